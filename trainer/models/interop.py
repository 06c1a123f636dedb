"""Weights in and out of the trainer: an ImageNet start (``--pretrained``), the official TSM
code's and mmaction2's checkpoints (``--test-only``), and weights-only exports in any of the
three key layouts (``--export-weights``/``--export-layout``, ``python -m trainer.models.interop convert``).

Why a module of its own: the same ResNet-50 with temporal shift is published under three
key namings, and a run is only worth as much as where its weights can go. Every file is
read as data only (``torch.load(weights_only=True)`` or safetensors): weights are
downloaded and shared, and a pickle may name any function to call while it is read.

The layouts, as read from the sources (no code taken from them):

- ``summit``: ``TSMResNet``'s own ``state_dict``, which is torchvision's ResNet naming
  (``conv1``, ``bn1``, ``layerX.Y.convN``/``bnN``, ``downsample.0``/``.1``, ``fc``); the
  shift holds no parameters. An ImageNet torchvision file is in this layout.
- ``tsm``: mit-han-lab/temporal-shift-module. ``ops/models.py`` ``TSN._prepare_base_model``
  keeps the torchvision ResNet as ``base_model``; ``TSN._prepare_tsn`` turns
  ``base_model.fc`` into a Dropout and adds ``new_fc`` when dropout > 0, else keeps
  ``base_model.fc``. ``ops/temporal_shift.py`` ``make_temporal_shift`` wraps the ``conv1``
  of each shifted block in ``TemporalShift`` (its module is ``.net``) with ``blockres``,
  every other block when layer3 has 23 or more blocks, or the whole block with ``block``;
  ``make_temporal_pool`` wraps ``layer2`` as ``.net`` (no temporal pool here: refused).
  ``main.py`` wraps the model in DataParallel (``module.``) and ``save_checkpoint`` writes
  ``{'epoch', 'arch', 'state_dict', 'optimizer', 'best_prec1'}``; ``test_models.py`` drops
  the first key component before ``load_state_dict`` into a TSN of dropout 0.8, so it
  expects ``new_fc``; ``--tune_from`` in ``main.py`` reads ``['state_dict']`` and adds or
  removes ``.net``.
- ``mmaction2``: open-mmlab/mmaction2. ``mmaction/models/backbones/resnet.py`` ``ResNet``
  builds each conv with its norm as a ``ConvModule`` (``conv1.conv``/``conv1.bn`` for the
  stem and for ``convN`` of a block; ``make_res_layer``'s ``downsample`` is one
  ``ConvModule``: ``downsample.conv``/``downsample.bn``; ``_load_torchvision_checkpoint``
  maps the torchvision names the same way). ``resnet_tsm.py`` ``ResNetTSM.make_temporal_shift``
  wraps ``blocks[i].conv1.conv`` (``conv1.conv.net``) with ``blockres`` under the same
  every-other-block rule, or the block (``.net``) with ``block``; ``NL3DWrapper`` adds
  ``.block``/``.non_local_block`` (refused). ``heads/tsm_head.py`` ``TSMHead`` holds the
  classifier as ``fc_cls``; the recognizer (``recognizers/base.py``) names its parts
  ``backbone`` and ``cls_head``; mmengine's checkpoint is ``{'meta', 'state_dict', ...}``.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

if __name__ == "__main__":
    # ``python -m trainer.models.interop``: the command line refuses bad options and paths before torch is
    # imported (a second of CPU), then imports this module under its own name for the conversion.
    from trainer.models.interop_cli import precheck
    precheck()
    from trainer.models import interop
    sys.exit(interop.main())

import torch

from trainer.dist import compat
from trainer.files import atomic_path, discard
from trainer.models.interop_cli import (FORMATS, LAYOUTS, PLACEMENTS, TSM_FCS, WeightsError,  # noqa: F401 - API
                                        cannot_write, check_paths, checked, parser, refused, weights_kind)
from trainer.models.model import ARCHS, SHIFT_BLOCKS, build_model, shift_round

WEIGHTS_DIR = "weights"
#: Key names shown in an error before "... N more".
SHOWN = 5

StateDict = Dict[str, torch.Tensor]

_BN = r"(?:weight|bias|running_mean|running_var|num_batches_tracked)"
OUR_KEY = re.compile(rf"^(?:conv1\.weight|bn1\.{_BN}|fc\.(?:weight|bias)|layer[1-4]\.\d+\."
                     rf"(?:conv[1-3]\.weight|bn[1-3]\.{_BN}|downsample\.0\.weight|downsample\.1\.{_BN}))$")
BLOCK_KEY = re.compile(r"^(layer[1-4]\.\d+)\.(.+)$")
EXPORT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
LEFTOVER = re.compile(r"^\.[A-Za-z0-9][A-Za-z0-9_-]*\.(?:pt|safetensors)\.tmp(\d+)$")
SAFETENSORS_META = "summit_meta"


# -- reading ---------------------------------------------------------------------------------

def _reason(exc: BaseException) -> str:
    """The first sentence of a loader's error that says what went wrong (torch's run to pages)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    line = next((ln for ln in lines if "nsupported" in ln), lines[0] if lines else type(exc).__name__)
    line = re.sub(r"^\[enforce fail at [^\]]*\]\s*\.?\s*", "", line.replace("WeightsUnpickler error: ", ""))
    return line.split(". ")[0].rstrip(".")


