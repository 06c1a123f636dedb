"""`make demo`'s own logic, without its minutes of training (the demo itself runs in CI as --quick).

What is checked: the LSF minute each link of the chain hands the next (from its own start-up, through the
`bsub` function the demo's config puts in its job scripts, run here by bash as the chain runs it); one
reason, and only one, when a chain stops before COMPLETE; commands printed with the settings that make them
work in another shell; a second demo into the same folder replacing only its own runs, never while a job of
theirs may run.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_cluster import stretched
from summit_jobs import demo

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def quiet_demo(tmp_path, monkeypatch):
    """A Demo whose start-up measurement takes no time (the real one starts 4 interpreters with torch)."""
    monkeypatch.setattr(demo, "startup_seconds", lambda ranks=demo.RANKS: 30.0)
    for k in ("SUMMIT_JOBS_MACHINE", "SUMMIT_JOBS_PROJECT", "SUMMIT_JOBS_HOST", "SUMMIT_JOBS_CONFIG"):
        monkeypatch.delenv(k, raising=False)
    (tmp_path / "out").mkdir()
    return demo.Demo(tmp_path / "out", quick=False)


def events(run_dir: Path, *records: dict) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "events.jsonl", "a") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")


def test_minutes_first_link_and_next():
    # 4 ranks start in 8 s on the quiet reference machine, where the minute is the floor; 30 s is 3.75 times slower.
    assert demo.lsf_minute(startup=4.0) == demo.MINUTE_FLOOR == 10.0
    assert demo.lsf_minute(startup=30.0) == 37.5
    # A link that took 60 s to start where a quiet machine takes 10 s: the floor, 6 times over.
    assert demo.link_minute(60.0, floor=6.0, quiet=10.0) == 36.0
    assert demo.link_minute(3.0, floor=6.0, quiet=10.0) == 6.0
    assert demo.quiet_link_startup() == 10.0            # the local profile's performance.startup_seconds


def test_next_minute_from_the_links_own_launch(tmp_path):
    run = tmp_path / "run"
    now = 1_000_000.0
    # Job 7 started 100 s ago and its trainer launched 45 s after that (4.5 quiet start-ups: 6 s x 4.5); job 6
    # (the link before) is not used.
    events(run, {"event": "launch", "job": "6", "mode": "train", "time": now - 500},
           {"event": "launch", "job": "7", "mode": "train", "time": now - 55})
    assert demo.next_minute(run, "7", elapsed=100, floor=6.0, current=10.0, now=now) == 27.0
    rec = json.loads((run / demo.MINUTES_FILE).read_text().splitlines()[-1])
    assert rec == {"job": "7", "startup_s": 45.0, "minute_s": 10.0, "next_minute_s": 27.0, "time": now}
    # No launch of this job: the minute stays.
    assert demo.next_minute(run, "8", elapsed=100, floor=6.0, current=10.0, now=now) == 10.0


def test_the_minute_goes_up_at_once_and_down_one_link_later(tmp_path):
    run = tmp_path / "run"
    now = 1_000_000.0
    starts = {"1": 12.0, "2": 45.0, "3": 15.0, "4": 15.0}
    got = []
    for i, (job, startup) in enumerate(starts.items()):
        t = now + 1000 * i
        events(run, {"event": "launch", "job": job, "mode": "train", "time": t - 100 + startup})
        got.append(demo.next_minute(run, job, elapsed=100, floor=6.0, current=10.0, now=t))
    assert got == [7.2, 27.0, 27.0, 9.0]


def fake_bsub(folder: Path) -> None:
    """A `bsub` on PATH that says which minute it was given, as the chain's bsub call reads its answer."""
    folder.mkdir(exist_ok=True)
    script = folder / "bsub"
    script.write_text('#!/bin/sh\necho "Job <8> is submitted to queue <batch>."\n'
                      'echo "minute=$SUMMIT_JOBS_LSF_MINUTE args=$*"\n')
    script.chmod(0o755)


