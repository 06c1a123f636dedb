"""One detached supervisor process per embedded-LSF job: waits, starts, watches, ends it.

bsub starts it in a session of its own (so an SSH disconnect or the caller's
Ctrl-C does not touch it). It keeps the job PEND until its dependency holds and
enough virtual nodes are free (a dependency that can never hold leaves the job
PEND with LSF's reason, or ends it as EXIT with ``bsub -ti``), then runs the
script in a new process group with LSF's variables and, as IBM LSF does:

* delivers the ``-wa`` signal ``-wt`` minutes before the ``-W`` limit to every
  process of the job (``state.job_processes``: the script, the launchers, the
  ranks on every virtual node, orphans and processes in sessions of their own
  included), as LSF's process tracking does;
* at the run limit sends SIGUSR2 to the whole job; a job that then ends on its
  own ends as it exits (exit 0: DONE); one still running after the run-limit
  grace (10 LSF minutes, SUMMIT_JOBS_LSF_RUNLIMIT_GRACE) is terminated;
* enforces ``-M``: every MEMORY_CHECK seconds it adds up the resident memory
  (RSS) of the job's processes on each virtual host (a process's host is its
  SUMMIT_JOBS_VNODE, else the first host); a job above its limit on any host
  is terminated and ends EXIT with TERM_MEMLIMIT, as LSF does with a job-level
  limit (LSB_JOB_MEMLIMIT=Y, or cgroup enforcement, the usual setting of GPU
  clusters);
* terminates a job (bkill, or the run limit's grace over) with IBM's TERMINATE
  action: SIGINT, SIGTERM one JOB_TERMINATE_INTERVAL later, SIGKILL one more
  interval later, each to every process of the job;
* when the script ends, kills whatever of the job is still alive, so that no
  process of a job outlives it (a rank orphaned by its launcher included).

The exit code recorded is the job's own (128 + the signal that ended it).
The job's process group is recorded in its state and a small watchdog
(watchdog.py) ends the job's processes should this supervisor die, so the job
never outlives it. Polling is fine-grained (0.05-0.1 s) so scaled minutes
(SUMMIT_JOBS_LSF_MINUTE) of a few seconds stay accurate.
"""
from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from summit_jobs.schedulers.lsf.embedded.commands import bacct
from summit_jobs.schedulers.lsf.embedded import deps, jobenv, state, vnode_ns, watchdog

NEVER = "Dependency condition invalid or never satisfied"
OWNER_KILL = "TERM_OWNER: job killed by owner"
RUNLIMIT = "TERM_RUNLIMIT: job killed after reaching LSF run time limit"
MEMLIMIT = "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit"
#: Seconds between two looks at the job's memory (LSF's PIM looks every few seconds too).
MEMORY_CHECK = 0.5
ORPHAN = "TERM_ORPHAN_SYSTEM: The orphan job was automatically terminated by LSF"
#: IBM's TERMINATE action: these signals, one JOB_TERMINATE_INTERVAL apart.
TERMINATE = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


def _dependency_reason(job: Dict, jobs: List[Dict]) -> Tuple[Optional[str], bool]:
    """Why the job's dependency keeps it waiting (None: it holds), and whether it can never hold."""
    if not job.get("dependency"):
        return None, False
    verdict = deps.evaluate(job["dependency"], deps.jobs_by_id(jobs))
    if verdict is None:
        return f"{NEVER}: {job['dependency']}", True
    if verdict is False:
        return f"Job dependency condition not satisfied: {job['dependency']}", False
    return None, False


def _try_start(lsf_home: Path, job: Dict, jobs: List[Dict]) -> Tuple[Optional[str], bool]:
    """One scheduling pass for a pending job (caller holds the lock): (pend reason or None if it started, ended)."""
    reason, never = _dependency_reason(job, jobs)
    if never and job.get("orphan_terminate"):
        job.update(state="EXIT", exit_code=None, exit_reason=ORPHAN, finish_time=time.time(), pend_reason=None)
        state.save_job(lsf_home, job)
        return None, True
    if reason is not None:
        return reason, False
    if job.get("unsatisfiable"):
        return job["unsatisfiable"], False          # no virtual node meets -R: pending for good, as in LSF
    limit = job.get("array_limit")
    if limit and sum(1 for j in jobs if j["state"] == "RUN" and j.get("array_id") == job["array_id"]) >= limit:
        return "The job array has reached its job slot limit", False       # IBM's words (bjobs -p)
    busy = {vnode_ns.address_of(h) for j in jobs if j["state"] == "RUN" for h in j["hosts"]}
    free = [n for n in state.node_names(job["nodes_total"]) if vnode_ns.address_of(n) not in busy]
    if len(free) >= job["nnodes"]:
        job.update(state="RUN", hosts=free[:job["nnodes"]], start_time=time.time(), pend_reason=None)
        if job.get("form", "csm") == "csm":
            job["allocation_id"] = state.next_allocation_id(lsf_home)
        state.save_job(lsf_home, job)
        return None, False
    return f"Not enough virtual nodes free: {job['nnodes']} needed, {len(free)} free", False


