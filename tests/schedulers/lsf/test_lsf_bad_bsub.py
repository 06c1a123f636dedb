"""The embedded LSF's bsub, bjobs and bacct against input that once broke them: every value is checked before
any lock is taken or any memory is spent on it, a script in any encoding is a script, and a record an older
bsub wrote (a -wa signal that is no signal) never turns every bjobs of the home into a traceback."""
from __future__ import annotations

import fcntl
import json
import os
import resource
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict

import pytest

from badinput import assert_refused
from lsf_jobs import job_processes, limit, lsf_environment, run, submitted_id, wait_for, wait_state


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Dict[str, str]:
    """One embedded LSF for the refusals here: its ids come from a counter of its own (SUMMIT_JOBS_LSF_ID_FILE),
    so a test can hold that counter's lock as another bsub would."""
    tmp = tmp_path_factory.mktemp("bad-bsub")
    return dict(lsf_environment(tmp), SUMMIT_JOBS_LSF_ID_FILE=str(tmp / "job-ids"))


def _small_address_space() -> None:
    """In the child: at most 1 GiB of address space, so a bsub that builds a list of 300 million hosts fails."""
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.parametrize("args, needles", [
    (["-n", "600000000"], ["-n 600000000", "needs 300000000 hosts", "could never start"]),
    (["-n", "99999999999999999999"], ["-n 99999999999999999999", "could never start"]),
    (["-wa", "65", "-wt", "1", "-W", "5"], ["-wa '65' is not a signal"]),
    (["-J", "j" * 5000], ["Bad job name", "5000 characters", "4094", "jjj...'"]),
    (["-J", "a[[1]]"], ["Bad job name"]),
    (["-w", "done(1"], ["Dependency condition syntax error"]),
], ids=["n-600M", "n-20-digits", "wa-65", "J-5000", "J-brackets", "w-syntax"])
def test_a_refusal_waits_for_no_lock_and_allocates_nothing(home, tmp_path, args, needles):
    """Another bsub holds the machine-wide id counter (as while it records a job array): a bsub whose options
    are refused says so at once, in 1 GiB of address space, instead of queueing behind it for the counter
    and then building its 300-million-host list under it. The lock stays held until the refusal is in."""
    lock_path = Path(home["SUMMIT_JOBS_LSF_ID_FILE"] + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        started = time.monotonic()
        res = subprocess.run(["bsub", *args, "/bin/true"], env=home, cwd=tmp_path, capture_output=True, text=True,
                             timeout=limit(120), preexec_fn=_small_address_space)
        took = time.monotonic() - started
    finally:
        os.close(fd)
    assert_refused(res, needles + ["Job not submitted."])
    assert res.returncode == 255 and len(res.stderr) < 600, res.stderr     # the value shown cut, not 5,000 chars
    print(f"refused in {took:.2f} s")


@pytest.mark.parametrize("argv, needles", [
    (["bjobs", "-o", "jobid:abc"], ["'jobid:abc'", "Illegal field format in -o", "field[:[-][width]][:unit]"]),
    (["bjobs", "-o", "jobid:10:parsecs"], ["'jobid:10:parsecs'", "Illegal field format"]),
    (["bjobs", "-o", "jobid:\u0661\u0660"], ["Illegal field format"]),
    (["bjobs", "-u", ""], ["-u ''", "give a user name, or all"]),
    (["bjobs", "9" * 5000], ["illegal option or job id"]),
    (["bacct", "-u", ""], ["bacct: -u ''", "give a user name, or all", "Usage: bacct"]),
    (["bacct", "-u"], ["bacct: -u:", "give a user name"]),
    (["bacct", "\u0663"], ["job id '\u0663'", "Usage: bacct"]),
    (["bkill", "-s", "99", "1"], ["bkill: -s '99' is not a signal", "1 to 31"]),
    (["bkill", "-s", "0", "1"], ["-s '0' is not a signal"]),
], ids=["o-width", "o-unit", "o-arabic", "bjobs-u-empty", "bjobs-5000-digits", "bacct-u-empty", "bacct-u-alone",
        "bacct-arabic-id", "bkill-s-99", "bkill-s-0"])
def test_listing_commands_refuse_as_ibm_does(home, tmp_path, argv, needles):
    """One line on stderr naming the value, exit status 255 (IBM's commands' status for a bad option)."""
    res = run(argv, home, cwd=tmp_path)
    assert_refused(res, needles)
    assert res.returncode == 255 and not res.stdout, (res.stdout, res.stderr)


#: A script whose comment and #BSUB -J carry Latin-1 bytes (é = 0xe9), as an editor of another locale saves it.
LATIN1 = b"#!/bin/bash\n#BSUB -J caf\xe9\n#BSUB -o latin.%J.out\n# r\xe9sum\xe9 of the run\necho \"caf\xe9 $LSB_JOBNAME\"\n"


def test_a_script_that_is_not_utf8_is_read_as_bytes_from_a_file_and_from_stdin(home, tmp_path):
    """Its #BSUB lines are honoured (-J, -o) from a file and from stdin, the job runs to DONE, its output is the
    script's bytes, and bjobs (table, -l, -json) and bacct list it without a traceback. Before, a file's
    #BSUB lines were ignored (it was taken for a program and failed with 127) and a script on stdin left
    a job whose supervisor died on the first line (RUN until bjobs declared it lost)."""
    script = tmp_path / "latin1.lsf"
    script.write_bytes(LATIN1)
    from_file = submitted_id(run(["bsub", str(script)], home, cwd=tmp_path).stdout)
    res = subprocess.run(["bsub"], env=home, cwd=tmp_path, input=LATIN1, capture_output=True, timeout=limit(60))
    from_stdin = submitted_id(res.stdout.decode())
    for jid in (from_file, from_stdin):
        assert wait_state(jid, home)["STAT"] == "DONE"
        out = tmp_path / f"latin.{jid}.out"
        assert out.read_bytes() == b"caf\xe9 caf\xe9\n"
        wait_for(lambda: not job_processes(jid, home["SUMMIT_JOBS_LSF_HOME"]), 15, f"job {jid}'s processes to end")
    table = subprocess.run(["bjobs", "-a", from_file, from_stdin], env=home, capture_output=True, timeout=limit(60))
    assert table.returncode == 0 and table.stdout.count(b"caf\xe9") == 2, table
    for argv in (["bjobs", "-l", from_stdin], ["bacct", "-l", from_file]):
        shown = subprocess.run(argv, env=home, capture_output=True, timeout=limit(60))
        assert shown.returncode == 0 and b"caf\xe9" in shown.stdout and b"Traceback" not in shown.stderr, shown
    records = json.loads(run(["bjobs", "-a", "-json", "-o", "jobid job_name", from_file], home).stdout)["RECORDS"]
    assert records[0]["JOB_NAME"].encode("utf-8", "surrogateescape") == b"caf\xe9"
    # IBM's field[:[-][width]][:unit] forms still read (widths and units are not applied here).
    widths = run(["bjobs", "-a", "-noheader", "-o", "jobid:10 stat:-5 queue: max_mem:12:MB mem:GB", from_file], home)
    assert widths.returncode == 0 and widths.stdout.split()[:3] == [from_file, "DONE", "batch"], widths


def test_bjobs_lists_a_record_with_a_signal_that_is_none_left_by_a_dead_supervisor(home, tmp_path):
    """A record an older bsub wrote with ``-wa 99``, whose supervisor and watchdog are dead (the warning
    killed the supervisor): bjobs ends the job's processes, shows it EXIT as lost, with its warning action
    as the number, and psij's ``list()`` (``bjobs -a -noheader -o jobid -u USER``) and every other listing
    of the home work; before, each was a traceback for as long as the record was kept."""
    from summit_jobs.schedulers.lsf.embedded import state
    script = tmp_path / "long.lsf"
    script.write_text("#!/bin/bash\n#BSUB -W 30 -wa USR2 -wt 1\n#BSUB -o long.%J.out\nsleep 300\n")
    jid = submitted_id(run(["bsub", str(script)], home, cwd=tmp_path).stdout)
    lsf_home = Path(home["SUMMIT_JOBS_LSF_HOME"])
    wait_for(lambda: (state.load_job(lsf_home, int(jid)) or {}).get("watchdog_pid"), 30, "the job to start")
    with state.locked(lsf_home):
        record = state.load_job(lsf_home, int(jid))
        # As an older bsub left it: the signal it took, submitted a while ago (past bjobs' 5 s of grace for a
        # supervisor that is still starting).
        record.update(warn_signal=99, submit_time=record["submit_time"] - 60)
        state.save_job(lsf_home, record)
    for pid in (record["watchdog_pid"], record["supervisor_pid"]):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not any(state.pid_alive(record[k]) for k in ("watchdog_pid", "supervisor_pid")), 10,
             "the supervisor and its watchdog to die")
    user = record["user"]
    listing = run(["bjobs", "-a", "-noheader", "-o", "jobid", "-u", user], home)
    assert listing.returncode == 0 and jid in listing.stdout.split(), listing
    assert not job_processes(jid, str(lsf_home)), "bjobs ended the lost job's processes"
    row = json.loads(run(["bjobs", "-a", "-json", "-o", "jobid stat exit_reason warning_action", jid],
                         home).stdout)["RECORDS"][0]
    assert row["STAT"] == "EXIT" and state.LOST in row["EXIT_REASON"] and row["WARNING_ACTION"] == "99", row
    for argv in (["bjobs", "-a", jid], ["bjobs", "-l", jid], ["bacct", "-l", jid]):
        res = run(argv, home)
        assert res.returncode == 0 and "Traceback" not in res.stderr and jid in res.stdout, (argv, res.stderr)
