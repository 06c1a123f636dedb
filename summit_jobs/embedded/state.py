"""The embedded LSF's shared state: one folder, one lock, one JSON record per job.

Several commands (bsub, bjobs, bkill, and one supervisor process per job) read
and change the same jobs at the same time, so every read-modify-write happens
under an exclusive ``fcntl`` lock on ``<home>/lock`` and every record is
written atomically (temporary name, then ``os.replace``): a reader never sees
half a record, and two bsub calls never get the same job id.

Settings (environment variables, read by each command):

``SUMMIT_JOBS_LSF_HOME``
    State folder. Default ``$XDG_DATA_HOME/summit-jobs/lsf`` or
    ``~/.local/share/summit-jobs/lsf``.
``SUMMIT_JOBS_LSF_NODES`` / ``SUMMIT_JOBS_LSF_CORES``
    Virtual nodes of this machine and cores per virtual node (default 4 and 2;
    the host layer sets them from the ``local`` profile).
``SUMMIT_JOBS_LSF_MINUTE``
    Seconds in one LSF minute (default 60). Tests set e.g. 3 so that ``-W 2``
    kills after 6 seconds and ``-wt 1`` warns 3 seconds before that.
``SUMMIT_JOBS_LSF_KILL_GRACE``
    Seconds between TERM and KILL when a job is killed (default 10, LSF's
    JOB_TERMINATE_INTERVAL).
``SUMMIT_JOBS_LSF_CLEAN_PERIOD``
    Seconds a finished job stays visible to bjobs (default 3600, LSF's
    CLEAN_PERIOD). After that it vanishes from bjobs, as on a real machine.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

LAUNCH_NODE = "batch1"
FINISHED = ("DONE", "EXIT")
ACTIVE = ("PEND", "RUN")


def home() -> Path:
    explicit = os.environ.get("SUMMIT_JOBS_LSF_HOME")
    if explicit:
        base = Path(explicit)
    else:
        data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
        base = Path(data) / "summit-jobs" / "lsf"
    (base / "jobs").mkdir(parents=True, exist_ok=True)
    return base


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"embedded LSF: {name}={raw!r} is not a number") from None
    if value <= 0:
        raise SystemExit(f"embedded LSF: {name}={raw!r} must be positive")
    return value


def virtual_nodes() -> int:
    return int(_env_number("SUMMIT_JOBS_LSF_NODES", 4))


def cores_per_node() -> int:
    return int(_env_number("SUMMIT_JOBS_LSF_CORES", 2))


def seconds_per_minute() -> float:
    return _env_number("SUMMIT_JOBS_LSF_MINUTE", 60.0)


def kill_grace() -> float:
    return _env_number("SUMMIT_JOBS_LSF_KILL_GRACE", 10.0)


def clean_period() -> float:
    return _env_number("SUMMIT_JOBS_LSF_CLEAN_PERIOD", 3600.0)


def node_names(count: int) -> List[str]:
    return [f"vnode{i:02d}" for i in range(1, count + 1)]


def nvme_dir(lsf_home: Path, node: str) -> Path:
    """A virtual node's NVMe folder. Unlike Summit's, it persists across jobs (nothing trims it)."""
    path = lsf_home / "nodes" / node / "nvme"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def locked(lsf_home: Path) -> Iterator[None]:
    """Exclusive lock over the whole state folder."""
    fd = os.open(lsf_home / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def write_json(path: Path, data: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def job_dir(lsf_home: Path, job_id: int) -> Path:
    return lsf_home / "jobs" / str(job_id)


def load_job(lsf_home: Path, job_id: int) -> Optional[Dict]:
    try:
        return json.loads((job_dir(lsf_home, job_id) / "job.json").read_text())
    except (FileNotFoundError, NotADirectoryError):
        return None


def save_job(lsf_home: Path, job: Dict) -> None:
    write_json(job_dir(lsf_home, job["id"]) / "job.json", job)


def all_jobs(lsf_home: Path) -> List[Dict]:
    jobs = []
    for entry in (lsf_home / "jobs").iterdir():
        if entry.name.isdigit():
            job = load_job(lsf_home, int(entry.name))
            if job is not None:
                jobs.append(job)
    return sorted(jobs, key=lambda j: j["id"])


def next_job_id(lsf_home: Path) -> int:
    """Allocate a job id (caller holds the lock)."""
    counter = lsf_home / "next_id"
    try:
        value = int(counter.read_text().strip())
    except (FileNotFoundError, ValueError):
        value = int(os.environ.get("SUMMIT_JOBS_LSF_FIRST_ID", "1"))
    counter_tmp = counter.with_name(f".next_id.tmp{os.getpid()}")
    counter_tmp.write_text(str(value + 1))
    os.replace(counter_tmp, counter)
    return value


def pid_alive(pid: Optional[int]) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); reap-less check through /proc.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def reap_lost(lsf_home: Path, jobs: List[Dict]) -> None:
    """Mark jobs whose supervisor died (machine reboot, kill -9) as EXIT, never as DONE.

    Caller holds the lock.
    """
    for job in jobs:
        if job["state"] in ACTIVE and not pid_alive(job.get("supervisor_pid")) \
                and time.time() - job["submit_time"] > 5:
            job["state"] = "EXIT"
            job["exit_reason"] = "embedded LSF supervisor process is gone; job lost"
            job["finish_time"] = time.time()
            save_job(lsf_home, job)


def fmt_time(ts: Optional[float]) -> str:
    """LSF's short time form, e.g. ``Nov 21 17:30``."""
    if not ts:
        return "-"
    return time.strftime("%b %d %H:%M", time.localtime(ts))
