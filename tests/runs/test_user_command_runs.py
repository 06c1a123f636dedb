"""Runs of a user's own training command (`submit --command`) as a newcomer meets them: the plan says what
is known of the program and none of the built-in trainer's numbers, the job is named after the program,
`status` shows the step (and, from records with times, the rate and ETA) of the metrics.jsonl records the
program writes, and `report` draws whatever subset of the documented fields those records hold.

Every check goes through the real CLI (a subprocess): `submit` on the embedded LSF, `status`, `report`.
"""
from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from lsf_jobs import cli, gated, lsf_environment, recorded_state, wait_for
from summit_jobs.schedulers import FINISHED

#: The user's program: the first rank to start writes ``--steps`` train records (with times unless
#: --no-time) as the docs prescribe, then every rank waits for a ``stop`` file in the run directory.
PROGRAM = r'''
import json, os, sys, time
steps = int(sys.argv[sys.argv.index("--steps") + 1])
try:
    os.close(os.open("writer.lock", os.O_CREAT | os.O_EXCL))
    writer = True
except FileExistsError:
    writer = False
if writer:
    for step in range(1, steps + 1):
        rec = {"kind": "train", "step": step, "loss": 2.0 / step}
        if "--no-time" not in sys.argv:
            rec["time"] = time.time()
        with open("metrics.jsonl", "a") as fh:
            fh.write(json.dumps(rec) + "\n")
        time.sleep(0.05)
deadline = time.time() + 120
while not os.path.exists("stop") and time.time() < deadline:
    time.sleep(0.1)
'''
SLOTS = ["--nodes", "1", "--request", "slots", "--launcher", "blaunch", "--walltime", "0:10"]


def dry_run(tmp_path: Path, *args: str):
    env = lsf_environment(tmp_path)
    return cli(["--machine", "local", "submit", *SLOTS, "--dry-run", *args], env, cwd=tmp_path, timeout=60)


# -- the plan and the job name ------------------------------------------------------------------------
def test_the_plan_of_a_user_command_prints_none_of_the_trainers_numbers(tmp_path):
    res = dry_run(tmp_path, "--until-complete", "--total-steps", "400", "--command", "python3 train.py --steps 400")
    assert res.returncode == 0, res.stderr
    plan = res.stderr
    for word in ("global batch", "LR", "optimizer", "epochs", "clips/s", "warm-up"):
        assert word not in plan, (word, plan)
    assert "1 node x 2 CPU ranks = 2 CPU ranks" in plan and "walltime 0:10" in plan and "at most 20 links" in plan
    assert f"runs your command on every rank: {sys.executable} train.py --steps 400" in plan
    assert "python3: the profile's interpreter" in plan
    assert "400 steps in all (--total-steps)" in plan
    assert re.search(r"^expected links: unknown for your own command .*; at most 20 \(--max-links\)", plan, re.M), \
        plan
    as_json = dry_run(tmp_path, "--json", "--total-steps", "400", "--command", "python3 train.py")
    summary = json.loads(as_json.stdout)["plan"]
    assert summary["command"] == [sys.executable, "train.py"] and summary["total_steps"] == 400
    assert not {"global_batch", "lr", "epochs", "optimizer", "engine", "clips_per_gpu"} & set(summary), summary
    # The built-in trainer's plan keeps its figures.
    builtin = dry_run(tmp_path, "--epochs", "3")
    assert "global batch" in builtin.stderr and "3 epochs" in builtin.stderr and "optimizer sgd" in builtin.stderr


def test_total_steps_belongs_to_a_user_command(tmp_path):
    res = dry_run(tmp_path, "--total-steps", "400")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "--total-steps 400" in res.stderr and "--command" in \
        res.stderr, res.stderr


@pytest.mark.parametrize("command,name", [
    ("python3 train.py --steps 400", "train"),
    ("/usr/bin/python3.11 -u '/home/u/my model/fit it.py'", "fit_it"),
    ("python -m mypkg.train --lr 0.1", "mypkg.train"),
    ("env OMP_NUM_THREADS=4 python3 -X dev run.py", "run"),
    ("./scripts/launch.sh", "launch"),
    ("'/opt/x/+weird name!'", "weird_name_"),
])
def test_the_default_job_name_comes_from_the_program(tmp_path, command, name):
    res = dry_run(tmp_path, "--command", command)
    assert res.returncode == 0, res.stderr
    assert f"#BSUB -J {name}\n" in res.stdout and f"#BSUB -o {name}.%J.out\n" in res.stdout, res.stdout[:300]


def test_the_built_in_trainer_keeps_tsm_and_an_explicit_name_wins(tmp_path):
    assert "#BSUB -J tsm\n" in dry_run(tmp_path).stdout
    res = dry_run(tmp_path, "--job-name", "mine", "--command", "python3 train.py")
    assert "#BSUB -J mine\n" in res.stdout
    bad = dry_run(tmp_path, "--job-name", "", "--command", "python3 train.py")
    assert bad.returncode == 2 and "--job-name ''" in bad.stderr     # an explicit (empty) name is not replaced
    helptext = cli(["submit", "--help"], lsf_environment(tmp_path), timeout=60).stdout
    assert "[default: tsm]" not in helptext and "--total-steps" in helptext


