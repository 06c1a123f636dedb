"""--until-complete: a chain whose length nobody knows in advance runs until the trainer's COMPLETE.

A stand-in trainer (2 ranks through the embedded LSF) makes one step every
PROG_STEP_SECONDS, checkpoints and exits 0 on the warning signal, and writes
COMPLETE after PROG_STEPS steps; it resumes from its newest checkpoint, so
the number of links depends on the machine's speed, as a real run's does.
"""
from __future__ import annotations

import json
from pathlib import Path

from lsf_jobs import cli, gated, run_recorded_ended, wait_for, write_template
from lsf_jobs import run as lsf_run
from summit_jobs.schedulers.lsf.embedded import state as native_state
from summit_jobs.schedulers import FINISHED

STAND_IN = r'''
import glob, os, signal, sys, time
rank = os.environ.get("JSM_NAMESPACE_RANK", "0")
os.makedirs("checkpoints", exist_ok=True)
found = sorted(glob.glob("checkpoints/ckpt-*.pt"))
step = int(found[-1][-12:-3]) if found else 0
stop = []
signal.signal(signal.SIGUSR2, lambda *a: stop.append(1))
while step < int(os.environ["PROG_STEPS"]) and not stop:
    time.sleep(float(os.environ["PROG_STEP_SECONDS"]))
    step += 1
if rank == "0" and os.environ.get("PROG_NO_CKPT") != "1":
    with open(f"checkpoints/.tmp{os.getpid()}", "w") as fh:
        fh.write("weights")
    os.replace(f"checkpoints/.tmp{os.getpid()}", f"checkpoints/ckpt-{step:09d}.pt")
if rank == "0" and step >= int(os.environ["PROG_STEPS"]):
    with open("COMPLETE", "w") as fh:
        fh.write(f"step {step}\n")
signal.signal(signal.SIGUSR2, signal.SIG_IGN)   # saved: a second warning must not turn exit 0 into 140
os.write(1, f"rank {rank}: stopped at step {step}\n".encode())
'''


def _run(env, tmp_path: Path, *extra: str, steps: int = 30, step_seconds: float = 0.25, **more):
    prog = tmp_path / "stand_in.py"
    prog.write_text(STAND_IN)
    templates = write_template(tmp_path / "templates", prog)
    env = dict(env, PROG_STEPS=str(steps), PROG_STEP_SECONDS=str(step_seconds), **more)
    run_dir = tmp_path / "run"
    res = cli(["submit", "--nodes", "1", "--json", "--template-dir", str(templates), "--run-dir", str(run_dir),
               "--walltime", "0:03", "--warning-minutes", "1", "--until-complete", *extra], env, timeout=60)
    assert res.returncode == 0, res.stderr
    return env, run_dir, json.loads(res.stdout)["job_ids"]


def _settled(env, run_dir: Path):
    """status --json once every link (including those the chain queued itself) has ended (status is asked
    when the job records say so, or every second: run_recorded_ended)."""
    def rows():
        res = cli(["status", str(run_dir), "--json"], env, timeout=60)
        assert res.returncode == 0, res.stderr
        data = json.loads(res.stdout)
        return data if data and all(r["state"] in FINISHED + ("unknown",) for r in data) else None
    last = None
    for _ in range(3):   # a link queues the next one just before it ends: look until nothing new appears
        last = wait_for(gated(lambda: run_recorded_ended(run_dir, env), rows), timeout=120, what="the chain to end")
        if not (run_dir / "chain.jobs").exists() or len(last) > len((run_dir / "chain.jobs").read_text().split()):
            break
    return last


def test_chain_runs_until_complete(lsf_env, tmp_path):
    env, run_dir, first = _run(lsf_env, tmp_path)
    rows = _settled(env, run_dir)
    assert (run_dir / "COMPLETE").read_text() == "step 30\n"
    queued = (run_dir / "chain.jobs").read_text().split()
    assert len(rows) == 1 + len(queued) >= 2, rows
    assert [r["job_id"] for r in rows] == first + queued
    logs = cli(["logs", str(run_dir)], env, timeout=60)
    assert all(r["state"] == "done" for r in rows), (
        [(r["job_id"], r["state"], r["exit_code"], r.get("native_state")) for r in rows], logs.stdout + logs.stderr)
    assert logs.stdout.count("summit-jobs: chain: queued link") == len(queued)
    assert "the warning before the run limit" in logs.stderr + logs.stdout


def test_chain_stops_when_a_link_makes_no_progress(lsf_env, tmp_path):
    env, run_dir, _ = _run(lsf_env, tmp_path, PROG_NO_CKPT="1")
    rows = _settled(env, run_dir)
    assert len(rows) == 1 and not (run_dir / "COMPLETE").exists()
    logs = cli(["logs", str(run_dir)], env, timeout=60)
    assert "wrote no new checkpoint" in logs.stdout + logs.stderr


def test_chain_stops_at_the_link_cap(lsf_env, tmp_path):
    env, run_dir, _ = _run(lsf_env, tmp_path, "--max-links", "2", steps=400)
    rows = _settled(env, run_dir)
    assert len(rows) == 2 and not (run_dir / "COMPLETE").exists()
    logs = cli(["logs", str(run_dir)], env, timeout=60)
    assert "the --max-links cap" in logs.stdout + logs.stderr


