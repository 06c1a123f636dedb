"""Job ids of the embedded LSF are unique across every LSF home of this machine, and a job id named to the
lifecycle commands means a job of the LSF home in use.

Every test, the demo and a user's own runs may each have an embedded LSF of their own (SUMMIT_JOBS_LSF_HOME),
all on one machine's processes and ports. Homes that numbered their jobs alone handed out the same id at the
same moment: three torchrun jobs met in one rendezvous (the port and the rendezvous id come from the job
id), and `cancel ID` in one home resolved the id to another home's run. Torchrun jobs of two homes side by
side are tested with the torchrun chains of test_launcher_chains.py.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from lsf_jobs import (bjobs_state, cli, lsf_environment, run, submitted_id, wait_for, wait_state, write_template,
    PROGRAM)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the embedded LSF's virtual nodes need Linux")


def _bsub_together(envs: List[Dict[str, str]], cwd: Path) -> List[str]:
    """One `bsub /bin/true` per environment, all started before any is waited for; the ids they print."""
    procs = [subprocess.Popen(["bsub", "/bin/true"], env=env, cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for env in envs]
    ids = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        ids.append(submitted_id(out))
    return ids


def _homes(tmp_path: Path, count: int, **extra: str) -> List[Dict[str, str]]:
    base = lsf_environment(tmp_path)
    return [dict(base, SUMMIT_JOBS_LSF_HOME=str(tmp_path / f"lsf-{i}"), **extra) for i in range(count)]


def test_six_homes_submitting_at_the_same_moment_get_six_distinct_ids(tmp_path):
    envs = _homes(tmp_path, 6)
    first = _bsub_together(envs, tmp_path)
    assert len(set(first)) == 6, f"ids handed out twice: {first}"
    second = _bsub_together(envs, tmp_path)
    assert len(set(first + second)) == 12, f"ids handed out twice: {first} then {second}"
    for env, a, b in zip(envs, first, second):
        assert int(b) > int(a), "ids must grow within a home"
        assert wait_state(a, env)["STAT"] == "DONE" and wait_state(b, env)["STAT"] == "DONE"


def test_homes_sharing_a_counter_file_take_turns_without_repeating_an_id(tmp_path):
    from summit_jobs.schedulers.lsf.embedded import state
    start = state.first_id() + 10_000_000            # above the time-based floor, which would win otherwise
    counter = tmp_path / "ids" / "job-ids"
    counter.parent.mkdir()
    counter.write_text(f"{start}\n")
    envs = _homes(tmp_path, 2, SUMMIT_JOBS_LSF_ID_FILE=str(counter))
    ids = [submitted_id(run(["bsub", "/bin/true"], envs[i % 2], cwd=tmp_path).stdout) for i in range(4)]
    assert ids == [str(start + i) for i in range(1, 5)]
    assert counter.read_text().strip() == str(start + 4)
    for i, jid in enumerate(ids):
        assert wait_state(jid, envs[i % 2])["STAT"] == "DONE"


def test_an_unusable_counter_leaves_the_home_numbering_alone_and_says_so(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    env = _homes(tmp_path, 1, SUMMIT_JOBS_LSF_ID_FILE=str(blocker / "job-ids"))[0]
    first = run(["bsub", "/bin/true"], env, cwd=tmp_path)
    second = run(["bsub", "/bin/true"], env, cwd=tmp_path)
    for res in (first, second):
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        assert "job-id counter" in res.stderr and "numbers its jobs alone" in res.stderr, res.stderr
    a, b = submitted_id(first.stdout), submitted_id(second.stdout)
    assert int(b) == int(a) + 1
    assert wait_state(b, env)["STAT"] == "DONE"


def _submit_run(env: Dict[str, str], tmp_path: Path, name: str) -> tuple:
    """A run of the sleeping test program through `summit-jobs submit`; (job id, run directory)."""
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    templates = write_template(tmp_path / "templates", prog)
    run_dir = tmp_path / "runs" / name
    res = cli(["submit", "--nodes", "1", "--template-dir", str(templates), "--run-dir", str(run_dir),
               "--job-name", name, "--json"], env)
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout)["job_ids"][0]), run_dir


def test_a_job_id_names_a_job_of_the_lsf_home_in_use_only(tmp_path):
    """Two homes that both number their jobs from 400 (SUMMIT_JOBS_LSF_FIRST_ID: a numbering of their own, as
    homes had before ids were shared) and one run index: `cancel 400` in home A cancels A's run, status and
    logs of 400 in home B show B's run, and a run named by its folder is asked of the home it ran in."""
    base = dict(lsf_environment(tmp_path), PROG_SLEEP="120", SUMMIT_JOBS_LSF_FIRST_ID="400")
    env_a = dict(base, SUMMIT_JOBS_LSF_HOME=str(tmp_path / "lsf-a"))
    env_b = dict(base, SUMMIT_JOBS_LSF_HOME=str(tmp_path / "lsf-b"))
    jid_a, dir_a = _submit_run(env_a, tmp_path, "alpha")
    jid_b, dir_b = _submit_run(env_b, tmp_path, "beta")        # the newer run of the two
    assert jid_a == jid_b == "400"
    try:
        for env, run_dir, name in ((env_a, dir_a, "alpha"), (env_b, dir_b, "beta")):
            out = run_dir / f"{name}.400.out"
            wait_for(lambda o=out: o.exists() and "RANK" in o.read_text(), 30, f"{name}'s ranks to start")

        res = cli(["cancel", "400"], env_a)
        assert res.returncode == 0 and "job 400: being killed" in res.stdout, res.stdout + res.stderr
        assert "NOT killed" not in res.stderr, res.stderr
        assert wait_state("400", env_a)["STAT"] == "EXIT"
        assert bjobs_state("400", env_b)["STAT"] == "RUN", "home B's job 400 must be untouched"
        assert json.loads((dir_a / "run.json").read_text()).get("cancelled") == ["400"]
        assert "cancelled" not in json.loads((dir_b / "run.json").read_text())

        rows = json.loads(cli(["status", "--json", "400"], env_b).stdout)
        assert [(r["run"], r["state"]) for r in rows] == [("beta", "running")], rows
        res = cli(["logs", "400"], env_b)
        assert res.returncode == 0 and f"beta.400.out" in res.stderr and "alpha" not in res.stderr, res.stderr

        # By its folder, alpha is asked of home A, wherever the command runs.
        rows = json.loads(cli(["status", "--json", str(dir_a)], env_b).stdout)
        assert [(r["run"], r["state"], r["cancelled"]) for r in rows] == [("alpha", "cancelled", True)], rows
    finally:
        run(["bkill", "400"], env_b)
        run(["bkill", "400"], env_a)
    assert wait_state("400", env_b)["STAT"] == "EXIT"


def test_a_taken_port_does_not_send_a_job_onto_the_next_jobs_port():
    """Jobs submitted together get consecutive ids. free_port only probes (torchrun binds the port seconds
    later), so a job whose own port was taken must not move onto a port the next jobs' probes still find free."""
    from trainer import rendezvous
    for job in range(5_000_000, 5_000_400):
        first = rendezvous.free_port(str(job))
        ahead = {rendezvous.free_port(str(job + i)) for i in range(1, 33)}
        if first not in ahead and len(ahead) == 32:
            break
    else:
        pytest.skip("no stretch of 33 ids with free ports found on this machine")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("", first))
        held.listen(1)
        moved = rendezvous.free_port(str(job))
        assert moved != first
        assert moved not in ahead, f"job {job} took port {moved}, the first choice of one of the next 32 jobs"
