"""The embedded LSF as clients written for IBM LSF use it (psij, ipyparallel, toil, dask-jobqueue, parsl):
bsub -env, -n with -nnodes, a one-string command run by /bin/sh, bjobs -u/-l/-o fields, EXIT_REASON, -R
select[], job arrays. Each test runs the real commands against an isolated embedded LSF and checks that no
process of its jobs is left."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from lsf_jobs import job_processes, run, submitted_id, wait_state

from summit_jobs.schedulers.lsf.embedded.state import node_names

NODE1 = node_names(1)[0]   # vnode1 where namespaces give nodes names, else 127.1.0.1


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


def test_repeated_env_lines_are_one_list_as_psij_writes_them(lsf_env, tmp_path):
    """psij: "#BSUB -env all" then one "#BSUB -env NAME=value" per variable. Each is kept, in order; a later
    "all" is refused as a name rather than silently replacing what came before."""
    env = dict(lsf_env, KEEP="kept", DROP="dropped")
    dump = tmp_path / "env.txt"
    script = tmp_path / "job.sh"
    script.write_text(ENV_SCRIPT.format(directive='#BSUB -env all\n#BSUB -env "NEW=fresh"\n#BSUB -env "~DROP"\n',
                                        dump=dump))
    jid = submit([str(script)], env, tmp_path)
    assert finished(jid, env)["STAT"] == "DONE"
    seen = env_of(dump)
    assert seen["KEEP"] == "kept" and seen["NEW"] == "fresh" and "DROP" not in seen
    res = run(["bsub", "-env", "NEW=1", "-env", "all", "/bin/true"], lsf_env, cwd=tmp_path)
    assert res.returncode == 255 and "'all' is not a variable name" in res.stderr, res.stderr


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


# --- bjobs -u, -l, -o ----------------------------------------------------------------------------------

def test_bjobs_user_selection(lsf_env, tmp_path):
    import getpass
    jid = submit(["sleep 30"], lsf_env, tmp_path)
    me = getpass.getuser()
    for user in ("all", me):
        res = run(["bjobs", "-u", user, "-o", "jobid user", "-json"], lsf_env)
        assert res.returncode == 0, res.stderr
        assert [(r["JOBID"], r["USER"]) for r in json.loads(res.stdout)["RECORDS"]] == [(jid, me)]
    res = run(["bjobs", "-u", "someone_else"], lsf_env)      # IBM's default exit status for "none": 0
    assert res.returncode == 0 and res.stderr.strip() == "No unfinished job found" and not res.stdout
    assert run(["bkill", jid], lsf_env).returncode == 0
    finished(jid, lsf_env)


def test_bjobs_long_layout(lsf_env, tmp_path):
    """The phrases clients (toil) read in `bjobs -l`: Job <id>, Status <STAT>, the end lines."""
    done = submit(["-J", "ok", "-W", "5", "true"], lsf_env, tmp_path)
    failed = submit(["echo x; exit 3"], lsf_env, tmp_path)
    finished(done, lsf_env)
    finished(failed, lsf_env)
    text = run(["bjobs", "-l", done], lsf_env).stdout
    assert f"Job <{done}>, Job Name <ok>, User <" in text and "Status <DONE>" in text
    assert "Done successfully. The CPU time used is" in text and "RUNLIMIT" in text
    assert f"Started 3 Task(s) on Host(s) <batch1><2*{NODE1}>" in text
    text = run(["bjobs", "-l", failed], lsf_env).stdout
    assert "Status <EXIT>" in text and "Exited with exit code 3. The CPU time used is" in text
    assert "Completed <exit>." in text and "Command <echo x; exit 3>" in text
    pending = submit(["-w", f"done({failed})", "true"], lsf_env, tmp_path)
    text = wait_for_text(["bjobs", "-l", pending], lsf_env, "never satisfied")
    assert "Status <PEND>" in text and " PENDING REASONS:" in text and "DEPENDENCY CONDITION" in text
    assert run(["bkill", "-C", "not needed", pending], lsf_env).returncode == 0
    rec = json.loads(run(["bjobs", "-o", "jobid stat kill_reason suspend_reason exit_reason", "-json", pending],
                         lsf_env).stdout)["RECORDS"][0]
    assert rec == {"JOBID": pending, "STAT": "EXIT", "KILL_REASON": "not needed", "SUSPEND_REASON": "",
                   "EXIT_REASON": "TERM_OWNER: job killed by owner"}
    assert "Completed <exit>; TERM_OWNER: job killed by owner." in run(["bjobs", "-l", pending], lsf_env).stdout


def wait_for_text(argv: List[str], env: Dict[str, str], needle: str) -> str:
    from lsf_jobs import wait_for
    return wait_for(lambda: (lambda out: out if needle in out else None)(run(argv, env).stdout), 20, needle)


def test_bjobs_output_fields(lsf_env, tmp_path):
    """psij's field list, IBM's aliases and `all`; an unknown field is refused."""
    jid = submit(["-n", "2", "-o", "o.txt", "true"], lsf_env, tmp_path)
    finished(jid, lsf_env)
    res = run(["bjobs", "-o", "JOBID STAT EXIT_REASON KILL_REASON SUSPEND_REASON", "-json", jid], lsf_env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["RECORDS"][0] == {"JOBID": jid, "STAT": "DONE", "EXIT_REASON": "",
                                                   "KILL_REASON": "", "SUSPEND_REASON": ""}
    rec = json.loads(run(["bjobs", "-o", "id name nreq_slot nalloc_slot first_host output_file cmd", "-json", jid],
                         lsf_env).stdout)["RECORDS"][0]
    assert rec == {"ID": jid, "NAME": "true", "NREQ_SLOT": "2", "NALLOC_SLOT": "2", "FIRST_HOST": NODE1,
                   "OUTPUT_FILE": "o.txt", "CMD": "true"}
    assert len(json.loads(run(["bjobs", "-o", "all", "-json", jid], lsf_env).stdout)["RECORDS"][0]) > 50
    text = run(["bjobs", "-noheader", "-o", "jobid stat delimiter=','", jid], lsf_env).stdout
    assert text == f"{jid},DONE\n"
    res = run(["bjobs", "-o", "jobid bogus_field", jid], lsf_env)
    assert res.returncode == 255 and "'bogus_field': Illegal field name" in res.stderr and not res.stdout


# --- EXIT_REASON -------------------------------------------------------------------------------------

def test_exit_reason_only_where_lsf_ended_the_job(lsf_env, tmp_path):
    """A plain non-zero exit has no EXIT_REASON (IBM sets none); bkill's TERM_OWNER and -M's TERM_MEMLIMIT stay."""
    plain = submit(["exit 3"], lsf_env, tmp_path)
    killed = submit(["sleep 30"], lsf_env, tmp_path)
    hog = submit(["-M", "20MB", sys.executable + " -c \"b = bytearray(200 * 2**20); import time; time.sleep(30)\""],
                 lsf_env, tmp_path)
    wait_state(killed, lsf_env, ("RUN",))
    assert run(["bkill", killed], lsf_env).returncode == 0
    assert finished(plain, lsf_env) == {"JOBID": plain, "STAT": "EXIT", "EXIT_CODE": "3", "EXIT_REASON": "",
                                        "PEND_REASON": ""}
    assert finished(killed, lsf_env)["EXIT_REASON"] == "TERM_OWNER: job killed by owner"
    assert finished(hog, lsf_env)["EXIT_REASON"].startswith("TERM_MEMLIMIT")
    text = run(["bjobs", "-l", plain], lsf_env).stdout
    assert "Exited with exit code 3." in text and "Completed <exit>." in text and "TERM_" not in text


def test_resource_usage_is_reported(lsf_env, tmp_path):
    """bjobs -l's MEMORY USAGE and CPU time, and the -o fields max_mem / cpu_used, for a job that used some."""
    prog = ("b = bytearray(60 * 2**20)\nimport time\nt = time.time()\nwhile time.time() - t < 3: pass\n")
    (tmp_path / "use.py").write_text(prog)
    jid = submit([sys.executable + " use.py"], lsf_env, tmp_path)
    finished(jid, lsf_env)
    rec = json.loads(run(["bjobs", "-o", "max_mem avg_mem cpu_used", "-json", jid], lsf_env).stdout)["RECORDS"][0]
    assert int(rec["MAX_MEM"].split()[0]) >= 60 and rec["MAX_MEM"].endswith(" Mbytes"), rec
    assert float(rec["CPU_USED"].split()[0]) > 0.1, rec
    text = run(["bjobs", "-l", jid], lsf_env).stdout
    assert " MEMORY USAGE:" in text and " MAX MEM: " in text


