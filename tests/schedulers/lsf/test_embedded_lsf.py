"""The embedded LSF with real processes: bsub/bjobs/bkill/jsrun as a user's job script calls them.

Time is scaled: 1 LSF minute = 2 s (SUMMIT_JOBS_LSF_MINUTE), kill grace 1 s. Upper bounds on how long
something takes are a quiet machine's seconds stretched by the measured slowdown (lsf_jobs.stretched);
lower bounds are the scheduler's own and stay.
"""
from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lsf_jobs import bjobs_state, run, stretched, submitted_id, wait_for, wait_state
from summit_jobs.schedulers.lsf.embedded.state import node_names

#: The virtual nodes' host names on this machine: vnode1... where tasks get host names, else 127.1.0.1...
NODE1, NODE2, NODE3, NODE4 = node_names(4)

PY = sys.executable


def script(tmp_path, body: str, name: str = "job.lsf") -> str:
    path = tmp_path / name
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body).lstrip())
    return str(path)


def test_bsub_runs_script_with_lsf_variables_and_output_files(tmp_path, lsf_env):
    s = script(tmp_path, """
        #BSUB -J vars
        #BSUB -nnodes 2
        #BSUB -o vars.%J.out
        #BSUB -e vars.%J.err
        echo "JOBID=$LSB_JOBID QUEUE=$LSB_QUEUE SUBCWD=$LS_SUBCWD"
        echo "MCPU=$LSB_MCPU_HOSTS"
        echo "HOSTS=$LSB_HOSTS"
        echo to-stderr >&2
        """)
    res = run(["bsub", s], lsf_env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "is submitted to default queue <batch>." in res.stdout
    jid = submitted_id(res.stdout)
    assert wait_state(jid, lsf_env)["STAT"] == "DONE"
    out = (tmp_path / f"vars.{jid}.out").read_text()
    assert f"JOBID={jid} QUEUE=batch SUBCWD={tmp_path}" in out
    assert f"MCPU=batch1 1 {NODE1} 2 {NODE2} 2 \n" in out     # trailing space, as on Summit
    assert f"HOSTS=batch1 {NODE1} {NODE1} {NODE2} {NODE2}" in out
    assert (tmp_path / f"vars.{jid}.err").read_text() == "to-stderr\n"


def test_bsub_from_stdin_with_explicit_queue(tmp_path, lsf_env):
    body = "#!/bin/bash\n#BSUB -q debug\n#BSUB -o stdin.%J.out\necho from-stdin\n"
    res = run(["bsub"], lsf_env, cwd=tmp_path, input=body)
    assert "is submitted to queue <debug>." in res.stdout and "default" not in res.stdout
    jid = submitted_id(res.stdout)
    wait_state(jid, lsf_env)
    assert (tmp_path / f"stdin.{jid}.out").read_text() == "from-stdin\n"


def test_too_many_nodes_refused_at_submit(tmp_path, lsf_env):
    s = script(tmp_path, "#BSUB -nnodes 5\necho never\n")
    res = run(["bsub", s], lsf_env, cwd=tmp_path)
    assert res.returncode != 0
    assert "4 virtual nodes" in res.stderr and "Job not submitted" in res.stderr
    assert "is submitted" not in res.stdout


def test_walltime_kill(tmp_path, lsf_env):
    s = script(tmp_path, """
        #BSUB -W 1
        #BSUB -o wall.%J.out
        echo started
        sleep 60 &
        echo $! > sleeper.pid
        wait
        echo not-reached
        """)
    t0 = time.time()
    jid = submitted_id(run(["bsub", s], lsf_env, cwd=tmp_path).stdout)
    rec = wait_state(jid, lsf_env, timeout=20)
    elapsed = time.time() - t0
    assert rec["STAT"] == "EXIT"
    assert rec["EXIT_REASON"].startswith("TERM_RUNLIMIT")
    assert 1.5 <= elapsed < stretched(10), elapsed
    assert "not-reached" not in (tmp_path / f"wall.{jid}.out").read_text()
    pid = int((tmp_path / "sleeper.pid").read_text())
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or
             open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] == "Z", 5, "the job's children to die")


