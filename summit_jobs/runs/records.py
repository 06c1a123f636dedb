"""Run records: what was submitted, where, with which code, and under which job ids.

Every submission gets a run directory (on the machine that runs the jobs)
holding the exact job script (``job.lsf``, ``job.sbatch`` under Slurm), ``plan.json``, ``profile.yaml`` (the
profile as used, overrides included), and ``run.json`` (machine, host, git
revision of the training code, job ids). The trainer writes its checkpoints
there too, which is what lets chained jobs resume. A copy of ``run.json`` goes
into a local index (``$XDG_DATA_HOME/summit-jobs/runs``) so that ``status``,
``cancel`` and ``logs`` find a run by name or job id from the laptop that
submitted it. Nothing existing is overwritten without ``--force``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from summit_jobs import schedulers
from summit_jobs.errors import UserError
from summit_jobs.hosts.host import Host
from trainer import rundir
from trainer import files

RECORD = rundir.RECORD
#: The script's name in the run directories of LSF runs and of records that do not name their script.
SCRIPT = rundir.SCRIPT
#: LSF's largest job id.
MAX_JOB_ID = schedulers.MAX_DECIMAL_JOB_ID


def index_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "summit-jobs" / "runs"


def training_code_revision() -> Optional[Dict[str, object]]:
    """Git revision of the trainer package (found without importing it: no torch here)."""
    import importlib.util
    spec = importlib.util.find_spec("trainer")
    if spec is None or not spec.origin:
        return None
    folder = os.path.dirname(spec.origin)
    try:
        rev = subprocess.run(["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", folder, "status", "--porcelain", "--", "."], capture_output=True,
                               text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {"commit": rev.stdout.strip(), "dirty": bool(dirty.stdout.strip()), "path": folder}


def _index_path(record: Dict[str, object]) -> Path:
    key = f"{(record.get('ssh') or {}).get('host', '')}:{record['run_dir']}"
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    return index_dir() / f"{record['name']}-{digest}.json"


def _save_index(record: Dict[str, object]) -> None:
    path = _index_path(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomic(path, json.dumps(record, indent=2))


def script_name(record: Optional[Dict]) -> str:
    """The job script's name in the run's directory: the record's ``script`` (its scheduler's name for one,
    ``job.sbatch`` under Slurm); ``job.lsf`` for records written before runs named it."""
    return str((record or {}).get("script") or SCRIPT)


def read_script(host: Host, run_dir: str, record: Optional[Dict]) -> str:
    """The text of the run's job script ("" when it is gone)."""
    return host.read_text(host.join(run_dir, script_name(record))) or ""


def _holds_a_run(host: Host, run_dir: str) -> bool:
    """A run record, or the script of any scheduler's run, is in ``run_dir``."""
    names = [RECORD, SCRIPT] + [s.script_name for s in schedulers.known()]
    return any(host.exists(host.join(run_dir, name)) for name in dict.fromkeys(names))


def create(host: Host, plan, profile, script: str, *, force: bool, ssh: Optional[Dict[str, object]]) -> Dict:
    """Make the run directory and write the record files (before anything is submitted)."""
    run_dir = plan.run_dir
    join = host.join
    previous: List[str] = []
    first_created = ""
    if _holds_a_run(host, run_dir):
        if not force:
            raise UserError(f"{host.label}:{run_dir} already holds a run. Pick another --run-dir (or let the "
                            "default name it), or pass --force to submit into it again (its checkpoints are "
                            "kept and the new jobs resume from them).")
        old = host.read_text(join(run_dir, RECORD))
        if old:
            try:
                before = json.loads(old)
                previous = list(before.get("job_ids") or [])
                first_created = str(before.get("first_created") or before.get("created") or "")
            except (ValueError, AttributeError):
                previous = []
    try:
        host.makedirs(run_dir)
    except OSError as exc:
        raise UserError(f"cannot create the run directory {host.label}:{run_dir}: {exc.strerror or exc}. "
                        "Choose a writable --run-dir / --runs-dir.") from None
    record: Dict[str, object] = {
        "name": os.path.basename(run_dir.rstrip("/")), "run_dir": run_dir, "machine": profile.name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git": training_code_revision(),
        "host": host.label, "ssh": ssh, "scheduler": schedulers.for_profile(profile).name,
        "script": plan.script_name,
        "embedded": profile.scheduler.embedded,
        "virtual_nodes": profile.scheduler.virtual_nodes, "cores": profile.node.cores,
        "submit_mode": plan.submit_mode, "chain": plan.chain, "job_name": plan.job_name,
        "job_ids": previous, "previous_job_ids": previous, "lsf_home": embedded_home(host),
    }
    if previous and first_created:
        # when the run's first jobs were submitted: status checks that a job under one of the run's ids was not
        # submitted before the run existed (ids are reused), and the previous jobs count from here
        record["first_created"] = first_created
    if previous or force:
        restart_chain(host, run_dir)
    host.write_file(join(run_dir, plan.script_name), script, force=force)
    host.write_file(join(run_dir, "plan.json"), json.dumps(plan.to_dict(), indent=2, default=str), force=force)
    import yaml  # here, not at the top: only writing a run's record needs it
    host.write_file(join(run_dir, "profile.yaml"),
                    yaml.safe_dump(_plain(dataclasses.asdict(profile)), sort_keys=False), force=force)
    save(host, record)
    return record


