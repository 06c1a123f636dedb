"""The training pool reads into the next epoch while this one's last batches are trained on
(``Pipeline.train_batches(..., ahead=...)``), and the batches stay exactly what one pass per epoch gives.

Real JPEG shards through the real Pipeline and its forkserver workers: three epochs with and without the
read-ahead, compared tensor for tensor; the same from a resume in the middle of an epoch; multigrid's
variable shapes; an epoch whose sampler differs from the one read ahead (AAVG's batch rule grew the batch)
gets its own batches from a new pass; and the read-ahead is really there: one pass serves all the epochs and
the next epoch's first batches are decoded before that epoch is asked for.
"""
from __future__ import annotations

from typing import Callable, List, Optional

import pytest
import torch

from lsf_jobs import wait_for
from trainer_utils import make_dataset

from trainer.data.clips import ClipSpec
from trainer.data.datasets import Pipeline, TrainClips
from trainer.data.sampler import MicroBatchSampler, ShapeBatchSampler

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPEC = ClipSpec(num_segments=4, stride=2, size=32)
N, EPOCHS = 24, 3


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("overlap") / "data", train=N, val=2, frames=8, size=48)


def micro(epoch: int, start: int = 0, batch: int = 2, rank: int = 0, size: int = 2, accum: int = 2):
    return MicroBatchSampler(N, rank, size, accum, batch, seed=11, epoch=epoch, start_step=start)


def shapes(epoch: int, start: int = 0):
    steps = [(4, 32, 2), (2, 24, 4), (4, 32, 2)] if epoch % 2 == 0 else [(2, 24, 4), (4, 32, 2)]
    return ShapeBatchSampler(N, 1, 2, 1, seed=11, epoch=epoch, steps=steps, start_step=start)


def epochs(data, first, make: Callable[[int, int], object], ahead: bool, workers: int = 2,
           real: Optional[Callable[[int, int], object]] = None):
    """Every batch of the epochs from ``first`` = (epoch, step) on, as the training loop takes them: one
    ``train_batches`` call per epoch, exactly ``len(sampler)`` batches each. ``real`` (default ``make``)
    gives the sampler each epoch really uses; ``make`` is what is read ahead."""
    real = real or make
    pipe = Pipeline(TrainClips(str(data), SPEC, seed=3), {}, workers=workers, pin=False)
    out: List[List] = []
    try:
        epoch, start = first
        while epoch < EPOCHS:
            sampler = real(epoch, start)
            batches = pipe.train_batches(sampler, ahead=(lambda e: make(e, 0) if e < EPOCHS else None)
                                         if ahead else None)
            got = [next(batches) for _ in range(len(sampler))]
            out.append(got)
            epoch, start = epoch + 1, 0
        return out, pipe.train_pool.passes
    finally:
        pipe.close()


def same(a: List[List], b: List[List]) -> None:
    assert [len(e) for e in a] == [len(e) for e in b]
    for ea, eb in zip(a, b):
        for (xa, ya), (xb, yb) in zip(ea, eb):
            assert xa.shape == xb.shape and torch.equal(xa, xb) and torch.equal(ya, yb)


@pytest.mark.parametrize("first", [(0, 0), (1, 2)], ids=["from-the-start", "resumed-mid-epoch"])
def test_three_epochs_read_ahead_equal_one_pass_per_epoch(data, first):
    before, passes_before = epochs(data, first, micro, ahead=False)
    after, passes_after = epochs(data, first, micro, ahead=True)
    same(before, after)
    assert passes_before == EPOCHS - first[0] and passes_after == 1
    # And they are the batches the sampler names, in its order (no epoch's items in another's place).
    labels = [int(y) for e in after for _, ys in e for y in ys]
    ds = TrainClips(str(data), SPEC, seed=3)
    want = [ds.shards.label(i) for ep in range(first[0], EPOCHS)
            for batch in micro(ep, first[1] if ep == first[0] else 0) for _, i in batch]
    assert labels == want


def test_multigrid_shapes_read_ahead_equal_one_pass_per_epoch(data):
    before, _ = epochs(data, (0, 0), shapes, ahead=False)
    after, passes = epochs(data, (0, 0), shapes, ahead=True)
    same(before, after)
    assert passes == 1 and {tuple(x.shape[1:3]) for e in after for x, _ in e} == {(4, 32), (2, 24)}


