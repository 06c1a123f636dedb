"""torch side of the input pipeline: Dataset over the shards and the DataLoader.

Why forkserver/spawn: DataLoader workers deadlocked with fork on Summit (the
CUDA/MPI state of the parent is not fork-safe), so workers are never forked
from the training process. Why workers that outlive an epoch (``Pipeline``):
starting them costs seconds, and at paper scale an epoch is seconds too; the
batch sampler of each pass carries the epoch (its shuffle) and the resume
position, so the workers need no state of their own.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import multiprocessing
import multiprocessing.connection
import os
import re
import select
import signal
import threading
import time
from multiprocessing import resource_tracker
from typing import Callable, Deque, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from trainer import preflight
from trainer.data import transforms
from trainer.data.clips import (ClipSpec, sample_rng, eval_crops, eval_frame_indices, flow_eval_crops, flow_eval_indices,
                    flow_train_clip, flow_train_indices, train_clip, train_frame_indices)
from trainer.data.sampler import MicroBatchSampler, ShapeBatchSampler
from trainer.shards import ShardDataset
from trainer.loop.signals import STOP_SIGNALS


class SampleError(ValueError):
    """A sample with a frame that cannot be decoded; the message names the shard file and the tar member."""


def error_line(exc: BaseException) -> str:
    """The message of ``exc`` without a DataLoader worker's traceback around it.

    Why: an error raised in a worker reaches the training process as the same
    type whose message is the worker's whole traceback; the line that says what
    is wrong is its last one, after the exception's name.
    """
    text = str(exc)
    if "Traceback (most recent call last)" not in text:
        return text
    last = [line for line in text.splitlines() if line.strip()][-1]
    return re.sub(r"^[\w.]+: ", "", last.strip(), count=1)


def _bad_frame(frames: Sequence[bytes], indices: Sequence[int], num_frames: int) -> Optional[Tuple[int, str]]:
    """(frame number, why) of the first frame of a clip that does not decode on its own, else None."""
    for j, data in zip(indices, frames):
        try:
            transforms.decode(data)
        except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, DecompressionBombError...
            why = re.sub(r"\s*<_io\.BytesIO object at 0x[0-9a-f]+>", "", str(exc))  # an address says nothing
            return min(max(int(j), 0), num_frames - 1), f"{type(exc).__name__}: {why}"
    return None


def bad_rgb(frames: Sequence[bytes], indices: Sequence[int], num_frames: int) -> Optional[Tuple[str, str, str]]:
    """(tar member suffix, where in the sample, why) of a clip's first frame that does not decode, else None."""
    bad = _bad_frame(frames, indices, num_frames)
    return None if bad is None else (f"{bad[0]:05d}.jpg", f", frame {bad[0]}", bad[1])


def _bad_flow(pairs: Sequence[Tuple[bytes, bytes]], indices: Sequence[int],
              num_fields: int) -> Optional[Tuple[str, str, str]]:
    """(tar member suffix, "", why) of the first flow JPEG of a clip that does not decode on its own, else None."""
    for j, (x, y) in zip(indices, pairs):
        t = min(max(int(j), 0), num_fields - 1)
        for axis, data in (("x", x), ("y", y)):
            bad = _bad_frame([data], [t], num_fields)
            if bad is not None:
                return f"{t:05d}.{axis}.jpg", "", bad[1]
    return None


def _decoding(shards: ShardDataset, i: int, items: List, indices: Sequence[int], make: Callable[[List], np.ndarray],
              find_bad: Callable, what: str):
    """``make(items)``; when it fails and one of the JPEGs fails on its own, a SampleError naming the shard
    file and the tar member. Any other failure is raised as it is."""
    try:
        return make(items)
    except Exception:
        bad = find_bad(items, indices, shards.num_frames(i))
        if bad is None:
            raise
        raise sample_error(shard_path(shards, i), shards.key(i), bad, what) from None


def shard_path(shards: ShardDataset, i: int) -> str:
    """The file of the shard that holds sample ``i`` (ShardDataset keeps no public accessor)."""
    return str(shards.root / shards._shards[shards._samples[i][0]]["name"])


