"""bparams, bacct, bhosts and lsid of the embedded LSF, run as real processes, read the way LSF clients
(toil's LSF batch system, people's scripts) read IBM's outputs; where a captured IBM output exists, both are
read by the same parser."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional

from lsf_jobs import job_processes, run, submitted_id, wait_state

from summit_jobs.schedulers.lsf import doctor

DATA = Path(__file__).resolve().parents[2] / "data" / "lsf"


# -- readers, written as the clients read these outputs ---------------------------------------------------------
def bparams_values(text: str) -> Dict[str, str]:
    """``NAME = value`` lines, split on '=' as toil's lsfHelper tokenizes ``bparams -a``."""
    out = {}
    for line in text.splitlines():
        parts = line.split("=")
        if len(parts) == 2 and not line.startswith("#"):
            out[parts[0].strip()] = parts[1].strip()
    return out


def bacct_status(text: str) -> Optional[int]:
    """toil's reading of ``bacct -l``: 0 for ``Completed <done>``, 1 for ``Completed <exit>``, None else."""
    for line in text.split("\n"):
        if "Completed <done>" in line or "<DONE>" in line:
            return 0
        if "Completed <exit>" in line or "<EXIT>" in line:
            return 1
    return None


def bacct_accounting(text: str) -> List[Dict[str, str]]:
    """Each job's accounting line of ``bacct -l``, by the column names of the line above it."""
    lines, rows = text.splitlines(), []
    for i, line in enumerate(lines):
        if line.split()[:2] == ["CPU_T", "WAIT"]:
            rows.append(dict(zip(line.split(), lines[i + 1].split())))
    return rows


def bacct_summary(text: str) -> Dict[str, str]:
    """The SUMMARY block's ``Name: value`` pairs (two a line)."""
    block = text.split("SUMMARY:", 1)[1]
    return {k.strip(): v for k, v in re.findall(r"([A-Z][a-z][A-Za-z ]+?):\s+([\d.]+)", block)}


def table(text: str) -> List[Dict[str, str]]:
    """A header-and-rows table (bhosts): each row by the header's column names."""
    lines = [l for l in text.splitlines() if l.strip()]
    head = lines[0].split()
    return [dict(zip(head, l.split())) for l in lines[1:]]


# -- bparams ---------------------------------------------------------------------------------------------------------
def test_bparams_default_all_and_long(lsf_env):
    plain = run(["bparams"], lsf_env)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines()[0] == "Default Queues:  batch"
    assert "Job Accepting Interval:" in plain.stdout and "MBD_SLEEP_TIME used for calculations:" in plain.stdout
    every = bparams_values(run(["bparams", "-a"], lsf_env).stdout)
    assert every["DEFAULT_QUEUE"] == "batch" and every["MAX_JOB_ID"] == "2147483646"
    assert every["RESOURCE_RESERVE_PER_TASK"] == "N"          # toil then asks rusage[mem=] for the whole job
    assert every["JOB_TERMINATE_INTERVAL"] == "1"               # the fixture's SUMMIT_JOBS_LSF_KILL_GRACE
    assert "LSF_UNIT_FOR_LIMITS" not in every                  # lsf.conf's, not lsb.params': toil keeps KB
    long = run(["bparams", "-l"], lsf_env).stdout
    assert bparams_values(long) == every and "System default queues" in long
    bad = run(["bparams", "-x"], lsf_env)
    assert bad.returncode == 255 and "Usage: bparams" in bad.stderr and not bad.stdout


# -- lsid ------------------------------------------------------------------------------------------------------------
def test_lsid_first_line_in_ibm_s_form(lsf_env):
    out = run(["lsid"], lsf_env).stdout
    first = out.splitlines()[0]
    assert re.fullmatch(r"IBM Spectrum LSF Standard 10\.1\.0\.2, [A-Z][a-z]{2} \d\d \d{4}", first), first
    assert re.search("IBM Spectrum LSF Standard (.*),", out).group(1) == "10.1.0.2"   # toil's reading
    assert "Not IBM software" in out.splitlines()[1]
    ours, ibm = doctor.parse_lsid(out), doctor.parse_lsid((DATA / "lsid_ibmcloud_standard_10_1_0_13.txt").read_text())
    assert ours.product == ibm.product == "IBM Spectrum LSF Standard"
    assert ours.version == (10, 1, 0, 2) and ours.cluster == "embedded"