def _pending(lsf_home: Path, job_id: int) -> Optional[Dict]:
    """Wait in PEND; return the job (now RUN, hosts allocated) or None if it was killed or ended meanwhile."""
    last_reason = None
    while True:
        with state.locked(lsf_home):
            jobs = state.all_jobs(lsf_home)
            state.reap_lost(lsf_home, jobs)        # a job whose supervisor died must not hold nodes
            job = next((j for j in jobs if j["id"] == job_id), None)
            if job is None or job["state"] != "PEND":
                return None
            reason, ended = _try_start(lsf_home, job, jobs)
            if ended:
                return None
            if reason is None:
                return job
            if reason != last_reason:
                job["pend_reason"] = reason
                state.save_job(lsf_home, job)
                last_reason = reason
        time.sleep(0.1)


def _environment(lsf_home: Path, job: Dict) -> Dict[str, str]:
    """The submission environment plus LSF's variables (jobenv.py); the host files written."""
    env = json.loads((state.job_dir(lsf_home, job["id"]) / "env.json").read_text())
    lsf = jobenv.variables(lsf_home, job)
    jobenv.write_host_files(lsf, job)
    for stale in ("LSB_OUTPUTFILE", "LSB_ERRORFILE", "LSB_DJOB_RANKFILE", "CSM_ALLOCATION_ID",
                  "SUMMIT_JOBS_VNODE", "SUMMIT_JOBS_NVME") + (("CUDA_VISIBLE_DEVICES",) if job.get("gpu") else ()):
        env.pop(stale, None)            # a job submitted from inside another must not inherit these
    env.update(lsf)
    _installation(env)
    return env


def _installation(env: Dict[str, str]) -> None:
    """What the job needs of the LSF installation, whatever ``bsub -env`` left of the submission environment.

    On a cluster a job reaches LSF's commands and configuration without its
    submitter's variables (``-env none``): LSF's own settings come from lsf.conf,
    HOME from the execution host. Here the embedded LSF's settings
    (SUMMIT_JOBS_LSF_*, SUMMIT_JOBS_PYTHON) are the configuration, so they are
    always set, and a job without PATH gets the embedded commands and the
    system's default folders.
    """
    for key, value in os.environ.items():
        if key.startswith("SUMMIT_JOBS_LSF_") or key == "SUMMIT_JOBS_PYTHON":
            env.setdefault(key, value)
    if "PATH" not in env:
        env["PATH"] = os.pathsep.join([str(Path(__file__).resolve().parent / "bin"), os.defpath.lstrip(":")])
    if "HOME" not in env:
        env["HOME"] = os.path.expanduser("~")


#: Starts the job's command with LS_JOBPID set to its own pid (the shell execs it, keeping the pid).
#: The command and its arguments are positional parameters: nothing is pasted into shell code.
_STARTER = ["/bin/sh", "-c", 'LS_JOBPID=$$; export LS_JOBPID; exec "$@"', "lsf-job"]


def _command(lsf_home: Path, job: Dict) -> List[str]:
    if job.get("shell_command"):
        return _STARTER + ["/bin/sh", "-c", job["command"][0]]      # bsub "prog args": Bourne shell text
    if not job["is_script"]:
        return _STARTER + list(job["command"])
    script = jobenv.job_file(lsf_home, job)
    with open(script, "rb") as fh:              # bytes: a script need not be UTF-8 (bsub takes any encoding)
        first = os.fsdecode(fh.readline().rstrip(b"\r\n"))
    if first.startswith("#!"):
        interp = first[2:].strip().split(None, 1)
        return _STARTER + interp + [str(script)] + list(job["command"])
    return _STARTER + ["/bin/sh", str(script)] + list(job["command"])