def sample_error(path: str, key: str, bad: Tuple[str, str, str], what: str = "video") -> SampleError:
    """The one line for a sample whose JPEG ``bad`` = (member suffix, where in the sample, why) does not
    decode, wherever it was decoded (a worker, or the rank with ``--decode device``)."""
    member, where, why = bad
    return SampleError(f"trainer: shard {path}: member {key}.{member} (sample {key}{where}) cannot be "
                       f"decoded ({why}); re-pack that {what} or re-stage the shard")


def decoded(shards: ShardDataset, i: int, indices: Sequence[int], make: Callable[[List[bytes]], np.ndarray]):
    """``make(frames)`` for sample ``i``; a frame that cannot be decoded is reported by shard file and member.

    Why here: the decode runs in a DataLoader worker, where PIL's own error names
    neither the video nor the file it came from. Only a frame that fails on its
    own is blamed on the data; any other failure is raised as it is.
    """
    return _decoding(shards, i, shards.frames(i, indices), indices, make, bad_rgb, "video")


def decoded_flow(shards: ShardDataset, i: int, indices: Sequence[int], make: Callable[[List], np.ndarray]):
    """``decoded`` for a flow pack: ``make(pairs)`` of the (flow_x, flow_y) JPEGs of fields ``indices``."""
    return _decoding(shards, i, shards.flow(i, indices), indices, make, _bad_flow, "video's flow")


def open_shards(root: str, split: str, spec: ClipSpec) -> ShardDataset:
    """The split's shards, refused in one line when they hold another modality than the run trains
    (``preflight.modality_matches``: ``python -m trainer`` refuses it before torch, a run started
    in-process here, before any worker starts)."""
    shards = ShardDataset(root, split)
    preflight.modality_matches(root, shards.modality, spec.modality)
    return shards


class TrainClips(Dataset):
    """Items are (epoch, index): the augmentation draw depends on nothing else."""

    def __init__(self, root: str, spec: ClipSpec, seed: int, split: str = "train"):
        self.shards = open_shards(root, split, spec)
        self.spec, self.seed = spec, seed

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, item: Tuple[int, ...]):
        """``(epoch, index)``, or ``(epoch, index, frames, size)`` for a multigrid shape."""
        i, spec, rng = self.start(item)
        if spec.modality == "flow":
            idx = flow_train_indices(self.shards.num_frames(i), spec, rng)
            clip = decoded_flow(self.shards, i, idx, lambda pairs: flow_train_clip(pairs, spec, rng))
        else:
            idx = self.rgb_indices(i, spec, rng)
            clip = decoded(self.shards, i, idx, lambda frames: train_clip(frames, spec, rng))
        return torch.from_numpy(clip), self.shards.label(i)

    def start(self, item: Tuple[int, ...]) -> Tuple[int, ClipSpec, np.random.Generator]:
        """The sample index, the spec of the item's shape and the clip's generator, before any draw.

        Why a method: the ``--decode device`` path (``trainer.data.devicedecode``)
        makes the same draws in the same order; both begin here.
        """
        epoch, i = item[0], item[1]
        spec = self.spec if len(item) == 2 else self.shaped(item[2], item[3])
        return i, spec, sample_rng(self.seed, epoch, i)

    def rgb_indices(self, i: int, spec: ClipSpec, rng: np.random.Generator) -> List[int]:
        """The frames of a training clip of sample ``i`` (the generator's first draws)."""
        return train_frame_indices(self.shards.num_frames(i), spec.num_segments, spec.mode, spec.stride, rng)

    def shaped(self, frames: int, size: int) -> ClipSpec:
        """The spec for a multigrid shape: fewer frames keep the temporal span (the dense
        stride grows), as in the multigrid paper's coarse grids."""
        stride = max(1, int(round(self.spec.stride * self.spec.num_segments / frames)))
        return dataclasses.replace(self.spec, num_segments=frames, size=size, stride=stride)