def restart_chain(host: Host, run_dir: str) -> None:
    """Before a run is submitted again by hand (submit --force, resume): a run cancelled before trains again
    (its links must not end at the cancel marker), and the chain's --max-links counts from here (the links
    chain.jobs holds so far are written to CHAIN_START)."""
    join = host.join
    try:
        host.remove(join(run_dir, rundir.CANCELLED))
    except OSError as exc:
        raise UserError(f"cannot remove the cancel marker {host.label}:{join(run_dir, rundir.CANCELLED)} "
                        f"({exc.strerror or exc}): remove it, or choose another --run-dir.") from None
    queued = [line for line in (host.read_text(join(run_dir, rundir.CHAIN)) or "").splitlines() if line.strip()]
    host.write_file(join(run_dir, rundir.CHAIN_START), f"{len(queued)}\n", force=True)


def follow_target(record: Dict[str, object]) -> str:
    """How a printed hint names the run: by its name where no other run recorded here has it, else by its
    run directory (``status NAME`` refuses a name two runs share)."""
    name = str(record.get("name") or "")
    same = [r for r in indexed() if str(r.get("name")) == name]
    if name and len(same) <= 1:
        return name
    return str(record.get("run_dir"))


def embedded_home(host: Host) -> Optional[str]:
    """The state folder of the embedded LSF that ``host`` submits to, as an absolute path; None for a real
    LSF or over SSH (the far side's environment decides there).

    Why recorded: every test, the demo and a user's own experiments may each run an embedded LSF of their
    own (SUMMIT_JOBS_LSF_HOME) while one run index lists all their runs. A job id means something only
    within the LSF that gave it, so the lifecycle commands ask that LSF about a run's jobs, and resolve a
    bare job id only among the runs of the LSF in use (find).
    """
    if host.is_remote or not getattr(host, "embedded", False):
        return None
    from summit_jobs.schedulers.lsf import home as lsfhome
    return os.path.realpath(lsfhome.home_path(getattr(host, "env", None)))


def current_embedded_home() -> str:
    """The embedded LSF this invocation uses (SUMMIT_JOBS_LSF_HOME or its default), as an absolute path."""
    from summit_jobs.schedulers.lsf import home as lsfhome
    return os.path.realpath(lsfhome.home_path())


def in_lsf_home(record: Dict[str, object], lsf_home: str) -> bool:
    """Whether a run's job ids are ids of the embedded LSF at ``lsf_home``.

    A run without a recorded LSF home (on a real LSF, over SSH, or recorded before homes were) passes: its
    ids are the only ones its LSF knows.
    """
    home = record.get("lsf_home")
    if not home or record.get("ssh"):
        return True
    return os.path.realpath(str(home)) == lsf_home


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def save(host: Host, record: Dict[str, object]) -> None:
    """Write run.json on the run's host and refresh the local index."""
    join = host.join
    host.write_file(join(str(record["run_dir"]), RECORD), json.dumps(record, indent=2), force=True)
    _save_index(record)


def _job_id(value: object, record: Optional[Dict] = None) -> Optional[str]:
    """A job id of the run's scheduler (``record``'s; LSF's for none) as text, or None when ``value`` is not
    one. The ids are opaque here: the scheduler says what its ids look like (``Scheduler.job_id``)."""
    return schedulers.safe_job_id(schedulers.for_record(record).job_id(value))


def _check_ids(rec: Dict[str, object], key: str, where: str, required: bool) -> None:
    if key not in rec and not required:
        return
    ids = rec.get(key)
    if not isinstance(ids, list):
        raise UserError(f"{where}: '{key}' must be a list of job ids, not {ids!r}; the run record is damaged. "
                        "Fix or restore the file, or name the job ids directly.")
    scheduler = schedulers.for_record(rec)
    clean = [schedulers.safe_job_id(scheduler.job_id(j)) for j in ids]
    bad = [j for j, c in zip(ids, clean) if c is None]
    if bad:
        raise UserError(f"{where}: '{key}' holds {bad[0]!r}, which is not a job id of {scheduler.label} "
                        f"({scheduler.job_id_words}); the run record is damaged. Fix or restore the file.")
    rec[key] = clean


def _check_ssh(ssh: object, where: str) -> None:
    if ssh is None:
        return
    if not isinstance(ssh, dict) or not isinstance(ssh.get("host"), str) or not ssh["host"].strip():
        raise UserError(f"{where}: 'ssh' must be null or a mapping with a 'host' name, not {ssh!r}.")
    port = ssh.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
        raise UserError(f"{where}: ssh port {port!r} is not a port number (1 to 65535).")
    for key in ("user", "key_file", "known_hosts"):
        if ssh.get(key) is not None and not isinstance(ssh[key], str):
            raise UserError(f"{where}: ssh {key} {ssh[key]!r} must be text.")


