"""The schedules and the resumable state without processes: each schedule's answers (steps per epoch,
LR, its checkpoint part) and the checkpoint's key set, which old checkpoints of this version share."""
import argparse

import pytest
import torch

from trainer.config import parser
from trainer.methods.schedules import AAVGSchedule, MultigridSchedule, Position, Schedule, TrainData, lr_at, make_schedule
from trainer.loop.trainstate import TrainState


class _Clips:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def options(*extra) -> argparse.Namespace:
    return parser().parse_args(["--data", "d", "--run-dir", "r", "--epochs", "5", "--batch-per-gpu", "2",
                                      "--warmup-epochs", "1", "--lr", "0.1", *extra])


def schedule_for(*extra) -> Schedule:
    data = TrainData(_Clips(48), 0, 2, 1, None)  # 48 clips, 2 ranks: 12 steps per epoch at batch 2
    return make_schedule(options(*extra), data, data.steps_for_batch(2), 0.1, 2)


def test_standard_schedule_is_warmup_then_cosine_over_iterations():
    s = schedule_for()
    assert type(s) is Schedule and s.epoch_steps(3) == 12 and s.run_total_steps == 60
    assert s.lr(Position(5, 0, 5)) == lr_at(5, 0.1, 12, 60) and s.state() == {}


def test_multigrid_schedule_owns_its_iterations_and_shapes():
    s = schedule_for("--schedule", "multigrid")
    assert isinstance(s, MultigridSchedule)
    assert sum(s.epoch_steps(e) for e in range(5)) == s.run_total_steps < 60
    assert s.metrics_extra(0)["batch"] > 2  # the coarse shapes take more clips per step


def test_aavg_grown_batch_has_fewer_steps_and_follows_the_curve_by_epochs():
    s = schedule_for("--optimizer-sync", "aavg", "--aavg-eval-every", "3", "--optimizer", "adam")
    assert isinstance(s, AAVGSchedule) and s.epoch_steps(0) == 12
    s.controller.observe(3, 0.5)
    s.controller.observe(6, 0.4)  # worse than the best: the batch doubles from the next epoch on
    s.start_epoch()
    assert s.epoch_batch == 4 and s.epoch_steps(1) == 6
    assert s.lr(Position(15, 1, 3)) == pytest.approx(lr_at(18, 0.1, 12, 60))


def test_aavg_state_round_trips_through_a_new_schedule():
    extra = ("--optimizer-sync", "aavg", "--aavg-eval-every", "3", "--optimizer", "adam")
    s = schedule_for(*extra)
    s.controller.observe(3, 0.5)
    s.controller.observe(6, 0.4)
    s.start_epoch()
    s.avg_rounds = 7
    t = schedule_for(*extra)
    t.restore(s.state())
    assert t.state() == s.state() and t.epoch_batch == 4 and t.controller.history == s.controller.history


def test_checkpoint_keys_are_the_format_old_checkpoints_have():
    s = schedule_for("--optimizer-sync", "aavg", "--optimizer", "adam")
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = TrainState(step=5, epoch=0, step_in_epoch=5).checkpoint(model, opt, None, s, options())
    assert set(state) == {"aavg", "model", "optimizer", "scaler", "step", "epoch", "step_in_epoch",
                          "steps_per_epoch", "best_top1", "rng", "args"}
    back = TrainState()
    assert back.restore(state, opt, None, s) is None
    assert (back.step, back.epoch, back.step_in_epoch) == (5, 0, 5)