class EvalClips(Dataset):
    """Items are (index, clip): all ``crops`` crops of one clip, (crops, T, size, size, 3), deterministic.

    Why a clip's crops together: they come from the same frames, so each frame
    is decoded once for all of them (the paper's test: 10 clips x 3 crops).
    Validation during training is 1 clip x 1 centre crop at the training size.
    """

    def __init__(self, root: str, spec: ClipSpec, clips: int, split: str = "val", crops: int = 1, size: int = 0):
        self.shards = open_shards(root, split, spec)
        self.spec, self.clips, self.crops = spec, clips, crops
        self.size = size or spec.size

    @property
    def views(self) -> int:
        """Views per video: clips x crops, averaged into one prediction."""
        return self.clips * self.crops

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, item: Tuple[int, int]):
        i, clip = item
        spec, n = self.spec, self.shards.num_frames(i)
        if spec.modality == "flow":
            idx = flow_eval_indices(n, spec, clip, self.clips)
            crops = decoded_flow(self.shards, i, idx, lambda pairs: flow_eval_crops(pairs, spec, self.crops,
                                                                                    self.size))
        else:
            idx = eval_frame_indices(n, spec.num_segments, spec.mode, spec.stride, clip, self.clips)
            crops = decoded(self.shards, i, idx, lambda frames: eval_crops(frames, spec, self.crops, self.size))
        return torch.from_numpy(crops), self.shards.label(i)


#: What the forkserver imports once, before it forks any worker: the main module (multiprocessing's
#: default) and this module, with torch. Each worker then starts as a copy of it instead of importing
#: torch on its own (about 1.5 s of CPU per worker, 4 workers a rank with --workers 2).
WORKER_PRELOAD = ["__main__", __name__]


def _context(workers: int) -> Optional[multiprocessing.context.BaseContext]:
    if workers <= 0:
        return None
    method = os.environ.get("SUMMIT_JOBS_WORKER_START", "forkserver")
    if method not in multiprocessing.get_all_start_methods():
        method = "spawn"
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(WORKER_PRELOAD)
    return ctx


class WorkerLost(SystemExit):
    """A DataLoader worker process of this rank ended while the rank was reading batches from it: one line
    naming the worker and how it ended, no traceback (the trainer exits non-zero)."""


@contextlib.contextmanager
def _stop_signals_held() -> Iterator[None]:
    """The stop signals held back (blocked) in this thread, then delivered as they came.

    Why around the start of worker processes: LSF sends its warning, the run
    limit's USR2 and bkill's INT and TERM to every process of the job, not only
    to the rank. A worker (or the forkserver that forks it) with the default
    action would die of the rank's stop request, and the rank would fail at its
    next batch instead of saving. Processes inherit the blocked set through
    fork and exec, so everything started here keeps these signals blocked for
    life; the rank, after the block, receives what arrived meanwhile. Workers
    still end when the rank shuts them down, when the rank is gone
    (``_worker_start``) or on SIGKILL. multiprocessing's resource tracker
    unblocks INT and TERM after it starts, so it is started first and the block
    made again.
    """
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# How long a failed read waits for a worker's end to become known (see ``_lost_workers``).
LOST_WORKER_GRACE_S = 3.0


def _lost_workers(it: object, grace: float = 0.0) -> List:
    """The worker processes of a loader iterator that are no longer alive, waiting up to ``grace`` seconds
    for one to be known dead.

    Why the wait: a worker's socket closes while the kernel is still ending the
    process, before its parent can reap it; and a forkserver worker's exit
    status reaches the rank only when the forkserver has reaped it and written
    it back. The rank's read can fail with "Connection reset by peer" in that
    gap, when every worker still looks alive. The wait returns as soon as one
    worker's sentinel is ready, so it costs nothing when a worker did die.
    """
    workers = list(getattr(it, "_workers", []))
    if grace > 0 and workers and all(w.is_alive() for w in workers):
        multiprocessing.connection.wait([w.sentinel for w in workers], timeout=grace)
    return [w for w in workers if not w.is_alive()]


def _lost_line(lost: List) -> str:
    """What a rank says when its workers died: which, how, and what to do."""
    how = []
    for w in lost:
        code = w.exitcode
        if code is not None and code < 0:
            how.append(f"pid {w.pid} killed by {signal.Signals(-code).name}")
        else:
            how.append(f"pid {w.pid} exit status {code}")
    return (f"trainer: data loader worker process ended while the rank read its clips ({', '.join(how)}): killed "
            "from outside or by the kernel's out-of-memory killer (see dmesg); the run stops here: run it again "
            "to resume from the newest checkpoint (fewer --workers or a lower --prefetch use less memory)")