def chain_call(tmp_path: Path, run: Path, elapsed: int, minute: str = "10", python: str = sys.executable) -> str:
    """bash runs the demo's setup lines under `set -u`, then queues the next link as chain.j2 does."""
    fake_bsub(tmp_path / "bin")
    setup = "\n".join(demo.chain_setup(python, 6.0))
    script = (f"set -u\n{setup}\nRUN_DIR={run}\nJOB_ID=7\nSECONDS={elapsed}\n"
              'out=$(cd "$RUN_DIR" && bsub -w "ended($JOB_ID)" job.lsf 2>&1)\nprintf "%s\\n" "$out"\n')
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "LSB_JOBID": "7",
           "SUMMIT_JOBS_LSF_MINUTE": minute, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Job <8> is submitted" in proc.stdout
    return proc.stdout


def test_the_chains_bsub_gets_the_minute_of_this_links_start_up(tmp_path):
    run = tmp_path / "run"
    events(run, {"event": "launch", "job": "7", "mode": "train", "time": time.time() - 30})
    # Script started 90 s ago, trainer launched 60 s after: 60 s of start-up, 6 quiet ones -> 36 s minutes (less
    # the seconds bash and Python take to start here, on a busy machine).
    out = chain_call(tmp_path, run, elapsed=90)
    line = [ln for ln in out.splitlines() if ln.startswith("minute=")][0]
    assert line.endswith(" args=-w ended(7) job.lsf")
    assert 33.0 <= float(line.split()[0][len("minute="):]) <= 36.0


