"""`summit-jobs lsf env` and `lsf shell`: the embedded LSF's commands in a user's shell, through real shells.

Why these tests: the point of the commands is that someone else's code (a
shell script, dask-jobqueue, a CI job) finds bsub, bjobs and bkill on PATH and
they work as LSF's do. So every test goes the user's way: `eval` of the
printed exports in bash, or a program started by `lsf shell`, never the
functions behind them. The embedded LSF's commands must never be on PATH
without these commands, and a state folder's name must never be run as shell
code.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Dict

import pytest

from lsf_jobs import BIN, job_processes, require_client, run, stretched, submitted_id, wait_for, wait_state

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")

#: A tiny job: writes a file named after its job id in the submission folder.
JOB = "#!/bin/sh\n#BSUB -J tiny\necho \"ran $LSB_JOBID on $LSB_HOSTS\" > ran.$LSB_JOBID\n"


@pytest.fixture
def user_env(tmp_path) -> Dict[str, str]:
    """A user's environment: no embedded LSF on PATH, no summit-jobs settings, a data folder of the test's own;
    LSF minutes scaled so that kills are quick."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SUMMIT_JOBS_", "LSB_"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", os.defpath).split(os.pathsep)
                                  if p and Path(p).resolve() != BIN.resolve())
    env.update({"XDG_CONFIG_HOME": str(tmp_path / "xdg-config"), "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
                "SUMMIT_JOBS_LSF_MINUTE": "2", "SUMMIT_JOBS_LSF_KILL_GRACE": "1", "SHELL": "/bin/sh"})
    return env


def embedded_env(user_env: Dict[str, str], home: Path) -> Dict[str, str]:
    """The user's environment with the embedded LSF of ``home`` on PATH: for this test to ask bjobs itself."""
    return dict(user_env, SUMMIT_JOBS_LSF_HOME=str(home), SUMMIT_JOBS_PYTHON=sys.executable,
                PATH=f"{BIN}{os.pathsep}{user_env['PATH']}")


def summit_jobs(*args: str) -> str:
    """`summit-jobs ARGS` as a shell word list: the interpreter and module this test runs."""
    return shlex.join((sys.executable, "-m", "summit_jobs", *args))


def bash(script: str, env: Dict[str, str], cwd: Path, timeout: float = 90):
    """Run ``script`` in a non-interactive bash that stops at the first failing command."""
    return run([BASH, "-euc", script], env, cwd=str(cwd), timeout=timeout)


def assert_no_processes_left(jid: str, home: Path) -> None:
    """Every process of the job is gone once LSF says it ended (LSF's process tracking)."""
    wait_for(lambda: not job_processes(jid, str(home)), 15, f"the processes of job {jid} to end")


