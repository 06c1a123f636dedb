"""The job lifecycle through the real CLI on the `local` profile (embedded LSF, real processes):
submit, status, logs, cancel, run records, checkpoint-and-chain."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from lsf_jobs import cli, recorded_state, run, stretched, submitted_id, wait_for, wait_state
from summit_jobs.schedulers.lsf.embedded.state import node_names
from summit_jobs.schedulers import FINISHED

#: The virtual nodes' host names on this machine: vnode1... where tasks get host names, else 127.1.0.1...
NODE1, NODE2, NODE3, NODE4 = node_names(4)


def submit(env, template_dir, runs_dir, *extra, nodes="2", name="e2e", trainer_args=()):
    args = ["submit", "--nodes", nodes, "--template-dir", str(template_dir), "--runs-dir", str(runs_dir),
            "--job-name", name, *extra]
    if trainer_args:
        args += ["--", *trainer_args]
    res = cli(args, env)
    assert res.returncode == 0, res.stderr
    m = re.search(r"^job ([\d ]+) submitted to queue (\S+)", res.stdout, re.M)
    assert m, res.stdout
    run_dir = re.search(r"^run directory: (.+)$", res.stdout, re.M).group(1)
    return m.group(1).split(), Path(run_dir)


def status_rows(env, target):
    res = cli(["status", "--json", target], env)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_end_to_end_pend_run_done_logs_and_exit_code(tmp_path, lsf_env, template_dir):
    env = dict(lsf_env, PROG_SLEEP="2")
    # Occupy every virtual node so the job must wait: PEND is observed for sure. The blocker's run limit (10
    # LSF minutes, stretched) outlasts a busy machine's submit and status; the test releases it long before.
    blocker = tmp_path / "blocker.sh"
    blocker.write_text("#!/bin/bash\nwhile [ ! -e release ]; do sleep 0.1; done\n")
    jb = submitted_id(run(["bsub", "-nnodes", "4", "-W", f"{stretched(10):.0f}", "-o", "blocker.%J.out",
                           str(blocker)], env, cwd=tmp_path).stdout)
    wait_state(jb, env, ("RUN",), timeout=20)

    ids, run_dir = submit(env, template_dir, tmp_path / "runs", trainer_args=["--extra", "two words"])
    assert len(ids) == 1
    jid = ids[0]
    follow = subprocess.Popen([sys.executable, "-m", "summit_jobs", "logs", "--follow", "--interval", "0.2",
                               run_dir.name], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        rows = status_rows(env, run_dir.name)
        assert rows[0]["job_id"] == jid and rows[0]["state"] == "pending"
        assert "virtual nodes" in rows[0]["reason"]
        seen.append("pending")
        native = [rows[0]["native_state"]]
        (tmp_path / "release").write_text("")
        deadline, asked = time.time() + stretched(40), 0.0
        while time.time() < deadline:
            # status is asked when the job's record has moved on from the state last seen (or every second)
            if recorded_state(jid, env) == native[-1] and time.time() - asked < 1.0:
                time.sleep(0.05)
                continue
            asked = time.time()
            row = status_rows(env, str(run_dir))[0]
            state = row["state"]
            if state != seen[-1]:
                seen.append(state)
                native.append(row["native_state"])
            if state in FINISHED + ("unknown",):
                break
            time.sleep(0.2)
        assert seen == ["pending", "running", "done"], seen
        out, err = follow.communicate(timeout=stretched(30))
    finally:
        follow.kill()
    assert follow.returncode == 0, err
    # Every rank's output with the right rank variables, in the job's -o file and in `logs`.
    logs = cli(["logs", jid], env)
    assert logs.returncode == 0, logs.stderr
    for text in (logs.stdout, out, (run_dir / f"e2e.{jid}.out").read_text()):
        lines = sorted(line for line in text.splitlines() if line.startswith("RANK "))
        assert len(lines) == 4, text
        for rank, line in enumerate(lines):
            assert (f"JSM_NAMESPACE_RANK={rank} JSM_NAMESPACE_SIZE=4 JSM_NAMESPACE_LOCAL_RANK={rank % 2} "
                    f"OMPI_COMM_WORLD_RANK={rank} OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK={rank % 2} "
                    f"PMIX_RANK={rank} SUMMIT_JOBS_VNODE={node_names(4)[rank // 2]}") in line
    assert f"==> {run_dir}/e2e.{jid}.out <==" in logs.stderr
    assert (run_dir / f"exitcode.{jid}").read_text() == "0\n"
    # The run record.
    record = json.loads((run_dir / "run.json").read_text())
    assert record["job_ids"] == [jid] and record["machine"] == "local" and record["run_dir"] == str(run_dir)
    assert (run_dir / "job.lsf").read_text().startswith("#!/bin/bash\n#BSUB")
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["nodes"] == 2 and plan["trainer_argv"][-2:] == ["--extra", "two words"]
    assert "virtual_nodes: 4" in (run_dir / "profile.yaml").read_text()
    # Nothing existing is overwritten without --force.
    again = cli(["submit", "--nodes", "1", "--template-dir", str(template_dir), "--run-dir", str(run_dir)], env)
    assert again.returncode == 2 and "--force" in again.stderr and "Traceback" not in again.stderr
    assert json.loads((run_dir / "run.json").read_text())["job_ids"] == [jid]
    run(["bkill", jb], env)


def test_checkpoint_and_chain(tmp_path, lsf_env, template_dir):
    """Three links of 2 LSF minutes each: USR2 one minute before the limit makes link 1 checkpoint
    and exit 0; link 2 resumes, finishes training and writes COMPLETE; link 3 exits at once."""
    prog = Path(str(template_dir)).parent / "prog.py"
    prog.write_text(prog.read_text().replace(
        "deadline = time.time()",
        "import glob\n"
        "if glob.glob('ckpt.*') and rank == '0':\n"
        "    open('COMPLETE', 'w').write('done\\n'); print('resumed and finished', flush=True); sys.exit(0)\n"
        "elif glob.glob('ckpt.*'):\n"
        "    sys.exit(0)\n"
        "deadline = time.time()"))
    # The warning comes one LSF minute after the start: 3 s on a quiet machine, stretched by the measured
    # slowdown so that the ranks have set their USR2 handler by then.
    minute = round(stretched(3.0), 1)
    env = dict(lsf_env, PROG_SLEEP=f"{20 * minute:.0f}", SUMMIT_JOBS_LSF_MINUTE=str(minute))
    t0 = time.time()
    ids, run_dir = submit(env, template_dir, tmp_path / "runs", "--walltime", "2", "--chain", "3", nodes="1",
                          name="chain")
    assert len(ids) == 3
    for jid in ids:
        assert wait_state(jid, env, timeout=40)["STAT"] == "DONE"
    assert time.time() - t0 < 10 * minute
    first, second, third = ids
    assert sorted(p.name for p in run_dir.glob("ckpt.*")) == [f"ckpt.{first}.0", f"ckpt.{first}.1"]
    assert "resumed and finished" in (run_dir / f"chain.{second}.out").read_text()
    assert "already complete" in (run_dir / f"chain.{third}.out").read_text()
    # The script records what it did as an event (trainer.rundir), for status and report.
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    assert [(e["event"], e["job"], e["by"]) for e in events] == [("already_complete", third, "script")]
    for jid in ids:
        assert (run_dir / f"exitcode.{jid}").read_text() == "0\n"
    rows = status_rows(env, run_dir.name)
    assert [r["state"] for r in rows] == ["done"] * 3
    watch = cli(["status", "--watch", "--interval", "0.2", run_dir.name], env)
    assert watch.returncode == 0 and watch.stdout.count("done") == 3


def test_status_never_reads_a_vanished_job_as_success(tmp_path, lsf_env, template_dir):
    ids, run_dir = submit(lsf_env, template_dir, tmp_path / "runs", nodes="1", name="gone")
    jid = ids[0]
    assert wait_state(jid, lsf_env)["STAT"] == "DONE"
    forgetful = dict(lsf_env, SUMMIT_JOBS_LSF_CLEAN_PERIOD="0.01")   # LSF's CLEAN_PERIOD has passed
    # Past the period by the job's finish time as the record holds it (written as the job ends, on a busy
    # machine a moment after bjobs first said DONE).
    wait_for(lambda: "is not found" in run(["bjobs", jid], forgetful).stderr, 10,
             f"job {jid} to vanish from bjobs after the clean period")
    row = status_rows(forgetful, jid)[0]
    assert row["state"] == "done" and row["exit_code"] == 0 and "exit-code file" in row["reason"]
    (run_dir / f"exitcode.{jid}").write_text("1\n")
    row = status_rows(forgetful, jid)[0]
    assert row["state"] == "failed" and row["exit_code"] == 1
    (run_dir / f"exitcode.{jid}").unlink()
    row = status_rows(forgetful, jid)[0]
    assert row["state"] == "unknown" and row["exit_code"] is None
    watch = cli(["status", "--watch", "--interval", "0.2", jid], forgetful)
    assert watch.returncode == 1 and "unknown" in watch.stdout


def test_cancel_kills_a_chain_without_starting_later_links(tmp_path, lsf_env, template_dir):
    # A kill interval long enough that the script records the step's end before any KILL reaches it; a walltime
    # of 10 LSF minutes (stretched) that no warning ends before the cancel, on a busy machine too.
    env = dict(lsf_env, PROG_SLEEP="60", SUMMIT_JOBS_LSF_KILL_GRACE="10",
               SUMMIT_JOBS_LSF_MINUTE=f"{stretched(2.0):.2f}")
    ids, run_dir = submit(env, template_dir, tmp_path / "runs", "--walltime", "10", "--chain", "2", nodes="1",
                          name="cx")
    wait_state(ids[0], env, ("RUN",), timeout=20)
    wait_for(lambda: "RANK " in (run_dir / f"cx.{ids[0]}.out").read_text()
             if (run_dir / f"cx.{ids[0]}.out").exists() else False, 20, "the ranks to start")
    res = cli(["cancel", run_dir.name], env)
    assert res.returncode == 0, res.stderr
    assert f"job {ids[0]}: being killed" in res.stdout and f"job {ids[1]}: being killed" in res.stdout
    for jid in ids:
        assert wait_state(jid, env, timeout=20)["STAT"] == "EXIT"
    assert not (run_dir / f"cx.{ids[1]}.out").exists()      # link 2 never started
    # The script's TERM trap forwarded the signal; the exit code file records the failure.
    assert (run_dir / f"exitcode.{ids[0]}").read_text().strip() != "0"
    again = cli(["cancel", ids[0]], env)
    assert again.returncode == 0 and "had already finished" in again.stdout
    rows = status_rows(env, run_dir.name)
    assert [r["state"] for r in rows] == ["cancelled", "cancelled"]


def test_user_mistakes_are_one_paragraph(tmp_path, lsf_env):
    res = cli(["status", "no-such-run"], lsf_env)
    assert res.returncode == 2 and "no run named 'no-such-run'" in res.stderr and "Traceback" not in res.stderr
    res = cli(["logs", "424242"], lsf_env)
    assert res.returncode == 2 and "belongs to no run" in res.stderr
    res = cli(["submit", "--nodes", "5", "--runs-dir", str(tmp_path)], lsf_env)
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_a_job_bsub_refuses_ends_in_lsfs_words_and_the_scripts_path(tmp_path, lsf_env, template_dir):
    """The scheduler's refusal (SubmitRefused) reaches the user as one message: bsub's own words, then where
    the script is; nothing is queued and no traceback is shown."""
    run_dir = tmp_path / "refused"
    res = cli(["submit", "--nodes", "1", "--template-dir", str(template_dir), "--run-dir", str(run_dir),
               "--bsub-option", "-R order[mem]"], lsf_env)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert "refused the job (exit 255)" in res.stderr and "not order[...]" in res.stderr, res.stderr
    assert f"The script is {run_dir / 'job.lsf'}." in res.stderr, res.stderr
    assert json.loads((run_dir / "run.json").read_text())["job_ids"] == []
