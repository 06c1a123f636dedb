"""The embedded LSF as a test double, against IBM's documented behaviour and real captured outputs: bjobs'
exit status (lsf.conf's LSB_BJOBS_CONSISTENT_EXIT_CODE) and its state and name filters (-r -p -d -J),
bpeek, bsub -K, bacct -l's Command, dates and SUMMARY, and a generic (non-CSM) cluster from
`summit-jobs lsf env --generic`. Every command is a real process against an LSF home of the test's own;
jobs wait through `bsub -K` or the job's record, never through polling loops of commands."""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Dict, List

from lsf_jobs import cli, job_processes, limit, lsf_environment, recorded_job, run, submitted_id, wait_for, wait_state
from summit_jobs.schedulers.lsf.embedded.state import node_names

DATA = Path(__file__).resolve().parents[2] / "data" / "lsf"
NODE1, NODE2 = node_names(2)
#: ctime's form of an LSF event time (bjobs -l, bacct -l, bhist -l): the day padded with a space.
EVENT_TIME = r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ 123]\d \d\d:\d\d:\d\d"


# -- readers, applied alike to IBM's captured outputs and to the embedded LSF's ------------------------------
def unwrapped(text: str) -> List[str]:
    """The lines of a ``bacct -l`` output with IBM's wrapped lines (continued under 21 spaces) joined again."""
    out: List[str] = []
    for line in text.splitlines():
        if line.startswith(" " * 21) and out:
            out[-1] += line[21:]
        else:
            out.append(line)
    return out


def bacct_jobs(text: str) -> List[Dict[str, object]]:
    """Each job block of ``bacct -l``: its id, name, command and the time and kind of each event."""
    jobs: List[Dict[str, object]] = []
    # Fields are separated by "," and maybe a space: a wrapped line's break can take the space.
    head = re.compile(r"Job <([^>]*)>,\s*(?:Job Name <(.*?)>,\s*)?User <[^>]*>,\s*Project <[^>]*>,\s*"
                      r"Status <(\w+)>,\s*Queue <[^>]*>,\s*Command <(.*?)>(?:,\s*Share group charged <[^>]*> ?)?$")
    for line in unwrapped(text):
        m = head.match(line)
        if m:
            jobs.append({"id": m.group(1), "name": m.group(2), "status": m.group(3), "command": m.group(4),
                         "events": []})
            continue
        m = re.match(rf"({EVENT_TIME}): (Submitted|Dispatched|\[\d+\] dispatched|Completed) ?(.*)$", line)
        if m and jobs:
            jobs[-1]["events"].append((m.group(1), m.group(2).split()[-1].lower(), m.group(3)))
    return jobs


def summary(text: str) -> Dict[str, str]:
    """The SUMMARY block's ``Name: value`` pairs, dates (``Beginning time: Oct  8 17:07``) included."""
    block = text.split("SUMMARY:", 1)[1]
    pairs = re.findall(r"([A-Z][a-z][A-Za-z ]+?):\s+([A-Z][a-z]{2} [ \d]\d \d\d:\d\d|[\d.]+)", block)
    return {k.strip(): v for k, v in pairs}


def event_ts(text: str) -> float:
    """An event time of this year as seconds (LSF prints no year)."""
    parsed = time.strptime(f"{time.localtime().tm_year} {text}", "%Y %a %b %d %H:%M:%S")
    return time.mktime(parsed)


def no_processes_left(env: Dict[str, str], *jids: str) -> None:
    for jid in jids:
        wait_for(lambda: not job_processes(jid, env["SUMMIT_JOBS_LSF_HOME"]), 15, f"job {jid}'s processes to end")


