"""The ``--decode device`` input path, run on the CPU: workers hand over JPEG bytes, the rank decodes and augments.

The checks: the batches equal the CPU path's (same frames, crop and flip; only
resampling arithmetic apart), through the real Pipeline and its worker
processes, for the standard and the multigrid shapes; a real two-rank training
run trains as the CPU path does; a decoder that rejects a batch falls back to
PIL or names the bad frame; a CUDA device without a working torchvision is
refused before anything starts. (A corrupt frame in a shard gives the CPU path's
line: tests/training/test_bad_input_trainer.py, which runs the CPU cases anyway.)
"""
from __future__ import annotations

import math

import pytest
import torch

from trainer_utils import make_dataset, run_ranks, tiny_args

from trainer.data import devicedecode
from trainer.data.clips import ClipSpec
from trainer.data.datasets import SampleError, TrainClips
from trainer.loop.metrics import read_metrics
from trainer.data.sampler import MicroBatchSampler, ShapeBatchSampler

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch computes here too

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def full_size(tmp_path_factory):
    """64-pixel frames cropped to 48: the CPU path decodes them at full size, as the device path does."""
    return make_dataset(tmp_path_factory.mktemp("dd64") / "data", train=16, val=2, frames=8, size=64)


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """128-pixel frames cropped to 32: the CPU path decodes them at a reduced size (PIL's draft mode)."""
    return make_dataset(tmp_path_factory.mktemp("dd128") / "data", train=16, val=2, frames=8, size=128)


def _batches(data, spec, decode, sampler, workers=0):
    """Every batch of one pass of a real Pipeline, as the training step receives it (uint8 clips, labels)."""
    pipe = devicedecode.pipeline(TrainClips(str(data), spec, seed=7), {}, workers=workers, pin=False, decode=decode,
                                 device=CPU)
    try:
        out = []
        for x, y in pipe.train_batches(sampler):
            out.append((x, devicedecode.device_clips(x, CPU) if decode == "device" else x, y))
        return out
    finally:
        pipe.close()


def _compare(cpu, dev, border=1):
    """(mean abs difference, largest difference inside the outermost ``border`` pixels) of two uint8 batches."""
    d = (cpu.int() - dev.int()).abs()
    inner = d[:, :, border:-border, border:-border, :] if border else d
    return d.float().mean().item(), int(inner.max())


def test_device_batches_equal_the_cpu_batches_frame_crop_and_flip(full_size):
    """Same (epoch, index) items through both paths, one worker each: pixel for pixel inside the crop (PIL
    samples past the crop's edge where torch clamps, so the outermost ring of pixels differs a little)."""
    spec = ClipSpec(num_segments=4, stride=2, size=48)
    sampler = MicroBatchSampler(16, 0, 1, 1, 8, seed=7, epoch=3, start_step=0)
    cpu = _batches(full_size, spec, "cpu", sampler, workers=1)
    dev = _batches(full_size, spec, "device", sampler, workers=1)
    assert len(cpu) == len(dev) == 2
    flips = []
    for (x, a, ya), (raw, b, yb) in zip(cpu, dev):
        assert isinstance(raw, devicedecode.ByteBatch) and raw.frames == 4 and raw.size == 48
        assert a.dtype == b.dtype == torch.uint8 and a.shape == b.shape == (8, 4, 48, 48, 3)
        assert torch.equal(ya, yb)
        mean, inner_max = _compare(a, b)
        assert mean < 0.5 and inner_max <= 2, (mean, inner_max)
        for n in range(len(raw)):  # each clip is nearer its CPU twin than that twin's mirror image
            same, mirror = _compare(a[n:n + 1], b[n:n + 1], 0)[0], _compare(a[n:n + 1].flip(3), b[n:n + 1], 0)[0]
            assert same < mirror, (n, same, mirror)
        flips += raw.flips.tolist()
    assert set(flips) == {True, False}  # flipped and unflipped clips both compared


def test_device_batches_stay_within_two_levels_of_the_reduced_size_decode(large):
    spec = ClipSpec(num_segments=4, stride=2, size=32)
    sampler = MicroBatchSampler(16, 0, 1, 1, 16, seed=7, epoch=0, start_step=0)
    (_, a, _), = _batches(large, spec, "cpu", sampler)
    (raw, b, _), = _batches(large, spec, "device", sampler)
    mean, _ = _compare(a, b, 0)
    assert mean < 2.0, mean
    assert set(raw.flips.tolist()) == {True, False}


def test_multigrid_shapes_on_the_device_path(full_size):
    """A ShapeBatchSampler's batches of several (frames, size) shapes, from one worker, as on the CPU path."""
    spec = ClipSpec(num_segments=4, stride=2, size=48)
    steps = [(1, 24, 8), (2, 34, 4), (4, 48, 2), (1, 24, 8), (4, 48, 2)]
    sampler = ShapeBatchSampler(16, 0, 1, 1, 7, 2, steps, 0)
    cpu = _batches(full_size, spec, "cpu", sampler, workers=1)
    dev = _batches(full_size, spec, "device", sampler, workers=1)
    assert [tuple(b.shape) for _, b, _ in dev] == [(b, f, s, s, 3) for f, s, b in steps]
    for (_, a, ya), (_, b, yb) in zip(cpu, dev):
        assert torch.equal(ya, yb)
        mean, inner_max = _compare(a, b)
        assert mean < 2.0, (a.shape, mean)
        if a.shape[-2] == 48:  # the coarser shapes' crops are 2x their side or more: PIL's draft decode
            assert mean < 0.5 and inner_max <= 2, (a.shape, mean, inner_max)