# --- -R select[] -------------------------------------------------------------------------------------

def test_select_checked_against_the_virtual_nodes(lsf_env, tmp_path):
    """toil's `-R "select[mem>X] rusage[mem=X]"`: runs where a node has the memory; pends with LSF's reason,
    for good, where none has (IBM keeps such a job pending rather than refusing it)."""
    env = dict(lsf_env, SUMMIT_JOBS_LSF_MEM="4000")
    fits = submit(["-R", "select[mem>3000] rusage[mem=3000]", "true"], env, tmp_path)
    assert finished(fits, env)["STAT"] == "DONE"
    too_big = submit(["-R", "select[mem>8000] rusage[mem=8000]", "true"], env, tmp_path)
    too_wide = submit(["-n", "2", "-R", "select[ncpus>=4 && mem>10] span[ptile=2]", "true"], env, tmp_path)
    for jid in (too_big, too_wide):
        rec = wait_for_text(["bjobs", "-o", "stat pend_reason", "-json", jid], env, "not satisfied")
        assert "Job's resource requirements not satisfied: 4 hosts" in rec and '"PEND"' in rec
    big_rusage = submit(["-R", "rusage[mem=9000]", "true"], env, tmp_path)
    rec = wait_for_text(["bjobs", "-o", "pend_reason", "-json", big_rusage], env, "not satisfied")
    assert "Job requirements for reserving resource (mem) not satisfied" in rec
    for jid in (too_big, too_wide, big_rusage):
        assert run(["bkill", jid], env).returncode == 0
        assert finished(jid, env)["STAT"] == "EXIT"
    res = run(["bsub", "-R", "select[type==X86_64]", "true"], env, cwd=tmp_path)
    assert res.returncode == 255 and "Job not submitted." in res.stderr and "select[type==X86_64]" in res.stderr