def test_the_chains_bsub_keeps_the_minute_when_the_measurement_fails(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert "minute=12.5 " in chain_call(tmp_path, run, elapsed=90, minute="12.5", python="/nonexistent/python")
    assert "minute=12.5 " in chain_call(tmp_path, run, elapsed=90, minute="12.5")   # no launch event


def test_a_stopped_chain_is_one_reason(tmp_path):
    run = tmp_path / "tsm"
    since = time.time() - 5
    events(run, {"event": "chain_stopped", "job": "41", "reason": "old run's", "exit": 0, "time": since - 100},
           {"event": "chain_stopped", "job": "42", "by": "script", "exit": 1, "time": since + 3,
            "reason": "link 2 ended (exit 1) before the warning signal"})
    rows = [{"job_id": "41", "state": "done"}, {"job_id": "42", "state": "failed", "exit_code": 1}]
    why = demo.failure(run, "TSM", since, rows)
    assert why == ("the TSM chain stopped before training was complete: link 2 ended (exit 1) before the "
                   "warning signal (job 42)")
    (run / "COMPLETE").write_text("done\n")
    assert demo.failure(run, "TSM", since, rows) is None


def test_a_failed_job_without_a_chain_record(tmp_path):
    run = tmp_path / "real"
    run.mkdir()
    rows = [{"job_id": "9", "state": "timed_out", "reason": "TERM_RUNLIMIT", "exit_code": 140}]
    assert demo.failure(run, "real 4-node", 0, rows) == \
        "the real 4-node run's job 9 ended timed out (TERM_RUNLIMIT; exit 140) before training was complete"
    assert "no COMPLETE" in demo.failure(run, "real 4-node", 0, [{"job_id": "9", "state": "done"}])


def test_the_summary_of_a_run_without_test_figures_says_one_thing(quiet_demo, tmp_path, capsys):
    tsm, tsn = quiet_demo.out / "runs" / "tsm", quiet_demo.out / "runs" / "no-shift"
    (tsm / "report").mkdir(parents=True)
    (tsm / "report" / "report.json").write_text(json.dumps({
        "summary": {"test_top1_mean": None, "best_eval_top1": 0.99, "jobs": []},
        "compare": {"test_top1_mean": 0.245, "best_eval_top1": 0.245},
        "verdict": "tsm reaches 99.0% best eval top-1 against 24.5% for no-shift: 74.5 points better."}))
    with pytest.raises(SystemExit) as exc:
        quiet_demo.summary(tsm, tsn, tsm, "simulate: ...")
    assert str(exc.value).startswith("demo: no multi-clip test top-1 for the TSM in the report")
    assert "better" not in capsys.readouterr().out


def test_printed_commands_carry_the_demos_settings(quiet_demo):
    d = quiet_demo
    home = str(d.out / "lsf")
    status = d.shown(["status", "/x/runs/tsm", "--watch"])
    assert status == f"SUMMIT_JOBS_LSF_HOME={home} {d.exe} status /x/runs/tsm --watch"
    submit = d.shown(["--machine", "local", "submit", "--run-dir", "/x/a b"])
    assert submit.startswith(f"SUMMIT_JOBS_LSF_HOME={home} SUMMIT_JOBS_LSF_MINUTE=37.5 SUMMIT_JOBS_LSF_KILL_GRACE=5 "
                             f"SUMMIT_JOBS_CONFIG={d.config} ")
    assert submit.endswith("--machine local submit --run-dir '/x/a b'")
    assert d.shown(["pack", "a", "b"]) == f"{d.exe} pack a b"
    assert d.pasteable("follow it with: summit-jobs status tsm --watch\n") == \
        f"follow it with: SUMMIT_JOBS_LSF_HOME={home} {d.exe} status tsm --watch\n"
    assert d.pasteable("run directory: /x\n") == "run directory: /x\n"


def test_the_pasted_status_finds_the_demos_jobs(quiet_demo, tmp_path):
    """The status line printed for another shell, run by a shell whose environment knows nothing of the demo:
    the demo's job is DONE there (without the settings in front it would be UNKNOWN: another LSF home)."""
    d = quiet_demo
    submitted = subprocess.run([sys.executable, "-m", "summit_jobs.schedulers.lsf.embedded.commands.bsub", "-J", "demo-test", "true"],
                               env=d.env, capture_output=True, text=True, timeout=60)
    job = submitted.stdout.split("<")[1].split(">")[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUMMIT_JOBS_")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    line = d.shown(["status", job])
    for _ in range(100):
        proc = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        if " done " in proc.stdout:
            break
        time.sleep(0.2)
    assert [ln for ln in proc.stdout.splitlines() if job in ln and " done " in ln], proc.stdout
    plain = subprocess.run(["bash", "-c", line.split(" ", 1)[1]], env=env, capture_output=True, text=True,
                           timeout=60)
    assert "unknown" in plain.stdout


def test_the_config_is_the_demos_own(tmp_path, monkeypatch):
    monkeypatch.setattr(demo, "startup_seconds", lambda ranks=demo.RANKS: 1.0)
    out = tmp_path / "out"
    out.mkdir()
    demo.Demo(out, quick=True)
    demo.Demo(out, quick=True)                       # rewritten: its own file
    (out / "config.yaml").write_text("machine: summit\n")
    with pytest.raises(SystemExit, match="did not write it"):
        demo.Demo(out, quick=True)
    assert (out / "config.yaml").read_text() == "machine: summit\n"


def test_an_earlier_run_is_replaced_only_when_it_is_the_demos_and_idle(quiet_demo, monkeypatch, tmp_path):
    d = quiet_demo
    run = d.out / "runs" / "tsm"
    run.mkdir(parents=True)
    (run / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="is not a run directory the demo made"):
        d.fresh(run)
    assert (run / "notes.txt").exists()
    (run / "run.json").write_text("{}")
    monkeypatch.setattr(d, "rows", lambda run_dir: [{"job_id": "5", "state": "pending"}])
    with pytest.raises(SystemExit, match="job\\(s\\) 5 of an earlier demo's run .* still queued or running"):
        d.fresh(run)
    assert run.exists()
    monkeypatch.setattr(d, "rows", lambda run_dir: [{"job_id": "5", "state": "done"}])
    d.fresh(run)
    assert not run.exists()


def test_the_demos_job_script_holds_the_bsub_function(quiet_demo, tmp_path):
    """The demo's config reaches the local profile's job script, and bash reads the script."""
    d = quiet_demo
    proc = subprocess.run([sys.executable, "-m", "summit_jobs", "--machine", "local", "submit", "--nodes", "2",
                           "--until-complete", "--walltime", demo.LINK_WALLTIME, "--warning-minutes", "2",
                           "--run-dir", str(tmp_path / "run"), "--dry-run"],
                          env={**d.env, "XDG_DATA_HOME": str(tmp_path / "data")}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout[proc.stdout.index("#!/bin/bash"):]
    assert demo.chain_setup(sys.executable, demo.MINUTE_FLOOR)[1] in script
    # The chain queues its next link with a plain `bsub` in this shell, which the function stands in front of.
    assert re.search(r'\$\(cd "\$RUN_DIR" && bsub -w ', script), "the chain no longer calls bsub by name"
    assert subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True).returncode == 0


def test_a_watch_that_ends_early_is_started_again(quiet_demo, monkeypatch, tmp_path):
    """status --watch may end between a link's end and its next link's first row: the demo watches again."""
    d = quiet_demo
    run = d.out / "runs" / "tsm"
    run.mkdir(parents=True)
    def look(rows, complete=False):
        if complete:
            (run / "COMPLETE").write_text("done\n")
        return rows
    # Link 1 DONE and its next link not yet in the rows; then link 2 running; then complete.
    looks = iter([lambda: look([{"job_id": "1", "state": "done"}]),
                  lambda: look([{"job_id": "1", "state": "done"}, {"job_id": "2", "state": "running"}]),
                  lambda: look([{"job_id": "1", "state": "done"}, {"job_id": "2", "state": "done"}], True)])
    watched = []
    monkeypatch.setattr(d, "wait", lambda run_dir: watched.append(run_dir) or True)
    monkeypatch.setattr(d, "rows", lambda run_dir: next(looks)())
    d.trained(run, "TSM", 0.0)
    assert watched == [run, run, run]


def test_a_failed_run_cancels_what_still_runs_then_gives_its_reason(quiet_demo, monkeypatch):
    d = quiet_demo
    run = d.out / "runs" / "tsm"
    events(run, {"event": "chain_stopped", "job": "3", "exit": 0, "time": 10.0,
                 "reason": "link 3 got the warning signal but wrote no new checkpoint"})
    cancelled = []
    monkeypatch.setattr(d, "wait", lambda run_dir: True)
    monkeypatch.setattr(d, "rows", lambda run_dir: [{"job_id": "3", "state": "done"}])
    monkeypatch.setattr(d, "cancel_active", lambda run_dirs: cancelled.extend(run_dirs))
    with pytest.raises(SystemExit) as exc:
        d.trained(run, "TSM", 0.0)
    assert cancelled == [run]
    assert str(exc.value) == ("demo: the TSM chain stopped before training was complete: link 3 got the warning "
                              f"signal but wrote no new checkpoint (job 3, exit 0); see {run}")


def expected_links(d: "demo.Demo", run_dir: Path) -> str:
    """submit --dry-run of a link of the demo's chain in the demo's environment: its expected-links line."""
    proc = subprocess.run([sys.executable, "-m", "summit_jobs", "--machine", "local", "submit", "--nodes", "2",
                           "--epochs", "1", "--until-complete", "--walltime", demo.LINK_WALLTIME, "--warning-minutes",
                           str(demo.LINK_WARNING_MINUTES), "--run-dir", str(run_dir), "--dry-run"],
                          env={**d.env, "XDG_DATA_HOME": str(run_dir.parent / "data")}, capture_output=True,
                          text=True, timeout=stretched(120))
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("expected links: about ")]
    return line


def test_the_demos_jobs_plan_with_this_machines_figures_now(quiet_demo, monkeypatch, tmp_path):
    """A start-up of 30 s (the quiet reference machine's: 8 s) is a machine 3.75 times slower now: the demo's
    config hands its jobs the local profile's throughput and link start-up stretched by that, its LSF minute is
    as much longer, and submit's expected links count all three, so a busy machine expects the links of a quiet
    one (within one: the figures are rounded); the summary keeps the figure submit printed."""
    d = quiet_demo
    config = json.loads(d.config.read_text().split("\n", 1)[1])
    assert config["machines"]["local"]["performance"] == {"clips_per_second_per_gpu": 5.333,
                                                          "allreduce_bandwidth_gbps": 0.267,
                                                          "allreduce_latency_us": 187.5, "startup_seconds": 37.5}
    busy = expected_links(d, tmp_path / "busy")
    assert "at 5.333 clips/s per CPU rank from the profile" in busy
    assert "3 min 08 s of training per link: 6 minutes of 37.5 s before its warning less 37.5 s of start-up" in busy
    monkeypatch.setattr(demo, "startup_seconds", lambda ranks=demo.RANKS: demo.QUIET_STARTUP_S)
    (tmp_path / "quiet").mkdir()
    quiet = expected_links(demo.Demo(tmp_path / "quiet", quick=False), tmp_path / "quiet-run")
    assert "50.0 s of training per link: 6 minutes of 10 s before its warning less 10.0 s of start-up" in quiet
    assert abs(int(busy.split()[3]) - int(quiet.split()[3])) <= 1, (busy, quiet)
    assert d.pasteable(busy + "\n") == busy + "\n" and d.expected_links == int(busy.split()[3])
