"""The trainer's refusals that need no torch come before torch is imported (``trainer/preflight.py``).

Each case runs ``python -m trainer`` as a rank does (the rank variables of ``trainer_utils.rank_env``) in a
process where ``import torch`` fails: the refusal must still be its one line and exit 1, with nothing
written. A refusal that imported torch first would end in a ModuleNotFoundError traceback instead, as the
control case shows. The bad-input files (test_bad_input_runs.py, test_bad_input_flow_stream.py,
test_bad_input_device_decode.py) check the same refusals on a trainer with torch.
"""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List

import pytest
from PIL import Image

from badinput import assert_refused
from trainer_utils import REPO, make_dataset, rank_env, tiny_args

from trainer import preflight
from trainer.shards import ShardWriter, write_manifest

#: ``python -m trainer ARGS`` with torch made unimportable (``None`` in sys.modules: ``import torch`` raises).
WITHOUT_TORCH = ("import sys, runpy; sys.modules['torch'] = None; sys.argv[0] = 'trainer'; "
                 "runpy.run_module('trainer', run_name='__main__', alter_sys=True)")


def _gray_jpeg(value: int) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (16, 16), value).save(buf, format="JPEG")
    return buf.getvalue()


def _flow_pack(root: Path) -> Path:
    """Two training and two validation samples of flow fields: a pack whose manifest says ``flow``."""
    root.mkdir()
    entries = []
    for split in ("train", "val"):
        w = ShardWriter(root / f"{split}-000.tar", split)
        for i in range(2):
            w.add_flow(f"{split}{i:05d}", i, [(_gray_jpeg(128), _gray_jpeg(128))] * 6)
        entries.append(w.close())
    write_manifest(root / "manifest.json", {"format": "summit-jobs-shards/1", "name": "flow", "modality": "flow",
                                            "classes": ["a", "b"], "flow": {"bound": 20.0}, "shards": entries})
    return root


@pytest.fixture(scope="module")
def where(tmp_path_factory) -> Dict[str, Path]:
    """An RGB pack, a flow pack, an empty weights file, a folder without checkpoints, and a package folder that
    makes ``import tensorboard`` fail as on a machine without it."""
    root = tmp_path_factory.mktemp("preflight")
    (root / "empty.pt").write_bytes(b"")
    (root / "no-checkpoints").mkdir()
    (root / "stub" / "tensorboard").mkdir(parents=True)
    (root / "stub" / "tensorboard" / "__init__.py").write_text("raise ImportError('No module named tensorboard')\n")
    return {"root": root, "rgb": make_dataset(root / "rgb", train=2, val=2, frames=4, size=16, shards=1),
            "flow": _flow_pack(root / "flow")}


def _args(*extra: str, data: str = "rgb") -> Callable[[Path, Dict[str, Path]], List[str]]:
    """Trainer arguments for a case: the tiny recipe on pack ``data`` (None: no --data) plus ``extra``, where
    ``{root}`` names the fixture's folder."""
    def build(run: Path, w: Dict[str, Path]) -> List[str]:
        return tiny_args(run, w[data] if data else None) + [e.format(root=w["root"]) for e in extra]
    return build


