"""The AAVG paper's recipe as a named preset (--preset aavg-paper): what it resolves to, how explicit options
override it, real 2-rank runs on both engines, the batch rule once per epoch across a resume, and the job
script summit-jobs renders for it (dry run and a real job on the embedded LSF)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import pytest

from helpers import run_cli
from lsf_jobs import cli, lsf_environment
from trainer_utils import run_ranks, tiny_args, wait_job_ended

from trainer.loop import checkpoint as ckpt
from trainer import config
from trainer.dist.engines import horovod_available
from trainer.loop.metrics import read_metrics
from trainer.rundir import COMPLETE

#: What the paper says (seeds/aavg-action-recognition-cluster.txt), option by option.
PAPER = {"optimizer": "adam", "optimizer_sync": "aavg", "avg_interval": -1, "aavg_eval_every": -1,
         "aavg_b1": 1.0, "aavg_b2": 2.0, "aavg_max_batch": 576, "val_clips": 5, "test_clips": 25,
         "test_crops": 1, "test_size": 224}


def parsed(*extra: str):
    return config.parse(["--run-dir", "/r", *extra])


# -- the preset as the trainer parses it ------------------------------------------------------------------------
def test_the_preset_is_the_papers_recipe():
    args = parsed("--preset", "aavg-paper")
    assert {k: getattr(args, k) for k in PAPER} == PAPER
    assert args.preset == "aavg-paper"
    # a 224 centre crop of the 256-side frame as it is (no rescaling): --test-size 0 would take all 256
    assert (args.input_size, args.scale_size, args.test_size) == (224, 256, 224)


@pytest.mark.parametrize("order", ["preset first", "preset last"])
def test_options_given_explicitly_win_over_the_preset(order):
    mine = ["--optimizer", "sgd", "--val-clips", "3", "--aavg-max-batch", "64", "--test-crops", "3",
            "--aavg-eval-every", "0"]
    preset = ["--preset", "aavg-paper"]
    args = parsed(*(preset + mine if order == "preset first" else mine + preset))
    assert (args.optimizer, args.val_clips, args.aavg_max_batch, args.test_crops, args.aavg_eval_every) == \
        ("sgd", 3, 64, 3, 0)
    assert (args.optimizer_sync, args.avg_interval, args.test_clips) == ("aavg", -1, 25)  # the rest: the paper's


def test_without_a_preset_nothing_changes():
    args = parsed()
    assert (args.preset, args.val_clips, args.aavg_eval_every, args.optimizer, args.test_clips) == \
        (None, 1, 0, "sgd", 10)


def test_the_login_side_reads_the_one_preset_table():
    from summit_jobs.planning import plan
    assert plan.trainer_config.PRESETS is config.PRESETS
    assert plan.preset_values("aavg-paper") == PAPER


# -- real runs: 2 learners, both engines --------------------------------------------------------------------------
def preset_args(run: Path, data: Path, **kw) -> List[str]:
    """The preset on a tiny model: batch 2 growing to at most 8 (the paper: 576), the test's centre crop at the
    tiny input size (the paper's 224 at 224); --test-clips left to the preset."""
    over = dict(epochs=3, batch_per_gpu=2, aavg_max_batch=8, lr=0.01, test_size=32, test_clips=None,
                test_last=1)
    over.update(kw)
    return ["--preset", "aavg-paper"] + tiny_args(run, data, **over)


def replay_rule(checks: List[Dict], batch: int, top: int, b1: float) -> None:
    """The batch each check recorded is the paper's rule (Alg. 1: grow by b2 = 2 when a < a* x b1) on its
    accuracy."""
    best = float("-inf")
    for r in checks:
        if r["top1"] < best * b1:
            batch = min(top, batch * 2)
        best = max(best, r["top1"])
        assert r["aavg_batch"] == batch, checks


def paper_args(run: Path, data: Path, engine: str, **kw) -> List[str]:
    """b1 1.5: the batch grows at a check that does not beat the best by half (a tiny model at chance grows it)."""
    return preset_args(run, data, engine=engine, aavg_b1=1.5, **kw)


@pytest.fixture(scope="module")
def paper_run(data, tmp_path_factory):
    """``paper_run(engine)``: the folder of one complete preset run on that engine (trained once per module:
    the paper's checks read it, and the stopped run is compared with it)."""
    done = {}

    def get(engine: str) -> Path:
        if engine not in done:
            tmp = tmp_path_factory.mktemp(f"paper-{engine}")
            run_ranks(2, paper_args(tmp / "run", data, engine), tmp / "logs", timeout=300)
            done[engine] = tmp / "run"
        return done[engine]
    return get


@pytest.mark.parametrize("engine", ["ddp", "horovod"])
def test_a_preset_run_trains_as_the_paper(paper_run, engine):
    if engine == "horovod" and not horovod_available():
        pytest.skip("Horovod is not installed here (make horovod); the ddp case ran")
    run = paper_run(engine)
    assert (run / COMPLETE).exists()
    cfg = json.loads((run / "run_config.json").read_text())
    assert (cfg["preset"], cfg["engine"], cfg["optimizer"], cfg["optimizer_sync"], cfg["avg_interval"],
            cfg["aavg_eval_every"], cfg["val_clips"], cfg["aavg_b1"], cfg["aavg_b2"]) == \
        ("aavg-paper", engine, "adam", "aavg", -1, -1, 5, 1.5, 2.0)
    assert cfg["test"].startswith("25 clips x 1 crops of 32")
    recs = read_metrics(run)
    train = [r for r in recs if r["kind"] == "train"]
    ends = {}
    for epoch in range(3):
        steps = [r for r in train if r["epoch"] == epoch]
        # one averaging round per epoch, after its last step
        assert [r["avg_rounds"] for r in steps] == [epoch] * (len(steps) - 1) + [epoch + 1], steps
        ends[epoch] = steps[-1]["step"]
    # the batch rule: one check per epoch, at its end, on a 5-clip validation (which is also the epoch's eval)
    evals = [r for r in recs if r["kind"] == "eval"]
    assert [(r["epoch"], r["step"]) for r in evals] == sorted(ends.items())
    assert all(r["views"] == 5 and r["videos"] == 8 and "aavg_batch" in r for r in evals)
    replay_rule(evals, 2, 8, 1.5)
    for epoch in (1, 2):  # a grown batch takes effect from the next epoch: 24 clips / (2 learners x batch) steps
        batch = evals[epoch - 1]["aavg_batch"]
        steps = [r for r in train if r["epoch"] == epoch]
        assert {r["batch"] for r in steps} == {batch} and len(steps) == 24 // (2 * batch)
    tests = [r for r in recs if r["kind"] == "test" and not r.get("summary")]
    assert tests and all((r["clips"], r["crops"], r["views"]) == (25, 1, 25) for r in tests)
    log = (run.parent / "logs" / "rank0.log").read_text()
    assert "8 videos, 5 clips)" in log and "aavg check at step" in log


def test_a_run_stopped_at_an_epoch_end_keeps_that_epochs_check(data, paper_run, tmp_path):
    """--aavg-eval-every -1: the check at the end of epoch 1 (step 6: 24 clips, 2 learners x 2) happens before
    the stop's checkpoint; the run goes on from there and has made every check the uninterrupted run (the ddp
    preset run above, same options) made, no check repeated or skipped (the rule's history, batch and best),
    and the same epochs' evaluations."""
    ref, cut = paper_run("ddp"), tmp_path / "cut"
    for n, limit in enumerate((6, 0)):
        run_ranks(2, paper_args(cut, data, "ddp", max_steps=limit or None), tmp_path / f"logs-cut{n}", timeout=300)
    a, b = (ckpt.load(ckpt.latest(r)) for r in (ref, cut))
    assert a["step"] == b["step"]
    history = b["aavg"]["controller"]["history"]
    assert len(history) == 3 and history[0][0] == 6
    assert a["aavg"] == b["aavg"]
    checks = [[(r["step"], r["top1"]) for r in read_metrics(r) if r["kind"] == "eval"] for r in (ref, cut)]
    assert checks[0] == checks[1] and len(checks[0]) == 3


# -- the job script ----------------------------------------------------------------------------------------------
def trainer_line(script: str) -> List[str]:
    line = next(l for l in script.splitlines() if " -m trainer " in l)
    return line.split(" -m trainer ", 1)[1].split()


def flag_values(words: List[str]) -> Dict[str, str]:
    return {w[2:].replace("-", "_"): v for w, v in zip(words, words[1:]) if w.startswith("--")}


def test_submit_dry_run_writes_every_value_of_the_preset(cli_env, tmp_path):
    res = run_cli(["--machine", "local", "submit", "--nodes", "2", "--preset", "aavg-paper", "--dry-run",
                   "--run-dir", str(tmp_path / "run")], cli_env)
    assert res.returncode == 0, res.stderr
    got = flag_values(trainer_line(res.stdout))
    assert got["preset"] == "aavg-paper"
    assert {k: got[k] for k in PAPER} == {k: str(v) for k, v in PAPER.items()}
    assert "preset aavg-paper, optimizer adam, AAVG model averaging every epoch" in res.stderr


def test_submit_options_win_over_the_preset_and_the_script_says_so(cli_env, tmp_path):
    res = run_cli(["--machine", "local", "submit", "--nodes", "2", "--preset", "aavg-paper", "--optimizer", "sgd",
                   "--avg-interval", "4", "--dry-run", "--json", "--run-dir", str(tmp_path / "run"), "--",
                   "--val-clips", "3"], cli_env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    words = trainer_line(out["script"])
    got = flag_values(words)
    assert (got["optimizer"], got["avg_interval"], got["optimizer_sync"]) == ("sgd", "4", "aavg")
    assert words[-2:] == ["--val-clips", "3"]  # after the preset's 5: the trainer keeps the last
    assert (out["plan"]["preset"], out["plan"]["optimizer"], out["plan"]["avg_interval"]) == ("aavg-paper", "sgd", 4)
    # and the trainer, parsing the script's arguments, runs what they say
    args = config.parse(words)
    assert (args.optimizer, args.avg_interval, args.val_clips, args.test_clips) == ("sgd", 4, 3, 25)


def test_a_preset_job_runs_on_the_embedded_lsf(tmp_path, data):
    """submit --preset for real: bsub, jsrun, 2 ranks of the trainer with the script's options."""
    env = lsf_environment(tmp_path, minute=60)
    run = tmp_path / "run"
    tiny = ["--data", str(data), "--width", "0.125", "--num-segments", "4", "--frame-stride", "2", "--input-size",
            "32", "--workers", "0", "--num-classes", "0", "--warmup-epochs", "0", "--threads", "1",
            "--ckpt-every-minutes", "0", "--log-every", "1", "--lr", "0.01", "--aavg-max-batch", "8",
            "--test-size", "32", "--test-clips", "2", "--test-last", "1"]
    res = cli(["--machine", "local", "submit", "--nodes", "1", "--preset", "aavg-paper", "--epochs", "2",
               "--engine", "ddp", "--clips-per-gpu", "2", "--job-name", "aavg", "--run-dir", str(run), "--json",
               "--", *tiny], env, timeout=120)
    assert res.returncode == 0, res.stderr
    job = json.loads(res.stdout)["job_ids"][0]
    state = wait_job_ended(job, env, run, timeout=400)
    assert state["STAT"] == "DONE", (state, (run / f"aavg.{job}.err").read_text()[-3000:])
    assert "--preset aavg-paper --optimizer adam --optimizer-sync aavg --avg-interval -1 --aavg-eval-every -1" \
        in (run / "job.lsf").read_text()
    cfg = json.loads((run / "run_config.json").read_text())
    assert (cfg["preset"], cfg["optimizer"], cfg["optimizer_sync"], cfg["val_clips"], cfg["ranks"]) == \
        ("aavg-paper", "adam", "aavg", 5, 2)
    evals = [r for r in read_metrics(run) if r["kind"] == "eval"]
    assert len(evals) == 2 and all("aavg_batch" in r and r["views"] == 5 for r in evals)