@contextlib.contextmanager
def _naming_lost_workers(get_iterator: Callable[[], object]) -> Iterator[None]:
    """A failure inside that comes with a dead worker of ``get_iterator()`` becomes ``WorkerLost``.

    Why: torch reports a dead worker as a RuntimeError with a traceback, or, when
    the worker died after sending part of a batch, as the connection error of
    reading it; neither says which process ended or what to do.
    """
    try:
        yield
    except StopIteration:
        raise
    except Exception as e:
        # A broken connection to a worker is the one failure that can come before the worker is known dead.
        grace = LOST_WORKER_GRACE_S if isinstance(e, (ConnectionError, EOFError)) else 0.0
        lost = _lost_workers(get_iterator(), grace)
        if lost:
            raise WorkerLost(_lost_line(lost)) from None
        raise


class _Watched:
    """A loader's iterator whose failure names a worker that died (``_naming_lost_workers``)."""

    def __init__(self, it: Iterator):
        self.it = it

    def __iter__(self) -> "_Watched":
        return self

    def __next__(self):
        with _naming_lost_workers(lambda: self.it):
            return next(self.it)


class _Loader(DataLoader):
    """A DataLoader whose worker processes start with the stop signals held (``_stop_signals_held``) and
    whose iterators name a worker that died (``_Watched``)."""

    def _get_iterator(self):
        if self.num_workers == 0:
            return super()._get_iterator()
        with _stop_signals_held():
            return super()._get_iterator()

    def __iter__(self):
        if self.num_workers == 0:
            return super().__iter__()
        with _naming_lost_workers(lambda: getattr(self, "_iterator", None)):  # a kept pool's next pass waits for
            return _Watched(super().__iter__())                                # every worker to answer


def _wait_for_exit(pid: int) -> None:
    """Return when process ``pid`` has ended (a pidfd where Linux has one, else a poll once a second)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        select.select([fd], [], [])  # readable once the process has ended, reaped or not
        return
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass
        time.sleep(1.0)


def _watch_rank(rank_pid: int) -> None:
    """A worker's thread: end the worker when its rank has ended."""
    _wait_for_exit(rank_pid)
    os._exit(0)


def _worker_start(rank_pid: int, worker_id: int) -> None:
    """Each worker's first act: follow its rank's life.

    Why: a forkserver worker is the forkserver's child, not the rank's, and
    torch's watchdog ends it only when its parent changes; the forkserver in
    turn stays while any worker holds its liveness pipe. A rank killed outright
    (SIGKILL, the out-of-memory killer) would leave its forkserver and workers,
    which also hold back the stop signals, running until the job ends.
    """
    threading.Thread(target=_watch_rank, args=(rank_pid,), name="rank-watch", daemon=True).start()


def _loader(dataset: Dataset, batch_sampler, workers: int, pin: bool, prefetch: int,
            persistent: bool = False, collate: Optional[Callable] = None) -> DataLoader:
    kw: Dict[str, object] = {} if collate is None else dict(collate_fn=collate)
    if workers > 0:
        kw.update(multiprocessing_context=_context(workers), prefetch_factor=prefetch, persistent_workers=persistent,
                  worker_init_fn=functools.partial(_worker_start, os.getpid()))
    return _Loader(dataset, batch_sampler=batch_sampler, num_workers=workers, pin_memory=pin, **kw)


class _Named(Dataset):
    """Several datasets behind one: items are ``(name, item)``, so one set of workers serves them all."""

    def __init__(self, sets: Dict[str, Dataset]):
        self.sets = sets

    def __len__(self) -> int:
        return sum(len(d) for d in self.sets.values())

    def __getitem__(self, item: Tuple[str, Tuple]):
        name, inner = item
        return self.sets[name][inner]


class _Feed:
    """A persistent loader's batch sampler: each pass yields the batches it was last given.

    Why: a DataLoader with persistent workers keeps its processes between passes
    but reads a new iterator from its batch sampler at each pass; the epoch, the
    resume position and the validation's batches change from pass to pass.
    """

    def __init__(self):
        self.batches: Iterable[List] = ()

    def __iter__(self) -> Iterator[List]:
        # The same iterator each time until the pipeline sets the next pass: torch asks twice when a
        # pool starts (once in the base iterator, once in its first reset).
        self.batches = iter(self.batches)
        return self.batches


