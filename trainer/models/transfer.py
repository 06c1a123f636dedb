"""``--init-from``: start a run from a model this trainer trained, across modalities.

The AAVG paper (Cong et al.) starts the temporal (optical flow) stream from the
trained spatial (RGB) stream and reaches the flow stream's accuracy about 30%
sooner; TSN calls this cross-modality initialisation. Every tensor that fits is
copied; the first convolution, the one tensor whose shape depends on the input,
is averaged over the source's input channels and repeated over the target's
(3 colours -> 2 x --flow-stack flow channels), so each filter answers to the
mean of its old inputs. The classifier is copied when the classes match and
left new otherwise (the usual fine-tuning). Anything else that does not fit is
another network: refused with both shapes named.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch

from trainer import preflight
from trainer.loop import checkpoint as ckpt
from trainer.models import interop

STEM = "conv1.weight"


class TransferError(SystemExit):
    """--init-from names nothing this trainer can start from: one line, no traceback."""


@dataclass
class TransferReport:
    """What ``init_from`` did: for the run's log."""
    path: str
    copied: int
    stem: Optional[str]  # how the first conv was made, when it was not copied as it was
    fc: str

    def line(self) -> str:
        stem = f"; {self.stem}" if self.stem else ""
        return f"init-from: {self.copied} tensors from {self.path}{stem}; {self.fc}"


def _plan(source: Dict[str, torch.Tensor], target: Dict[str, torch.Tensor]) -> List[str]:
    """The problems (shape or key) that make ``source`` another network than ``target``."""
    problems = []
    for key, dst in target.items():
        src = source.get(key)
        if key.startswith("fc.") or key == STEM or key.endswith("num_batches_tracked"):
            continue
        if src is None:
            problems.append(f"{key} missing")
        elif tuple(src.shape) != tuple(dst.shape):
            problems.append(f"{key} is {list(src.shape)} there and {list(dst.shape)} here")
    extra = [k for k in source if k not in target and not k.endswith("num_batches_tracked")]
    if extra:
        problems.append(f"{len(extra)} tensors this run's network has not ({', '.join(extra[:2])}...)")
    return problems


def _stem(src: torch.Tensor, dst: torch.Tensor) -> Optional[str]:
    """Copy or adapt the first conv into ``dst``; what was done, in words (None: copied as it was)."""
    if tuple(src.shape) == tuple(dst.shape):
        dst.copy_(src)
        return None
    if tuple(src.shape[:1] + src.shape[2:]) != tuple(dst.shape[:1] + dst.shape[2:]):
        raise ValueError(f"{STEM} is {list(src.shape)} there and {list(dst.shape)} here")
    dst.copy_(interop.cross_modality(src, dst.shape[1]))
    return (f"{STEM} averaged over its {src.shape[1]} input channels and repeated over {dst.shape[1]} "
            "(cross-modality)")


def _fc(source: Dict[str, torch.Tensor], target: Dict[str, torch.Tensor]) -> str:
    """Copy the classifier when its classes match; what was done, in words."""
    w, b = source.get("fc.weight"), source.get("fc.bias")
    if w is not None and b is not None and tuple(w.shape) == tuple(target["fc.weight"].shape):
        target["fc.weight"].copy_(w)
        target["fc.bias"].copy_(b)
        return "the fc head copied"
    had = f" ({w.shape[0]} classes there)" if w is not None else ""
    return f"the fc head is new{had}"


def init_from(model: torch.nn.Module, source: os.PathLike) -> TransferReport:
    """Load ``source`` (``preflight.init_checkpoint``: a file, or a run directory's best or newest checkpoint)
    into ``model`` as the module docstring says; nothing is changed unless the networks agree apart from the
    first conv's inputs and the classifier."""
    path = preflight.init_checkpoint(source)
    try:
        weights, _info = interop.load_checkpoint_any(path)
    except (interop.WeightsError, ckpt.CheckpointError) as exc:
        raise TransferError(f"trainer: --init-from {path}: {str(exc).removeprefix('trainer: ')}") from None
    target = model.state_dict()
    problems = _plan(weights, target)
    if STEM not in weights:
        problems.insert(0, f"{STEM} missing")
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise TransferError(f"trainer: --init-from {path}: another network than this run's "
                            f"({'; '.join(problems[:3])}{more}): give the same --arch and --width")
    with torch.no_grad():
        try:
            stem = _stem(weights[STEM], target[STEM])
        except ValueError as exc:
            raise TransferError(f"trainer: --init-from {path}: {exc}: give the same --arch and --width") from None
        copied = 1
        for key, dst in target.items():
            if key != STEM and not key.startswith("fc.") and key in weights:
                dst.copy_(weights[key])
                copied += 1
        fc = _fc(weights, target)
    return TransferReport(os.fspath(path), copied + (2 if fc.endswith("copied") else 0), stem, fc)