#: name -> (arguments, what the refusal line must hold; "{root}" is the fixture's folder)
CASES = {
    "test-only checkpoint missing": (_args("--test-only", "{root}/gone.pt"),
                                     ["trainer: --test-only {root}/gone.pt: no such file"]),
    "test-only checkpoint a folder": (_args("--test-only", "{root}"), ["trainer: --test-only {root}: not a file"]),
    "test-only checkpoint empty": (_args("--test-only", "{root}/empty.pt"),
                                   [f"trainer: --test-only {{root}}/empty.pt: {preflight.EMPTY_FILE}"]),
    "test-only without data": (_args("--test-only", "{root}/empty.pt", data=None), ["--test-only needs --data"]),
    "test-only flow pack as rgb": (_args("--test-only", "{root}/empty.pt", data="flow"),
                                   ["flow holds flow shards", "--modality rgb"]),
    "train without data": (_args(data=None), ["trainer: --data DIR is required"]),
    "data without a manifest": (_args("--data", "{root}/no-checkpoints"),
                                ["trainer: manifest {root}/no-checkpoints/manifest.json does not exist"]),
    "flow on an rgb pack": (_args("--modality", "flow"), ["rgb holds rgb shards", "--modality flow"]),
    "rgb on a flow pack": (_args(data="flow"), ["flow holds flow shards", "--modality rgb"]),
    "device decode of flow": (_args("--modality", "flow", "--decode", "device", data="flow"),
                              ["trainer: --decode device decodes RGB frames only", "--decode cpu"]),
    "init-from missing": (_args("--init-from", "{root}/nowhere"),
                          ["trainer: --init-from {root}/nowhere: no such file or directory"]),
    "init-from a folder without checkpoints": (_args("--init-from", "{root}/no-checkpoints"),
                                               ["--init-from {root}/no-checkpoints: a folder with no checkpoints"]),
    "init-from empty": (_args("--init-from", "{root}/empty.pt"),
                        [f"trainer: --init-from {{root}}/empty.pt: {preflight.EMPTY_FILE}"]),
    "tensorboard not installed": (_args("--tensorboard"), [preflight.TENSORBOARD_MISSING]),
    "tensorboard not installed, test only": (_args("--tensorboard", "--test-only", "{root}/gone.pt"),
                                             [preflight.TENSORBOARD_MISSING]),
}


def run_without_torch(args: List[str], where: Dict[str, Path]) -> subprocess.CompletedProcess:
    """A rank of a one-rank job started with ``args``, in an interpreter that cannot import torch (and, for
    the tensorboard cases, finds the failing tensorboard package first)."""
    extra = {"PYTHONPATH": f"{where['root'] / 'stub'}{os.pathsep}{REPO}"} if "--tensorboard" in args else {}
    return subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *args], env=rank_env(0, 1, "4242", extra),
                          cwd=str(REPO), capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_before_torch_is_imported(case, where, tmp_path):
    build, needles = CASES[case]
    proc = run_without_torch(build(tmp_path / "run", where), where)
    assert_refused(proc, [n.format(root=where["root"]) for n in needles], prefix="trainer: ")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("trainer: "), proc.stderr  # the one line
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_input_the_preflight_accepts_goes_on_to_import_torch(where, tmp_path):
    """The control: the same interpreter with good input fails where the trainer imports torch, so a refusal
    that came after torch could not pass the test above."""
    proc = run_without_torch(tiny_args(tmp_path / "run", where["rgb"]), where)
    assert proc.returncode != 0 and "import of torch halted" in proc.stderr, proc.stderr[-2000:]


def _torch_side(case: str, args, where: Dict[str, Path]) -> None:
    """Where the torch side of the trainer meets case ``case``'s input in a run started in-process."""
    from trainer.data import devicedecode
    from trainer.data.datasets import TrainClips, open_shards
    from trainer.loop import setup, testonly
    from trainer.models import transfer
    if case == "flow on an rgb pack":
        open_shards(args.data, "train", setup.clip_spec(args))
    elif case == "device decode of flow":
        devicedecode.train_input(TrainClips(args.data, setup.clip_spec(args), 0), "cpu")
    elif case == "init-from a folder without checkpoints":
        transfer.init_from(None, args.init_from)
    elif case == "test-only checkpoint empty":
        testonly.read_weights(Path(args.test_only))


@pytest.mark.parametrize("case", ["flow on an rgb pack", "device decode of flow",
                                  "init-from a folder without checkpoints", "test-only checkpoint empty"])
def test_a_run_started_in_process_refuses_in_the_same_line(case, where, tmp_path):
    """The torch side calls the same checks where it meets the input (tests and bench/ start runs in-process,
    without ``python -m trainer``)."""
    from trainer.config import parse
    args = parse(CASES[case][0](tmp_path / "run", where))
    with pytest.raises(SystemExit) as first:
        preflight.refuse_early(args)
    with pytest.raises(SystemExit) as later:
        _torch_side(case, args, where)
    assert later.value.code == first.value.code and str(first.value.code).startswith("trainer: ")