def test_eval_env_gives_bash_an_lsf_that_runs_and_kills_jobs(user_env, tmp_path):
    """eval "$(summit-jobs lsf env --home H)"; then bsub, bjobs, DONE, and bkill of another job, in bash."""
    home = tmp_path / "lsf"
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(JOB)
    (work / "job.sh").chmod(0o755)
    script = f"""
eval "$({summit_jobs('lsf', 'env', '--home', str(home))})"
command -v bsub
quick=$(bsub ./job.sh)
long=$(bsub -J long sleep 60)
echo "QUICK $quick"
echo "LONG $long"
bjobs -a -noheader -o "jobid stat job_name"
for i in $(seq 600); do
  [ "$(bjobs -a -noheader -o stat "${{quick//[!0-9]/}}")" = DONE ] && break; sleep 0.1
done
echo "QUICK_STATE $(bjobs -a -noheader -o stat "${{quick//[!0-9]/}}")"
for i in $(seq 600); do
  [ "$(bjobs -a -noheader -o stat "${{long//[!0-9]/}}")" = RUN ] && break; sleep 0.1
done
bkill "${{long//[!0-9]/}}"
for i in $(seq 600); do
  [ "$(bjobs -a -noheader -o stat "${{long//[!0-9]/}}")" = EXIT ] && break; sleep 0.1
done
echo "LONG_STATE $(bjobs -a -noheader -o "stat exit_reason" "${{long//[!0-9]/}}")"
echo "HOME $SUMMIT_JOBS_LSF_HOME"
"""
    res = bash(script, user_env, work, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == str(BIN / "bsub")
    quick = submitted_id(next(ln for ln in lines if ln.startswith("QUICK ")))
    long = submitted_id(next(ln for ln in lines if ln.startswith("LONG ")))
    listed = {ln.split()[0]: ln.split()[2] for ln in lines if ln.split() and ln.split()[0] in (quick, long)}
    assert listed == {quick: "tiny", long: "long"}          # bjobs saw both, with their #BSUB / -J names
    assert "QUICK_STATE DONE" in lines
    assert (work / f"ran.{quick}").read_text().startswith(f"ran {quick} on ")
    killed = next(ln for ln in lines if ln.startswith("LONG_STATE ")).split()
    assert killed[1:3] == ["EXIT", "TERM_OWNER:"], res.stdout
    assert f"HOME {home}" in lines
    assert (home / "jobs" / quick).is_dir() and (home / "jobs").stat().st_mode & 0o077 == 0
    for jid in (quick, long):
        assert_no_processes_left(jid, home)


def test_the_commands_are_on_path_only_in_the_shell_that_asks(user_env, tmp_path):
    """Running `lsf env` changes nothing by itself: bsub is on PATH only after eval, and only in that shell."""
    if shutil.which("bsub", path=user_env["PATH"]):
        pytest.skip("this machine has an LSF of its own on PATH")
    script = f"""
{summit_jobs('lsf', 'env', '--home', str(tmp_path / 'lsf'))} > /dev/null
command -v bsub || echo "NO BSUB BEFORE"
( eval "$({summit_jobs('lsf', 'env', '--home', str(tmp_path / 'lsf'))})"; command -v bsub; command -v jsrun )
command -v bsub || echo "NO BSUB AFTER"
"""
    res = bash(script, user_env, tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["NO BSUB BEFORE", str(BIN / "bsub"), str(BIN / "jsrun"), "NO BSUB AFTER"]
    assert shutil.which("bsub", path=user_env["PATH"]) is None


@pytest.mark.parametrize("name", ["a b", "it's \"quoted\"", "$(touch PWNED)`touch PWNED2`", "semi;colon & amp\nnl"])
def test_a_hostile_home_is_quoted_and_used_as_named(user_env, tmp_path, name):
    """A state folder's name with spaces, quotes, $(...) or a newline reaches the variable as it is, runs
    nothing, and the embedded LSF keeps its jobs there."""
    home = tmp_path / name / "lsf"
    script = f"""
eval "$({summit_jobs('lsf', 'env', '--home', str(home))})"
printf '%s' "$SUMMIT_JOBS_LSF_HOME" > seen
bsub -J hostile true
"""
    res = bash(script, user_env, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "seen").read_text() == str(home)
    assert not list(tmp_path.rglob("PWNED*")), "a folder name was run as a command"
    jid = submitted_id(res.stdout)
    assert (home / "jobs" / jid).is_dir()
    assert wait_state(jid, embedded_env(user_env, home), timeout=60)["STAT"] == "DONE"
    assert_no_processes_left(jid, home)


def test_lsf_shell_runs_a_command_with_the_lsf_and_its_exit_status(user_env, tmp_path):
    """`lsf shell -- bsub ...` then `lsf shell -- bjobs` sees the job; the command's exit status is kept."""
    home = tmp_path / "shell home"
    sub = run([sys.executable, "-m", "summit_jobs", "lsf", "shell", "--home", str(home), "--",
               "bsub", "-J", "from-shell", "sleep", "0.2"], user_env, cwd=str(tmp_path))
    assert sub.returncode == 0, sub.stderr
    jid = submitted_id(sub.stdout)
    assert f"with the embedded LSF at {shlex.quote(str(home))}" in sub.stderr, sub.stderr
    listed = run([sys.executable, "-m", "summit_jobs", "lsf", "shell", "--home", str(home), "--",
                  "bjobs", "-a", "-noheader", "-o", "jobid job_name"], user_env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == [jid, "from-shell"]
    failed = run([sys.executable, "-m", "summit_jobs", "lsf", "shell", "--home", str(home), "--",
                  "bkill", "999999999"], user_env)
    assert failed.returncode != 0 and "No matching job found" in failed.stdout + failed.stderr
    assert wait_state(jid, embedded_env(user_env, home), timeout=60)["STAT"] == "DONE"
    assert_no_processes_left(jid, home)


def test_lsf_shell_starts_the_users_shell_and_says_how_to_leave(user_env, tmp_path):
    """Without a command: $SHELL with the LSF on PATH; stderr names the home and `exit`."""
    home = tmp_path / "h"
    res = run([sys.executable, "-m", "summit_jobs", "lsf", "shell", "--home", str(home)], user_env,
              input='command -v bkill; echo "$SUMMIT_JOBS_LSF_HOME"; exit 7\n')
    assert res.returncode == 7, res.stderr
    assert res.stdout.splitlines() == [str(BIN / "bkill"), str(home)]
    note = [ln for ln in res.stderr.splitlines() if ln.startswith("summit-jobs lsf: a new sh")]
    assert note and str(home) in note[0] and "exit" in note[0], res.stderr


def test_default_home_is_the_one_summit_jobs_uses(user_env, tmp_path):
    """Without --home: $SUMMIT_JOBS_LSF_HOME when set, else the local machine's default under the data folder."""
    plain = run([sys.executable, "-m", "summit_jobs", "lsf", "env", "--json"], user_env)
    assert plain.returncode == 0, plain.stderr
    data = json.loads(plain.stdout)
    assert data["home"] == str(tmp_path / "xdg-data" / "summit-jobs" / "lsf")
    assert data["environment"]["SUMMIT_JOBS_LSF_HOME"] == data["home"]
    assert data["environment"]["PATH"].split(os.pathsep)[0] == str(BIN) == data["bin"] == data["prepend"]["PATH"]
    assert {"bsub", "bjobs", "bkill", "jsrun"} <= set(data["commands"])
    # The local profile's machine: 4 virtual nodes of 2 cores (envs/local.yaml).
    assert (data["environment"]["SUMMIT_JOBS_LSF_NODES"], data["environment"]["SUMMIT_JOBS_LSF_CORES"]) == ("4", "2")
    chosen = tmp_path / "mine"
    given = run([sys.executable, "-m", "summit_jobs", "lsf", "env", "--json"],
                dict(user_env, SUMMIT_JOBS_LSF_HOME=str(chosen)))
    assert json.loads(given.stdout)["home"] == str(chosen) and chosen.is_dir()
    relative = run([sys.executable, "-m", "summit_jobs", "lsf", "env", "--json", "--home", "rel"], user_env,
                   cwd=str(tmp_path))
    assert json.loads(relative.stdout)["home"] == str(tmp_path / "rel")


@pytest.mark.parametrize("args, words", [
    (["lsf", "env", "--home", "{file}"], ["is a file, not a folder"]),
    (["lsf", "env", "--home", ""], ["--home", "empty"]),
    (["lsf", "shell", "--home", "{dir}", "--", "no-such-program-xyz"], ["'no-such-program-xyz' was not found"]),
])
def test_mistakes_end_in_one_line(user_env, tmp_path, args, words):
    (tmp_path / "f").write_text("")
    argv = [a.format(file=tmp_path / "f", dir=tmp_path / "d") for a in args]
    res = run([sys.executable, "-m", "summit_jobs", *argv], user_env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert all(w in res.stderr for w in words), res.stderr


DASK_SCRIPT = r"""
import sys
from dask_jobqueue import LSFCluster
from distributed import Client
workers_s, result_s = float(sys.argv[2]), float(sys.argv[3])
cluster = LSFCluster(cores=1, memory="1GB", walltime="00:10", processes=1, use_stdin=True,
                     log_directory=sys.argv[1], scheduler_options={"host": "127.0.0.1"})
try:
    cluster.scale(1)
    with Client(cluster) as client:
        client.wait_for_workers(1, timeout=workers_s)
        print("ANSWER", client.submit(lambda x: x + 1, 41).result(timeout=result_s))
finally:
    cluster.close()
"""


def test_dask_jobqueue_lsfcluster_runs_a_task_through_lsf_env(user_env, tmp_path):
    """dask-jobqueue's LSFCluster, unchanged, submits its worker with bsub and gets a result back. The LSF
    minute and the client's waits are stretched by the measured slowdown: the worker's walltime of 10 LSF
    minutes must hold a busy machine's start of a dask worker (the minute costs nothing here: the worker
    ends by bkill)."""
    require_client("dask_jobqueue")
    user_env = dict(user_env, SUMMIT_JOBS_LSF_MINUTE=f"{stretched(2.0):.2f}")
    home = tmp_path / "lsf"
    (tmp_path / "dask_client.py").write_text(DASK_SCRIPT)
    (tmp_path / "logs").mkdir()
    waits = (f"{stretched(120):.0f}", f"{stretched(60):.0f}")
    script = f"""
eval "$({summit_jobs('lsf', 'env', '--home', str(home))})"
{shlex.join((sys.executable, "dask_client.py", str(tmp_path / "logs"), *waits))}
"""
    res = bash(script, user_env, tmp_path, timeout=240)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "ANSWER 42" in res.stdout.splitlines(), res.stdout
    jobs = sorted(p.name for p in (home / "jobs").iterdir())
    assert jobs, "no job reached the embedded LSF"
    for jid in jobs:
        # cluster.close() scaled the worker away with bkill: the job was killed by its owner, as IBM records it
        rec = wait_state(jid, embedded_env(user_env, home), timeout=30)
        assert rec["STAT"] == "EXIT" and rec["EXIT_REASON"].startswith("TERM_OWNER"), rec
        assert_no_processes_left(jid, home)