def check_record(rec: object, where: str) -> Dict[str, object]:
    """A run record as read from ``where``, checked: the fields the lifecycle commands act on.

    Why so strict: run.json files are edited by hand, copied between machines
    and left half-written by killed tools; job ids out of such a file go to
    bkill, so anything that is not plainly a job id is refused with the file named.
    """
    if not isinstance(rec, dict):
        raise UserError(f"{where} is not a run record (a JSON object), it holds {type(rec).__name__}; "
                        "the run record is damaged.")
    kind = rec.get("scheduler")
    if kind not in (None, "") and not (isinstance(kind, str) and kind in schedulers.IMPLEMENTATIONS):
        raise UserError(f"{where}: 'scheduler' {kind!r} is not one this tool drives (known: "
                        f"{', '.join(sorted(schedulers.IMPLEMENTATIONS))}); the run record is damaged.")
    if not isinstance(rec.get("run_dir"), str) or not rec["run_dir"]:
        raise UserError(f"{where}: 'run_dir' {rec.get('run_dir')!r} is not a folder name; the run record is "
                        "damaged.")
    if rec.get("name") is not None and not isinstance(rec["name"], str):
        raise UserError(f"{where}: 'name' {rec['name']!r} must be text.")
    _check_ids(rec, "job_ids", where, required=True)
    _check_ids(rec, "cancelled", where, required=False)
    _check_ssh(rec.get("ssh"), where)
    home = rec.get("lsf_home")
    if home is not None and not (isinstance(home, str) and os.path.isabs(home)):
        raise UserError(f"{where}: 'lsf_home' {home!r} must be null or an absolute folder name; the run record "
                        "is damaged.")
    return rec


def parse_record(data: Optional[bytes], where: str) -> Dict[str, object]:
    """Decode, parse and check a run record's bytes; a clean error naming ``where`` otherwise."""
    if data is None:
        raise UserError(f"{where} does not exist; give a run directory that holds a run.json.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{where} is not UTF-8 text (byte {exc.start}); the run record is damaged.") from None
    try:
        rec = json.loads(text)
    except ValueError as exc:
        raise UserError(f"{where} is not valid JSON ({exc}); the run record is damaged.") from None
    return check_record(rec, where)


def indexed() -> List[Dict[str, object]]:
    """The runs this machine submitted. A damaged index entry is skipped with a warning naming it."""
    out = []
    d = index_dir()
    if d.is_dir():
        for p in sorted(d.glob("*.json")):
            try:
                out.append(parse_record(p.read_bytes(), str(p)))
            except (UserError, OSError) as exc:
                print(f"summit-jobs: warning: skipping run index entry {p}: {exc}", file=sys.stderr)
    return sorted(out, key=lambda r: str(r.get("created", "")))


def find(target: str) -> List[Dict[str, object]]:
    """Run records matching a run directory, a run name, or a job id (empty list when none)."""
    local = Path(target).expanduser()
    if (local / RECORD).is_file():
        rec = parse_record((local / RECORD).read_bytes(), str(local / RECORD))
        if not rec.get("ssh"):
            rec["run_dir"] = str(local.resolve())
        return [rec]
    records = indexed()
    # A job id of a run's scheduler (opaque: 123, 123.server, ƒ2Mq...), of the runs of the LSF in use only:
    # another embedded LSF's run may hold the same id (in_lsf_home).
    here = current_embedded_home()
    by_id = [r for r in records if in_lsf_home(r, here)
             and (jid := _job_id(target, r)) is not None and jid in [str(j) for j in r.get("job_ids") or []]]
    if by_id or target.isdecimal():
        return by_id
    stripped = target.rstrip("/")
    return [r for r in records if r.get("name") == stripped or r.get("run_dir") == stripped]


def with_chain_links(host: Host, record: Dict[str, object], ids: List[str]) -> List[str]:
    """``ids`` plus the links a chain until complete queued itself (``chain.jobs`` in the run directory).

    Those links are submitted by the job script, not by this tool, so run.json
    never hears of them; the file holds one job id per line, appended by each
    link. A line that is not a job id is skipped (the file is the job's, not ours).
    """
    join = host.join
    text = host.read_text(join(str(record["run_dir"]), rundir.CHAIN)) or ""
    out = list(ids)
    for line in text.splitlines():
        jid = _job_id(line.strip(), record)
        if jid is not None and jid not in out:
            out.append(jid)
    return out


def output_files(script: str, job_id: str, record: Optional[Dict] = None) -> List[str]:
    """The output files (relative to the run directory) a job of ``script`` writes, as the run's scheduler
    names them."""
    return schedulers.for_record(record).output_files(script, job_id)