def test_two_ranks_train_with_device_decode_as_with_cpu_decode(tmp_path):
    """A real 2-rank run, two workers each: finite losses, and the first steps' losses those of --decode cpu."""
    data = make_dataset(tmp_path / "data", train=16, val=4, frames=8, size=48)
    losses = {}
    for decode in ("cpu", "device"):
        run = tmp_path / decode
        run_ranks(2, tiny_args(run, data, epochs=1, workers=2, decode=decode) + ["--no-test"],
                  tmp_path / f"logs-{decode}", timeout=300)
        assert (run / "COMPLETE").exists()
        losses[decode] = [r["loss"] for r in read_metrics(run) if r["kind"] == "train"]
    assert len(losses["device"]) == len(losses["cpu"]) == 4
    assert all(math.isfinite(v) for v in losses["device"])
    assert losses["device"][:2] == pytest.approx(losses["cpu"][:2], abs=5e-3)


def test_a_multigrid_run_trains_on_the_device_path(full_size, tmp_path):
    run = tmp_path / "run"
    args = tiny_args(run, full_size, epochs=3, schedule="multigrid", short_cycle=True, batch_per_gpu=1, bn_clips=2,
                     decode="device", eval_every=0) + ["--no-test"]
    run_ranks(1, args, tmp_path / "logs", timeout=300)
    train = [r for r in read_metrics(run) if r["kind"] == "train"]
    assert len({(r["frames"], r["size"]) for r in train}) >= 2 and all(math.isfinite(r["loss"]) for r in train)


def _one_batch(data, spec):
    """The raw device-path batch of the first 8 items of epoch 0."""
    ds = devicedecode.TrainBytes(TrainClips(str(data), spec, seed=7))
    return devicedecode.collate([ds[(0, i)] for i in range(8)])[0]


def _rejects(jpegs):
    raise RuntimeError("nvjpeg: unsupported bitstream")


def test_a_rejected_batch_is_decoded_by_pil_or_its_bad_frame_named(full_size, tmp_path, capsys, monkeypatch):
    """As when nvJPEG refuses a batch: when every frame decodes with PIL the rank decodes the batch so, and
    says so once per process (a slower path must not hide in the step time); when one frame does not
    decode, the error names its shard and member."""
    spec = ClipSpec(num_segments=4, stride=2, size=48)
    batch = _one_batch(full_size, spec)
    monkeypatch.setattr(devicedecode, "_SAID_FALLBACK", [])
    assert torch.equal(devicedecode.device_clips(batch, CPU, _rejects), devicedecode.device_clips(batch, CPU))
    devicedecode.device_clips(batch, CPU, _rejects)
    said = [x for x in capsys.readouterr().err.splitlines() if "refused a batch that PIL decodes" in x]
    assert len(said) == 1, said
    o = batch.origins[3]
    f = batch.frames * 3 + 1  # clip 3's second frame
    start = int(batch.offsets[f])
    batch.data[start:start + 64] = 0
    with pytest.raises(SampleError) as err:
        devicedecode.device_clips(batch, CPU, _rejects)
    assert str(err.value).startswith(f"trainer: shard {o.path}: member {o.key}.{o.indices[1]:05d}.jpg "
                                     f"(sample {o.key}, frame {o.indices[1]}) cannot be decoded")


def test_the_byte_batch_holds_each_frames_bytes_in_one_flat_tensor(full_size):
    spec = ClipSpec(num_segments=4, stride=2, size=48)
    ds = TrainClips(str(full_size), spec, seed=7)
    batch = _one_batch(full_size, spec)
    assert batch.data.dtype == torch.uint8 and batch.data.dim() == 1 and batch.offsets.numel() == 8 * 4 + 1
    for n, o in enumerate(batch.origins):
        assert batch.clip_bytes(n) == ds.shards.frames(n, o.indices)
    assert [j.numel() for j in batch.jpegs()] == torch.diff(batch.offsets).tolist()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a usable CUDA torchvision")
def test_a_cuda_device_without_a_working_torchvision_is_refused_in_one_line():
    """Here torchvision is missing (or, where installed, cannot decode on a CUDA device that is not there)."""
    with pytest.raises(SystemExit) as err:
        devicedecode.decoder_for(torch.device("cuda", 0))
    line = str(err.value)
    assert line.startswith("trainer: --decode device") and "cuda:0" in line and "--decode cpu" in line
    assert "\n" not in line
    try:
        import torchvision  # noqa: F401
    except ImportError:
        assert "pip install torchvision" in line and torch.__version__ in line


def test_the_float_resize_of_cuda_equals_the_uint8_resize_of_the_cpu_within_a_level():
    """A GPU resizes in float (no uint8 kernel there); run here on the CPU, it agrees with the uint8 path."""
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (3, 3, 90, 120), dtype=torch.uint8, generator=g)
    for size in (32, 64, 150):  # down and up
        a = devicedecode._resized(frames[:, :, 5:80, 10:100], size)
        b = devicedecode._resized_float(frames[:, :, 5:80, 10:100], size)
        assert a.shape == b.shape == (3, 3, size, size) and int((a.int() - b.int()).abs().max()) <= 1