def test_warning_signal_reaches_ranks_before_the_limit(tmp_path, lsf_env, program):
    # 1 LSF minute = 3 s on a quiet machine, stretched by the measured slowdown: the warning must not come
    # before 4 Python ranks have set their USR2 handler. Limit 2 minutes; USR2 one minute before: the
    # ranks checkpoint and exit 0.
    minute = round(stretched(3.0), 1)
    lsf_env = dict(lsf_env, SUMMIT_JOBS_LSF_MINUTE=str(minute))
    s = script(tmp_path, f"""
        #BSUB -nnodes 2
        #BSUB -W 2
        #BSUB -wa USR2
        #BSUB -wt 1
        #BSUB -o warn.%J.out
        trap 'echo got-usr2; kill -USR2 $STEP' USR2
        PROG_SLEEP={10 * minute} jsrun -n 4 -r 2 -a 1 -c 1 {PY} {program} &
        STEP=$!
        wait $STEP; rc=$?
        while kill -0 $STEP 2>/dev/null; do wait $STEP; rc=$?; done
        echo "step-rc=$rc"
        exit $rc
        """)
    jid = submitted_id(run(["bsub", s], lsf_env, cwd=tmp_path).stdout)
    rec = wait_state(jid, lsf_env, timeout=20)
    job = json.loads((Path(lsf_env["SUMMIT_JOBS_LSF_HOME"]) / "jobs" / jid / "job.json").read_text())
    elapsed = job["finish_time"] - job["start_time"]
    out = (tmp_path / f"warn.{jid}.out").read_text()
    assert rec["STAT"] == "DONE", out
    assert "got-usr2" in out and "step-rc=0" in out
    # warned (one minute in), ended before the limit (two minutes)
    assert minute - 0.5 <= elapsed < 2 * minute and job.get("runlimit_signal_sent") is None, (elapsed, job)
    for rank in range(4):
        assert (tmp_path / f"ckpt.{jid}.{rank}").read_text() == "checkpoint\n"


def test_dependency_chain_and_never_satisfied(tmp_path, lsf_env):
    go = tmp_path / "go"                                  # job a runs until the test releases it
    a = script(tmp_path, f"#BSUB -o a.%J.out\nwhile [ ! -e '{go}' ]; do sleep 0.05; done\nexit 4\n", "a.lsf")
    ja = submitted_id(run(["bsub", a], lsf_env, cwd=tmp_path).stdout)
    b = script(tmp_path, "#BSUB -o b.%J.out\necho b-ran\n", "b.lsf")
    jb = submitted_id(run(["bsub", "-w", f"ended({ja})", b], lsf_env, cwd=tmp_path).stdout)
    jc = submitted_id(run(["bsub", "-w", f"done({ja})", b], lsf_env, cwd=tmp_path).stdout)
    jd = submitted_id(run(["bsub", "-w", f"exit({ja})", b], lsf_env, cwd=tmp_path).stdout)
    rb = wait_for(lambda: (lambda r: r if f"ended({ja})" in r["PEND_REASON"] else None)(bjobs_state(jb, lsf_env)),
                  10, "the dependency's pending reason")
    assert rb["STAT"] == "PEND"
    go.touch()
    assert wait_state(ja, lsf_env)["STAT"] == "EXIT"
    assert wait_state(jb, lsf_env)["STAT"] == "DONE"     # ended() holds for a failed job too
    assert wait_state(jd, lsf_env)["STAT"] == "DONE"
    never = wait_for(lambda: (lambda r: r if "never satisfied" in r["PEND_REASON"] else None)(
        bjobs_state(jc, lsf_env)), 10, "the never-satisfied reason")
    assert never["STAT"] == "PEND"
    # Killing a pending job ends it at once.
    kill = run(["bkill", jc], lsf_env)
    assert f"Job <{jc}> is being terminated" in kill.stdout
    assert bjobs_state(jc, lsf_env)["STAT"] == "EXIT"
    bad = run(["bsub", "-w", "ended(99999)", b], lsf_env, cwd=tmp_path)
    assert bad.returncode != 0 and "Job not submitted" in bad.stderr


