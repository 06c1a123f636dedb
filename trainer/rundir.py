"""The run directory's contract: every file name in it and the event records. Torch-free.

Why one module: the job script (templates), the trainer, ``status`` and
``report`` all read or write the same files, and a name spelled in four places
drifts. The login side imports this module too (it imports nothing but the
standard library), so a name changes here or nowhere.

The files of ``<run-dir>``:

- ``plan.json``, ``run.json`` (written at submit), the job script (``SCRIPT``;
  under Slurm ``job.sbatch``, which run.json names),
  ``chain.jobs`` (ids of links submitted by the chain), ``<name>.<id>.out``;
- ``exitcode.<id>``: the job script's exit code, written last by the script;
- ``metrics.jsonl``: one JSON record per logged step or evaluation;
- ``events.jsonl``: one JSON record per thing a job did that status and
  report must know (below), appended by the trainer and the job script;
- ``COMPLETE``: training and the final test are done (later links exit 0);
- ``run_config.json``: the trainer's resolved configuration;
- ``checkpoints/ckpt-<step:09d>.pt``;
- ``tensorboard/``: TensorBoard event files of the same records (``--tensorboard``);
- ``scores/<checkpoint stem>.npz``: every test video's scores from the final
  test of that checkpoint (``scores/test-only-<stem>.npz`` from ``--test-only``;
  format in trainer.scores), read by ``summit-jobs fuse``;
- ``.rendezvous.<job>.json``: where the ranks of a job meet (trainer.rendezvous);
- ``.warning.<job>``: written by the job script when its job got the warning
  signal. Ranks poll it (``warned``) as well as catching the signal: where
  LSF signals only the script, or a launcher between them ignores the signal
  (torchrun's agent, trainer.agent), the file still reaches every rank, on
  every node, through the parallel file system.

Events (``event`` is the kind; every record has ``time`` and ``job``, the LSF
job id, "" outside a job):

- ``launch``: a trainer started on this run (rank 0, before its first step):
  ``mode`` (``train`` or ``test_only``), ``options`` (every trainer option as
  plain values), ``seed``, ``ranks``, ``engine``, ``torch``, ``python``,
  ``host``, ``code_revision`` (the git commit of the trainer's source tree, or
  None), ``summit_jobs`` (the installed version, or None), ``step`` (where
  training starts: 0, or the step resumed from), ``total_steps`` (the steps
  of the whole run under its schedule, before --max-steps; status's ETA) and, when resuming,
  ``resumed_from`` (the checkpoint's file name); ``already_complete`` (true)
  when the launch found COMPLETE and trains nothing;
- ``resumed``: ``step`` the trainer resumed from (``checkpoint``: its file name);
- ``stopped``: ``step`` and ``reason`` (signal or step limit), checkpoint saved;
  ``weights_agree``: whether every rank held the same weights then;
- ``complete``: all epochs and the final test done, ``step``, ``epochs``,
  ``weights_agree``;
- ``already_complete``: the job found COMPLETE and did nothing (``by``:
  ``trainer`` or ``script``);
- ``chain_stopped``: a link of a chain until complete ended without queueing
  the next one before COMPLETE (``by``: ``script``), ``reason`` in words and
  ``exit``, the link's exit code.

- ``link_start``: the job script is about to start the job's step, whatever it
  runs (``by``: ``script``): ``metrics_offset``, the size of metrics.jsonl
  then (the job's records are the ones after it: a user's program writes no
  job id in its records), and ``checkpoint``, the newest checkpoint's name
  ("" for none);
- ``link_end``: the step ended (``by``: ``script``): ``exit``, ``warned``
  (the warning signal came), ``cancelled`` (a stop signal: bkill, cancel, the
  run limit), ``complete`` (COMPLETE exists), ``start_checkpoint`` and
  ``checkpoint`` (the newest one now).

``python -m trainer.rundir event RUN_DIR KIND [NAME=VALUE ...]`` appends one
record from a job script, the values as strings (``exit`` as a number): the
script's own text (bsub's message) never has to be quoted for JSON in shell.
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

from trainer import rankenv

PLAN = "plan.json"
RECORD = "run.json"
#: The job script of an LSF run (and of any run whose run.json names none).
SCRIPT = "job.lsf"
CHAIN = "chain.jobs"
METRICS = "metrics.jsonl"
EVENTS = "events.jsonl"
COMPLETE = "COMPLETE"
#: Written by ``summit-jobs cancel`` before it kills a run's jobs: a chain's link that queues the next one
#: while the cancel runs kills it, and a link that starts anyway ends at once. Submitting into the run
#: directory again removes it.
CANCELLED = "CANCELLED"
#: How many lines chain.jobs had when the run was last submitted by hand (submit --force, resume): a chain's
#: --max-links counts the links queued since then, so a chain stopped by its cap goes on when resumed.
CHAIN_START = ".chain-start"
RUN_CONFIG = "run_config.json"
CHECKPOINTS = "checkpoints"
TENSORBOARD = "tensorboard"
SCORES = "scores"
EVENT_KINDS = ("launch", "resumed", "stopped", "complete", "already_complete", "chain_stopped",
               "ended_by_scheduler", "link_start", "link_end")
#: How long ``code_revision`` waits for git (a hung network file system must not hold the start).
GIT_TIMEOUT_S = 2.0

PathLike = Union[str, "os.PathLike[str]"]


def nvme_data_dir(nvme_path: str) -> str:
    """Where a job's staging step puts a node's shards under the node's NVMe folder (the trainer's --data
    there): one rule for the planner, which writes it into the script, and stage-data's plans, which print it.
    Here because both sides read it and this contract is cheap to import."""
    return f"{nvme_path}/summit-jobs/data"


def exitcode_name(job_id: Union[int, str]) -> str:
    """``exitcode.<id>``: written by the job script as its last act."""
    return f"exitcode.{job_id}"


#: A step checkpoint's name (``checkpoint_name``): what a run resumes from.
CKPT_RE = re.compile(r"^ckpt-(\d{9})\.pt$")
#: The checkpoint of the best evaluation so far, beside the step checkpoints.
BEST = "best.pt"


def checkpoint_name(step: int) -> str:
    return f"ckpt-{step:09d}.pt"


def ckpt_dir(run_dir: PathLike) -> Path:
    return Path(run_dir) / CHECKPOINTS


def list_checkpoints(run_dir: PathLike) -> List[Path]:
    """The step checkpoints of ``run_dir``, oldest first (torch-free: the trainer's preflight lists them too)."""
    d = ckpt_dir(run_dir)
    if not d.is_dir():
        return []
    return sorted((p for p in d.iterdir() if CKPT_RE.match(p.name)), key=lambda p: p.name)


def latest(run_dir: PathLike) -> Optional[Path]:
    """The newest step checkpoint of ``run_dir``, or None."""
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def warning_name(job: Union[int, str]) -> str:
    """``.warning.<job>``: the job script's record that its job got the warning signal."""
    return f".warning.{job}"


def warned(run_dir: PathLike, job: Optional[str] = None) -> bool:
    """Whether the job script of this job (``job_id()``, or ``job``) wrote its warning file into ``run_dir``.

    One stat of a file that does not exist until the warning: a few microseconds on a
    local disk, one metadata lookup on a parallel file system.
    """
    job = job_id() if job is None else job
    if not job:
        return False
    try:
        return os.path.exists(os.path.join(os.fspath(run_dir), warning_name(job)))
    except (OSError, ValueError):
        return False


def job_id() -> str:
    """This process's job id (LSF's LSB_JOBID, else Slurm's SLURM_JOB_ID), or "" outside a job: the job script
    names its warning file and events with the same id (rankenv reads it)."""
    return rankenv.job_id(os.environ)


def event(run_dir: PathLike, kind: str, **fields: object) -> None:
    """Append one event record in a single write (O_APPEND: records of concurrent writers never interleave).

    A record that cannot be written is dropped: events inform reports, and a
    full disk must not turn a finished training into a failed one.
    """
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown event kind {kind!r}; known: {', '.join(EVENT_KINDS)}")
    record: Dict[str, object] = {"time": round(time.time(), 3), "job": job_id(), "event": kind}
    record.update(fields)
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    try:
        fd = os.open(Path(run_dir) / EVENTS, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        return
    try:
        os.write(fd, line if ends_whole(fd) else b"\n" + line)
    except OSError:
        pass
    finally:
        os.close(fd)


def ends_whole(fd: int) -> bool:
    """Whether the file open on ``fd`` is empty or ends with a line break.

    Why: a writer cut short (a full disk, a kill in the middle of a write)
    leaves a line without its end; a record appended right after it would join
    that line and be lost to every reader. Appenders start on a new line then.
    """
    try:
        size = os.fstat(fd).st_size
        return size == 0 or os.pread(fd, 1, size - 1) == b"\n"
    except OSError:  # not readable: append as before
        return True


def code_revision(folder: PathLike) -> Optional[str]:
    """The git commit of the checkout ``folder`` is in, or None (not a checkout, no git, git too slow).

    Why asked at every launch: a chain's links may run different code (a fix
    pulled between two links), and a launch record that names the commit says
    which numbers came from which code.
    """
    import subprocess  # here, not at the top: the login side reads this module's names, only launches run git
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=str(folder), capture_output=True, text=True,
                             timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    rev = out.stdout.strip()
    return rev if out.returncode == 0 and len(rev) in (40, 64) and rev.isalnum() else None


def installed_version(distribution: str) -> Optional[str]:
    """The installed version of ``distribution`` (from its metadata, not by importing it), or None."""
    from importlib import metadata
    try:
        return metadata.version(distribution)
    except (metadata.PackageNotFoundError, ValueError):
        return None


def host_name() -> str:
    """The node this process runs on: the embedded LSF's virtual node name, else the host name."""
    import socket
    return os.environ.get("SUMMIT_JOBS_VNODE") or socket.gethostname()


def launch(run_dir: PathLike, options: Dict[str, object], **fields: object) -> None:
    """Append the ``launch`` event: ``options`` and ``fields`` (seed, ranks, engine, torch, step, ...) with
    the code revision, the installed summit-jobs version, the host and the Python version added here."""
    import platform
    event(run_dir, "launch", options=options, code_revision=code_revision(Path(__file__).resolve().parent),
          summit_jobs=installed_version("summit-jobs"), host=host_name(), python=platform.python_version(),
          **fields)


def json_records(text: str, keep: Callable[[Dict[str, object]], bool]) -> List[Dict[str, object]]:
    """The JSON objects of a JSON-lines file that ``keep`` accepts, in file order; a torn line (a writer
    killed mid-line) or a foreign one is skipped. metrics.jsonl and events.jsonl are read with it."""
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and keep(rec):
            out.append(rec)
    return out


def json_records_at(data: bytes, keep: Callable[[Dict[str, object]], bool],
                    base: int = 0) -> Tuple[List[Dict[str, object]], List[int]]:
    """As :func:`json_records`, for the bytes of a JSON-lines file from byte ``base`` on (whole lines), with
    the byte offset in the file at which each record's line starts: a ``link_start`` event's
    ``metrics_offset`` says which records came after it."""
    out: List[Dict[str, object]] = []
    offsets: List[int] = []
    at = base
    for line in data.split(b"\n"):
        start, at = at, at + len(line) + 1
        try:
            rec = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            continue
        if isinstance(rec, dict) and keep(rec):
            out.append(rec)
            offsets.append(start)
    return out, offsets


def parse_events(text: str) -> List[Dict[str, object]]:
    """Whole event records in file order; torn or foreign lines are skipped."""
    return json_records(text, lambda r: r.get("event") in EVENT_KINDS and isinstance(r.get("job", ""), str))


def job_events(events: List[Dict[str, object]], job: str) -> List[Dict[str, object]]:
    return [e for e in events if e.get("job") == job]


def last_event(events: List[Dict[str, object]], kind: str) -> Optional[Dict[str, object]]:
    found = [e for e in events if e.get("event") == kind]
    return found[-1] if found else None


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m trainer.rundir event RUN_DIR KIND [NAME=VALUE ...]`` (see the module's docstring)."""
    import sys
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[0] != "event" or any("=" not in a for a in args[3:]):
        print("usage: python -m trainer.rundir event RUN_DIR KIND [NAME=VALUE ...]", file=sys.stderr)
        return 2
    fields: Dict[str, object] = {}
    for pair in args[3:]:
        name, value = pair.split("=", 1)
        fields[name] = int(value) if name == "exit" and value.lstrip("-").isdecimal() else value
    try:
        event(args[1], args[2], **fields)
    except ValueError as exc:
        print(f"trainer.rundir: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
