"""Bad input to ``python -m trainer``: refused with one line naming the value, never a traceback.

Two tables: options that argparse accepts as numbers but that make no sense
(NaN, infinite, negative or zero where the option needs otherwise), refused by
``trainer.config.parse`` before anything starts; and data that breaks while
training (a corrupt JPEG in a shard), refused with the shard file and the
sample's member name, whether the frame was decoded in a DataLoader worker or
in the rank itself, and with ``--decode device`` in the very words of the CPU
path.
"""
from __future__ import annotations

import tarfile

import pytest

from badinput import assert_refused, run_module, trainer_env
from trainer_utils import REPO, make_dataset, tiny_args

from trainer.config import parse


# -- a corrupt frame in a shard --------------------------------------------------------------

def corrupt_member(shard, member):
    """Overwrite the start of one JPEG inside a real tar shard (its offset read with tarfile)."""
    with tarfile.open(shard) as tf:
        info = tf.getmember(member)
    with open(shard, "r+b") as f:
        f.seek(info.offset_data)
        f.write(b"\x00" * 64)


def corrupt_root(base, split, frame):
    """A data folder whose sample ``<split>00001`` has frame ``frame`` corrupt; (root, shard, key)."""
    root = make_dataset(base / "data", train=8, val=4, frames=8, size=32, shards=2)
    shard, key = root / f"{split}-000.tar", f"{split}00001"
    corrupt_member(shard, f"{key}.{frame:05d}.jpg")  # frames 0 and 2: in every 4-frame stride-2 clip of 8 frames
    return root, shard, key


@pytest.fixture(scope="module")
def refusal(tmp_path_factory):
    """``refusal(split, frame, workers, decode)``: (the finished trainer process, shard, key) of one epoch on
    a data folder with one corrupt frame; each distinct case runs once per module, whichever test asks."""
    roots, done = {}, {}

    def get(split, frame, workers, decode="cpu"):
        if (split, frame) not in roots:
            roots[(split, frame)] = corrupt_root(tmp_path_factory.mktemp(f"corrupt-{split}-{frame}"), split, frame)
        root, shard, key = roots[(split, frame)]
        case = (split, frame, workers, decode)
        if case not in done:
            run = tmp_path_factory.mktemp("run") / "run"
            args = tiny_args(run, root, epochs=1, workers=workers, eval_every=1, test_clips=1, decode=decode)
            done[case] = run_module("trainer", args, trainer_env(), cwd=str(REPO), timeout=180)
        return done[case], shard, key
    return get


@pytest.mark.parametrize("split", ["train", "val"])
@pytest.mark.parametrize("workers", [0, 2], ids=["in-rank", "in-worker"])
def test_a_corrupt_jpeg_names_the_shard_and_the_member(refusal, split, workers):
    res, shard, key = refusal(split, 2, workers)
    assert_refused(res, [str(shard), f"member {key}.00002.jpg", f"sample {key}"], prefix="trainer: shard ")


@pytest.mark.parametrize("frame,workers", [(2, 0), (2, 2), (0, 2)],
                         ids=["rank-decodes", "rank-decodes-workers", "worker-reads-header"])
def test_a_corrupt_frame_gives_the_cpu_paths_line(refusal, frame, workers):
    """--decode device: frame 2 fails in the rank's decode; frame 0, whose header gives the crop box, fails in
    the worker. Either way the one line is the CPU path's, word for word."""
    lines = {}
    for decode in ("cpu", "device"):
        res, shard, key = refusal("train", frame, workers, decode)
        assert_refused(res, [str(shard), f"member {key}.{frame:05d}.jpg", f"sample {key}, frame {frame}"],
                       prefix="trainer: shard ")
        lines[decode] = res.stderr.strip().splitlines()[-1]
    assert lines["device"] == lines["cpu"]


# -- options argparse accepts but the trainer cannot use --------------------------------------