def _open(path: Optional[str], overwrite: bool, fallback: Path):
    if path:
        try:
            return open(path, "wb" if overwrite else "ab")
        except OSError as exc:
            with open(fallback, "ab") as fh:
                fh.write(f"embedded LSF: cannot open {path}: {exc}; output goes here\n".encode())
    return open(fallback, "ab")


def _update(lsf_home: Path, job_id: int, **fields) -> Optional[Dict]:
    """Change the job's record under the lock; None when the record (or the state folder) is gone.

    The state folder can be deleted while a job runs; the supervisor must then
    still see its job to the end (and end its processes), not die halfway.
    """
    try:
        with state.locked(lsf_home):
            rec = state.load_job(lsf_home, job_id)
            if rec is None:
                return None
            rec.update(fields)
            state.save_job(lsf_home, rec)
            return rec
    except OSError:
        return None


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _start(lsf_home: Path, job: Dict) -> Optional[subprocess.Popen]:
    """Start the job's script as the leader of a new process group; None (job marked EXIT) if it cannot."""
    jdir = state.job_dir(lsf_home, job["id"])
    out = _open(job["out"], job["out_overwrite"], jdir / "output")
    err = out if not job["err"] else _open(job["err"], job["err_overwrite"], jdir / "output")
    try:
        env = _environment(lsf_home, job)
        on = env.get("SUMMIT_JOBS_VNODE") or state.LAUNCH_NODE        # the CSM form's script: the launch node
        note = vnode_ns.fallback_note()
        if note:
            err.write(f"{note}\n".encode())
            err.flush()
        return subprocess.Popen(_command(lsf_home, job), cwd=job["subcwd"], env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, start_new_session=True,
                                preexec_fn=state.preexec(on, job["hosts"], lsf_home))
    except (OSError, subprocess.SubprocessError) as exc:
        out.write(f"embedded LSF: cannot start the job: {exc}\n".encode())
        _update(lsf_home, job["id"], state="EXIT", exit_code=127, exit_reason=f"cannot start: {exc}",
                finish_time=time.time())
        return None
    finally:
        out.close()
        if err is not out:
            err.close()


def _start_watchdog(lsf_home: Path, job: Dict, pgid: int) -> Tuple[Optional[int], Optional[int]]:
    """The watchdog that ends the job if this supervisor dies: (its pid, the pipe's write end).

    A fork of this process rather than a new interpreter: it needs nothing this process has not loaded,
    and a Python start-up per job (about 0.05 s of CPU, while the job itself starts) is saved. This
    process holds no lock here and runs no thread, so the fork copies nothing half-done.
    """
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None, None
    if pid == 0:                                        # pragma: no cover - the watchdog
        code = 1
        try:
            os.close(write_end)                         # only the supervisor may hold it: its death closes the pipe
            code = watchdog.run(lsf_home, job["id"], read_end, pgid, float(job["kill_grace"]))
        finally:
            os._exit(code)
    os.close(read_end)
    return pid, write_end


def _record_start(lsf_home: Path, job: Dict, proc: subprocess.Popen) -> Tuple[Dict, Optional[int]]:
    """Save the job's pid and process group (for whoever must end it), then start its watchdog."""
    job_id = job["id"]
    job = _update(lsf_home, job_id, pid=proc.pid, pgid=proc.pid) or job
    watchdog_pid, pipe = _start_watchdog(lsf_home, job, proc.pid)
    return _update(lsf_home, job_id, watchdog_pid=watchdog_pid) or job, pipe