# --- job arrays --------------------------------------------------------------------------------------

def test_job_array(lsf_env, tmp_path):
    """ipyparallel's -J "ipengine[1-2]": one element per index with LSB_JOBINDEX, %I in file names, the slot
    limit %M, bjobs per element and for the whole array, bkill of one element."""
    jid = submit(["-J", "eng[1-4]%2", "-o", "out.%J.%I", "echo $LSB_JOBID $LSB_JOBINDEX $LSB_JOBNAME; sleep 1"],
                 lsf_env, tmp_path)
    rows = json.loads(run(["bjobs", "-o", "jobid jobindex job_name stat pend_reason", "-json", jid],
                          lsf_env).stdout)["RECORDS"]
    assert [(r["JOBID"], r["JOBINDEX"], r["JOB_NAME"]) for r in rows] == [(jid, str(i), f"eng[{i}]")
                                                                         for i in range(1, 5)]
    assert sum(r["STAT"] == "RUN" for r in rows) <= 2
    killed = run(["bkill", f"{jid}[4]"], lsf_env)
    assert killed.returncode == 0 and f"Job <{jid}[4]> is being terminated" in killed.stdout
    from lsf_jobs import wait_for
    done = wait_for(lambda: (lambda recs: recs if all(r["STAT"] in ("DONE", "EXIT") for r in recs) else None)(
        json.loads(run(["bjobs", "-a", "-o", "jobindex stat exit_reason", "-json", jid], lsf_env).stdout)["RECORDS"]),
        40, "the array to end")
    assert [r["STAT"] for r in done] == ["DONE", "DONE", "DONE", "EXIT"]
    assert done[3]["EXIT_REASON"] == "TERM_OWNER: job killed by owner"
    for i in (1, 2, 3):
        assert (tmp_path / f"out.{jid}.{i}").read_text() == f"{jid} {i} eng[{i}]\n"
    one = run(["bjobs", "-a", "-o", "jobid jobindex stat", "-json", f"{jid}[2]"], lsf_env).stdout
    assert json.loads(one)["RECORDS"] == [{"JOBID": jid, "JOBINDEX": "2", "STAT": "DONE"}]
    assert run(["bjobs", "-l", f"{jid}[2]"], lsf_env).stdout.startswith(f"\nJob <{jid}[2]>")
    assert not job_processes(jid, lsf_env["SUMMIT_JOBS_LSF_HOME"])


def test_job_array_killed_whole(lsf_env, tmp_path):
    jid = submit(["-J", "w[1-3]", "sleep 30"], lsf_env, tmp_path)
    wait_state(jid, lsf_env, ("RUN",))
    assert run(["bkill", jid], lsf_env).stdout.strip() == f"Job <{jid}> is being terminated"
    from lsf_jobs import wait_for
    wait_for(lambda: all(r["STAT"] == "EXIT" for r in json.loads(
        run(["bjobs", "-a", "-o", "stat", "-json", jid], lsf_env).stdout)["RECORDS"]), 30, "the array to end")
    assert not job_processes(jid, lsf_env["SUMMIT_JOBS_LSF_HOME"])
    res = run(["bsub", "-J", "bad[0-2]", "true"], lsf_env, cwd=tmp_path)
    assert res.returncode == 255 and "Bad job name" in res.stderr and "Job not submitted." in res.stderr