def test_an_epoch_unlike_the_one_read_ahead_gets_its_own_batches(data):
    """AAVG's batch rule grew the batch at epoch 1's start after the pool read ahead with the old one: the
    epoch gets the grown batch's batches (a new pass); epoch 2, read ahead with the grown batch, does not."""
    grown = lambda e, s: micro(e, s, batch=2 if e == 0 else 3)   # noqa: E731
    before, _ = epochs(data, (0, 0), grown, ahead=False)
    after, passes = epochs(data, (0, 0), lambda e, s: micro(e, s, batch=2 if e <= 1 else 3), ahead=True,
                           real=grown)
    same(before, after)
    assert passes == 2


class LoggedClips(TrainClips):
    """TrainClips that append "epoch index" to a file for every clip a worker decodes."""

    def __init__(self, root: str, log: str):
        super().__init__(root, SPEC, seed=3)
        self.log = log

    def __getitem__(self, item):
        with open(self.log, "a") as fh:
            fh.write(f"{item[0]} {item[1]}\n")
        return super().__getitem__(item)


def test_the_next_epoch_is_decoded_before_it_is_asked_for(data, tmp_path):
    """Once epoch 0's last batch is taken, the workers decode epoch 1's first clips while nobody has asked
    for epoch 1 yet (the rank is busy with the last step, an evaluation, a checkpoint)."""
    log = tmp_path / "decoded.txt"
    pipe = Pipeline(LoggedClips(str(data), str(log)), {}, workers=2, pin=False)
    try:
        ahead = lambda e: micro(e) if e < EPOCHS else None   # noqa: E731
        batches = pipe.train_batches(micro(0), ahead=ahead)
        for _ in range(len(micro(0))):
            next(batches)
        with pytest.raises(StopIteration):   # the segment ends with its epoch
            next(batches)
        first_of_1 = [(1, i) for _, i in next(iter(micro(1)))]
        wait_for(lambda: set(first_of_1) <= {tuple(map(int, line.split())) for line in log.read_text().splitlines()},
                 30, "epoch 1's first clips to be decoded before epoch 1 is asked for")
        nxt = pipe.train_batches(micro(1), ahead=ahead)
        assert next(nxt)[0].shape[0] == 2 and pipe.train_pool.passes == 1
    finally:
        pipe.close()


def test_pools_started_per_pass_do_not_read_ahead(data):
    """--persistent-workers off: every epoch its own pool, as before; a pass ends with its epoch's batches
    (iterating it to its end does not run into the next epoch)."""
    pipe = Pipeline(TrainClips(str(data), SPEC, seed=3), {}, workers=1, pin=False, persistent=False)
    try:
        ahead = lambda e: micro(e) if e < EPOCHS else None   # noqa: E731
        for epoch in range(2):
            assert len(list(pipe.train_batches(micro(epoch), ahead=ahead))) == len(micro(epoch))
        assert pipe.train_pool.passes == 2
    finally:
        pipe.close()


def test_partitioned_shares_yield_the_epochs_steps_so_the_read_ahead_is_taken():
    """Partitioned staging: each node samples its own share, and every node stops at the smallest share's
    steps. The sampler of a node with more clips yields only those steps, so the loop takes all of a segment
    and the next epoch's read-ahead matches (before, the surplus batches ended every pass)."""
    import argparse
    from trainer.methods.schedules import AAVGSchedule, Schedule, TrainData

    class Share:
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n
    args = argparse.Namespace(epochs=3, warmup_epochs=0, batch_per_gpu=2, seed=1, aavg_eval_every=0)
    big = TrainData(Share(40), sample_rank=0, sample_size=2, accum=1, node_counts=[40, 24])
    steps = big.steps_for_batch(2)
    assert steps == 24 // 4 < 40 // 4
    for schedule in (Schedule(args, big, steps, 0.1, 2), AAVGSchedule(Schedule(args, big, steps, 0.1, 2))):
        real, ahead = schedule.sampler(1, 0), schedule.sampler_ahead(1)
        assert len(real) == len(list(real)) == steps * 1 and real.key == ahead.key
        assert len(schedule.sampler(1, 2)) == steps - 2