# -- bjobs, bpeek, bsub -K ------------------------------------------------------------------------------------
def test_bjobs_filters_exit_status_bpeek_and_bsub_K_as_ibm(lsf_env, tmp_path):
    """IBM's default exit status (0 for an empty listing, 255 for an unknown job), the Y setting, -r -p -d -J
    with LSF's lines for an empty listing, bpeek of a running, pending and finished job, and bsub -K: the
    job's exit code, 126 for a job terminated while pending, and the messages of a captured Summit run."""
    consistent = dict(lsf_env, LSB_BJOBS_CONSISTENT_EXIT_CODE="Y")
    empty = run(["bjobs"], lsf_env)
    assert (empty.returncode, empty.stderr.strip(), empty.stdout) == (0, "No unfinished job found", "")
    assert run(["bjobs"], consistent).returncode == 255
    for argv, line, code in ((["-r"], "No running job found", 0), (["-p", "-d"], "No DONE/EXIT job found", 0),
                             (["-J", "nosuch"], "Job <nosuch> is not found", 255)):
        res = run(["bjobs", *argv], lsf_env)
        assert (res.returncode, res.stderr.strip()) == (code, line), (argv, res)
    assert run(["bpeek"], lsf_env).stderr.strip() == "No unfinished job found"

    running = submitted_id(run(["bsub", "-J", "peeked", "-o", "peek.out", "echo first; exec sleep 60"], lsf_env,
                               cwd=tmp_path).stdout)
    waiter = subprocess.Popen(["bsub", "-K", "-w", f"done({running})", "true"], env=lsf_env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    follow = None
    try:
        pending = submitted_id(waiter.stdout.readline())
        wait_state(running, lsf_env, ("RUN",))
        wait_for(lambda: "first" in (tmp_path / "peek.out").read_text(), 30, "the running job's first line")
        rows = run(["bjobs", "-r", "-noheader", "-o", "jobid stat"], lsf_env).stdout.split()
        assert rows == [running, "RUN"]
        listed = run(["bjobs", "-p"], lsf_env).stdout.splitlines()
        header, row = listed[0].split(), listed[1].split()
        assert (header[0], row[0], row[2]) == ("JOBID", pending, "PEND"), listed
        assert re.fullmatch(r" \S.*;", listed[2]), listed            # LSF's pending reason line, under its row
        assert run(["bjobs", "-p", "-noheader", "-o", "jobid"], lsf_env).stdout.split() == [pending]
        assert run(["bjobs", "-J", "peek*", "-noheader", "-o", "jobid"], lsf_env).stdout.split() == [running]

        assert run(["bpeek", running], lsf_env).stdout == "<< output from stdout >>\nfirst\n"
        assert run(["bpeek", "-J", "peeked"], lsf_env).stdout == "<< output from stdout >>\nfirst\n"
        latest = run(["bpeek"], lsf_env)                    # your most recent unfinished job: the pending one
        assert (latest.returncode, latest.stderr.strip()) == (255, f"Job <{pending}> : Not yet started.")
        both = run(["bpeek", "-q", "batch", running], lsf_env)
        assert both.returncode == 255 and "more than one of -m , -q, -J or jobId" in both.stderr

        follow = subprocess.Popen(["bpeek", "-f", running], env=lsf_env, stdout=subprocess.PIPE, text=True)
        assert follow.stdout.readline() == "<< output from stdout >>\n"
        assert follow.stdout.readline() == "first\n"          # what the job has written so far
        assert run(["bkill", pending], lsf_env).returncode == 0
        out, err = waiter.communicate(timeout=limit(30))
        assert waiter.returncode == 126, (out, err)            # IBM: 126 for a job terminated while pending
        assert err.splitlines() == ["<<Waiting for dispatch ...>>", "<<Terminated while pending>>"]
        assert run(["bkill", running], lsf_env).returncode == 0
        # It ends with the job. (Read through the file object: communicate() would skip what readline buffered.)
        assert follow.wait(timeout=limit(30)) == 0 and follow.stdout.read() == ""
    finally:
        for proc in (waiter, follow):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    wait_state(running, lsf_env)
    gone = run(["bpeek", running], lsf_env)
    assert (gone.returncode, gone.stderr.strip()) == (255, f"Job <{running}> : Already finished.")
    assert sorted(run(["bjobs", "-d", "-noheader", "-o", "jobid"], lsf_env).stdout.split()) == sorted([running,
                                                                                                   pending])

    script = "#!/bin/sh\n#BSUB -J scripted\n#BSUB -oo scripted.%J.out\n\necho hi\nexit 3\n"
    waited = run(["bsub", "-K"], dict(lsf_env, LSB_SUBK_SHOW_EXEC_HOST="y"), cwd=tmp_path, input=script)
    captured = (DATA / "bsub_K_summit.txt").read_text().splitlines()
    assert waited.returncode == 3                               # IBM: bsub -K exits with the job's exit code
    assert re.fullmatch(r"Job <\d+> is submitted to default queue <batch>\.", waited.stdout.strip())
    assert re.fullmatch(r"Job <\d+> is submitted to default queue <batch>\.", captured[0])
    assert waited.stderr.splitlines() == captured[1:]            # the same lines as Summit's, batch1 first
    scripted = submitted_id(waited.stdout)
    assert (tmp_path / f"scripted.{scripted}.out").read_text() == "hi\n"
    array = submitted_id(run(["bsub", "-J", "arr[1]", "-o", "/dev/null", "true"], lsf_env, cwd=tmp_path).stdout)
    refused = run(["bsub", "-K", "-J", "arr[1-2]", "true"], lsf_env, cwd=tmp_path)
    assert refused.returncode == 255 and "Job not submitted." in refused.stderr
    wait_state(array, lsf_env)

    done = run(["bjobs"], lsf_env)
    assert (done.returncode, done.stderr.strip()) == (0, "No unfinished job found")
    assert run(["bjobs"], consistent).returncode == 255
    unknown = run(["bjobs", running, "999999999"], lsf_env)
    assert unknown.returncode == 255 and "Job <999999999> is not found" in unknown.stderr
    no_processes_left(lsf_env, running, pending, scripted, array)
    check_bacct(lsf_env, tmp_path, running=running, scripted=scripted, array=array, script=script)


def check_bacct(env: Dict[str, str], tmp_path: Path, *, running: str, scripted: str, array: str,
                script: str) -> None:
    """bacct -l of the jobs above, read by the reader of two captured IBM outputs: Job Name only for a named
    job, an array element as ID[i], Command as typed or a stdin script's lines joined with ';', the events
    at the jobs' own times in ctime's form, and the SUMMARY's 10.1 lines with its dates."""
    theirs = {}
    for name in ("bacct_l_ebi_exit.txt", "bacct_l_ebi_array_element.txt", "bacct_l_gc3pie_killed.txt"):
        [job] = bacct_jobs((DATA / name).read_text())
        theirs[name] = job
    assert theirs["bacct_l_ebi_exit.txt"]["name"] is None and theirs["bacct_l_ebi_exit.txt"]["command"] == \
        "cp ./A.txt ./B.txt"
    element = theirs["bacct_l_ebi_array_element.txt"]
    assert re.fullmatch(r"\d+\[1\]", element["id"]) and element["name"].endswith("[1]")
    assert element["command"].startswith("#!/bin/bash;  i=$LSB_JOBINDEX;")
    assert [e[1] for e in theirs["bacct_l_gc3pie_killed.txt"]["events"]] == ["submitted", "dispatched",
                                                                            "completed"]

    text = run(["bacct", "-l", running, scripted, array], env).stdout
    ours = {j["id"]: j for j in bacct_jobs(text)}
    assert set(ours) == {running, scripted, f"{array}[1]"}, text
    assert (ours[running]["name"], ours[running]["command"]) == ("peeked", "echo first; exec sleep 60")
    lines = [ln for ln in script.splitlines() if ln.strip()]
    assert (ours[scripted]["name"], ours[scripted]["command"]) == ("scripted", ";".join(lines))
    assert ours[f"{array}[1]"]["name"] == "arr[1]"
    assert "Exited with exit code" not in text                  # IBM's bacct -l prints no exit code line
    for jid, job in ours.items():
        rec = recorded_job(jid.split("[")[0], env)
        kinds = [e[1] for e in job["events"]]
        assert kinds == ["submitted", "dispatched", "completed"], (jid, job)
        wanted = [rec["submit_time"], rec["start_time"], rec["finish_time"]]
        assert [abs(event_ts(e[0]) - int(t)) <= 1 for e, t in zip(job["events"], wanted)] == [True] * 3, job
        assert re.match(r"\d+ Task\(s\) on Host\(s\) <", job["events"][1][2]), job["events"][1]
    assert "Output File (overwrite) <scripted.%J.out>" in "".join(unwrapped(text))
    mine, ibm = summary(text), summary((DATA / "bacct_l_ebi_array_element.txt").read_text())
    assert set(ibm) <= set(mine), set(ibm) - set(mine)
    assert {"Total throughput", "Beginning time", "Ending time"} <= set(mine)
    began = time.strftime("%b %e %H:%M", time.localtime(int(recorded_job(running, env)["start_time"])))
    assert abs(time.mktime(time.strptime(f"{time.localtime().tm_year} {mine['Beginning time']}", "%Y %b %d %H:%M"))
               - time.mktime(time.strptime(f"{time.localtime().tm_year} {began}", "%Y %b %d %H:%M"))) <= 60
    # A day below 10, whatever day the test runs on: padded with a space, as ctime and LSF print it.
    from summit_jobs.schedulers.lsf.embedded.commands import bacct, bjobs
    seventh = time.mktime((2026, 12, 7, 9, 5, 1, 0, 0, -1))
    assert bacct._when(seventh) == bjobs._long_time(seventh) == "Mon Dec  7 09:05:01"
    assert bacct._short(seventh) == "Dec  7 09:05"


# -- a generic LSF cluster --------------------------------------------------------------------------------------
def test_lsf_env_generic_cluster_runs_jobs_on_their_first_host_without_a_launch_node(tmp_path):
    """`summit-jobs lsf env --generic`: a job without -n gets one slot, an -n job its span[ptile] hosts, both
    with the variables of an LSF cluster without CSM (no batch1, no rank file, no CSM allocation), the script
    on the first execution host, and blaunch starting one task per slot there; -nnodes is refused."""
    base = lsf_environment(tmp_path)
    res = cli(["lsf", "env", "--generic", "--home", str(tmp_path / "generic"), "--json"], base)
    assert res.returncode == 0, res.stderr
    env = dict(base, **json.loads(res.stdout)["environment"])
    assert env["SUMMIT_JOBS_LSF_CLUSTER"] == "generic" and env["SUMMIT_JOBS_LSF_HOME"] == str(tmp_path / "generic")

    refused = run(["bsub", "-nnodes", "1", "true"], env, cwd=tmp_path)
    assert refused.returncode == 255 and "generic LSF cluster" in refused.stderr and "Job not submitted." in \
        refused.stderr
    show = ('echo "HOSTS=$LSB_HOSTS|MCPU=$LSB_MCPU_HOSTS|NUMPROC=$LSB_DJOB_NUMPROC|'
            'RANKFILE=${LSB_DJOB_RANKFILE-none}|CSM=${CSM_ALLOCATION_ID-none}|ON=$SUMMIT_JOBS_VNODE"\n'
            'sed "s/^/SLOT /" "$LSB_DJOB_HOSTFILE"\n'
            "blaunch 'echo TASK $LSF_PM_TASKID $SUMMIT_JOBS_VNODE'\n")
    expected = {(): (f"{NODE1}", f"{NODE1} 1", [NODE1]),
                ("-n", "3", "-R", "span[ptile=2]"): (f"{NODE1} {NODE1} {NODE2}", f"{NODE1} 2 {NODE2} 1",
                                                     [NODE1, NODE1, NODE2])}
    for options, (hosts, mcpu, slots) in expected.items():
        out = tmp_path / f"job{len(options)}.out"
        res = run(["bsub", "-K", "-o", str(out), *options], env, cwd=tmp_path, input="#!/bin/sh\n" + show,
                  timeout=60)
        assert res.returncode == 0, res.stderr + (out.read_text() if out.exists() else "")
        jid = submitted_id(res.stdout)
        text = out.read_text()
        said = dict(w.split("=", 1) for w in next(ln for ln in text.splitlines() if ln.startswith("HOSTS=")).split("|"))
        assert said == {"HOSTS": hosts, "MCPU": mcpu, "NUMPROC": str(len(slots)), "RANKFILE": "none",
                        "CSM": "none", "ON": NODE1}, text
        assert [ln.split()[1] for ln in text.splitlines() if ln.startswith("SLOT ")] == slots
        tasks = sorted(ln.split()[1:] for ln in text.splitlines() if ln.startswith("TASK "))
        assert tasks == [[str(i + 1), host] for i, host in enumerate(slots)], text
        no_processes_left(env, jid)