#: (arguments after --run-dir/--data, what the refusal must name)
BAD_OPTIONS = [
    (["--lr", "nan"], "--lr nan"), (["--lr", "inf"], "--lr inf"), (["--lr", "-1"], "--lr -1"),
    (["--lr", "0"], "--lr 0"), (["--lr", "1e999"], "--lr inf"), (["--lr", "0.1", "--lr", "nan"], "--lr nan"),
    (["--warmup-epochs", "nan"], "--warmup-epochs nan"), (["--warmup-epochs", "-1"], "--warmup-epochs -1"),
    (["--warmup-epochs", "inf"], "--warmup-epochs inf"),
    (["--momentum", "nan"], "--momentum nan"), (["--momentum", "1"], "--momentum 1"),
    (["--momentum", "-0.1"], "--momentum -0.1"),
    (["--weight-decay=-1e-4"], "--weight-decay -0.0001"), (["--weight-decay", "nan"], "--weight-decay nan"),
    (["--clip-grad", "-1"], "--clip-grad -1"), (["--clip-grad", "inf"], "--clip-grad inf"),
    (["--dropout", "1"], "--dropout 1"), (["--dropout", "-0.5"], "--dropout -0.5"),
    (["--dropout", "nan"], "--dropout nan"),
    (["--width", "0"], "--width 0"), (["--width", "-1"], "--width -1"), (["--width", "nan"], "--width nan"),
    (["--width", "100"], "--width 100"),
    (["--trust-coefficient", "0"], "--trust-coefficient 0"),
    (["--trust-coefficient", "nan"], "--trust-coefficient nan"),
    (["--ckpt-every-minutes", "-5"], "--ckpt-every-minutes -5"),
    (["--ckpt-every-minutes", "nan"], "--ckpt-every-minutes nan"),
    (["--aavg-b1", "nan"], "--aavg-b1 nan"), (["--aavg-b2", "0.5"], "--aavg-b2 0.5"),
    (["--aavg-b2", "inf"], "--aavg-b2 inf"),
    (["--num-classes", "-5"], "--num-classes -5"), (["--epochs", "0"], "--epochs 0"),
    (["--epochs", "-3"], "--epochs -3"), (["--workers", "-1"], "--workers -1"),
    (["--prefetch", "0"], "--prefetch 0"), (["--keep", "0"], "--keep 0"),
    (["--test-clips", "0"], "--test-clips 0"), (["--test-last", "0"], "--test-last 0"),
    (["--test-last", "-2"], "--test-last -2"), (["--log-every", "0"], "--log-every 0"),
    (["--threads", "-1"], "--threads -1"), (["--max-steps", "-1"], "--max-steps -1"),
    (["--seed", "-1"], "--seed -1"), (["--seed", str(2 ** 63)], f"--seed {2 ** 63}"),
    (["--batch-per-gpu", "0"], "--batch-per-gpu 0"), (["--accum-steps", "0"], "--accum-steps 0"),
    (["--num-segments", "0"], "--num-segments 0"), (["--fold-div", "1"], "--fold-div 1"),
    (["--fold-div", "0"], "--fold-div 0"), (["--frame-stride", "0"], "--frame-stride 0"),
    (["--input-size", "0"], "--input-size 0"), (["--input-size", "32", "--scale-size", "16"], "--scale-size 16"),
    (["--scale-size", "-1"], "--scale-size -1"), (["--eval-every", "-1"], "--eval-every -1"),
    (["--ckpt-every-steps", "-1"], "--ckpt-every-steps -1"), (["--bn-clips", "0"], "--bn-clips 0"),
    (["--aavg-eval-every", "-2"], "--aavg-eval-every -2"), (["--aavg-max-batch", "0"], "--aavg-max-batch 0"),
    (["--arch", "resnet19"], "resnet19"), (["--epochs", "two"], "two"),
    (["--optimizer-sync", "aavg", "--avg-interval", "0"], "--avg-interval 0"),
    (["--optimizer-sync", "aavg", "--batch-per-gpu", "8", "--aavg-max-batch", "4"], "--aavg-max-batch 4"),
    (["--schedule", "multigrid", "--epochs", "2"], "got 2"),
    # sizes: each within a range, and together within this machine's memory (the input batch alone)
    (["--input-size", "100000"], "--input-size 100000: must be at most 1024"),
    (["--scale-size", "100000"], "--scale-size 100000: must be at most 2048"),
    (["--num-segments", "100000"], "--num-segments 100000: must be at most 256"),
    (["--modality", "flow", "--flow-stack", "1000"], "--flow-stack 1000: must be at most 64"),
    (["--batch-per-gpu", "1000000"], "--batch-per-gpu 1000000: must be at most 4096"),
    (["--aavg-max-batch", "1000000"], "--aavg-max-batch 1000000: must be at most 4096"),
    (["--val-clips", "100000"], "--val-clips 100000: must be at most 1000"),
    (["--test-clips", "100000"], "--test-clips 100000: must be at most 1000"),
    (["--input-size", "1024", "--num-segments", "256", "--batch-per-gpu", "4096", "--no-test"],
     "--batch-per-gpu 4096 x --num-segments 256 at --input-size 1024: one batch's input alone is 12,288.0 GiB"),
    (["--optimizer-sync", "aavg", "--aavg-max-batch", "4096", "--num-segments", "256", "--input-size", "1024",
      "--no-test"], "--aavg-max-batch 4096 x --num-segments 256 at --input-size 1024"),
    (["--test-clips", "1000", "--scale-size", "2048", "--num-segments", "256"],
     "--test-clips 1000 x --test-crops 3 x --num-segments 256 at a test side of 2048"),
    (["--modality", "flow", "--flow-stack", "64", "--num-segments", "256", "--batch-per-gpu", "4096",
      "--input-size", "1024", "--no-test"], "x --flow-stack 64 x 2 at --input-size 1024"),
]