class _Segment:
    """``count`` batches of a pool's running pass, the batches of one sampler (one epoch or its rest)."""

    def __init__(self, pool: "_Pool", stream: Iterator, count: int):
        self.pool, self.stream, self.left = pool, stream, count

    def __iter__(self) -> "_Segment":
        return self

    def __next__(self):
        if self.left <= 0:
            raise StopIteration
        batch = next(self.stream)
        self.left -= 1
        self.pool._owed -= 1
        return batch


class _Pool:
    """One persistent DataLoader over named datasets; ``passes`` counts the passes it started (a pass serves
    one sampler or several in a row); ``collate`` makes a batch of items (None: torch's default).

    A pass given ``ahead`` (the sampler of an epoch from its first step, None past the run's last) runs on
    into the next epoch: the loader asks its batch sampler for a batch of the next epoch as soon as it has
    room in its prefetch queue, so the workers decode the next epoch's first batches while the rank trains
    on this epoch's last. The next ``batches`` call takes them when its sampler is the one read ahead
    (``key``); otherwise (a batch size changed at the epoch start, a segment left unfinished) the pass ends
    and a new one starts, as every epoch did before, after the workers have answered for the batches they
    had read ahead (torch's reset waits for them: up to ``prefetch`` batches per worker, paid only at such
    an epoch, which AAVG's batch rule makes a few times a run).
    """

    def __init__(self, sets: Dict[str, Dataset], workers: int, pin: bool, prefetch: int, persistent: bool,
                 collate: Optional[Callable] = None):
        self.sets, self.workers, self.pin, self.prefetch, self.persistent = sets, workers, pin, prefetch, persistent
        self.collate = collate
        self._feed = _Feed()
        self._loader: Optional[DataLoader] = None
        self.passes = 0
        self._stream: Optional[Iterator] = None
        self._ahead: Optional[Callable[[int], Optional[object]]] = None
        self._queued: Deque[Tuple[object, int]] = collections.deque()  # (key, batches) the feed ran into
        self._owed = 0  # batches of the segment handed out last that its reader has not taken

    def _fed(self, name: str, sampler) -> Iterator[List]:
        """The feed of a pass: ``sampler``'s batches, then (with ``ahead``) those of the epochs after it."""
        while True:
            for batch in sampler:
                yield [(name, item) for item in batch]
            following = self._ahead(sampler.epoch + 1) if self._ahead is not None else None
            if following is None:
                return
            sampler = following
            self._queued.append((sampler_key(sampler), len(sampler)))

    def batches(self, name: str, sampler, ahead: Optional[Callable[[int], Optional[object]]] = None) -> Iterator:
        """The batches of ``sampler`` (``len(sampler)`` of them) from dataset ``name``; the previous pass of
        this pool ends unless it read ahead into exactly this sampler (class docstring)."""
        self._ahead = ahead
        if (self._stream is not None and self._owed == 0 and self._queued
                and self._queued[0][0] == sampler_key(sampler)):
            _, count = self._queued.popleft()
            self._owed = count
            return _Segment(self, self._stream, count)
        self._queued.clear()
        reading_ahead = ahead is not None and self.persistent   # a pool started per pass ends with it
        self._feed.batches = self._fed(name, sampler) if reading_ahead else \
            ([(name, item) for item in batch] for batch in sampler)
        if self._loader is None or not self.persistent:
            self._loader = _loader(_Named(self.sets), self._feed, self.workers, self.pin, self.prefetch,
                                   self.persistent, self.collate)
        self.passes += 1
        stream = iter(self._loader)
        if not reading_ahead:
            self._stream, self._owed = None, 0
            return stream
        self._stream, self._owed = stream, len(sampler)
        return _Segment(self, stream, len(sampler))

    def close(self) -> None:
        """Stop the workers now (a persistent pool otherwise keeps them until the process ends)."""
        it = getattr(self._loader, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        self._loader = None
        self._stream, self._owed = None, 0
        self._queued.clear()


def sampler_key(sampler) -> object:
    """What makes two batch samplers yield the same batches: their ``key``, else the object itself."""
    return getattr(sampler, "key", sampler)


class Pipeline:
    """The run's input: one worker pool for training and one for validation and test, each started
    once per run (``--persistent-workers on``) instead of once per epoch and per evaluation.

    Why two pools: AAVG validates in the middle of an epoch, and a pass of a
    pool ends its previous pass; training's pass must outlive it. Why
    persistent: at 1,536 GPUs an epoch is ~19 steps (~8.5 s) while starting a
    pool of forkserver workers takes seconds (bench/epoch_boundary.py).

    ``train_input``: the dataset the training workers read and its collate,
    instead of ``train`` and torch's default: ``--decode device`` gives the
    workers' side of ``trainer.data.devicedecode`` (each clip's JPEG bytes and
    its drawn crop and flip; the rank decodes and augments on its device:
    ``devicedecode.pipeline``); validation and test clips are decoded by the
    workers either way.
    """

    def __init__(self, train: TrainClips, evals: Dict[str, "EvalClips"], workers: int, pin: bool,
                 prefetch: int = 2, persistent: bool = True,
                 train_input: Optional[Tuple[Dataset, Callable]] = None):
        persistent = persistent and workers > 0
        train_set, collate = train_input if train_input is not None else (train, None)
        self.train_pool = _Pool({"train": train_set}, workers, pin, prefetch, persistent, collate)
        self.eval_pool = _Pool(dict(evals), workers, pin, prefetch, persistent)

    def train_batches(self, sampler, ahead: Optional[Callable[[int], Optional[object]]] = None) -> Iterator:
        """The epoch's micro-batches from a MicroBatchSampler or ShapeBatchSampler.

        ``ahead(epoch)``: the sampler that epoch will use from its first step (None past the run's last
        epoch). With it, the workers go on into the next epoch's batches while this one's last are trained
        on, so an epoch starts with a full queue (``_Pool``); the batches are the same either way.
        """
        return self.train_pool.batches("train", sampler, ahead)

    def eval_batches(self, dataset: "EvalClips", indices: List[int], batch: int) -> Iterator:
        """Whole videos of ``dataset`` (registered under any name with this pipeline) in batches."""
        name = next((k for k, d in self.eval_pool.sets.items() if d is dataset), None)
        if name is None:
            name = f"set{len(self.eval_pool.sets)}"
            self.eval_pool.sets[name] = dataset
            self.eval_pool.close()  # the workers hold copies of the sets: start them again with the new one
        return self.eval_pool.batches(name, eval_batches(indices, dataset.clips, dataset.views, batch))

    def close(self) -> None:
        self.train_pool.close()
        self.eval_pool.close()


def train_loader(dataset: TrainClips, rank: int, size: int, accum: int, batch: int, seed: int, epoch: int,
                 start_step: int, workers: int, pin: bool, prefetch: int = 2) -> DataLoader:
    sampler = MicroBatchSampler(len(dataset), rank, size, accum, batch, seed, epoch, start_step)
    return _loader(dataset, sampler, workers, pin, prefetch)


def shape_loader(dataset: TrainClips, rank: int, size: int, accum: int, seed: int, epoch: int,
                 steps, start_step: int, workers: int, pin: bool, prefetch: int = 2) -> DataLoader:
    """One loader (one set of workers) for an epoch of variable-shape iterations."""
    sampler = ShapeBatchSampler(len(dataset), rank, size, accum, seed, epoch, steps, start_step)
    return _loader(dataset, sampler, workers, pin, prefetch)


class _ListBatches:
    def __init__(self, batches: List[List[Tuple[int, int]]]):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def eval_loader(dataset: EvalClips, indices: List[int], batch: int, workers: int, pin: bool,
                prefetch: int = 2) -> DataLoader:
    """Batches of (sample, clip) in sample-major order, whole videos per batch, so that averaging a
    video's views is a reshape."""
    batches = eval_batches(indices, dataset.clips, dataset.views, batch)
    return _loader(dataset, _ListBatches(batches), workers, pin, prefetch)


def eval_batches(indices: Sequence[int], clips: int, views: int, batch: int) -> List[List[Tuple[int, int]]]:
    """Items (sample, clip) of ``indices``, grouped into batches of whole videos of at most ``batch`` views
    (at least one video)."""
    items = [(i, c) for i in indices for c in range(clips)]
    per = max(1, batch // views) * clips
    return [items[j:j + per] for j in range(0, len(items), per)]


__all__ = ["TrainClips", "EvalClips", "Pipeline", "SampleError", "error_line", "train_loader", "shape_loader",
           "eval_loader"]
