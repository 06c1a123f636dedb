"""Compare two runs' final weights and logged training curves (`summit-jobs compare`).

Why: `simulate` claims that k accumulation steps on p nodes give the same
optimisation as p*k real nodes. This module checks the claim on two finished
runs: the same steps, global batches and learning rates at every logged step,
the same training loss, and the same weights at the end, within a tolerance.

Torch is imported inside ``load_checkpoint`` only, after both runs are found and
their checkpoints look like torch archives: this module is imported by the CLI,
whose start-up on a login node must stay torch-free, and a refusal that needs no
tensor should not wait a second of CPU for torch. Checkpoints are
read with ``weights_only=True`` (they are pickles and may come from anywhere).
"""
from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from summit_jobs.errors import UserError
from trainer import rundir

CKPT_RE = re.compile(r"^ckpt-(\d{9})\.pt$")
#: BatchNorm running statistics are kept per rank and are not synchronised by DDP or
#: Horovod; with k accumulation steps they get k updates per step. They are reported,
#: never held against the comparison.
BUFFER_SUFFIXES = ("running_mean", "running_var", "num_batches_tracked")


@dataclass
class Run:
    """One side of the comparison: its checkpoint, its contents and its run directory (if known)."""

    label: str
    checkpoint: Path
    run_dir: Optional[Path]
    state: Dict = field(default_factory=dict)


def newest_checkpoint(run_dir: Path) -> Optional[Path]:
    """The newest ``checkpoints/ckpt-<step>.pt`` of a run directory (the name the trainer resumes from)."""
    folder = run_dir / rundir.CHECKPOINTS
    if not folder.is_dir():
        return None
    found = sorted(p for p in folder.iterdir() if CKPT_RE.match(p.name))
    return found[-1] if found else None


def resolve(target: str) -> Tuple[Path, Optional[Path]]:
    """(checkpoint file, run directory or None) for a run directory or a checkpoint file."""
    path = Path(target).expanduser()
    if path.is_dir():
        ckpt = newest_checkpoint(path)
        if ckpt is None:
            raise UserError(f"run {target} has no checkpoint (no {rundir.CHECKPOINTS}/ckpt-*.pt in it): give a "
                            "run directory whose training has saved a checkpoint, or a checkpoint file.")
        return ckpt, path
    if path.is_file():
        run_dir = path.parent.parent if path.parent.name == rundir.CHECKPOINTS else None
        return path, run_dir
    raise UserError(f"run {target} does not exist: give a run directory (holding {rundir.CHECKPOINTS}/) "
                    "or a checkpoint file (.pt).")


def _unreadable(path: Path, why: str) -> UserError:
    return UserError(f"checkpoint {path} is not readable ({why}): give another run or checkpoint, or delete "
                     "this file to compare the run's older checkpoint.")


def check_archive(path: Path) -> None:
    """Refuse, without torch, a file that is no zip archive (every torch.save since 1.6 writes one): an
    empty, cut-short or foreign file shows it in its last bytes, and is refused a second of CPU sooner."""
    try:
        is_zip = zipfile.is_zipfile(path)
    except OSError as exc:
        raise _unreadable(path, exc.strerror or str(exc)) from None
    if not is_zip:
        raise _unreadable(path, "not a torch archive: empty, cut short or another kind of file")