def test_cancel_reaches_the_links_the_chain_queued(lsf_env, tmp_path):
    env, run_dir, first = _run(lsf_env, tmp_path, steps=400)
    wait_for(lambda: (run_dir / "chain.jobs").exists(), timeout=60, what="the first link to queue the next")
    queued_before = (run_dir / "chain.jobs").read_text().split()
    res = cli(["cancel", str(run_dir)], env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert (run_dir / "CANCELLED").exists()
    for jid in first + queued_before:
        assert f"job {jid}:" in res.stdout, res.stdout
    rows = _settled(env, run_dir)
    # a link the dying link queued while the cancel ran was killed by cancel or by the link, or ended at its
    # start: the chain goes no further, and nothing after the cancel trained
    assert all(r["state"] in ("cancelled", "failed") or r["job_id"] in first + queued_before for r in rows), rows
    assert rows[-1]["state"] in ("cancelled", "failed"), rows
    assert not (run_dir / "COMPLETE").exists()


#: A site's bsub that queues the next link only once summit-jobs cancel has begun (its marker is there) and a
#: second has passed: the cancel has read the chain's links by then.
BSUB_AFTER_CANCEL = '''bsub() {
  while [ ! -e "$RUN_DIR/CANCELLED" ]; do sleep 0.1; done
  sleep 1
  command bsub "$@"
}
'''


def test_a_link_queued_while_cancel_runs_never_trains_and_a_resubmission_does(lsf_env, tmp_path):
    """The race of a cancel with a link that is queueing the next one: the link's bsub returns after the
    cancel has read the chain. The new link is killed (by the dying link, which sees the marker, or by the
    cancel, which reads the chain again) and never runs; a link started with the marker there ends at once;
    a submission into the run directory again (--force) removes the marker and trains."""
    _with_site_bsub(tmp_path, BSUB_AFTER_CANCEL)
    # a kill grace longer than the site's bsub: the dying link's script outlives its INT and TERM (ignored while
    # it queues) and finishes queueing, as a link on a real LSF does within its 10 s JOB_TERMINATE_INTERVAL
    env, run_dir, first = _run(dict(lsf_env, SUMMIT_JOBS_LSF_KILL_GRACE="4"), tmp_path, steps=400)
    wait_for(lambda: list(run_dir.glob(f"*.{first[0]}.out")) and "checkpointed" in "".join(
        p.read_text() for p in run_dir.glob(f"*.{first[0]}.out")), timeout=60,
        what="the first link to checkpoint and start queueing the next")
    res = cli(["cancel", str(run_dir)], env, timeout=60)
    assert res.returncode == 0 and f"job {first[0]}: being killed" in res.stdout, res.stdout + res.stderr
    wait_for(lambda: (run_dir / "chain.jobs").exists(), timeout=30, what="the dying link's bsub")
    rows = _settled(env, run_dir)
    (second,) = (run_dir / "chain.jobs").read_text().split()
    assert [r["job_id"] for r in rows] == [first[0], second], rows
    assert rows[1]["state"] == "cancelled", rows
    record = native_state.load_job(Path(env["SUMMIT_JOBS_LSF_HOME"]), int(second))
    assert record is not None and not record.get("start_time"), record          # killed before it ran
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    by_link = [e for e in events if e["event"] == "chain_stopped" and "cancelled" in e["reason"]]
    assert by_link or f"job {second}:" in res.stdout, (events, res.stdout)
    assert not list(run_dir.glob(f"*.{second}.out")), "the link queued after the cancel ran"

    # a link that starts with the marker there (the job script submitted by hand) ends at once, and says why
    started = lsf_run(["bsub", "-J", "by-hand", "-o", str(run_dir / "by-hand.%J.out"), str(run_dir / "job.lsf")],
                      env, cwd=run_dir)
    assert started.returncode == 0, started.stderr
    third = started.stdout.split("<")[1].split(">")[0]
    wait_for(lambda: (run_dir / f"exitcode.{third}").exists(), timeout=60, what="the hand-submitted link to end")
    assert (run_dir / f"exitcode.{third}").read_text() == "130\n"
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "chain_stopped" and e["job"] == third and "before job" in e["reason"]
               for e in events), events

    # submitted again into the run directory: no marker, and the run trains to COMPLETE
    again = cli(["submit", "--nodes", "1", "--json", "--template-dir", str(tmp_path / "templates"), "--run-dir",
                 str(run_dir), "--walltime", "0:03", "--warning-minutes", "1", "--until-complete", "--force"],
                dict(env, PROG_STEPS="2"), timeout=60)
    assert again.returncode == 0, again.stderr
    assert not (run_dir / "CANCELLED").exists()
    (fourth,) = [str(j) for j in json.loads(again.stdout)["job_ids"]]
    wait_for(lambda: (run_dir / f"exitcode.{fourth}").exists(), timeout=60, what="the resubmitted link to end")
    assert (run_dir / f"exitcode.{fourth}").read_text() == "0\n" and (run_dir / "COMPLETE").exists()