@pytest.mark.parametrize("extra,needle", BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_an_unusable_option_is_refused_before_anything_starts(tmp_path, extra, needle):
    run = tmp_path / "run"
    res = run_module("trainer", ["--run-dir", str(run), "--data", str(tmp_path / "data"), *extra], trainer_env(),
                     cwd=str(REPO), timeout=60)
    assert_refused(res, [needle], prefix="python -m trainer: error: ")
    assert res.returncode == 2 and not run.exists()


UNSET = [(["--run-dir", "$SUMMIT_JOBS_UNSET_VARIABLE/run", "--data", "DATA"], "$SUMMIT_JOBS_UNSET_VARIABLE"),
         (["--run-dir", "RUN", "--data", "${SUMMIT_JOBS_UNSET_NVME}/data"], "${SUMMIT_JOBS_UNSET_NVME}"),
         (["--run-dir", " ", "--data", "DATA"], "--run-dir ''")]


@pytest.mark.parametrize("argv,needle", UNSET, ids=["run-dir", "data", "blank-run-dir"])
def test_a_path_naming_an_unset_variable_is_refused(tmp_path, argv, needle):
    argv = [a.replace("RUN", str(tmp_path / "run")).replace("DATA", str(tmp_path / "data")) for a in argv]
    res = run_module("trainer", argv, trainer_env(), cwd=str(tmp_path), timeout=60)
    assert_refused(res, [needle])
    assert list(tmp_path.iterdir()) == []  # no folder named after the variable


def test_the_login_side_parser_refuses_the_same_and_accepts_the_recipe():
    """``trainer.config.parse`` is what submit calls on the arguments after --: same refusals, exit 2."""
    base = ["--run-dir", "/r", "--data", "/d"]
    assert parse(base).lr is None and parse(base + ["--lr", "0.1", "--warmup-epochs", "0"]).lr == 0.1
    for extra, _ in BAD_OPTIONS[:6]:
        with pytest.raises(SystemExit) as exc:
            parse(base + extra)
        assert exc.value.code == 2


def test_sizes_within_the_ranges_and_memory_are_accepted():
    """The bounds leave the recipes and their larger variants alone: 16 or 32 frames, 448-pixel crops."""
    base = ["--run-dir", "/r", "--data", "/d"]
    for extra in (["--num-segments", "16", "--input-size", "448"], ["--num-segments", "32"],
                  ["--preset", "aavg-paper"], ["--modality", "flow", "--flow-stack", "10"],
                  ["--input-size", "1024", "--batch-per-gpu", "1", "--num-segments", "8", "--no-test"]):
        assert parse(base + extra).num_segments in (8, 16, 32)


def test_the_arch_choices_are_the_models():
    from trainer.config import ARCHS
    from trainer.models.model import ARCHS as BUILT
    assert tuple(BUILT) == ARCHS