def test_bkill_running_job_term_then_kill_and_finished_job(tmp_path, lsf_env):
    # The script ignores INT and TERM (bkill's first two signals), so only the KILL two intervals later ends it.
    s = script(tmp_path, "#BSUB -o k.%J.out\ntrap '' INT TERM\necho up\nsleep 60\n")
    jid = submitted_id(run(["bsub", s], lsf_env, cwd=tmp_path).stdout)
    wait_for(lambda: (tmp_path / f"k.{jid}.out").exists() and "up" in (tmp_path / f"k.{jid}.out").read_text(),
             20, "the job to start")
    t0 = time.time()
    res = run(["bkill", jid], lsf_env)
    assert res.stdout.strip() == f"Job <{jid}> is being terminated"
    rec = wait_state(jid, lsf_env, timeout=15)
    assert rec["STAT"] == "EXIT" and rec["EXIT_REASON"].startswith("TERM_OWNER")
    assert 0.8 <= time.time() - t0 < stretched(8)
    again = run(["bkill", jid], lsf_env)
    assert again.returncode != 0 and f"Job <{jid}>: Job has already finished" in again.stderr


def test_jobs_wait_for_free_virtual_nodes(tmp_path, lsf_env):
    go = tmp_path / "go"                                  # the big job holds its nodes until released
    big = script(tmp_path, f"#BSUB -nnodes 3\n#BSUB -o big.%J.out\nwhile [ ! -e '{go}' ]; do sleep 0.05; done\n",
                 "big.lsf")
    small = script(tmp_path, "#BSUB -nnodes 2\n#BSUB -o small.%J.out\necho $LSB_MCPU_HOSTS\n", "small.lsf")
    j1 = submitted_id(run(["bsub", big], lsf_env, cwd=tmp_path).stdout)
    wait_for(lambda: bjobs_state(j1, lsf_env)["STAT"] == "RUN", 20, "the big job to run")
    j2 = submitted_id(run(["bsub", small], lsf_env, cwd=tmp_path).stdout)
    pend = wait_for(lambda: (lambda r: r if "virtual nodes" in r["PEND_REASON"] else None)(
        bjobs_state(j2, lsf_env)), 10, "the node shortage reason")
    assert pend["STAT"] == "PEND"
    go.touch()
    assert wait_state(j2, lsf_env)["STAT"] == "DONE"
    assert bjobs_state(j1, lsf_env)["STAT"] == "DONE"


def test_jsrun_refuses_layouts_that_do_not_fit_and_propagates_rank_failure(tmp_path, lsf_env, program):
    # The sleeping ranks must be killed, not waited for: they sleep twice the time the job is given.
    allowed = stretched(20)
    s = script(tmp_path, f"""
        #BSUB -nnodes 2
        #BSUB -o js.%J.out
        jsrun -n 6 -r 2 -a 1 -c 1 {PY} {program}; echo "too-many-rc=$?"
        jsrun -n 2 -r 1 -a 1 -c 3 {PY} {program}; echo "too-wide-rc=$?"
        jsrun -n 2 -r 1 -a 1 -g 1 {PY} {program}; echo "gpu-rc=$?"
        PROG_SLEEP={2 * allowed:.0f} PROG_FAIL_RANK=2 PROG_FAIL_DELAY=2 \\
            jsrun -n 2 -r 1 -a 2 -c 2 -E EXTRA=val {PY} {program}
        echo "fail-rc=$?"
        """)
    t0 = time.time()
    jid = submitted_id(run(["bsub", s], lsf_env, cwd=tmp_path).stdout)
    wait_state(jid, lsf_env, timeout=30)
    out = (tmp_path / f"js.{jid}.out").read_text()
    assert "too-many-rc=255" in out and "need 3 nodes" in out
    assert "too-wide-rc=255" in out and "too-wide" in out
    assert "gpu-rc=255" in out and "no GPUs" in out
    assert "fail-rc=3" in out and "rank 2 exited with status 3" in out
    assert time.time() - t0 < allowed       # the sleeping ranks were killed, not waited for
    assert out.count("RANK ") == 4


