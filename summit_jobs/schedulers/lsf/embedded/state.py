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
``SUMMIT_JOBS_LSF_CLUSTER``
    ``csm`` (default): a Summit-like cell, where ``-nnodes`` (or neither
    ``-n`` nor ``-nnodes``) gets whole nodes behind the launch node
    ``batch1``; ``generic``: an LSF cluster without IBM CSM, where every job
    has the generic form (``-n``, default one slot, no launch node: the script
    runs on the first execution host) and ``-nnodes`` is refused.
    ``summit-jobs lsf env --generic`` sets it.
``SUMMIT_JOBS_LSF_GPUS``
    GPUs of each virtual node (default 0: a job asking ``-gpu`` could never
    start). A job's GPUs are told to it in CUDA_VISIBLE_DEVICES (jobenv.py).
``SUMMIT_JOBS_LSF_MEM``
    Memory of each virtual node in MB, what ``-R "select[mem>X]"`` is
    checked against (default: this machine's memory divided by the nodes).
``SUMMIT_JOBS_LSF_APPS``
    Comma-separated names of the application profiles ``bsub -app`` accepts
    (default none).
``SUMMIT_JOBS_LSF_QUEUES``
    Comma-separated names of the queues ``bqueues`` lists (default: the
    ``local`` profile's queues, with the user's config overrides).
``SUMMIT_JOBS_LSF_MINUTE``
    Seconds in one LSF minute (default 60). Tests set e.g. 3 so that ``-W 2``
    kills after 6 seconds and ``-wt 1`` warns 3 seconds before that.
``SUMMIT_JOBS_LSF_KILL_GRACE``
    Seconds between the signals of LSF's TERMINATE action (bkill, or the run
    limit's grace over): SIGINT, SIGTERM one interval later, SIGKILL one more
    interval later; also the grace jsrun gives ranks between TERM and KILL.
    Default: LSF's JOB_TERMINATE_INTERVAL of 10 seconds, scaled like the
    minute (10 x SUMMIT_JOBS_LSF_MINUTE / 60), so scaled tests stay fast.
``SUMMIT_JOBS_LSF_RUNLIMIT_GRACE``
    LSF minutes between the SIGUSR2 a job gets at its run limit (``-W``) and
    the TERMINATE action if it is still running (default 10, IBM's fixed ten
    minutes); fractions allowed, scaled by SUMMIT_JOBS_LSF_MINUTE.
``SUMMIT_JOBS_LSF_CLEAN_PERIOD``
    Seconds a finished job stays visible to bjobs (default 3600, LSF's
    CLEAN_PERIOD). After that it vanishes from bjobs, as on a real machine.
``SUMMIT_JOBS_LSF_TMP``
    Where the per-job, per-virtual-node temporary folders go (default
    ``/tmp``); see ``node_tmp_dir``.
``SUMMIT_JOBS_LSF_FIRST_ID``
    Lowest job id to hand out (1 to 2147483646, LSF's largest). Without it the
    floor is time-based (one id per 6 seconds since 2024), so ids keep growing
    even when the whole state folder is deleted. With it the home numbers its
    jobs on its own from that id (for tests that need known ids): another home
    may then hand out the same ids.
``SUMMIT_JOBS_LSF_ID_FILE``
    The machine-wide job-id counter that every home of this user draws from
    (default ``/tmp/summit-jobs-<uid>/job-ids``).

Job ids are never reused, and two homes of one machine never hand out the
same id: the next id is the largest of the counter in the state folder, a
high-water mark kept *beside* the folder (it survives deleting the folder
mid-job), the largest job folder present, the floor above, and one more than
the machine-wide counter, read and written under its own lock (machine_ids).
A reused id would let ``summit-jobs cancel`` of an old run kill a new,
unrelated job; an id shared by two homes gave their torchrun jobs one
rendezvous.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import select
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from summit_jobs.schedulers.lsf.home import home_path  # noqa: F401 - the state folder, for this package's modules
from summit_jobs.schedulers.lsf.home import prepare as prepare_home
from summit_jobs.schedulers.lsf.embedded import vnode_ns
#: The virtual nodes' names and addresses are vnode_ns's (which never imports this module); here for the
#: package's modules, which read them as state.LAUNCH_NODE and state.node_address.
from summit_jobs.schedulers.lsf.embedded.vnode_ns import LAUNCH_NODE, node_address  # noqa: F401

FINISHED = ("DONE", "EXIT")
ACTIVE = ("PEND", "RUN")
#: LSF's largest job id (MAX_JOB_ID can be set up to this in lsb.params).
MAX_JOB_ID = 2147483646
#: Start of the time-based id floor (2024-01-01 UTC) and seconds per id.
_ID_EPOCH = 1704067200
_ID_SECONDS = 6
#: Names of the state's temporary files (``.<name>.tmp<pid>``), left behind by a killed writer.
TMP_RE = re.compile(r"^\..+\.tmp\d+$")


class LsfError(Exception):
    """A setting or state problem the embedded LSF commands report in one line (no traceback)."""


def home() -> Path:
    """The state folder, created private (0700): job records hold the submission environment. A folder
    that is neither empty nor an embedded-LSF home is refused (home.NotAHome, an OSError)."""
    return prepare_home(home_path())


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"embedded LSF: {name}={raw!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise SystemExit(f"embedded LSF: {name}={raw!r} must be a positive, finite number")
    return value


def _env_count(name: str, default: int, limit: int) -> int:
    """A whole-number setting between 1 and ``limit`` (a fraction or a huge value is a typo, not a wish)."""
    value = _env_number(name, default)
    if value != int(value) or value > limit:
        raise SystemExit(f"embedded LSF: {name}={os.environ.get(name)!r} must be a whole number from 1 to {limit}")
    return int(value)


def virtual_nodes() -> int:
    return _env_count("SUMMIT_JOBS_LSF_NODES", 4, 4096)


def cores_per_node() -> int:
    return _env_count("SUMMIT_JOBS_LSF_CORES", 2, 4096)


#: The kinds of cluster the embedded LSF can be (SUMMIT_JOBS_LSF_CLUSTER).
CLUSTER_KINDS = ("csm", "generic")


def cluster_kind() -> str:
    """``csm`` (a Summit-like cell with the launch node batch1) or ``generic`` (an LSF cluster without CSM):
    SUMMIT_JOBS_LSF_CLUSTER, default ``csm``."""
    raw = (os.environ.get("SUMMIT_JOBS_LSF_CLUSTER") or "csm").strip().lower()
    if raw not in CLUSTER_KINDS:
        raise LsfError(f"SUMMIT_JOBS_LSF_CLUSTER={os.environ.get('SUMMIT_JOBS_LSF_CLUSTER')!r} must be "
                       f"{' or '.join(CLUSTER_KINDS)}")
    return raw


def gpus_per_node() -> int:
    """GPUs of each virtual node (SUMMIT_JOBS_LSF_GPUS); 0, the default, is a valid answer."""
    raw = (os.environ.get("SUMMIT_JOBS_LSF_GPUS") or "0").strip()
    if not raw.isdecimal() or int(raw) > 64:
        raise LsfError(f"SUMMIT_JOBS_LSF_GPUS={raw!r} must be a whole number of GPUs per virtual node "
                       "from 0 to 64")
    return int(raw)


def memory_per_node_mb() -> int:
    """Memory of each virtual node in MB (SUMMIT_JOBS_LSF_MEM), what ``select[mem>X]`` is checked against;
    default: this machine's memory shared out evenly between the virtual nodes."""
    raw = os.environ.get("SUMMIT_JOBS_LSF_MEM")
    if raw:
        return _env_count("SUMMIT_JOBS_LSF_MEM", 1, 2 ** 40)
    try:
        total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2 ** 20
    except (ValueError, OSError):
        total_mb = 4096
    return max(1, total_mb // virtual_nodes())


def node_resources() -> Dict[str, int]:
    """What a virtual node offers to ``select[]``: memory (MB), cores, GPUs. Nodes are never shared, so a
    node's available memory is all of it."""
    mem = memory_per_node_mb()
    return {"mem": mem, "maxmem": mem, "ncpus": cores_per_node(), "maxslots": cores_per_node(),
            "ngpus": gpus_per_node()}


def app_profiles() -> List[str]:
    """The application profiles ``bsub -app`` accepts (SUMMIT_JOBS_LSF_APPS, comma-separated)."""
    return [n.strip() for n in os.environ.get("SUMMIT_JOBS_LSF_APPS", "").split(",") if n.strip()]


def seconds_per_minute() -> float:
    return _env_number("SUMMIT_JOBS_LSF_MINUTE", 60.0)


def kill_grace() -> float:
    """Seconds between SIGINT, SIGTERM and SIGKILL when LSF terminates a job (JOB_TERMINATE_INTERVAL)."""
    return _env_number("SUMMIT_JOBS_LSF_KILL_GRACE", 10.0 * seconds_per_minute() / 60.0)


def runlimit_grace() -> float:
    """Seconds a job may run on after its run limit's SIGUSR2 before it is terminated (10 LSF minutes)."""
    return _env_number("SUMMIT_JOBS_LSF_RUNLIMIT_GRACE", 10.0) * seconds_per_minute()


def clean_period() -> float:
    return _env_number("SUMMIT_JOBS_LSF_CLEAN_PERIOD", 3600.0)


def node_names(count: int) -> List[str]:
    """The virtual nodes' host names: ``vnode1``... where tasks can get them, else their addresses (vnode_ns)."""
    return vnode_ns.node_names(count)


def preexec(host: str, hosts: Iterable[str], lsf_home: Optional[Path] = None) -> Optional[Callable[[], None]]:
    """What a task on ``host`` runs before exec, or None when ``host`` is an address (no namespaces then).

    ``hosts`` are the job's; the file names every node of the home and those. It is written here, in the
    parent (``<LSF home>/vnode-hosts``, temporary name then rename), only when its text changes: the bind
    mount pins the file it found, so a later rewrite never changes a running task's view.
    """
    if not host or vnode_ns.is_address(host):
        return None
    indexes = [int(m.group(1)) for m in map(vnode_ns.NAME_RE.match, list(hosts) + [host]) if m]
    try:
        base = Path("/etc/hosts").read_text(errors="replace")
    except OSError:
        base = "127.0.0.1\tlocalhost\n"
    text = vnode_ns.hosts_text(base, max(indexes + [virtual_nodes()]))
    path = (lsf_home or home()) / vnode_ns.HOSTS_FILE
    try:
        current = path.read_text()
    except OSError:
        current = None
    if current != text:
        write_bytes(path, text.encode())
    hosts_file = str(path)
    return vnode_ns.entry(host, hosts_file)


def next_allocation_id(lsf_home: Path) -> int:
    """A CSM allocation id (CSM_ALLOCATION_ID): CSM numbers allocations apart from LSF's job ids.
    The caller holds the lock."""
    path = lsf_home / "allocation.seq"
    try:
        value = int(path.read_text().strip()) + 1
    except (OSError, ValueError):
        value = 1_000_001
    write_bytes(path, str(value).encode())
    return value


def nvme_dir(lsf_home: Path, node: str) -> Path:
    """A virtual node's NVMe folder. Unlike Summit's, it persists across jobs (nothing trims it).

    It is named after the node as jobs see it (``vnode1``, or ``127.1.0.1`` where namespaces are
    unavailable). One node is one node whichever way it is named, so a folder kept under the node's other
    name (data staged before the nodes had host names, or on a machine without namespaces) is renamed to
    this one rather than staged again: nothing staged is lost or copied twice.
    """
    path = lsf_home / "nodes" / node / "nvme"
    other = vnode_ns.other_name(node)
    old = lsf_home / "nodes" / other / "nvme" if other else None
    if old is not None and not path.is_dir() and old.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(old, path)  # atomic; a racing task that moved it first leaves nothing to move
        except OSError:
            pass
    path.mkdir(parents=True, exist_ok=True)
    return path


def job_tmp_root(lsf_home: Path, job_id: object) -> Path:
    """The folder of one job's per-node temporary folders (``node_tmp_dir``), removed when the job ends.

    Short on purpose, and outside the state folder: programs put Unix sockets under TMPDIR (Python's
    forkserver, Open MPI's PMIx), whose paths may not pass 107 bytes. The state folder's hash keeps two
    embedded machines (two state folders) that hand out the same job id apart.
    """
    base = Path(os.environ.get("SUMMIT_JOBS_LSF_TMP") or "/tmp")
    tag = hashlib.sha256(str(lsf_home.absolute()).encode()).hexdigest()[:8]
    return base / f"summit-jobs-{os.getuid()}" / f"{tag}.{job_id}"


def node_tmp_dir(lsf_home: Path, job_id: object, node: str) -> Path:
    """A virtual node's temporary folder for one job: the TMPDIR of everything the job runs there.

    Real nodes each have their own /tmp; the virtual nodes would share this machine's. Programs that keep
    per-host state under TMPDIR then collide across "nodes": Open MPI names its session directory after
    the host name and job family, and the two daemons of one mpirun on two virtual nodes failed with
    "mkdir ...: File exists". Private to the user (0700); a folder in the way that is not this user's own
    is refused rather than used.
    """
    path = job_tmp_root(lsf_home, job_id) / node
    private_dir(path.parent.parent, "set SUMMIT_JOBS_LSF_TMP to another folder")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def private_dir(top: Path, fix: str) -> Path:
    """``top`` made if missing and checked to be this user's own private folder (0700, not a link).

    It sits in a folder every user can write (/tmp), where another user could have put a folder or a link of
    theirs first; such a folder is refused (OSError naming ``fix``) rather than used.
    """
    top.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(top)
    if not os.path.isdir(top) or os.path.islink(top) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise OSError(f"{top} is not a private folder of this user (a link, another user's, or open to others): "
                      f"remove it, or {fix}")
    return top


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


def write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``path`` atomically: a temporary name created with ``mode``, then ``os.replace``.

    The mode is given at creation (never chmod afterwards), so a private file is
    never readable by others, not even for an instant. A writer killed halfway
    leaves only the temporary name, which clean_leftovers removes later.
    """
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_json(path: Path, data: object, mode: int = 0o644) -> None:
    write_bytes(path, json.dumps(data, indent=1, sort_keys=True).encode(), mode)


def clean_leftovers(lsf_home: Path) -> List[Path]:
    """Remove temporary files of writers that were killed (caller holds the lock).

    Every writer of the state holds the lock while it writes, so under the lock
    any ``.<name>.tmp<pid>`` is a leftover of a killed process.
    """
    removed = []
    folders = [lsf_home] + [d for d in (lsf_home / "jobs").iterdir() if d.is_dir()]
    for folder in folders:
        for entry in folder.iterdir():
            if TMP_RE.fullmatch(entry.name) and entry.is_file():
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
                    removed.append(entry)
    return removed


def job_dir(lsf_home: Path, job_id: int) -> Path:
    return lsf_home / "jobs" / str(job_id)


def load_job(lsf_home: Path, job_id: int) -> Optional[Dict]:
    """A job's record, or None when there is none (or it is damaged: a record is never half-written)."""
    try:
        data = json.loads((job_dir(lsf_home, job_id) / "job.json").read_bytes())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return data if _well_formed(data) else None


def _well_formed(data: object) -> bool:
    """Whether a record has what every command reads of every job (its id, state and submission time):
    one that lacks them is treated as damaged, not shown, rather than failing every command of the home."""
    return isinstance(data, dict) and type(data.get("id")) is int and data.get("state") in ACTIVE + FINISHED \
        and isinstance(data.get("submit_time"), (int, float))


def save_job(lsf_home: Path, job: Dict) -> None:
    write_json(job_dir(lsf_home, job["id"]) / "job.json", job)


def all_jobs(lsf_home: Path) -> List[Dict]:
    jobs = []
    for entry in (lsf_home / "jobs").iterdir():
        if entry.name.isdecimal():
            job = load_job(lsf_home, int(entry.name))
            if job is not None:
                jobs.append(job)
    return sorted(jobs, key=lambda j: j["id"])


def first_id() -> int:
    """The lowest id to hand out: SUMMIT_JOBS_LSF_FIRST_ID, else the time-based floor."""
    raw = os.environ.get("SUMMIT_JOBS_LSF_FIRST_ID")
    if raw is None or raw.strip() == "":
        return max(1, int((time.time() - _ID_EPOCH) // _ID_SECONDS))
    text = raw.strip()
    if not text.isdecimal() or not 1 <= int(text) <= MAX_JOB_ID:
        raise LsfError(f"SUMMIT_JOBS_LSF_FIRST_ID={raw!r} must be a whole number from 1 to {MAX_JOB_ID} "
                       "(LSF's largest job id); unset it for time-based ids")
    return int(text)


def high_water_path(lsf_home: Path) -> Path:
    """The last id handed out by this home, kept in it: the embedded LSF writes nothing outside its home
    (a home given as ``/`` or ``~`` must not litter the folder above). Ids still never repeat when the
    home is deleted: the machine-wide counter (machine_ids) and the time-based floor (first_id) remain."""
    return lsf_home / "last-job-id"


def _old_high_water_path(lsf_home: Path) -> Path:
    """Where older versions kept the mark: beside the home. Still read, so that their ids are never
    handed out again; never written."""
    resolved = lsf_home.resolve()
    return resolved.parent / f".{resolved.name}.last-job-id"


def id_counter_path() -> Path:
    """The machine-wide job-id counter: SUMMIT_JOBS_LSF_ID_FILE, else ``/tmp/summit-jobs-<uid>/job-ids``.

    Fixed ``/tmp``, not TMPDIR: a job's TMPDIR is a folder of its own (node_tmp_dir), and a chain link that
    runs bsub inside a job must count on the same counter as the bsub that submitted it.
    """
    raw = (os.environ.get("SUMMIT_JOBS_LSF_ID_FILE") or "").strip()
    return Path(raw) if raw else Path("/tmp") / f"summit-jobs-{os.getuid()}" / "job-ids"


@contextlib.contextmanager
def machine_ids() -> Iterator[Optional[Path]]:
    """Hold the machine-wide job-id counter (its lock) while a bsub numbers its job; yields its path.

    Why: every LSF home counts its own jobs, but the homes of one machine share its processes and ports. Two
    homes that handed out the same id gave three torchrun jobs one rendezvous (the port and the rendezvous id
    come from the job id), and a job id named to ``summit-jobs cancel`` could belong to any of them. So all
    homes of this user draw from one counter. Yields None, and the home numbers its jobs alone, when
    SUMMIT_JOBS_LSF_FIRST_ID asks for a numbering of its own, or when the counter cannot be used (said on
    stderr: ids are then unique within the home only).
    """
    if (os.environ.get("SUMMIT_JOBS_LSF_FIRST_ID") or "").strip():
        yield None
        return
    path = id_counter_path()
    fd = _open_counter_lock(path)
    if fd is None:
        yield None
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield path
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _open_counter_lock(path: Path) -> Optional[int]:
    """The counter's lock file, opened (its folder made private first unless SUMMIT_JOBS_LSF_ID_FILE chose
    it); None, with a warning on stderr, when it cannot be."""
    try:
        if not (os.environ.get("SUMMIT_JOBS_LSF_ID_FILE") or "").strip():
            private_dir(path.parent, "set SUMMIT_JOBS_LSF_ID_FILE to a file in a folder of your own")
        return os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        print(f"bsub: warning: the machine-wide job-id counter {path} cannot be used ({exc.strerror or exc}); "
              "this LSF home numbers its jobs alone, so another home may hand out the same ids",
              file=sys.stderr)
        return None


def _read_id(path: Path) -> int:
    try:
        text = path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError, PermissionError, UnicodeDecodeError):
        return 0
    return int(text) if text.isascii() and text.isdecimal() and len(text) <= 18 else 0


def peek_job_id(lsf_home: Path, counter: Optional[Path] = None) -> int:
    """The id the next accepted job will get (caller holds the lock, and machine_ids' when ``counter``).

    The largest of: this home's counter, its high-water mark + 1, its job folders + 1 (so ids grow within a
    home), the floor (first_id), and the machine-wide ``counter`` + 1 (so no other home has handed it out).
    Nothing is written: bsub validates a job with this id (for ``%J`` in file names) and only commits it
    (commit_job_id) once the job is accepted: a rejected bsub must not use up an id, as in LSF.
    """
    seen = [int(e.name) for e in (lsf_home / "jobs").iterdir() if e.name.isdecimal()]
    shared = [_read_id(counter) + 1] if counter is not None else []
    value = max([_read_id(lsf_home / "next_id"), _read_id(high_water_path(lsf_home)) + 1,
                 _read_id(_old_high_water_path(lsf_home)) + 1, first_id()]
                + shared + [s + 1 for s in seen])
    if value > MAX_JOB_ID:
        marks = f"{high_water_path(lsf_home)}" + (f" and {counter}" if counter is not None else "")
        raise LsfError(f"job ids are used up (next would be {value}, LSF's largest is {MAX_JOB_ID}); "
                       f"set SUMMIT_JOBS_LSF_FIRST_ID lower and remove {marks}")
    return value


def commit_job_id(lsf_home: Path, value: int, counter: Optional[Path] = None) -> None:
    """Record ``value`` as handed out (caller holds the locks): this home's counter, the mark beside it, and
    the machine-wide ``counter``."""
    if counter is not None:         # first: a failure here leaves this home's numbering untouched
        write_bytes(counter, str(value).encode(), 0o600)
    write_bytes(lsf_home / "next_id", str(value + 1).encode())
    write_bytes(high_water_path(lsf_home), str(value).encode())


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


class ExitWaiter:
    """Sleeps up to a given time, waking at once when one of the watched processes ends.

    Why: the supervisor and the launchers look at their processes every 0.05 s (a warning or a bkill is due,
    a rank failed); waking at an exit ends a job, or a step, without waiting out the rest of the interval.
    Each process is watched through a pidfd (Linux 5.3 and later); where one cannot be had, waiting is a
    plain sleep and exits are seen at the next look, as before.
    """

    def __init__(self, pids: List[int]):
        self.fds: Dict[int, int] = {}
        for pid in pids:
            try:
                self.fds[pid] = os.pidfd_open(pid)
            except (AttributeError, OSError):
                pass

    def forget(self, pid: int) -> None:
        """Stop watching ``pid`` (it ended: its pidfd would wake every wait at once)."""
        fd = self.fds.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def wait(self, seconds: float) -> None:
        if self.fds:
            select.select(list(self.fds.values()), [], [], seconds)
        else:
            time.sleep(seconds)

    def close(self) -> None:
        for pid in list(self.fds):
            self.forget(pid)


def _proc_stat(pid: int) -> Optional[List[str]]:
    """Fields of ``/proc/<pid>/stat`` after the command name: [0] state, [2] process group."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()


def group_members(pgid: int) -> List[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    if not os.path.isdir("/proc"):          # no /proc: ask the kernel whether the group still exists
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdecimal():
            fields = _proc_stat(int(entry))
            if fields and len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
                members.append(int(entry))
    return members


def _environ(pid: int) -> Optional[List[bytes]]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read().split(b"\0")
    except OSError:
        return None


def _has_job_marker(pid: int, job_id: int, lsf_home: Optional[Path] = None) -> bool:
    """Whether a process carries the job's LSB_JOBID (every process the job starts inherits it), and,
    when ``lsf_home`` is given, this state folder's SUMMIT_JOBS_LSF_HOME (two homes may both have a job 7)."""
    words = _environ(pid)
    if words is None:
        return not os.path.isdir("/proc")
    # An element of a job array shares LSB_JOBID with its siblings; JOB_RECORD names the element's own record.
    record = next((w for w in words if w.startswith(JOB_RECORD.encode() + b"=")), None)
    if record is not None:
        if record != f"{JOB_RECORD}={job_id}".encode():
            return False
    elif f"LSB_JOBID={job_id}".encode() not in words:
        return False
    return lsf_home is None or f"SUMMIT_JOBS_LSF_HOME={lsf_home}".encode() in words


def job_processes(job: Dict, lsf_home: Optional[Path] = None) -> List[int]:
    """Every live process of a running job, on every virtual node: LSF's process tracking.

    IBM LSF tracks a job's processes (with LSF_PROCESS_TRACKING=Y, the installed
    default, in a cgroup per job; else by PIM's process-table scans) and signals
    all of them for every job control action: the -wa warning, the run limit,
    bkill's TERMINATE, bkill -s. Remote tasks that blaunch started are tracked on
    their hosts by RES. A process group alone misses what leaves it: torchrun
    starts its workers in sessions of their own, and an orphan reparented to
    init keeps no tie to the script. Here a job's processes are its process
    group plus every process that carries its LSB_JOBID and SUMMIT_JOBS_LSF_HOME
    in its environment (set for the script and inherited by whatever it starts;
    bsub takes them out of the environment of the supervisor it starts, so a
    chain's next link is not counted as a process of the link that queued it).
    """
    pgid = job.get("pgid")
    members = group_members(pgid) if pgid else []
    if members and not any(_has_job_marker(p, job["id"]) for p in members):
        members = []                    # the group id was reused by somebody else's processes
    if not os.path.isdir("/proc"):
        return members
    home = lsf_home if lsf_home is not None else job.get("lsf_home")
    found = set(members)
    mine = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdecimal():
            continue
        pid = int(entry)
        if pid in found or pid == mine:
            continue
        fields = _proc_stat(pid)
        if not fields or fields[0] in ("Z", "X"):
            continue
        if _has_job_marker(pid, job["id"], Path(home) if home else None):
            found.add(pid)
    return sorted(found)


def signal_job(job: Dict, sig: int, lsf_home: Optional[Path] = None) -> List[int]:
    """Send ``sig`` to every process of the job (job_processes); the pids signalled."""
    pids = job_processes(job, lsf_home)
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:         # gone, not ours, or a number that is no signal (a record of an older bsub)
            pass
    return pids


def end_job_group(job: Dict, grace: float, lsf_home: Optional[Path] = None) -> bool:
    """TERM every process of the job, KILL after ``grace`` s; True once no process of the job is left.

    The group id was recorded when the job started. Before signalling, at least
    one member must carry the job's LSB_JOBID, so a group id the system has
    since reused for somebody else's processes is never signalled; processes
    that left the group are found by their environment (job_processes).
    """
    if not job_processes(job, lsf_home):
        return True
    signal_job(job, signal.SIGTERM, lsf_home)
    deadline = time.time() + grace
    while time.time() < deadline and job_processes(job, lsf_home):
        time.sleep(0.05)
    deadline = time.time() + 5.0
    while signal_job(job, signal.SIGKILL, lsf_home):
        if time.time() > deadline:
            return False
        time.sleep(0.05)
    return True


LOST = "embedded LSF supervisor process is gone; job lost"
#: The variable naming the record (job, or element of a job array) a process belongs to.
JOB_RECORD = "SUMMIT_JOBS_LSF_JOB"


def lsf_id(job: Dict) -> int:
    """The id LSF shows for a record: its array's id for an element of a job array, else its own."""
    return int(job.get("array_id") or job["id"])


def shown_id(job: Dict) -> str:
    """``12`` or, for an element of a job array, ``12[3]``."""
    return f"{lsf_id(job)}[{job['index']}]" if job.get("array_id") else str(job["id"])


def mark_lost(lsf_home: Path, job: Dict, why: str) -> None:
    """Record a job whose supervisor died as EXIT, never as DONE (caller holds the lock)."""
    job.update(state="EXIT", exit_reason=f"{LOST}{why}", finish_time=time.time(), pend_reason=None)
    save_job(lsf_home, job)


def reap_lost(lsf_home: Path, jobs: List[Dict]) -> None:
    """End jobs whose supervisor died (machine reboot, kill -9); caller holds the lock.

    A running job's process group is ended first and its nodes are freed (the
    job marked EXIT) only once none of its processes is left, so a lost job
    never shares nodes with the next one. While the job's watchdog is alive it
    does this itself, with the normal kill grace.
    """
    for job in jobs:
        if job["state"] not in ACTIVE or pid_alive(job.get("supervisor_pid")) \
                or time.time() - job["submit_time"] <= 5:
            continue
        if job["state"] == "RUN":
            if pid_alive(job.get("watchdog_pid")):
                continue
            if not end_job_group(job, grace=min(1.0, float(job.get("kill_grace") or 1.0)), lsf_home=lsf_home):
                continue          # unkillable for now: its nodes stay busy, tried again next time
            mark_lost(lsf_home, job, "; its processes were killed")
            remove_job_tmp(lsf_home, job)
        else:
            mark_lost(lsf_home, job, "")


def remove_job_tmp(lsf_home: Path, job: Dict) -> None:
    """Remove the job's per-node temporary folders (node_tmp_dir), as LSF removes a job's temporary
    directory when it ends. The elements of an array share their array's id, so each removes the folders
    of its own hosts, and the last one the array's folder."""
    root = job_tmp_root(lsf_home, lsf_id(job))
    if not job.get("array_id"):
        shutil.rmtree(root, ignore_errors=True)
        return
    for host in job.get("hosts") or []:
        shutil.rmtree(root / str(host), ignore_errors=True)
    with contextlib.suppress(OSError):
        root.rmdir()


def fmt_time(ts: Optional[float]) -> str:
    """LSF's short time form, e.g. ``Nov 21 17:30``."""
    if not ts:
        return "-"
    return time.strftime("%b %d %H:%M", time.localtime(ts))


def asked_among(asked: List[str], names: List[str], unknown: str) -> Tuple[List[str], List[str]]:
    """(the names a listing command shows: all of them, or the asked ones, in their own order; the asked names
    that are not among them). Each unknown name gets IBM's line ``NAME: <unknown>`` on stderr."""
    missing = [a for a in asked if a not in names]
    for name in missing:
        print(f"{name}: {unknown}", file=sys.stderr)
    return [n for n in names if not asked or n in asked], missing


def jobs_for_report(command: str) -> Optional[List[Dict]]:
    """Every job of this LSF home, lost ones marked first, for a command that only reads (bacct, bhosts,
    bqueues); None after one line on stderr in the command's name when the home cannot be read, the exit
    status 255 IBM's commands use then."""
    from summit_jobs.errors import describe_os_error
    try:
        lsf_home = home()
        with locked(lsf_home):
            jobs = all_jobs(lsf_home)
            reap_lost(lsf_home, jobs)
    except (LsfError, SystemExit) as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None
    except OSError as exc:
        print(f"{command}: embedded LSF state: {describe_os_error(exc)}", file=sys.stderr)
        return None
    return jobs

