"""``--tensorboard``: the event files hold the numbers of metrics.jsonl, read back with TensorBoard's reader.

A real tiny run in two launches: the first stops at step 6, its step-6
checkpoint is removed (as if the job had been killed before it), so the second
resumes at step 4 and trains steps 5 and 6 again. TensorBoard must then show
the second launch's values for those steps, as the report does.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from trainer_utils import run_ranks, tiny_args

from trainer import rundir
from trainer.loop import tboard
from trainer.loop.metrics import read_metrics

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.plugins.hparams import plugin_data_pb2  # noqa: E402


def last_per_step(records, keep):
    out = {}
    for r in records:
        if keep(r):
            out[r["step"]] = r
    return [out[s] for s in sorted(out)]


def scalars(acc: EventAccumulator, tag: str):
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def expected(records, field):
    return [(r["step"], pytest.approx(float(r[field]), rel=1e-6, abs=1e-12)) for r in records]


@pytest.fixture(scope="module")
def chained(tiny_run, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tboard")
    data = tiny_run / "data"                                     # the session's (tests/conftest.py)
    run = tmp / "run"
    args = tiny_args(run, data, epochs=3, test_last=2) + ["--tensorboard"]
    run_ranks(1, args + ["--max-steps", "6"], tmp / "logs1", timeout=180)
    (run / "checkpoints" / "ckpt-000000006.pt").unlink()
    run_ranks(1, args, tmp / "logs2", timeout=180)
    acc = EventAccumulator(str(run / rundir.TENSORBOARD), size_guidance={"scalars": 0})
    acc.Reload()
    return {"run": run, "data": data, "acc": acc, "tmp": tmp, "plain": tiny_run / "run"}


def test_train_scalars_match_the_metrics_records(chained):
    records = read_metrics(chained["run"])
    steps = [r["step"] for r in records if r["kind"] == "train"]
    assert steps.count(5) == 2 and steps.count(6) == 2          # the second launch really replayed them
    train = last_per_step(records, lambda r: r["kind"] == "train")
    assert [r["step"] for r in train] == list(range(1, 13))
    for field in tboard.SCALARS:
        assert scalars(chained["acc"], f"train/{field}") == expected(train, field), field


def test_eval_and_test_scalars_match_the_metrics_records(chained):
    records = read_metrics(chained["run"])
    acc = chained["acc"]
    evals = last_per_step(records, lambda r: r["kind"] == "eval")
    tests = last_per_step(records, lambda r: r["kind"] == "test" and not r.get("summary"))
    summary = [r for r in records if r.get("summary")]
    assert [r["step"] for r in evals] == [4, 8, 12] and [r["step"] for r in tests] == [8, 12] and len(summary) == 1
    for field in ("loss", "top1", "top5", "clips_per_s", "data_wait_frac"):
        assert scalars(acc, f"eval/{field}") == expected(evals, field), field
        assert scalars(acc, f"test/{field}") == expected(tests, field), field
        assert scalars(acc, f"test_mean/{field}") == expected(summary, field), field
    tags = set(acc.Tags()["scalars"])
    assert {f"train/{f}" for f in tboard.SCALARS} <= tags and not any(t.startswith("test_only/") for t in tags)


def test_options_are_in_the_hyperparameter_view(chained):
    content = chained["acc"].PluginTagToContent("hparams")
    start = [plugin_data_pb2.HParamsPluginData.FromString(v) for v in content.values()]
    info = [d.session_start_info for d in start if d.HasField("session_start_info")]
    assert info, content.keys()
    hp = info[-1].hparams
    assert hp["arch"].string_value == "resnet18" and hp["epochs"].number_value == 3
    assert hp["data"].string_value == str(chained["data"]) and hp["tensorboard"].string_value == "True"
    assert hp["lr"].number_value == pytest.approx(0.1) and hp["pretrained"].string_value == "None"


def test_no_event_files_without_the_option_and_test_only_writes_its_own(chained, tmp_path):
    plain = chained["plain"]                      # one epoch of the same recipe on the same data, no --tensorboard
    assert (plain / "COMPLETE").exists() and not (plain / rundir.TENSORBOARD).exists()
    out = tmp_path / "test-only"
    ckpt = chained["run"] / "checkpoints" / "epoch-0002.pt"
    run_ranks(1, tiny_args(out, chained["data"], test_only=ckpt) + ["--tensorboard"], tmp_path / "logs2",
              timeout=180)
    acc = EventAccumulator(str(out / rundir.TENSORBOARD), size_guidance={"scalars": 0})
    acc.Reload()
    [rec] = [r for r in read_metrics(out) if r.get("test_only")]
    assert scalars(acc, "test_only/top1") == expected([rec], "top1")
    assert not any(t.startswith("train/") for t in acc.Tags()["scalars"])


def test_event_files_are_under_the_run_directory(chained):
    files = list(Path(chained["run"] / rundir.TENSORBOARD).glob("events.out.tfevents.*"))
    assert len(files) == 2                                           # one per launch