def test_the_plan_says_how_many_links_to_expect(tmp_path):
    from helpers import run_cli
    env = dict(__import__("os").environ, XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    args = ["--machine", "summit", "submit", "--nodes", "16", "--project", "ABC123", "--until-complete", "--dry-run"]
    res = run_cli(args, env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    # 240,000 clips x 100 epochs / (96 GPUs x 22.3 clips/s) = 3 h 11 min; 110 minutes per 2-hour link.
    assert "expected links: about 2 (3 h 11 min of training" in res.stderr
    res = run_cli([*args, "--max-links", "1"], env, cwd=tmp_path)
    assert "above --max-links 1" in res.stderr


#: A site's bsub that fails like a real one (IBM LSF's message for a master still starting) once, and on which
#: LSF's signals land while it runs (the warning, bkill's INT and TERM, to every process of the job).
BSUB_FAILS_ONCE_THEN_SIGNALLED = '''bsub() {
  if [ ! -e "$RUN_DIR/.bsub-failed-once" ]; then
    : > "$RUN_DIR/.bsub-failed-once"
    echo "Failed in an LSF library call: Slave LIM configuration is not ready yet. Job not submitted." >&2
    return 255
  fi
  command bsub "$@" &
  local pid=$!
  kill -USR2 "$pid"; kill -INT "$pid"; kill -TERM "$pid"
  command bkill -s USR2 "$JOB_ID" >/dev/null
  wait "$pid"
}
'''
#: A bsub that never takes the job (an esub refusing it), with LSF's own message.
BSUB_REFUSES = '''bsub() {
  echo "Request aborted by esub. Job not submitted." >&2
  return 255
}
'''


def _with_site_bsub(tmp_path: Path, definition: str) -> None:
    """The site environment partial of the test's template folder defines ``bsub`` as a shell function."""
    (tmp_path / "templates" / "lsf" / "partials").mkdir(parents=True, exist_ok=True)
    (tmp_path / "templates" / "lsf" / "partials" / "environment.j2").write_text(definition)


def test_a_bsub_that_fails_once_or_gets_signals_does_not_lose_the_next_link(lsf_env, tmp_path):
    """One chain through a site's bsub (a shell function of the environment partial), for two facts: the first
    next-link bsub fails with IBM's LIM message and is tried again; that retry, and every later link's
    bsub, get the warning, INT and TERM while they run (and the job a bkill -s USR2). The chain still
    completes, every link DONE, and the failure is in the logs."""
    _with_site_bsub(tmp_path, BSUB_FAILS_ONCE_THEN_SIGNALLED)
    env, run_dir, first = _run(lsf_env, tmp_path)
    rows = _settled(env, run_dir)
    assert (run_dir / "COMPLETE").read_text() == "step 30\n" and (run_dir / ".bsub-failed-once").exists()
    assert len(rows) >= 2 and all(r["state"] == "done" for r in rows), rows
    logs = cli(["logs", str(run_dir)], env, timeout=60)
    assert "Slave LIM configuration is not ready yet" in logs.stdout + logs.stderr


def test_a_link_whose_next_bsub_is_refused_ends_non_zero_and_says_why(lsf_env, tmp_path):
    _with_site_bsub(tmp_path, BSUB_REFUSES)
    # 1 LSF minute = 2 s and a run-limit grace of 5 LSF minutes: the warning 4 s after the start leaves 2 s
    # to the run limit (whose USR2 lands on the retries) and 10 more of grace, room for the 7 s of retries
    env, run_dir, first = _run(dict(lsf_env, SUMMIT_JOBS_LSF_RUNLIMIT_GRACE="5"), tmp_path, steps=400,
                               step_seconds=0.5)
    rows = _settled(env, run_dir)
    assert len(rows) == 1 and rows[0]["state"] in ("failed", "timed_out") and not (run_dir / "COMPLETE").exists(), rows
    assert (run_dir / f"exitcode.{first[0]}").read_text() == "1\n"
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    stopped = [e for e in events if e["event"] == "chain_stopped"]
    assert len(stopped) == 1 and stopped[0]["exit"] == 1 and stopped[0]["job"] == first[0], events
    assert "Request aborted by esub. Job not submitted." in stopped[0]["reason"]
    # status says it, in the table and in --json: a chain that stopped early never looks finished
    assert "Request aborted by esub" in rows[0]["chain_stopped"]
    assert rows[0]["last_event"]["event"] == "chain_stopped" and rows[0]["more_links"] is False
    table = cli(["status", str(run_dir)], env, timeout=60)
    assert table.returncode == 0, table.stderr
    assert f"job {first[0]}: the chain stopped before COMPLETE: " in table.stdout, table.stdout
    assert f"summit-jobs resume {run_dir.name}" in table.stdout, table.stdout
    logs = cli(["logs", str(run_dir)], env, timeout=60)
    assert logs.stdout.count("bsub did not queue the next link") + logs.stderr.count(
        "bsub did not queue the next link") == 4