# -- status of a running user command ---------------------------------------------------------------------
def submit_program(tmp_path: Path, *extra: str) -> Dict:
    env = lsf_environment(tmp_path)
    program = tmp_path / "userprog.py"
    program.write_text(PROGRAM)
    run_dir = tmp_path / "user-run"
    res = cli(["submit", *SLOTS, "--run-dir", str(run_dir), "--json",
               "--command", f"{sys.executable} {program} --steps 30 {' '.join(extra)}", "--total-steps", "100"],
              env, timeout=60)
    assert res.returncode == 0, res.stderr
    return {"env": env, "run_dir": run_dir, "id": json.loads(res.stdout)["job_ids"][0]}


def status_rows(job: Dict) -> List[Dict]:
    res = cli(["status", "--json", str(job["run_dir"])], job["env"], timeout=60)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    return json.loads(res.stdout)


def recorded_in(job: Dict, *states: str) -> bool:
    """Whether the job's record says one of ``states`` (status is asked only then, or every second)."""
    return recorded_state(job["id"], job["env"]) in states


def wrote_step(job: Dict, step: int) -> bool:
    """Whether the program's newest metrics record is at ``step`` (read here, before status is asked)."""
    try:
        lines = (job["run_dir"] / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return False
    return bool(lines) and f'"step": {step},' in lines[-1]


def stop(job: Dict) -> List[Dict]:
    (job["run_dir"] / "stop").write_text("")
    return wait_for(gated(lambda: recorded_in(job, "DONE", "EXIT"),
                          lambda: [r for r in status_rows(job) if r["state"] in FINISHED]),
                    timeout=120, what="the user's program to end")


@pytest.mark.parametrize("timed", [True, False], ids=["with-times", "without-times"])
def test_status_shows_the_step_of_a_running_user_command(tmp_path, timed):
    job = submit_program(tmp_path, *([] if timed else ["--no-time"]))
    try:
        rows = wait_for(gated(lambda: recorded_in(job, "RUN") and wrote_step(job, 30),
                              lambda: [r for r in status_rows(job) if r["state"] == "running" and r["step"] == 30]),
                        timeout=120, what="the program to write its 30 records")
        row = rows[0]
        assert row["total_steps"] == 100 and row["epochs"] is None and row["clips_per_s"] is None
        if timed:
            assert 1 < row["steps_per_s"] < 40 and row["eta_s"] == pytest.approx(70 / row["steps_per_s"], abs=0.11)
        else:
            assert row["steps_per_s"] is None and row["eta_s"] is None
        table = cli(["status", str(job["run_dir"])], job["env"], timeout=60).stdout
        line = next(line for line in table.splitlines() if f" {job['id']} " in line)
        # the job script's link_start event: the link started (from no checkpoint)
        assert "30/100" in line and "ago: started" in line and "nothing recorded" not in line
        assert "STEPS/S" in table and "CLIPS/S" not in table      # the program's records say no clips/s
        assert re.search(r"30/100\s+" + (r"\d+(\.\d+)?\s+\d+s\s" if timed else r"-\s+-\s"), line), line
    finally:
        done = stop(job)
    assert done[0]["state"] == "done" and done[0]["step"] == 30 and done[0]["eta_s"] is None
    record = json.loads((job["run_dir"] / "run.json").read_text())
    assert record["job_name"] == "userprog" and (job["run_dir"] / f"userprog.{job['id']}.out").exists()
    assert json.loads((job["run_dir"] / "plan.json").read_text())["total_steps"] == 100


# -- status and report of user runs' files ----------------------------------------------------------------
T0 = 1_700_000_000.0


def user_run(tmp_path: Path, records: List, name: str = "mine", plan: Dict = None, complete: bool = False) -> Path:
    """A user run's directory as submit and the job script leave it (two links, both ended 0), with the
    records the program wrote (a dict is a record; text is written as it is)."""
    run = tmp_path / name
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    (run / "run.json").write_text(json.dumps({"name": name, "run_dir": str(run), "machine": "local",
                                              "job_name": "train", "job_ids": ["7", "8"]}))
    for jid in ("7", "8"):
        (run / f"exitcode.{jid}").write_text("0\n")
    (run / "plan.json").write_text(json.dumps(plan or {"user_command": True, "epochs": 100, "global_batch": 16,
                                                       "nodes": 1, "ranks": 2, "jsrun": {"g": 0}}))
    if complete:
        (run / "COMPLETE").write_text("done\n")
    return run


#: Records with the documented fields only, with some of the optional ones, and lines that are not records.
MINIMAL = [{"kind": "train", "step": s, "loss": 2.0 / s} for s in range(1, 41)]
SOME = ([{"kind": "train", "step": s, "loss": 2.0 / s, "time": T0 + s, "lr": 0.1 * (1 - s / 50)} for s in range(1, 41)]
        + [{"kind": "eval", "step": 40, "loss": 0.1, "top1": 0.5, "time": T0 + 40.5}])
ODD = MINIMAL[:20] + ["[1, 2]", '"text"', "not json", '{"kind": "train", "st',
                      {"kind": "train", "step": 21, "loss": "high", "epoch": "one", "time": "now", "lr": None},
                      {"kind": "train", "step": -3, "loss": 1.0}, {"kind": "train", "step": 2.5, "loss": 1.0},
                      {"kind": "train", "step": True, "loss": 1.0}, {"kind": "train", "step": 22, "loss": math.inf,
                                                                      "time": math.nan}]
CASES = {"minimal": MINIMAL, "some-fields": SOME, "odd-lines": ODD}


@pytest.mark.parametrize("case", sorted(CASES))
def test_status_of_a_user_runs_records(tmp_path, case):
    run = user_run(tmp_path, CASES[case], plan={"user_command": True, "epochs": 100, "total_steps": 50})
    env = lsf_environment(tmp_path)
    res = cli(["status", "--json", str(run)], env, timeout=60)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    rows = json.loads(res.stdout)
    last = max(r["step"] for r in CASES[case] if isinstance(r, dict) and type(r["step"]) is int and r["step"] >= 0)
    assert [(r["job_id"], r["state"]) for r in rows] == [("7", "done"), ("8", "done")]
    # The records go to the newest link that ran; the plan's epochs (the recipe's) are not the program's.
    assert rows[1]["step"] == last and rows[1]["total_steps"] == 50 and rows[1]["epochs"] is None
    assert rows[0]["step"] is None
    assert (rows[1]["steps_per_s"] is not None) == (case == "some-fields")
    plain = cli(["status", str(run)], env, timeout=60)
    assert plain.returncode == 0 and f"{last}/50" in plain.stdout, plain.stdout


def test_the_rate_of_a_user_run_is_the_newest_links(tmp_path):
    """Two links' records and the queue wait between them, with no launch event to cut them: the rate is
    measured after the wait (a rate across it would be far too low)."""
    first = [{"kind": "train", "step": s, "loss": 1.0, "time": T0 + s} for s in range(1, 41)]
    second = [{"kind": "train", "step": s, "loss": 1.0, "time": T0 + 3600 + (s - 40) / 2} for s in range(41, 61)]
    run = user_run(tmp_path, first + second)
    rows = json.loads(cli(["status", "--json", str(run)], lsf_environment(tmp_path), timeout=60).stdout)
    assert rows[1]["step"] == 60 and rows[1]["steps_per_s"] == pytest.approx(2.0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_report_of_a_user_runs_records(tmp_path, case):
    run = user_run(tmp_path, CASES[case])
    res = cli(["report", str(run), "--quiet", "--json"], lsf_environment(tmp_path), timeout=120)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    summary = json.loads(res.stdout)["summary"]
    steps = [r for r in CASES[case] if isinstance(r, dict) and r["kind"] == "train" and type(r["step"]) is int
             and r["step"] >= 0]
    assert summary["steps"] == steps[-1]["step"] and summary["final_train_loss"] == pytest.approx(
        [r["loss"] for r in steps if isinstance(r["loss"], float) and math.isfinite(r["loss"])][-1])
    # The user's plan holds the recipe's defaults: none of them is reported as the program's.
    assert summary["epochs_planned"] is None and summary["shapes"]["global_batch"] is None
    assert summary["epochs_done"] is None and not summary["complete"]
    doc = json.loads((run / "report" / "report.json").read_text())
    loss = doc["figures"]["loss.png"]
    assert loss["title"] == "Loss: mine (not complete)"
    train = loss["panels"][0]["series"][0]
    assert loss["panels"][0]["xlabel"] == "step" and train["label"] == "train"
    assert train["x"] == [float(r["step"]) for r in steps if "loss" in r and isinstance(r["loss"], float)
                          and math.isfinite(r["loss"])]
    drawn = {"minimal": {"loss.png"}, "odd-lines": {"loss.png"}, "some-fields": {"loss.png", "accuracy.png", "lr.png"}}
    assert set(doc["files"]) == drawn[case] | {"report.md"}
    assert {p.name for p in (run / "report").glob("*.png")} == drawn[case]
    for fig in doc["figures"].values():    # no panel, and no legend entry, without data
        for panel in fig["panels"]:
            assert panel["series"] or panel["points"]
            assert all(s["x"] and len(s["x"]) == len(s["y"]) for s in panel["series"])
    if case == "some-fields":                # times: a time axis; no epochs: steps
        assert [p["xlabel"] for p in loss["panels"]] == ["step", "training time (s)"]
        assert [s["label"] for s in doc["figures"]["accuracy.png"]["panels"][0]["series"]] == ["eval top-1"]
    text = cli(["report", str(run), "--quiet"], lsf_environment(tmp_path), timeout=120).stdout
    assert "2 CPU ranks" in text and "GPU" not in text, text