# -- bhosts ----------------------------------------------------------------------------------------------------------
def test_bhosts_shows_the_virtual_nodes_and_a_running_job_s_slots(lsf_env, tmp_path):
    idle = run(["bhosts"], lsf_env)
    assert idle.returncode == 0, idle.stderr
    assert idle.stdout.splitlines()[0].split() == ["HOST_NAME", "STATUS", "JL/U", "MAX", "NJOBS", "RUN", "SSUSP",
                                                   "USUSP", "RSV"]
    rows = table(idle.stdout)
    assert len(rows) == 4 and all(r["STATUS"] == "ok" and r["MAX"] == "2" and r["NJOBS"] == "0" for r in rows)
    jid = submitted_id(run(["bsub", "-n", "3", "-o", "/dev/null", "sleep", "20"], lsf_env, cwd=tmp_path).stdout)
    try:
        wait_state(jid, lsf_env, ("RUN",))
        busy = {r["HOST_NAME"]: r for r in table(run(["bhosts", "-w"], lsf_env).stdout)}
        used = {h: (r["STATUS"], r["NJOBS"], r["RUN"]) for h, r in busy.items() if r["NJOBS"] != "0"}
        assert sorted(used.values()) == [("closed", "1", "1"), ("closed", "2", "2")], busy
        one = run(["bhosts", next(iter(used))], lsf_env)
        assert len(table(one.stdout)) == 1
        unknown = run(["bhosts", "nosuchhost"], lsf_env)
        assert unknown.returncode == 255 and "nosuchhost" in unknown.stderr
    finally:
        run(["bkill", jid], lsf_env)
        wait_state(jid, lsf_env)
    assert not job_processes(jid, lsf_env["SUMMIT_JOBS_LSF_HOME"])


# -- bacct -----------------------------------------------------------------------------------------------------------
def test_bacct_of_finished_jobs_read_as_ibm_s(lsf_env, tmp_path):
    """A job that exits 0, one that exits 3 and one killed by its owner, read by the reader of a captured IBM
    ``bacct -l``: status, termination reason, run time, CPU time and memory."""
    hog = "import time; x = bytearray(120 * 1024 * 1024); time.sleep(0.5)"
    ok = submitted_id(run(["bsub", "-o", "/dev/null", lsf_env["SUMMIT_JOBS_PYTHON"], "-c", hog], lsf_env,
                          cwd=tmp_path).stdout)
    bad = submitted_id(run(["bsub", "-o", "/dev/null", "sh", "-c", "exit 3"], lsf_env, cwd=tmp_path).stdout)
    killed = submitted_id(run(["bsub", "-o", "/dev/null", "sleep", "30"], lsf_env, cwd=tmp_path).stdout)
    wait_state(killed, lsf_env, ("RUN",))
    run(["bkill", killed], lsf_env)
    for jid in (ok, bad, killed):
        wait_state(jid, lsf_env)
        assert not job_processes(jid, lsf_env["SUMMIT_JOBS_LSF_HOME"])

    ibm = (DATA / "bacct_l_gc3pie_killed.txt").read_text()
    assert bacct_status(ibm) == 1 and "TERM_OWNER" in ibm
    [ibm_row] = bacct_accounting(ibm)
    assert ibm_row["STATUS"] == "exit" and ibm_row["MEM"] == "1M"

    outs = {jid: run(["bacct", "-l", jid], lsf_env) for jid in (ok, bad, killed)}
    assert all(o.returncode == 0 for o in outs.values()), outs
    assert [bacct_status(outs[j].stdout) for j in (ok, bad, killed)] == [0, 1, 1]
    assert "Completed <exit>; TERM_OWNER: job killed by owner." in outs[killed].stdout
    assert "Completed <exit>." in outs[bad].stdout and "TERM_" not in outs[bad].stdout   # IBM's: no exit code
    rows = {j: bacct_accounting(outs[j].stdout)[0] for j in outs}
    assert set(rows[ok]) == set(ibm_row) and rows[ok]["STATUS"] == "done" and rows[bad]["STATUS"] == "exit"
    assert int(rows[ok]["MEM"].rstrip("M")) >= 120, rows[ok]          # the 120 MB the job held
    assert float(rows[ok]["CPU_T"]) > 0
    assert int(rows[killed]["TURNAROUND"]) >= int(rows[killed]["WAIT"])
    ours, theirs = bacct_summary(outs[ok].stdout), bacct_summary(ibm)
    assert set(theirs) <= set(ours) and ours["Total number of done jobs"] == "1"

    every = run(["bacct"], lsf_env).stdout                              # the user's finished jobs: a summary
    assert bacct_summary(every)["Total number of exited jobs"] == "2" and "Job <" not in every
    both = run(["bacct", "-l", ok, bad], lsf_env).stdout
    assert len(bacct_accounting(both)) == 2
    running = submitted_id(run(["bsub", "-o", "/dev/null", "sleep", "20"], lsf_env, cwd=tmp_path).stdout)
    try:
        none = run(["bacct", "-l", running], lsf_env)
        assert none.returncode == 0 and "No matching job found" in none.stdout and bacct_status(none.stdout) is None
    finally:
        run(["bkill", running], lsf_env)
        wait_state(running, lsf_env)
    refused = run(["bacct", "-x"], lsf_env)
    assert refused.returncode == 255 and "Usage: bacct" in refused.stderr