def load_checkpoint(path: Path) -> Dict:
    """A checkpoint's contents as data only; an unreadable file is the user's to fix, not a traceback."""
    import pickle

    check_archive(path)
    import torch
    why = None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        why = "it holds more than tensors and plain values: " + str(exc).splitlines()[0][:200]
    except (EOFError, RuntimeError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
    if why is None and not (isinstance(state, dict) and isinstance(state.get("model"), dict)):
        why = "no model weights in it (not a checkpoint of this trainer)"
    if why is not None:
        raise _unreadable(path, why)
    return state


def open_runs(target_a: str, target_b: str) -> Tuple[Run, Run]:
    """Both sides, loaded. Why both resolved and sniffed first: a missing second run or an empty
    checkpoints folder is refused before torch is imported to read the first run's checkpoint."""
    (ckpt_a, dir_a), (ckpt_b, dir_b) = resolve(target_a), resolve(target_b)
    check_archive(ckpt_a)
    check_archive(ckpt_b)
    return Run("A", ckpt_a, dir_a, load_checkpoint(ckpt_a)), Run("B", ckpt_b, dir_b, load_checkpoint(ckpt_b))


def train_records(run: Run) -> Dict[int, Dict]:
    """The run's train records by step, the last one of a step kept (a resumed chain repeats steps),
    up to the checkpoint's step (a later record belongs to training after it)."""
    if run.run_dir is None:
        return {}
    path = run.run_dir / rundir.METRICS
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return {}
    limit = int(run.state.get("step", 0) or 0)
    out: Dict[int, Dict] = {}
    for rec in rundir.json_records(text, lambda r: r.get("kind") == "train" and isinstance(r.get("step"), int)):
        if rec["step"] <= limit:
            out[int(rec["step"])] = rec
    return out


def check_same_shape(a: Run, b: Run) -> None:
    """Different step counts or architectures cannot be compared weight by weight: a user error."""
    sa, sb = a.state.get("step"), b.state.get("step")
    if sa != sb:
        raise UserError(f"the runs' checkpoints are at different steps ({a.checkpoint} at step {sa}, "
                        f"{b.checkpoint} at step {sb}): compare checkpoints of the same step (give the "
                        "checkpoint files), or train both runs for the same epochs.")
    ma, mb = a.state["model"], b.state["model"]
    only = sorted(set(ma) ^ set(mb))
    if only:
        raise UserError(f"different architectures: tensor {only[0]} is in only one of {a.checkpoint} and "
                        f"{b.checkpoint} ({len(only)} such tensors): compare runs of the same --arch and options.")
    for key in ma:
        shape_a, shape_b = tuple(getattr(ma[key], "shape", ())), tuple(getattr(mb[key], "shape", ()))
        if shape_a != shape_b:
            raise UserError(f"different architectures: tensor {key} has shape {list(shape_a)} in {a.checkpoint} "
                            f"and {list(shape_b)} in {b.checkpoint}: compare runs of the same --arch and options.")


def weight_diffs(a: Dict, b: Dict) -> List[Dict]:
    """Per tensor: the largest absolute difference and that relative to the tensor's largest magnitude."""
    out = []
    for key in a:
        ta, tb = a[key].double(), b[key].double()
        absd = (ta - tb).abs().max().item() if ta.numel() else 0.0
        scale = max(ta.abs().max().item() if ta.numel() else 0.0, 1e-12)
        out.append({"tensor": key, "group": key.split(".")[0], "abs": absd, "rel": absd / scale,
                    "buffer": key.endswith(BUFFER_SUFFIXES)})
    return out


def group_diffs(diffs: List[Dict]) -> List[Dict]:
    """The worst tensor of each top-level module (parameters only), in the models' order."""
    groups: Dict[str, Dict] = {}
    for d in diffs:
        if d["buffer"]:
            continue
        g = groups.setdefault(d["group"], {"group": d["group"], "abs": -1.0, "rel": 0.0, "tensor": ""})
        if d["abs"] > g["abs"]:
            g.update(abs=d["abs"], tensor=d["tensor"])
        g["rel"] = max(g["rel"], d["rel"])
    return list(groups.values())


def _differs(x: object, y: object, tolerance: float) -> bool:
    """Numbers differ beyond the tolerance (relative to their size when above 1); others by equality."""
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        return abs(x - y) > tolerance * max(1.0, abs(x), abs(y))
    return x != y


def step_rows(ra: Dict[int, Dict], rb: Dict[int, Dict], tolerance: float) -> List[Dict]:
    """One row per step logged by either run: LR, global batch and loss of both and what differs."""
    rows = []
    for step in sorted(set(ra) | set(rb)):
        a, b = ra.get(step, {}), rb.get(step, {})
        row = {"step": step}
        for key in ("global_batch", "lr", "loss"):
            row[key] = [a.get(key), b.get(key)]
        if not a or not b:
            row["differs"] = ["logged in one run only"]
        else:
            row["differs"] = [k for k in ("global_batch", "lr", "loss") if _differs(a.get(k), b.get(k), tolerance)]
        rows.append(row)
    return rows


def max_loss_diff(rows: List[Dict]) -> Optional[float]:
    both = [r["loss"] for r in rows if all(isinstance(v, (int, float)) for v in r["loss"])]
    return max((abs(x - y) for x, y in both), default=None)


def compare(target_a: str, target_b: str, tolerance: float) -> Dict:
    """The whole comparison as plain data (what --json prints); ``agree`` and ``reason`` are the verdict."""
    if not 0 <= tolerance < float("inf"):
        raise UserError(f"--tolerance {tolerance}: must be a finite number, 0 or more (1e-5 suits fp32 on CPU).")
    a, b = open_runs(target_a, target_b)
    check_same_shape(a, b)
    diffs = weight_diffs(a.state["model"], b.state["model"])
    params = [d for d in diffs if not d["buffer"]]
    worst = max(params, key=lambda d: d["abs"], default=None)
    rows = step_rows(train_records(a), train_records(b), tolerance)
    result = {"runs": [_describe(a), _describe(b)], "step": a.state.get("step"), "tolerance": tolerance,
              "steps": rows, "groups": group_diffs(diffs), "worst": worst,
              "max_loss_diff": max_loss_diff(rows),
              "buffers_max_abs": max((d["abs"] for d in diffs if d["buffer"]), default=None)}
    result["reason"] = verdict(result, tolerance)
    result["agree"] = result["reason"] is None
    return result


def _describe(run: Run) -> Dict:
    return {"checkpoint": str(run.checkpoint), "run_dir": None if run.run_dir is None else str(run.run_dir),
            "step": run.state.get("step")}


def verdict(result: Dict, tolerance: float) -> Optional[str]:
    """None when the runs agree; else the first step where the logs differ and the tensor that differs most."""
    reasons = []
    first = next((r for r in result["steps"] if r["differs"]), None)
    if first is not None:
        pairs = "; ".join(f"{k} {first[k][0]} vs {first[k][1]}" for k in ("global_batch", "lr", "loss")
                          if k in first["differs"]) or "logged in one run only"
        reasons.append(f"first difference at step {first['step']} ({pairs})")
    worst = result["worst"]
    if worst is not None and worst["abs"] > tolerance:
        reasons.append(f"tensor {worst['tensor']} differs most: max |dw| {worst['abs']:.3g} "
                       f"(relative {worst['rel']:.3g}) > tolerance {tolerance:g}")
    return "; ".join(reasons) if reasons else None
