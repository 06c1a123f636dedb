"""The embedded LSF as clients written for IBM LSF use it (psij, ipyparallel, toil, dask-jobqueue, parsl):
bsub -env, -n with -nnodes, a one-string command run by /bin/sh, bjobs -u/-l/-o fields, EXIT_REASON, -R
select[], job arrays. Each test runs the real commands against an isolated embedded LSF and checks that no
process of its jobs is left."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import pytest

from conftest_lsf import job_processes, lsf_env, run, submitted_id, wait_state  # noqa: F401


def env_of(path: Path) -> Dict[str, str]:
    """The variables a job dumped with /usr/bin/env (one NAME=value a line)."""
    out = {}
    for line in path.read_text().splitlines():
        name, eq, value = line.partition("=")
        if eq:
            out[name] = value
    return out


def submit(args: List[str], env: Dict[str, str], cwd: Path, input: str = None) -> str:
    res = run(["bsub", *args], env, cwd=cwd, input=input)
    assert res.returncode == 0, res.stderr
    return submitted_id(res.stdout)


def finished(jid: str, env: Dict[str, str], states=("DONE", "EXIT")) -> Dict[str, str]:
    """The job's final record; no process of it may be left."""
    rec = wait_state(jid, env, states)
    assert not job_processes(jid, env["SUMMIT_JOBS_LSF_HOME"]), f"job {jid} left processes behind"
    return rec


# --- bsub -env -----------------------------------------------------------------------------------------

ENV_SCRIPT = "#!/bin/sh\n#BSUB -J envdump\n{directive}/usr/bin/env > {dump}\n"


@pytest.mark.parametrize("spec,present,absent,values", [
    (None, ["KEEP", "DROP"], [], {}),
    ("all", ["KEEP", "DROP"], [], {}),
    ("none", [], ["KEEP", "DROP"], {}),
    ("all, ~DROP, NEW=fresh", ["KEEP", "NEW"], ["DROP"], {"NEW": "fresh"}),
    ("KEEP, NEW=$KEEP-x, COMMA='a, b'", ["KEEP", "NEW", "COMMA"], ["DROP"], {"NEW": "kept-x", "COMMA": "a, b"}),
])
@pytest.mark.parametrize("where", ["directive", "option"])
def test_bsub_env(lsf_env, tmp_path, spec, present, absent, values, where):
    """-env as IBM documents it, on the command line and as #BSUB -env; LSF's variables are always set."""
    env = dict(lsf_env, KEEP="kept", DROP="dropped")
    dump = tmp_path / "env.txt"
    directive = f'#BSUB -env "{spec}"\n' if spec is not None and where == "directive" else ""
    script = tmp_path / "job.sh"
    script.write_text(ENV_SCRIPT.format(directive=directive, dump=dump))
    args = ["-env", spec] if spec is not None and where == "option" else []
    jid = submit([*args, str(script)], env, tmp_path)
    assert finished(jid, env)["STAT"] == "DONE"
    seen = env_of(dump)
    for name in present:
        assert name in seen, (spec, name)
    for name in absent:
        assert name not in seen, (spec, name)
    for name, value in values.items():
        assert seen[name] == value
    assert seen["LSB_JOBID"] == jid and seen["LSB_JOBNAME"] == "envdump" and "LSB_HOSTS" in seen


@pytest.mark.parametrize("spec,needle", [
    ("none, KEEP", "none stands alone"),
    ("~KEEP", "give \"all, ~KEEP\""),
    ("all, , KEEP", "empty item"),
    ("all, X='a", "not closed"),
    ("all, none=1", "not a variable name"),
])
def test_bsub_env_refused(lsf_env, tmp_path, spec, needle):
    res = run(["bsub", "-env", spec, "/bin/true"], lsf_env, cwd=tmp_path)
    assert res.returncode == 255 and needle in res.stderr and "Job not submitted." in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


# --- -n with -nnodes -----------------------------------------------------------------------------------

def test_n_with_nnodes_runs_the_csm_form(lsf_env, tmp_path):
    """psij writes "-nnodes 1" and "-n 1" together; IBM's -nnodes page lists only -csm y as a conflict."""
    dump = tmp_path / "env.txt"
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n#BSUB -nnodes 2\n#BSUB -n 1\n/usr/bin/env > {dump}\n")
    jid = submit([str(script)], lsf_env, tmp_path)
    assert finished(jid, lsf_env)["STAT"] == "DONE"
    seen = env_of(dump)
    assert seen["LSB_MCPU_HOSTS"].startswith("batch1 1 ") and len(seen["LSB_MCPU_HOSTS"].split()) == 6
    res = run(["bsub", "-nnodes", "1", "-csm", "y", "/bin/true"], lsf_env, cwd=tmp_path)
    assert res.returncode == 255 and "-csm y" in res.stderr and "Job not submitted." in res.stderr


# --- a one-string command ------------------------------------------------------------------------------

@pytest.mark.parametrize("argv,expected", [
    (["echo a1 a2"], "a1 a2\n"),
    (["echo a; echo b"], "a\nb\n"),
    (["X=1; echo \"$X$LSB_JOBID\" | sed s/^1/one/"], None),
    (["/bin/echo", "a;", "$HOME"], "a; $HOME\n"),           # a program with arguments: no shell, as before
])
def test_one_string_command_runs_in_the_bourne_shell(lsf_env, tmp_path, argv, expected):
    out = tmp_path / "out.txt"
    jid = submit(["-o", str(out), *argv], lsf_env, tmp_path)
    assert finished(jid, lsf_env)["STAT"] == "DONE"
    assert out.read_text() == (expected if expected is not None else f"one{jid}\n")


def test_one_string_command_exit_code(lsf_env, tmp_path):
    jid = submit(["-o", str(tmp_path / "out"), "echo x; exit 3"], lsf_env, tmp_path)
    rec = finished(jid, lsf_env)
    assert rec["STAT"] == "EXIT" and rec["EXIT_CODE"] == "3"
    name = run(["bjobs", "-o", "job_name", "-json", jid], lsf_env).stdout
    assert json.loads(name)["RECORDS"][0]["JOB_NAME"] == "echo x; exit 3"
