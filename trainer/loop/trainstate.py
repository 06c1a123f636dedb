"""The resumable training state: what a checkpoint saves and a resume restores, in one object.

Why one owner: a field saved in one place and restored in another drifts (a new counter saved but
never restored resumes silently wrong). ``TrainState.checkpoint`` and ``TrainState.restore`` are the
two halves, next to each other; the schedule adds its own part (``Schedule.state``).

Checkpoints are read with ``weights_only=True``: everything here is a tensor or a plain value.
"""
from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np
import torch

from trainer.dist.engines import unwrap
from trainer.methods.schedules import Position, Schedule


def rng_states() -> Dict:
    """torch, numpy and python RNG states as a tensor and plain lists and numbers.

    Why not the objects the libraries return: checkpoints are read with
    ``weights_only=True``, which refuses numpy arrays; a numpy state stored as
    plain values restores the same stream bit for bit.
    """
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, py_gauss = random.getstate()
    return {"torch": torch.get_rng_state(),
            "numpy": {"name": str(name), "keys": [int(k) for k in keys], "pos": int(pos),
                      "has_gauss": int(has_gauss), "gauss": float(gauss)},
            "python": {"version": int(version), "state": [int(v) for v in internal], "gauss": py_gauss}}


def set_rng_states(rng: Dict) -> None:
    """The inverse of ``rng_states``."""
    torch.set_rng_state(rng["torch"])
    n = rng["numpy"]
    np.random.set_state((n["name"], np.array(n["keys"], dtype=np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = rng["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))


def plain_args(args: argparse.Namespace) -> Dict:
    """The options as plain values (strings, numbers, booleans, None, lists of them) for the checkpoint."""
    def plain(v):
        if v is None or isinstance(v, (str, int, float, bool)):
            return v
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return str(v)
    return {k: plain(v) for k, v in vars(args).items()}


#: Options that define the network or its optimiser's groups: a checkpoint resumes only under the same values.
NETWORK_OPTIONS = ("arch", "width", "shift", "shift_placement", "shift_blocks", "fold_div", "fc_lr5", "modality",
                   "flow_stack")


def _effective(args: Dict) -> Dict:
    """The network options of ``args`` as they took effect. A checkpoint written before --shift-blocks
    existed shifted every block; under the official rule only resnet101/152 with blockres differ."""
    out = {k: args.get(k) for k in NETWORK_OPTIONS}
    out["shift_blocks"] = out["shift_blocks"] or "all"
    out["fc_lr5"] = bool(out["fc_lr5"])
    out["modality"] = out["modality"] or "rgb"  # written before --modality existed: RGB
    if out["modality"] == "rgb":
        out["flow_stack"] = None  # no stack in an RGB network
    if out["arch"] not in ("resnet101", "resnet152") or out["shift_placement"] != "blockres" or not out["shift"]:
        out["shift_blocks"] = "all"  # the official rule shifts every block there
    return out


def resume_mismatch(saved_args: Optional[Dict], args: argparse.Namespace) -> Optional[str]:
    """Why a checkpoint cannot continue this run (its network or parameter groups differ), else None.

    Why refuse: the shift has no weights, so a checkpoint of a network with
    its shifts elsewhere loads without a word and trains a different model;
    parameter groups that differ fail deep inside torch.
    """
    if not saved_args:
        return None
    then, now = _effective(saved_args), _effective(vars(args))
    for name in NETWORK_OPTIONS:
        if then[name] is not None and then[name] != now[name]:
            flag = "--" + name.replace("_", "-")
            return (f"was written with {flag} {then[name]} and this run has {now[name]}: resume with the same "
                    f"{flag}, or start the new network in another --run-dir")
    return None


@dataclass
class TrainState:
    """Where the run is and what it has learned about itself; the model and optimiser live beside it."""
    step: int = 0
    epoch: int = 0
    step_in_epoch: int = 0
    best_top1: float = -1.0

    @property
    def position(self) -> Position:
        return Position(self.step, self.epoch, self.step_in_epoch)

    def advance(self) -> None:
        """One optimiser step done."""
        self.step += 1
        self.step_in_epoch += 1

    def next_epoch(self) -> None:
        self.epoch, self.step_in_epoch = self.epoch + 1, 0

    def checkpoint(self, model: torch.nn.Module, opt: torch.optim.Optimizer, scaler: Optional[object],
                   schedule: Schedule, args: argparse.Namespace) -> Dict:
        """Tensors and plain values only: what ``checkpoint.load`` (weights_only) accepts."""
        return {**schedule.state(),
                "model": unwrap(model).state_dict(), "optimizer": opt.state_dict(),
                "scaler": scaler.state_dict() if scaler is not None else None,
                "step": self.step, "epoch": self.epoch, "step_in_epoch": self.step_in_epoch,
                "steps_per_epoch": schedule.steps_per_epoch, "best_top1": self.best_top1,
                "rng": rng_states(), "args": plain_args(args)}

    def restore(self, state: Dict, opt: torch.optim.Optimizer, scaler: Optional[object],
                schedule: Schedule) -> Optional[str]:
        """The inverse of ``checkpoint`` (the model is loaded before the engine wraps it).

        Returns a warning when the checkpoint's epoch geometry differs from this run's: the epoch then
        restarts at its first step, since the sampler's offsets no longer mean the same clips.
        """
        schedule.restore(state)
        opt.load_state_dict(state["optimizer"])
        if scaler is not None and state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
        self.step, self.epoch, self.step_in_epoch = state["step"], state["epoch"], state["step_in_epoch"]
        self.best_top1 = state.get("best_top1", -1.0)
        rng = state.get("rng", {})
        if "torch" in rng:
            set_rng_states(rng)
        warning = None
        if state.get("steps_per_epoch") != schedule.steps_per_epoch:
            warning = (f"was written with {state.get('steps_per_epoch')} steps/epoch, now "
                       f"{schedule.steps_per_epoch} (different ranks/batch): the epoch restarts at step 0")
            self.step_in_epoch = 0
        # a run stopped after its last epoch (before or during the final test) has no epoch left to measure
        if self.epoch < schedule.args.epochs and self.step_in_epoch >= schedule.epoch_steps(self.epoch):
            self.next_epoch()
            schedule.start_epoch()
        return warning