def test_jsrun_rank_variables_nvme_and_env(tmp_path, lsf_env):
    s = script(tmp_path, f"""
        #BSUB -nnodes 2
        #BSUB -o env.%J.out
        mkdir -p wd
        jsrun -n 2 -r 1 -a 2 -c 2 -h wd -E EXTRA=val --smpiargs=off {PY} -c 'import os; \
os.write(1, (" ".join([os.environ["JSM_NAMESPACE_RANK"], os.environ["OMPI_COMM_WORLD_LOCAL_RANK"], \
os.environ["SUMMIT_JOBS_VNODE"], os.environ["SUMMIT_JOBS_NVME"], os.environ["EXTRA"], \
os.environ.get("SUMMIT_JOBS_RENDEZVOUS_ADDR", "-"), os.getcwd()]) + "\\n").encode())'
        """)
    jid = submitted_id(run(["bsub", s], lsf_env, cwd=tmp_path).stdout)
    assert wait_state(jid, lsf_env)["STAT"] == "DONE"
    rows = sorted(line.split() for line in (tmp_path / f"env.{jid}.out").read_text().splitlines())
    home = lsf_env["SUMMIT_JOBS_LSF_HOME"]
    assert [r[:3] for r in rows] == [["0", "0", NODE1], ["1", "1", NODE1],
                                     ["2", "0", NODE2], ["3", "1", NODE2]]
    for r in rows:
        assert r[3] == f"{home}/nodes/{r[2]}/nvme" and os.path.isdir(r[3])
        assert r[4:] == ["val", "-", str(tmp_path / "wd")]     # ranks find the rendezvous in the host list


def test_concurrent_submissions_get_distinct_ids(tmp_path, lsf_env):
    def one(_):
        return run(["bsub", "-o", "c.%J.out", "/bin/true"], lsf_env, cwd=tmp_path).stdout
    with ThreadPoolExecutor(6) as pool:
        outs = list(pool.map(one, range(6)))
    ids = [submitted_id(o) for o in outs]
    assert len(set(ids)) == 6
    for jid in ids:
        assert wait_state(jid, lsf_env)["STAT"] == "DONE"
    listing = run(["bjobs", "-a"], lsf_env).stdout
    assert all(f"\n{jid} " in listing for jid in ids)
    assert run(["bjobs"], lsf_env).stderr.strip() == "No unfinished job found"


#: A task that ignores USR2 (it has saved), says it started, and ends a moment later.
QUIET_TASK = (f"{PY} -c 'import os, signal, time; signal.signal(signal.SIGUSR2, signal.SIG_IGN); "
              "open(\"started.\" + str(os.getpid()), \"w\").close(); time.sleep(0.5)'")


@pytest.mark.parametrize("form,launch", [
    ("#BSUB -nnodes 1", f"jsrun -n 2 -r 2 -a 1 -c 1 {QUIET_TASK}"),
    ("#BSUB -n 2\n#BSUB -R \"span[ptile=2]\"", f"blaunch -no-shell {QUIET_TASK}"),
], ids=["jsrun", "blaunch"])
def test_a_warning_that_reaches_the_launcher_as_its_tasks_end_does_not_fail_the_step(tmp_path, lsf_env, form,
                                                                                      launch):
    """LSF's warning goes to every process of the job, and the batch shell forwards it to the step as well:
    it can reach jsrun or blaunch just as its last task ends. The launcher then has nothing to forward it to
    and must still exit with its tasks' status (0), not die of SIGUSR2 while the interpreter exits (a chain
    link's step once ended with 255 that way). Here USR2 is sent to the launcher without pause from the
    moment both tasks have started until it has ended, three times."""
    s = script(tmp_path, f"""
        {form}
        #BSUB -o sig.%J.out
        for i in 1 2 3; do
          rm -f started.*
          {launch} &
          step=$!
          while [ "$(ls started.* 2>/dev/null | wc -l)" -lt 2 ] && kill -0 "$step" 2>/dev/null; do sleep 0.01; done
          while kill -0 "$step" 2>/dev/null; do kill -USR2 "$step" 2>/dev/null; done
          wait "$step"; echo "launcher-rc=$?"
        done
        """)
    jid = submitted_id(run(["bsub", s], lsf_env, cwd=tmp_path).stdout)
    assert wait_state(jid, lsf_env, timeout=60)["STAT"] == "DONE"
    out = (tmp_path / f"sig.{jid}.out").read_text()
    assert out.count("launcher-rc=") == 3 and out.count("launcher-rc=0") == 3, out