def _torch_load(path: Path) -> Any:
    """The file read as data only (``weights_only=True``: a file cannot run code), failures as one-line WeightsErrors."""
    try:
        return compat.load_data_only(path)  # torch.load(weights_only=True) on every torch release
    except pickle.UnpicklingError as exc:
        raise WeightsError(f"refusing it: it holds more than tensors and plain values ({_reason(exc)}); weights "
                           "are read as data only: where you trust the file, save its state_dict alone "
                           "(torch.save(obj['state_dict'], NEW)) and give NEW") from None
    except (RuntimeError, EOFError, ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise WeightsError(f"not a readable torch file ({_reason(exc)}): cut short or damaged; "
                           "download or copy it again") from None


def _safetensors_load(path: Path) -> Dict[str, Any]:
    """A safetensors file as ``{"state_dict": tensors, "meta": what this module wrote in its metadata}``."""
    try:
        from safetensors import safe_open
    except ImportError:
        raise WeightsError("it is a safetensors file and the safetensors package is not installed: "
                           "pip install safetensors") from None
    try:
        with safe_open(str(path), framework="pt", device="cpu") as fh:
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
            metadata = fh.metadata() or {}
    except Exception as exc:  # noqa: BLE001 - SafetensorError and header errors: all mean "damaged"
        raise WeightsError(f"not a readable safetensors file ({_reason(exc)}): cut short or damaged") from None
    try:
        meta = json.loads(metadata.get(SAFETENSORS_META, "{}"))
    except ValueError:
        meta = {}
    return {"state_dict": tensors, "meta": meta if isinstance(meta, dict) else {}}


def read_weights(path: os.PathLike) -> Tuple[Any, str]:
    """What the file holds, read as data only, and its format ("pt" or "safetensors")."""
    p = Path(path)
    if weights_kind(p) == "safetensors":
        return _safetensors_load(p), "safetensors"
    return _torch_load(p), "pt"


def _plain(value: Any) -> bool:
    """Whether a checkpoint entry is a plain value worth keeping as information (not tensors)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def unwrap(obj: Any) -> Tuple[StateDict, Dict[str, Any]]:
    """(state dict, the checkpoint's plain entries) of any container: a bare state dict, a dict with
    ``state_dict`` (official TSM, mmaction2, exports) or ``model`` (this trainer's checkpoints)."""
    if not isinstance(obj, dict):
        raise WeightsError(f"it holds a {type(obj).__name__}, not a state dict or a checkpoint")
    meta = {k: v for k, v in obj.items() if isinstance(k, str) and k not in ("state_dict", "model", "optimizer")
            and _plain(v)}
    for entry in ("state_dict", "model"):
        if isinstance(obj.get(entry), dict):
            sd = obj[entry]
            break
    else:
        if not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
            keys = ", ".join(repr(k) for k in list(obj)[:SHOWN]) or "none"
            raise WeightsError(f"it holds no state dict (its entries: {keys}): expected a state_dict, a "
                               "checkpoint with a 'state_dict' or 'model' entry, or a safetensors file")
        sd, meta = obj, {}
    bad = [k for k, v in sd.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise WeightsError(f"its state dict entry {bad[0]!r} is a {type(sd[bad[0]]).__name__}, not a tensor")
    if not sd:
        raise WeightsError("its state dict is empty")
    return dict(sd), meta


# -- key layouts -----------------------------------------------------------------------------

def _names(keys: Sequence[str]) -> str:
    """Up to ``SHOWN`` key names, then how many more."""
    keys = list(keys)
    more = f", ... {len(keys) - SHOWN} more" if len(keys) > SHOWN else ""
    return ", ".join(keys[:SHOWN]) + more


def _check_ours(sd: StateDict) -> None:
    """Every key is one of TSMResNet's (torchvision's ResNet names): else the keys that are not."""
    odd = [k for k in sd if not OUR_KEY.match(k)]
    if odd:
        raise WeightsError(f"{len(odd)} key{'s' if len(odd) > 1 else ''} that no part of this trainer's ResNet "
                           f"has ({_names(odd)}){_hint(odd)}")


def _hint(keys: Sequence[str]) -> str:
    """What the keys a ResNet does not have usually mean."""
    text = " ".join(keys)
    if "layer2.net." in text:
        return ": a temporal-pooling (tpool) network, which halves the frames after layer1; this trainer has none"
    if ".nl." in text or "non_local" in text:
        return ": non-local blocks, which this trainer's ResNet does not have"
    if re.search(r"(^| )(features|classifier|inception)", text):
        return ": not a ResNet (MobileNet or BN-Inception?); this trainer builds ResNet-18 to 152"
    return ": a ResNet in torchvision's, the official TSM code's or mmaction2's naming is expected"


def _to_tsm_key(key: str, shifted: frozenset, placement: str, new_fc: bool) -> str:
    """Our key in the official TSM code's naming (``module.`` of DataParallel included)."""
    if key.startswith("fc."):
        return ("module.new_fc." if new_fc else "module.base_model.fc.") + key[3:]
    m = BLOCK_KEY.match(key)
    if m and m.group(1) in shifted:
        block, rest = m.groups()
        if placement == "block":
            key = f"{block}.net.{rest}"
        elif rest.startswith("conv1."):
            key = f"{block}.conv1.net.{rest[len('conv1.'):]}"
    return "module.base_model." + key


_MM_RENAMES = ((re.compile(r"^conv(\d)\.(.+)$"), r"conv\1.conv.\2"), (re.compile(r"^bn(\d)\.(.+)$"), r"conv\1.bn.\2"),
               (re.compile(r"^downsample\.0\.(.+)$"), r"downsample.conv.\1"),
               (re.compile(r"^downsample\.1\.(.+)$"), r"downsample.bn.\1"))


def _to_mm_key(key: str, shifted: frozenset, placement: str) -> str:
    """Our key in mmaction2's naming (ConvModule ``.conv``/``.bn``, ``backbone.``, ``cls_head.fc_cls``)."""
    if key.startswith("fc."):
        return "cls_head.fc_cls." + key[3:]
    m = BLOCK_KEY.match(key)
    block, rest = m.groups() if m else ("", key)
    for pattern, repl in _MM_RENAMES:
        if pattern.match(rest):
            rest = pattern.sub(repl, rest)
            break
    if block and block in shifted:
        if placement == "block":
            rest = f"net.{rest}"
        elif rest.startswith("conv1.conv."):
            rest = f"conv1.conv.net.{rest[len('conv1.conv.'):]}"
    return "backbone." + (f"{block}.{rest}" if block else rest)


def to_layout(state_dict: StateDict, layout: str, *, shifted: Optional[Sequence[str]] = None,
              placement: Optional[str] = "blockres", tsm_fc: Optional[str] = None,
              dropout: Optional[float] = None) -> StateDict:
    """Our state dict with its keys in ``layout`` (the same tensors).

    ``shifted``: the blocks ("layer1.0", ...) that carry a shift, which the tsm and mmaction2
    layouts mark by a wrapped ``.net``; None is the trainer's default (``shifted_blocks``).
    ``tsm_fc`` (or, when not given, ``dropout``: > 0 is ``new_fc``) names the official TSN's
    classifier; with neither it is ``new_fc``, as the official scripts and test_models.py build it.
    """
    if layout not in LAYOUTS:
        raise WeightsError(f"unknown layout {layout!r}: choose one of {', '.join(LAYOUTS)}")
    _check_ours(state_dict)
    if layout == "summit":
        return dict(state_dict)
    if shifted is None:
        shifted = shifted_blocks(infer_arch(state_dict))
    placement = placement or "blockres"
    if placement not in PLACEMENTS:
        raise WeightsError(f"unknown shift placement {placement!r}: choose one of {', '.join(PLACEMENTS)}")
    wrapped = frozenset(shifted)
    if layout == "mmaction2":
        return {_to_mm_key(k, wrapped, placement): v for k, v in state_dict.items()}
    if tsm_fc is None:
        tsm_fc = "base_model.fc" if dropout is not None and dropout <= 0 else "new_fc"
    if tsm_fc not in TSM_FCS:
        raise WeightsError(f"unknown TSM classifier name {tsm_fc!r}: choose one of {', '.join(TSM_FCS)}")
    return {_to_tsm_key(k, wrapped, placement, tsm_fc == "new_fc"): v for k, v in state_dict.items()}


_UNWRAP_BLOCK = re.compile(r"^(layer\d+\.\d+)\.net\.(.+)$")
_UNWRAP_TSM_CONV = re.compile(r"^(layer\d+\.\d+)\.conv1\.net\.(.+)$")
_UNWRAP_MM_CONV = re.compile(r"^(layer\d+\.\d+)\.conv1\.conv\.net\.(.+)$")
_MM_BACK = ((re.compile(r"^conv1\.conv\.(.+)$"), r"conv1.\1"), (re.compile(r"^conv1\.bn\.(.+)$"), r"bn1.\1"),
            (re.compile(r"^(layer\d+\.\d+)\.conv(\d)\.conv\.(.+)$"), r"\1.conv\2.\3"),
            (re.compile(r"^(layer\d+\.\d+)\.conv(\d)\.bn\.(.+)$"), r"\1.bn\2.\3"),
            (re.compile(r"^(layer\d+\.\d+)\.downsample\.conv\.(.+)$"), r"\1.downsample.0.\2"),
            (re.compile(r"^(layer\d+\.\d+)\.downsample\.bn\.(.+)$"), r"\1.downsample.1.\2"))


def _unwrap_shift(key: str, conv_wrap: "re.Pattern[str]", conv_name: str) -> Tuple[str, Optional[Tuple[str, str]]]:
    """``key`` without a TemporalShift's ``.net``, and (block, placement) when it had one."""
    m = _UNWRAP_BLOCK.match(key)
    if m:
        return f"{m.group(1)}.{m.group(2)}", (m.group(1), "block")
    m = conv_wrap.match(key)
    if m:
        return f"{m.group(1)}.{conv_name}.{m.group(2)}", (m.group(1), "blockres")
    return key, None


def _from_tsm_key(key: str) -> Tuple[str, Optional[Tuple[str, str]]]:
    """An official TSM key (``module.`` already gone) in our naming."""
    if key.startswith("new_fc."):
        return "fc." + key[len("new_fc."):], None
    if key.startswith("base_model."):
        key = key[len("base_model."):]
    return _unwrap_shift(key, _UNWRAP_TSM_CONV, "conv1")


def _from_mm_key(key: str) -> Tuple[str, Optional[Tuple[str, str]]]:
    """An mmaction2 key in our naming (keys of other heads or necks are left as they are, to be refused)."""
    if key.startswith("cls_head.fc_cls."):
        return "fc." + key[len("cls_head.fc_cls."):], None
    if not key.startswith("backbone."):
        return key, None
    key, wrap = _unwrap_shift(key[len("backbone."):], _UNWRAP_MM_CONV, "conv1.conv")
    for pattern, repl in _MM_BACK:
        if pattern.match(key):
            return pattern.sub(repl, key), wrap
    return key, wrap


def detect_layout(keys: Sequence[str]) -> str:
    """The layout a state dict's keys are in (``module.`` of DataParallel/DDP already removed)."""
    if any(k.startswith(("backbone.", "cls_head.")) for k in keys):
        return "mmaction2"
    if any(k.startswith(("base_model.", "new_fc.")) or ".net." in k for k in keys):
        return "tsm"
    return "summit"


def _convert_in(state_dict: StateDict) -> Tuple[StateDict, str, Optional[Dict[str, Any]]]:
    """(our keys, the layout found, the shift the keys show: placement and blocks; None for summit)."""
    sd = dict(state_dict)
    if sd and all(k.startswith("module.") for k in sd):
        sd = {k[len("module."):]: v for k, v in sd.items()}
    layout = detect_layout(list(sd))
    convert = {"mmaction2": _from_mm_key, "tsm": _from_tsm_key}.get(layout)
    if convert is None:
        return sd, layout, None
    out: StateDict = {}
    wraps: Dict[str, str] = {}
    for key, value in sd.items():
        new, wrap = convert(key)
        if new in out:
            raise WeightsError(f"two keys map to {new} (one is {key}): the file mixes layouts")
        out[new] = value
        if wrap:
            wraps[wrap[0]] = wrap[1]
    placements = sorted(set(wraps.values()))
    if len(placements) > 1:
        raise WeightsError("its shifts are placed both on blocks and on residual branches: no TSM network does that")
    shifted = sorted(wraps, key=_block_order)
    return out, layout, {"shifted": shifted, "placement": placements[0] if placements else None}


def _block_order(block: str) -> Tuple[int, int]:
    layer, index = block.split(".")
    return int(layer[len("layer"):]), int(index)


def from_layout(state_dict: StateDict) -> Tuple[StateDict, str]:
    """(the state dict in our naming, the layout it was in): summit/torchvision, tsm or mmaction2."""
    sd, layout, _shift = _convert_in(state_dict)
    return sd, layout


# -- what a state dict is --------------------------------------------------------------------

def infer_arch(sd: StateDict) -> str:
    """The ResNet (resnet18 ... resnet152) whose blocks these keys (our naming) hold."""
    counts = [0, 0, 0, 0]
    for key in sd:
        m = re.match(r"^layer([1-4])\.(\d+)\.", key)
        if m:
            i = int(m.group(1)) - 1
            counts[i] = max(counts[i], int(m.group(2)) + 1)
    kind = "bottleneck" if any(k.endswith(".conv3.weight") for k in sd) else "basic"
    for arch, (k, layers) in ARCHS.items():
        if k == kind and list(layers) == counts:
            return arch
    raise WeightsError(f"its {kind} blocks per stage {counts} are no ResNet this trainer builds "
                       f"({', '.join(ARCHS)})")


def shifted_blocks(arch: str, shift: bool = True, placement: str = "blockres",
                   shift_blocks: str = "official") -> List[str]:
    """The blocks ("layer1.0", ...) that carry a shift in the trainer's model built with these options."""
    if not shift:
        return []
    kind, layers = ARCHS[arch]
    n_round = shift_round(layers, placement, shift_blocks)
    return [f"layer{i + 1}.{j}" for i, count in enumerate(layers) for j in range(count) if j % n_round == 0]


def layout_info(model: torch.nn.Module) -> Dict[str, Any]:
    """The shift of a built model as ``to_layout``/``export_weights`` take it: the blocks whose
    shift is on (a ``--no-shift`` model has none) and their placement."""
    from trainer.models.model import BasicBlock
    shifted, placement = [], "blockres"
    for name, m in model.named_modules():
        if isinstance(m, BasicBlock):
            placement = m.placement
            if m.shift is not None and m.shift.enabled:
                shifted.append(name[len("module."):] if name.startswith("module.") else name)
    return {"shifted": shifted, "placement": placement}


def _shapes(sd: StateDict) -> Dict[str, Tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in sd.items()}


def _mismatch(have: Dict[str, Tuple[int, ...]], want: Dict[str, Tuple[int, ...]]) -> Optional[str]:
    """Missing keys, unexpected keys and shapes that differ, each counted and named (None: all match).

    ``num_batches_tracked`` may be missing: torchvision's original ImageNet files predate it.
    """
    missing = [k for k in want if k not in have and not k.endswith(".num_batches_tracked")]
    unexpected = [k for k in have if k not in want]
    shapes = [k for k in want if k in have and have[k] != want[k]]
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing ({_names(missing)})")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected ({_names(unexpected)})")
    if shapes:
        shown = ", ".join(f"{k}: file {list(have[k])}, model {list(want[k])}" for k in shapes[:SHOWN])
        parts.append(f"{len(shapes)} of another shape ({shown})")
    return "; ".join(parts) or None


def _fill_counts(sd: StateDict, want: Dict[str, Tuple[int, ...]]) -> StateDict:
    """BatchNorm's ``num_batches_tracked`` where the file has none (0, as torch itself assumes)."""
    out = dict(sd)
    for k in want:
        if k.endswith(".num_batches_tracked") and k not in out:
            out[k] = torch.tensor(0, dtype=torch.long)
    return out


def _expected(arch: str, base: int, classes: int, in_channels: int = 3) -> Dict[str, Tuple[int, ...]]:
    """Key shapes of the trainer's model of this arch, stem width, classes and input channels (built on
    the meta device: no memory, no initialisation cost)."""
    width = base / 64
    if max(8, int(round(64 * width))) != base:
        raise WeightsError(f"conv1 has {base} output channels: this trainer's ResNets have 8 or more")
    with torch.device("meta"):
        model = build_model(arch, classes, shift=False, width=width, in_channels=in_channels)
    return _shapes(model.state_dict())


def describe(sd: StateDict) -> Tuple[StateDict, Dict[str, Any]]:
    """(the state dict, checked whole against the model it fits, with missing BN counters added;
    {"arch", "width", "num_classes"}). A WeightsError says what does not fit."""
    _check_ours(sd)
    arch = infer_arch(sd)
    if "conv1.weight" not in sd or sd["conv1.weight"].dim() != 4:
        raise WeightsError("it has no stem convolution conv1.weight of 4 dimensions")
    fc = sd.get("fc.weight")
    if fc is None or fc.dim() != 2:
        raise WeightsError(f"it has no classifier (fc.weight of 2 dimensions) for its {arch}: a backbone alone "
                           "can start a run (--pretrained) but not be tested or exported")
    base, channels = int(sd["conv1.weight"].shape[0]), int(sd["conv1.weight"].shape[1])
    want = _expected(arch, base, int(fc.shape[0]), channels)
    problem = _mismatch(_shapes(sd), want)
    if problem:
        raise WeightsError(f"it is no whole {arch}: {problem}")
    return _fill_counts(sd, want), {"arch": arch, "width": base / 64, "num_classes": int(fc.shape[0]),
                                    "in_channels": channels}


def input_options(channels: int) -> str:
    """The trainer options that build a first conv of ``channels`` input channels, in words."""
    if channels == 3:
        return "--modality rgb"
    if channels % 2 == 0:
        return f"--modality flow --flow-stack {channels // 2}"
    return f"no options of this trainer ({channels} input channels are neither RGB nor x/y flow pairs)"


# -- an ImageNet start -----------------------------------------------------------------------

@dataclass
class PretrainedReport:
    """What ``load_pretrained`` copied: for the run's log."""
    path: str
    layout: str
    copied: int
    source_classes: Optional[int]
    cross_modality: bool = False  # the RGB stem averaged and repeated over a flow stream's channels

    def line(self) -> str:
        had = f" (its {self.source_classes}-class fc left out)" if self.source_classes else ""
        stem = "; conv1 averaged over RGB and repeated over the flow channels" if self.cross_modality else ""
        return (f"pretrained: {self.copied} backbone tensors from {self.path} ({self.layout} layout){had}{stem}; "
                "the fc head is new")


def _arch_hint(sd: StateDict, model: torch.nn.Module) -> str:
    """What to do when a file does not fit the model: name both networks when the file's is known."""
    want = getattr(model, "arch", "the model's arch")
    try:
        have = infer_arch(sd)
    except WeightsError:
        return f"give ImageNet weights of a {want} in torchvision's key layout"
    conv = sd.get("conv1.weight")
    width = f" of width {conv.shape[0] / 64:g}" if conv is not None else ""
    return (f"the file holds a {have}{width}, the model is a {want}: pass --arch {have} (or --width), "
            f"or give {want} weights")


def cross_modality(weight: torch.Tensor, channels: int) -> torch.Tensor:
    """A first conv's (out, c, k, k) filters for ``channels`` inputs: the mean over its c input channels,
    repeated (TSN's cross-modality initialisation: an ImageNet or RGB stem starts a flow stream)."""
    mean = weight.float().mean(dim=1, keepdim=True)
    return mean.expand(weight.shape[0], channels, *weight.shape[2:]).to(weight.dtype).contiguous()


def _adapt_stem(backbone: StateDict, target: StateDict) -> bool:
    """The file's RGB stem made to fit a stem of other input channels (a flow stream); True when done."""
    src, dst = backbone.get("conv1.weight"), target.get("conv1.weight")
    if src is None or dst is None or src.dim() != 4 or tuple(src.shape) == tuple(dst.shape):
        return False
    if (src.shape[0], *src.shape[2:]) != (dst.shape[0], *dst.shape[2:]):
        return False
    backbone["conv1.weight"] = cross_modality(src, dst.shape[1])
    return True


def load_pretrained(model: torch.nn.Module, path: os.PathLike) -> PretrainedReport:
    """Copy a 2D ResNet's backbone (every key but ``fc.*``) into ``model``; its fc head stays new.

    The file: an ImageNet state dict in torchvision's layout (bare, or under ``state_dict``/
    ``model``; ``.pt``/``.pth`` or safetensors); an official TSM or mmaction2 checkpoint works
    too (its backbone only). Nothing is copied unless every backbone tensor fits: a WeightsError
    names up to ``SHOWN`` missing and unexpected keys, the counts, and the fix.
    """
    obj, _fmt = read_weights(path)
    sd, _meta = unwrap(obj)
    ours, layout, _shift = _convert_in(sd)
    head = ours.get("fc.weight")
    backbone = {k: v for k, v in ours.items() if not k.startswith("fc.")}
    target = {k: v for k, v in model.state_dict().items() if not k.startswith("fc.")}
    adapted = _adapt_stem(backbone, target)
    problem = _mismatch(_shapes(backbone), _shapes(target))
    if problem:
        raise WeightsError(f"does not fit the model: {problem}; {_arch_hint(backbone, model)}")
    with torch.no_grad():
        for key, dst in target.items():
            if key in backbone:
                dst.copy_(backbone[key])
    copied = sum(1 for k in target if k in backbone)
    return PretrainedReport(os.fspath(path), layout, copied, int(head.shape[0]) if head is not None else None,
                            adapted)


# -- any checkpoint, for --test-only ---------------------------------------------------------

def _shift_from_meta(meta: Dict[str, Any]) -> Dict[str, Any]:
    """The shift a summit-layout file records: an export's meta, or a trainer checkpoint's args."""
    inner = meta.get("meta") if isinstance(meta.get("meta"), dict) else meta
    if isinstance(inner.get("shifted"), list):
        return {"shifted": list(inner["shifted"]), "placement": inner.get("placement")}
    args = meta.get("args")
    if isinstance(args, dict) and args.get("arch") in ARCHS:
        placement = args.get("shift_placement", "blockres")
        shift_blocks = args.get("shift_blocks", "official")
        if placement in PLACEMENTS and shift_blocks in SHIFT_BLOCKS:
            return {"shifted": shifted_blocks(args["arch"], bool(args.get("shift", True)), placement, shift_blocks),
                    "placement": placement}
    return {"shifted": None, "placement": None}


def load_checkpoint_any(path: os.PathLike) -> Tuple[StateDict, Dict[str, Any]]:
    """(model state dict in our naming, info) from this trainer's checkpoints or exports, an
    official TSM checkpoint, an mmaction2 one, or a bare state dict (torch or safetensors).

    ``info``: arch, width, num_classes, layout, format, shifted (the blocks with a shift, or
    None when the file does not say), placement, meta (the checkpoint's plain entries).
    """
    obj, fmt = read_weights(path)
    sd, meta = unwrap(obj)
    ours, layout, shift = _convert_in(sd)
    ours, info = describe(ours)
    info.update(layout=layout, format=fmt, **(shift if shift is not None else _shift_from_meta(meta)))
    info["meta"] = meta
    return ours, info


def _same_shift(info: Dict[str, Any], shift: bool, placement: str, shift_blocks: str) -> bool:
    """Whether these trainer options shift the blocks ``info`` names, at its placement."""
    mine = shifted_blocks(info["arch"], shift, placement, shift_blocks)
    return mine == list(info["shifted"]) and (not mine or placement == info["placement"])


def _shift_options(info: Dict[str, Any]) -> Optional[List[str]]:
    """The trainer options that build the shifts ``info`` describes ([]: it does not say; None: no options do)."""
    if info.get("shifted") is None:
        return []
    for shift in (True, False):
        for placement in PLACEMENTS:
            for blocks in SHIFT_BLOCKS:
                if _same_shift(info, shift, placement, blocks):
                    return ["--shift-placement", placement, "--shift-blocks", blocks] if shift else ["--no-shift"]
    return None


def option_mismatch(info: Dict[str, Any], args: argparse.Namespace, num_classes: int) -> Optional[str]:
    """Why the trainer's options (and the data's ``num_classes``) build another network than the
    checkpoint's, naming the options to pass; None when they build the same one."""
    want = [f"--arch {info['arch']}"] if args.arch != info["arch"] else []
    if abs(args.width - info["width"]) > 1e-9:
        want.append(f"--width {info['width']:g}")
    channels = info.get("in_channels", 3)
    mine = 3 if getattr(args, "modality", "rgb") == "rgb" else 2 * args.flow_stack
    if channels != mine:
        want.append(input_options(channels))
    shift = _shift_options(info)
    if shift is None:
        return (f"its shifts ({len(info['shifted'])} blocks, placement {info['placement']}) follow no rule of "
                "this trainer (--shift-placement, --shift-blocks)")
    if shift and not _same_shift(info, args.shift, args.shift_placement, args.shift_blocks):
        want.append(" ".join(shift))
    kind = "" if channels == 3 else f" on {channels} flow channels"
    problem = f"it is a {info['arch']} of width {info['width']:g}{kind} with {info['num_classes']} classes"
    if info["num_classes"] != num_classes:
        return f"{problem}, the data has {num_classes} classes: test it on data of its classes"
    return f"{problem}, built otherwise than these options: pass {' '.join(want)}" if want else None


# -- writing ---------------------------------------------------------------------------------

def _host_copy(sd: StateDict) -> StateDict:
    """Contiguous CPU copies: safetensors refuses strided or memory-sharing tensors, and a copy
    taken now cannot change under a writer while training goes on."""
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in sd.items()}


def _container(flat: StateDict, layout: str, meta: Dict[str, Any]) -> Dict[str, Any]:
    """What a ``.pt`` export holds: each layout's own checkpoint form, weights only (no optimiser)."""
    if layout == "tsm":  # main.py's save_checkpoint, which test_models.py and --tune_from read
        return {"epoch": int(meta.get("epoch") or 0), "arch": meta["arch"], "state_dict": flat,
                "best_prec1": float(meta.get("best_prec1") or 0.0)}
    return {"meta": meta, "state_dict": flat}  # mmengine's form; summit keeps the shift in meta


def _save(path: Path, flat: StateDict, fmt: str, layout: str, meta: Dict[str, Any]) -> None:
    """Write under a temporary name in the same folder, then rename: never half a file under ``path``."""
    if fmt == "safetensors":
        try:
            from safetensors.torch import save_file
        except ImportError:
            raise WeightsError("the safetensors package is not installed: pip install safetensors, "
                               "or use the pt format") from None
    try:
        with atomic_path(path) as tmp:
            if fmt == "safetensors":
                save_file(flat, str(tmp), metadata={"format": "pt", "layout": layout,
                                                    SAFETENSORS_META: json.dumps(meta)})
            else:
                torch.save(_container(flat, layout, meta), tmp)
    except OSError as exc:
        raise WeightsError(cannot_write(path, exc)) from None
    except Exception as exc:  # noqa: BLE001 - torch wraps a short write in RuntimeError, safetensors in its own
        raise WeightsError(f"cannot write {path}: {_reason(exc)}; nothing was left under that name") from None


def write_weights(path: os.PathLike, state_dict: StateDict, fmt: str, layout: str, *,
                  shifted: Optional[Sequence[str]] = None, placement: Optional[str] = "blockres",
                  tsm_fc: Optional[str] = None, dropout: Optional[float] = None,
                  epoch: Optional[int] = None, best_prec1: Optional[float] = None) -> Dict[str, Any]:
    """``state_dict`` (our naming, checked whole) as a weights-only file in ``layout``; returns its meta.

    ``fmt`` "pt": the layout's own checkpoint form (tsm: main.py's dict without the optimiser;
    mmaction2: ``{'meta', 'state_dict'}``; summit: the same, the shift recorded in meta);
    "safetensors": the flat tensors, the meta as JSON in the file's metadata.
    """
    if fmt not in FORMATS:
        raise WeightsError(f"unknown weights format {fmt!r}: choose one of {', '.join(FORMATS)}")
    sd, facts = describe(_host_copy(state_dict))
    if shifted is None:
        shifted = shifted_blocks(facts["arch"])
    flat = to_layout(sd, layout, shifted=shifted, placement=placement, tsm_fc=tsm_fc, dropout=dropout)
    placement = (placement or "blockres") if shifted else None
    meta = {"layout": layout, **facts, "shifted": list(shifted), "placement": placement,
            "epoch": epoch, "best_prec1": best_prec1, "written_by": "summit-jobs trainer"}
    _save(Path(path), flat, fmt, layout, meta)
    return meta


def clean_leftovers(folder: os.PathLike) -> List[Path]:
    """Remove the temporaries of exports a killed run left in ``folder`` (any pid but this one's:
    only one job owns a run directory, and this process's own are in flight)."""
    removed: List[Path] = []
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return removed
    for p in entries:
        m = LEFTOVER.match(p.name)
        if m and int(m.group(1)) != os.getpid():
            discard(p)
            removed.append(p)
    return removed


def export_weights(run_dir: os.PathLike, model_state_dict: StateDict, name: str, fmt: str, layout: str,
                   **info: Any) -> Optional[Path]:
    """``<run-dir>/weights/<name>.pt`` (or ``.safetensors``) in ``layout``, written atomically;
    None with ``fmt`` "none". ``info``: ``write_weights``'s keywords (``layout_info(model)``,
    epoch, best_prec1). The resumable checkpoints stay as they are: this is the copy to share."""
    if fmt == "none":
        return None
    if not EXPORT_NAME.match(name):
        raise WeightsError(f"export name {name!r}: letters, digits, '-' and '_' only (last, best, ...)")
    folder = Path(run_dir) / WEIGHTS_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WeightsError(f"cannot create {folder}: {exc.strerror or exc}") from None
    clean_leftovers(folder)
    path = folder / f"{name}.{fmt}"
    write_weights(path, model_state_dict, fmt, layout, **info)
    return path


# -- convert (its command line and the checks that need no torch: interop_cli.py) ------------------

def _convert_shift(a: argparse.Namespace, info: Dict[str, Any]) -> Tuple[List[str], Optional[str], bool]:
    """(shifted blocks, placement, whether the trainer's defaults were assumed) for OUT."""
    given = a.shift is not None or a.shift_placement is not None or a.shift_blocks is not None
    if not given and info["shifted"] is not None:
        return list(info["shifted"]), info["placement"], False
    placement = a.shift_placement or "blockres"
    blocks = shifted_blocks(info["arch"], a.shift is not False, placement, a.shift_blocks or "official")
    return blocks, placement, not given


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _history(meta: Dict[str, Any]) -> Tuple[Optional[int], Optional[float]]:
    """(epochs done, best top-1 in percent) that a checkpoint records, for the file written from it.

    The official code's ``best_prec1`` is in percent; this trainer's ``best_top1`` is a fraction,
    and -1 before any validation.
    """
    inner = meta.get("meta") if isinstance(meta.get("meta"), dict) else meta
    epoch = inner.get("epoch")
    best = inner.get("best_prec1")
    if not _number(best) and _number(meta.get("best_top1")) and meta["best_top1"] >= 0:
        best = 100.0 * meta["best_top1"]
    return (epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None,
            float(best) if _number(best) else None)


def convert(a: argparse.Namespace) -> str:
    """Run ``convert``; returns the line to print. WeightsError names the file it is about."""
    check_paths(a)
    out = Path(a.output)
    try:
        sd, info = load_checkpoint_any(a.input)
    except WeightsError as exc:
        raise WeightsError(f"{a.input}: {exc}") from None
    fmt = a.format or ("safetensors" if out.suffix == ".safetensors" else "pt")
    shifted, placement, assumed = _convert_shift(a, info)
    epoch, best = _history(info["meta"])
    write_weights(out, sd, fmt, a.to, shifted=shifted, placement=placement, tsm_fc=a.tsm_fc,
                  epoch=epoch, best_prec1=best)
    note = ("; IN does not say where its shifts are: the trainer's defaults were assumed (--shift-placement "
            "blockres --shift-blocks official), pass --no-shift or others if its run used them") if assumed else ""
    return (f"wrote {out}: {info['arch']}, {info['num_classes']} classes, {a.to} layout ({fmt}), "
            f"{len(shifted)} shifted blocks, from {a.input} ({info['layout']} layout){note}")


def main(argv: Optional[List[str]] = None) -> int:
    """``convert``'s entry: one line on stderr and exit 2 for anything wrong with its input (interop_cli
    checks the options and paths, which ``python -m`` does before torch is imported)."""
    try:
        print(convert(checked(argv)))
    except WeightsError as exc:
        return refused(exc)
    return 0