class _Terminate:
    """IBM's TERMINATE action on every process of a job: INT, then TERM, then KILL, ``interval`` seconds apart."""

    def __init__(self, lsf_home: Path, job: Dict, interval: float):
        self.lsf_home, self.job, self.interval = lsf_home, job, interval
        self.started_at: Optional[float] = None
        self.sent = 0

    def start(self, now: float) -> None:
        if self.started_at is None:
            self.started_at = now

    def tick(self, now: float) -> None:
        """Send every signal that is due; KILL is repeated until the script is gone."""
        if self.started_at is None:
            return
        due = min(len(TERMINATE), 1 + int((now - self.started_at) // self.interval)) if self.interval > 0 \
            else len(TERMINATE)
        while self.sent < due:
            state.signal_job(self.job, TERMINATE[self.sent], self.lsf_home)
            self.sent += 1
        if self.sent == len(TERMINATE):
            _killpg(self.job["pgid"], signal.SIGKILL)


def _owner_kill(lsf_home: Path, job_id: int) -> bool:
    """Whether bkill asked for this job to be killed (a state folder that cannot be read says no)."""
    try:
        rec = state.load_job(lsf_home, job_id)
    except OSError:
        return False
    return bool(rec and rec.get("kill_requested"))


def _warn(lsf_home: Path, job: Dict, now: float) -> None:
    """The -wa action, to every process of the job (IBM: "LSF sends the warning action to the job")."""
    state.signal_job(job, job["warn_signal"], lsf_home)
    _update(lsf_home, job["id"], warning_sent=now)


def _vnode_of(pid: int) -> Optional[str]:
    """The virtual host a process runs on (its SUMMIT_JOBS_VNODE), None when it has none or is gone."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            for item in fh.read().split(b"\0"):
                if item.startswith(b"SUMMIT_JOBS_VNODE="):
                    return item.split(b"=", 1)[1].decode("ascii", "replace")
    except OSError:
        pass
    return None


def _rss_kb(pid: int) -> int:
    """Resident memory of one process in KB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except (OSError, ValueError, IndexError):
        return 0


def memory_by_host(pgid: int, first_host: str) -> Dict[str, int]:
    """RSS in KB of the job's processes (its process group), added up per virtual host."""
    usage: Dict[str, int] = {}
    for pid in state.group_members(pgid):
        host = _vnode_of(pid) or first_host
        usage[host] = usage.get(host, 0) + _rss_kb(pid)
    return usage


class _Usage:
    """The job's memory as bjobs reports it (MEM, MAX MEM, AVG MEM): RSS of its process group, all hosts."""

    def __init__(self) -> None:
        self.samples: List[int] = []

    def add(self, usage: Dict[str, int]) -> None:
        self.samples.append(sum(usage.values()))

    def fields(self) -> Dict[str, Optional[int]]:
        if not self.samples:
            return {}
        return {"mem_kb": self.samples[-1], "max_mem_kb": max(self.samples),
                "avg_mem_kb": sum(self.samples) // len(self.samples)}


#: Seconds between two looks at the memory of a job without -M (only for bjobs' usage figures).
USAGE_CHECK = 2.0


def _over_memory(lsf_home: Path, job: Dict, pgid: int, usage_log: Optional[_Usage] = None) -> bool:
    """Whether the job uses more than its -M limit on one of its hosts; the usage is recorded when it does."""
    limit = job.get("mem_limit_kb")
    usage = memory_by_host(pgid, job["hosts"][0] if job.get("hosts") else state.LAUNCH_NODE)
    if usage_log is not None:
        usage_log.add(usage)
    if not limit or max(usage.values(), default=0) <= limit:
        return False
    _update(lsf_home, job["id"], memory_kb_at_kill=usage)
    return True


def _supervise(lsf_home: Path, job: Dict, proc: subprocess.Popen,
               usage: Optional[_Usage] = None) -> Tuple[Optional[str], bool]:
    """Warn, enforce the run limit and bkill until the script ends: (why LSF acted, whether it terminated).
    It looks every 0.05 s, and at once when the script ends (state.ExitWaiter)."""
    start, limit = job["start_time"], job.get("limit_s")
    warn_at = (start + max(0.0, limit - job["warn_s"])) if (limit and job.get("warn_signal")) else None
    limit_at = start + limit if limit else None
    grace = float(job.get("runlimit_grace_s") or 0.0)
    job = dict(job, pgid=proc.pid)
    terminate = _Terminate(lsf_home, job, float(job["kill_grace"]))
    reason: Optional[str] = None
    last_check = last_memory = 0.0
    waiter = state.ExitWaiter([proc.pid])
    while proc.poll() is None:
        now = time.time()
        if warn_at is not None and now >= warn_at:
            warn_at = None
            _warn(lsf_home, job, now)
        if limit_at is not None and now >= limit_at and reason is None:
            reason = RUNLIMIT
            state.signal_job(job, signal.SIGUSR2, lsf_home)
            _update(lsf_home, job["id"], runlimit_signal_sent=now)
        if reason == RUNLIMIT and now >= limit_at + grace:
            terminate.start(now)
        if terminate.started_at is None and now - last_check >= 0.1:
            last_check = now
            if _owner_kill(lsf_home, job["id"]):
                reason = OWNER_KILL
                terminate.start(now)
        every = MEMORY_CHECK if job.get("mem_limit_kb") else USAGE_CHECK
        if terminate.started_at is None and now - last_memory >= every:
            last_memory = now
            if _over_memory(lsf_home, job, proc.pid, usage):
                reason = MEMLIMIT
                terminate.start(now)
        terminate.tick(now)
        waiter.wait(0.05)
    waiter.close()
    return reason, terminate.started_at is not None


def _outcome(code: int, reason: Optional[str], terminated: bool) -> Tuple[str, Optional[str]]:
    """(state, exit reason) of a job that ended with ``code``.

    A job LSF terminated (bkill, or the run limit's grace over) is EXIT even if
    it exited 0, as in LSF. A job that got the run limit's USR2 and ended on its
    own within the grace ends as it exits: 0 is DONE. A plain non-zero exit is
    EXIT without a reason, as in IBM LSF.
    """
    if reason in (OWNER_KILL, MEMLIMIT) or (reason and terminated):
        return "EXIT", reason
    if code == 0:
        return "DONE", None
    # IBM sets a termination reason only where LSF ended the job; a job that simply exits non-zero has
    # none (bjobs -l: "Exited with exit code N", no TERM_* word).
    return "EXIT", reason


def _kill_leftovers(lsf_home: Path, job_id: int, pgid: int) -> None:
    """Like LSF, nothing of a job outlives it: KILL every process still carrying the job, until none is
    left (a few seconds at most; a process stuck in the kernel is given up on, not waited for forever)."""
    job = {"id": job_id, "pgid": pgid}
    deadline = time.time() + 5.0
    while state.signal_job(job, signal.SIGKILL, lsf_home) and time.time() < deadline:
        time.sleep(0.05)


def _finish(lsf_home: Path, job_id: int, proc: subprocess.Popen, reason: Optional[str],
            terminated: bool, usage: Optional[_Usage] = None) -> None:
    """Record how the job ended, with the exit code the job really had (128 + signal when one ended it),
    its CPU time (the script and every process it waited for: this supervisor's children's usage) and
    its memory figures."""
    rc = proc.returncode
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    figures = dict(usage.fields() if usage else {}, cpu_s=round(children.ru_utime + children.ru_stime, 3),
                   peak_rss_kb=bacct.peak_rss_kb(children))
    code = 128 - rc if rc < 0 else rc
    _kill_leftovers(lsf_home, job_id, proc.pid)
    try:
        with state.locked(lsf_home):
            rec = state.load_job(lsf_home, job_id)
            if rec is None:
                return                      # the state folder was deleted: nothing left to record
            if reason is None and rec.get("kill_requested"):
                reason = OWNER_KILL
            job_state, why = _outcome(code, reason, terminated)
            rec.update(exit_code=code, finish_time=time.time(), state=job_state, exit_reason=why, **figures)
            state.save_job(lsf_home, rec)
    except OSError:
        pass


def run(lsf_home: Path, job_id: int) -> int:
    job = _pending(lsf_home, job_id)
    if job is None:
        return 0
    proc = _start(lsf_home, job)
    if proc is None:
        return 0
    job, pipe = _record_start(lsf_home, job, proc)
    usage = _Usage()
    reason, terminated = _supervise(lsf_home, job, proc, usage)
    _finish(lsf_home, job_id, proc, reason, terminated, usage)
    # As LSF removes a job's temporary directory: the virtual nodes' TMPDIR folders go with the job.
    state.remove_job_tmp(lsf_home, job)
    if pipe is not None:
        with contextlib.suppress(OSError):
            os.write(pipe, watchdog.FINISHED)
        os.close(pipe)
    return 0


#: Signals whose disposition a job starts with at the default, whatever its submitter had.
RESET_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def main() -> int:
    # A job starts as LSF's sbatchd starts it, not with its submitter's signal dispositions: a chain's
    # link runs bsub with the stop signals ignored (so that none cuts the submission short), and an
    # ignored signal stays ignored across fork and exec, down to the next link's script, where bash
    # can then no longer trap it ("signals ignored upon entry to the shell cannot be trapped").
    for sig in RESET_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    lsf_home, job_id = Path(sys.argv[1]), int(sys.argv[2])
    return run(lsf_home, job_id)


if __name__ == "__main__":
    sys.exit(main())
