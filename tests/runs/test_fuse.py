"""Per-video test scores (``<run>/scores/*.npz``) and ``summit-jobs fuse``, on runs trained for real.

Two tiny runs are trained on the synthetic moving squares with different
seeds (their final tests write the scores); ``--test-only`` tests one
checkpoint again on 1 and on 2 ranks, which must give the same table, row for
row (the 2-rank split is uneven and batches hold several videos, so a row
written to the wrong video shows); ``summit-jobs fuse`` of the two runs must
give what numpy computes by hand from the two files.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainer_utils import make_dataset, run_ranks, tiny_args

from helpers import run_cli
from trainer.loop.metrics import read_metrics
from trainer.shards import ShardDataset

VAL = 7  # odd: 2 ranks score 4 and 3 videos


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuse")
    data = make_dataset(tmp / "data", train=8, val=VAL)
    a, b = tmp / "rgb-a", tmp / "rgb-b"
    # A killed final test's temporary in B's scores folder (removed by the next test), and a --test-only
    # run's (kept: it may be writing now).
    (b / "scores").mkdir(parents=True)
    (b / "scores" / ".epoch-0000.npz.tmp4242").write_bytes(b"partial")
    (b / "scores" / ".test-only-epoch-0000.npz.tmp4242").write_bytes(b"partial")
    run_ranks(1, tiny_args(a, data, epochs=2, test_last=2, seed=1), tmp / "logs-a", timeout=180)
    run_ranks(1, tiny_args(b, data, epochs=1, test_last=1, seed=2), tmp / "logs-b", timeout=180)
    return {"data": data, "a": a, "b": b, "tmp": tmp}


def load(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        out = {k: z[k] for k in z.files}
    out["meta"] = json.loads(str(out["meta"]))
    return out


def records_of(run: Path) -> list:
    return [r for r in read_metrics(run) if r["kind"] == "test" and not r.get("summary")]


def top(scores: np.ndarray, labels: np.ndarray, k: int) -> float:
    best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return float((best == labels[:, None]).any(axis=1).mean())


def softmax(s: np.ndarray) -> np.ndarray:
    z = np.exp(s - s.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def test_the_final_test_writes_every_videos_scores(runs):
    val = ShardDataset(runs["data"], "val")
    for run, tested in ((runs["a"], ["epoch-0000", "epoch-0001"]), (runs["b"], ["epoch-0000"])):
        records = records_of(run)
        assert [r["scores"] for r in records] == [f"scores/{s}.npz" for s in tested]
        for r in records:
            z = load(run / r["scores"])
            assert set(z) == {"keys", "labels", "scores", "meta"}
            assert z["keys"].tolist() == [val.key(i) for i in range(VAL)]
            assert z["labels"].dtype == np.int64 and z["labels"].tolist() == val.labels()
            assert z["scores"].dtype == np.float32 and z["scores"].shape == (VAL, 4)
            m = z["meta"]
            assert (m["checkpoint"], m["step"], m["epoch"]) == (r["checkpoint"], r["step"], r["epoch"])
            assert (m["clips"], m["crops"], m["average"], m["modality"], m["num_classes"]) == (2, 3, "logits",
                                                                                             "rgb", 4)
            assert m["classes"] == ["right", "left", "down", "up"] and m["test_only"] is False
            # The table scores the test exactly as its record says.
            assert top(z["scores"], z["labels"], 1) == pytest.approx(r["top1"], abs=1e-12)
            assert top(z["scores"], z["labels"], 5) == pytest.approx(r["top5"], abs=1e-12)
    # The validations during training keep counts only.
    assert all("scores" not in r for r in read_metrics(runs["a"]) if r["kind"] == "eval")
    left = sorted(p.name for p in (runs["b"] / "scores").iterdir() if p.name.startswith("."))
    assert left == [".test-only-epoch-0000.npz.tmp4242"]


def test_test_only_writes_the_same_table_on_one_and_two_ranks(runs, tmp_path):
    ckpt = runs["a"] / "checkpoints" / "epoch-0001.pt"
    one, two = tmp_path / "one", tmp_path / "two"
    (two / "scores").mkdir(parents=True)
    (two / "scores" / ".test-only-epoch-0001.npz.tmp77").write_bytes(b"partial")   # its own leftover: removed
    (two / "scores" / ".epoch-0001.npz.tmp77").write_bytes(b"partial")             # a training's: kept
    run_ranks(1, tiny_args(one, runs["data"], test_only=ckpt), tmp_path / "logs1", timeout=180)
    # 3 videos (18 views) per batch on 2 ranks: rows come from batches of several videos, split unevenly.
    run_ranks(2, tiny_args(two, runs["data"], test_only=ckpt, batch_per_gpu=18), tmp_path / "logs2", timeout=180)
    ref = load(runs["a"] / "scores" / "epoch-0001.npz")
    tables = []
    for out in (one, two):
        [rec] = [r for r in read_metrics(out) if r.get("test_only")]
        assert rec["scores"] == "scores/test-only-epoch-0001.npz"
        z = load(out / rec["scores"])
        assert z["keys"].tolist() == ref["keys"].tolist() and z["labels"].tolist() == ref["labels"].tolist()
        assert z["meta"]["test_only"] is True and z["meta"]["checkpoint"] == "epoch-0001.pt"
        assert top(z["scores"], z["labels"], 1) == pytest.approx(rec["top1"], abs=1e-12)
        tables.append(z["scores"])
    np.testing.assert_allclose(tables[0], tables[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tables[0], ref["scores"], rtol=1e-5, atol=1e-5)
    assert not np.allclose(tables[1], tables[1][::-1])   # rows differ, so a misplaced row would show
    assert sorted(p.name for p in (two / "scores").iterdir()) == [".epoch-0001.npz.tmp77",
                                                                  "test-only-epoch-0001.npz"]


def fused_by_hand(files, weights, average):
    zs = [load(f) for f in files]
    parts = [softmax(z["scores"].astype(np.float64)) if average == "probs" else z["scores"].astype(np.float64)
             for z in zs]
    fused = sum(w * p for w, p in zip(weights, parts)) / sum(weights)
    labels = zs[0]["labels"]
    return top(fused, labels, 1), top(fused, labels, 5), [top(z["scores"], labels, 1) for z in zs]


@pytest.mark.parametrize("average,weights", [("probs", "1,1.5"), ("logits", None)])
def test_fuse_of_two_runs_is_the_hand_computed_fusion(runs, cli_env, average, weights):
    args = ["fuse", str(runs["a"]), str(runs["b"]), "--average", average, "--json"]
    proc = run_cli(args + (["--weights", weights] if weights else []), cli_env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    files = [runs["a"] / "scores" / "epoch-0001.npz", runs["b"] / "scores" / "epoch-0000.npz"]
    w = [1.0, 1.5] if weights else [1.0, 1.0]
    top1, top5, streams = fused_by_hand(files, w, average)
    assert [s["file"] for s in got["streams"]] == [str(f) for f in files]    # A's newest: epoch-0001
    assert [s["name"] for s in got["streams"]] == ["rgb-a [rgb]", "rgb-b [rgb]"]
    assert [s["top1"] for s in got["streams"]] == pytest.approx(streams, abs=1e-12)
    assert (got["fused"]["top1"], got["fused"]["top5"], got["fused"]["videos"]) == (pytest.approx(top1, abs=1e-12),
                                                                                  pytest.approx(top5, abs=1e-12),
                                                                                  VAL)
    assert got["fused"]["weights"] == w


def test_fuse_prints_the_files_it_used_and_a_table(runs, cli_env):
    proc = run_cli(["fuse", str(runs["a"]), str(runs["b"] / "scores" / "epoch-0000.npz"), "--checkpoint",
                    "epoch_0000", "--weights", "1,1.5"], cli_env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"rgb-a [rgb]: {runs['a'] / 'scores' / 'epoch-0000.npz'} (--checkpoint epoch_0000)"
    assert lines[1] == f"rgb-b [rgb]: {runs['b'] / 'scores' / 'epoch-0000.npz'}"
    assert lines[2].split() == ["stream", "top1", "top5", "videos", "weight"]
    top1, top5, streams = fused_by_hand([runs["a"] / "scores" / "epoch-0000.npz",
                                         runs["b"] / "scores" / "epoch-0000.npz"], [1, 1.5], "probs")
    assert lines[3].split() == ["rgb-a", "[rgb]", f"{100 * streams[0]:.2f}%", "100.00%", str(VAL), "1"]
    assert lines[5].split() == ["fused", "(probs)", f"{100 * top1:.2f}%", f"{100 * top5:.2f}%", str(VAL)]


def test_fuse_common_takes_the_videos_every_stream_has(runs, cli_env, tmp_path):
    """A stream tested on fewer videos: refused by default, fused on the shared ones with --common."""
    from trainer.scores import write_scores
    z = load(runs["b"] / "scores" / "epoch-0000.npz")
    write_scores(tmp_path, "part.npz", z["keys"][2:], z["labels"][2:], z["scores"][2:], z["meta"])
    a = runs["a"] / "scores" / "epoch-0001.npz"
    refused = run_cli(["fuse", str(a), str(tmp_path / "part.npz")], cli_env, timeout=120)
    assert refused.returncode == 2 and "2 only in" in refused.stderr and "--common" in refused.stderr
    proc = run_cli(["fuse", str(a), str(tmp_path / "part.npz"), "--common", "--json"], cli_env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    za = load(a)
    fused = (softmax(za["scores"][2:].astype(np.float64)) + softmax(z["scores"][2:].astype(np.float64))) / 2
    assert got["fused"]["videos"] == VAL - 2
    assert got["fused"]["top1"] == pytest.approx(top(fused, za["labels"][2:], 1), abs=1e-12)
    assert [s["left_out"] for s in got["streams"]] == [2, 0]


def test_weights_and_average_decide_the_fusion(cli_env, tmp_path):
    """Streams that disagree on many videos (as written by the trainer's writer): each weighting and each
    average gives its own fused accuracy, and the command gives the hand-computed one for each."""
    from trainer.scores import write_scores
    rng = np.random.default_rng(5)
    keys, labels = [f"v{i:03d}" for i in range(60)], rng.integers(0, 5, 60)
    files = []
    for name, scale in (("rgb", 1.0), ("flow", 6.0)):
        meta = {"checkpoint": "epoch-0000.pt", "step": 1, "modality": name, "num_classes": 5}
        write_scores(tmp_path / name, "scores/epoch-0000.npz", keys, labels, rng.normal(size=(60, 5)) * scale, meta)
        files.append(tmp_path / name / "scores" / "epoch-0000.npz")
    seen = set()
    for average, weights in (("probs", [1, 1]), ("probs", [1, 0.05]), ("probs", [20, 1]), ("logits", [1, 1]),
                             ("logits", [6, 1])):
        top1, top5, _ = fused_by_hand(files, weights, average)
        proc = run_cli(["fuse", str(tmp_path / "rgb"), str(tmp_path / "flow"), "--average", average, "--weights",
                        ",".join(map(str, weights)), "--json"], cli_env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout)
        assert (got["fused"]["top1"], got["fused"]["top5"]) == (pytest.approx(top1, abs=1e-12),
                                                                pytest.approx(top5, abs=1e-12))
        assert [s["name"] for s in got["streams"]] == ["rgb [rgb]", "flow [flow]"]
        seen.add((top1, top5))
    assert len(seen) >= 4   # the settings really give different fusions: a test that ignored one would fail


def test_an_rgb_stream_and_a_flow_stream_fuse(two_stream_packs, tmp_path, cli_env):
    """The two-stream case itself: synthetic videos packed as RGB frames and as optical flow by the real
    CLI (the session's two_stream_packs, tests/conftest.py), one run on each (--modality flow), fused; the
    flow run's scores say it is the flow stream."""
    packs = two_stream_packs
    recipe = ["--engine", "ddp", "--arch", "resnet18", "--width", "0.125", "--num-segments", "3", "--sampling",
              "uniform", "--input-size", "56", "--batch-per-gpu", "4", "--lr", "0.01", "--optimizer", "adam",
              "--warmup-epochs", "0", "--epochs", "1", "--workers", "0", "--test-clips", "1", "--test-crops", "1",
              "--test-last", "1", "--no-flip", "--threads", "1"]
    run_ranks(1, ["--run-dir", str(tmp_path / "run-rgb"), "--data", str(packs / "rgb"), *recipe],
              tmp_path / "logs-rgb", timeout=300)
    run_ranks(1, ["--run-dir", str(tmp_path / "run-flow"), "--data", str(packs / "flow"), "--modality", "flow",
                  "--flow-stack", "5", *recipe], tmp_path / "logs-flow", timeout=300)
    files = [tmp_path / f"run-{m}" / "scores" / "epoch-0000.npz" for m in ("rgb", "flow")]
    assert [load(f)["meta"]["modality"] for f in files] == ["rgb", "flow"]
    proc = run_cli(["fuse", str(tmp_path / "run-rgb"), str(tmp_path / "run-flow"), "--weights", "1,1.5", "--json"],
                   cli_env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert [s["name"] for s in got["streams"]] == ["run-rgb [rgb]", "run-flow [flow]"]
    top1, top5, _ = fused_by_hand(files, [1, 1.5], "probs")
    assert (got["fused"]["top1"], got["fused"]["top5"], got["fused"]["videos"]) == (
        pytest.approx(top1, abs=1e-12), pytest.approx(top5, abs=1e-12), 16)     # 6 videos of 8 classes: 16 val
