"""stage-data: archive -> parallel file system (hop 1), placement planning, and the local hop 2.

Why two hops: on Summit-class machines the tape archive (HPSS) is reachable
only from login and transfer nodes, and node-local NVMe only from compute
nodes. Hop 1 runs here (login/transfer node) and copies the shards onto the
parallel file system; hop 2 (``trainer.stage``) runs inside the job with one
rank per node and copies each node's share onto its NVMe.

Hop 1 transports:
- ``posix``: a plain folder (GPFS, Lustre, a laptop disk);
- ``hpss``: ``hsi get <local> : <hpss path>`` per shard, or, when the shards
  were archived together with ``htar -cvf``, ONE ``htar -xvf <archive>
  <member>...`` call naming exactly the missing members (tape wants one ordered
  pass, not parallel recalls).

Every shard lands under a hidden temporary name, is verified against the
manifest's hash, and only then renamed: a killed or failed transfer never
leaves a file under a shard's name. Shards already present and verified are
skipped, transient failures are retried with exponential backoff, a missing
archive member fails at once with its name. A manifest already in ``dest`` is
removed before a shard there is replaced and written again last; one run at a
time per ``dest`` (a FolderLock), and shard names and HPSS paths are checked
before they reach hsi, which reads its arguments as commands.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from summit_jobs.errors import UserError
from summit_jobs.data.pack import human_bytes
from summit_jobs.data.pack import interrupted as interrupted_pack
from summit_jobs import wording
from trainer.rundir import nvme_data_dir  # noqa: F401  (one rule for the NVMe data path)
from summit_jobs.progress import Progress
from trainer import shards, units
from trainer import stage as node_stage

PARTIAL = node_stage.PARTIAL_TAG
#: Messages of hsi/htar that mean "it is not there": retrying cannot help.
NOT_FOUND = ("no such file", "enoent", "not found", "does not exist")
#: Messages that mean the local destination cannot take the file: retrying cannot help either.
LOCAL_WRITE = ("no space left", "enospc", "read-only file system", "erofs", "disk quota exceeded",
               "permission denied")
#: What may reach hsi/htar's command line: hsi reads its arguments as commands, where ';' starts
#: another request, '!' runs a local shell command and spaces or ':' split paths.
HPSS_ARG_RE = re.compile(r"[A-Za-z0-9_./+=,@%~][A-Za-z0-9_./+=,@%~-]*")
#: Retries and parallel transfers beyond these are mistakes, not tuning.
MAX_RETRIES = 20
MAX_JOBS = 256
MAX_RETRY_DELAY = 3600.0


def load_manifest(path: str) -> Tuple[Path, Dict[str, object]]:
    """The manifest's path and contents; a missing one in a folder an interrupted pack left says so, and how to
    finish that pack (summit_jobs.data.pack.interrupted)."""
    p = Path(path)
    try:
        return (p / shards.MANIFEST_NAME if p.is_dir() else p), shards.read_manifest(p)
    except shards.ShardError as exc:
        folder = p if p.is_dir() else p.parent
        why = interrupted_pack(folder) if not (folder / shards.MANIFEST_NAME).exists() else None
        if why:
            raise UserError(f"{exc}: {why}; then stage again.") from None
        raise UserError(f"{exc}. Give --manifest the manifest.json written by `summit-jobs pack`.") from None


def check_job_manifest(manifest: str, nodes: int, policy: str) -> None:
    """``submit --data`` (dry run too): a manifest readable here is parsed and checked before anything is queued.

    Why: the job's staging step would find the same fault only once the job runs,
    after its wait in the queue. The checks are the staging step's own
    (trainer.stage.check: readable, well formed, enough training shards for a
    partition over ``nodes``). A path that does not exist here names a file on the
    machine that runs the job, and is left to the job's staging step, unless its
    folder is here with the shards of an interrupted pack.
    """
    path = Path(manifest)
    if not path.exists():
        why = interrupted_pack(path.parent) if path.name == shards.MANIFEST_NAME else None
        if why:
            raise UserError(f"--data: manifest {path} does not exist: {why}. Nothing was submitted.")
        return
    try:
        data = shards.read_manifest(path)
    except shards.ShardError as exc:
        text = str(exc) if str(exc).startswith("manifest ") else f"manifest {exc}"
        raise UserError(f"--data: {text}. Nothing was submitted: give --data a whole manifest.json as `summit-jobs "
                        "pack` or `stage-data` writes it (run that again if it was cut short).") from None
    try:
        node_stage.placement(data, nodes, policy)
    except node_stage.StageError as exc:
        text = str(exc).replace("use --policy replicate", "use --stage-policy replicate")
        raise UserError(f"--data: manifest {path}: {text}. Nothing was submitted.") from None


# ---- placement plan ---------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeShare:
    node: int
    shards: Tuple[str, ...]
    bytes: int
    seconds: float


@dataclass(frozen=True)
class StagePlan:
    machine: str
    nodes: int
    policy: str
    total_bytes: int
    shard_count: int
    shares: Tuple[NodeShare, ...]
    capacity_bytes: int
    rate_gbps: float
    warnings: Tuple[str, ...]
    #: Whether the machine's nodes have node-local NVMe (node.nvme_path): without it there is no hop 2, and the
    #: job's ranks read the shards from the parallel file system folder.
    node_local_nvme: bool = True

    def to_dict(self) -> Dict[str, object]:
        return {
            "machine": self.machine, "nodes": self.nodes, "policy": self.policy, "total_bytes": self.total_bytes,
            "shards": self.shard_count, "node_local_nvme": self.node_local_nvme,
            "nvme_capacity_bytes": self.capacity_bytes, "hop2_rate_gbps": self.rate_gbps,
            "hop2_seconds": max((s.seconds for s in self.shares), default=0.0),
            "per_node": [{"node": s.node, "bytes": s.bytes, "seconds": round(s.seconds, 3), "shards": list(s.shards)}
                         for s in self.shares],
            "warnings": list(self.warnings),
        }


def plan_placement(profile, manifest: Dict[str, object], nodes: int, policy: str) -> StagePlan:
    """Which shards go to which node, bytes and estimated hop-2 time per node, capacity warnings.

    On a machine without node-local NVMe the shares are where the shards would go: there is no hop 2 (the plan
    says so in ``node_local_nvme``, and stage-data points the job at the folder instead)."""
    if nodes < 1:
        raise UserError(f"--nodes {nodes} must be at least 1.")
    if nodes > profile.max_nodes:
        raise UserError(f"--nodes {nodes:,} is above {profile.name}'s maximum of "
                        f"{wording.count(profile.max_nodes, 'node')}.")
    try:
        per_node = node_stage.placement(manifest, nodes, policy)
    except node_stage.StageError as exc:
        raise UserError(f"{exc}.") from None
    node = profile.node
    rates = [r for r in (profile.performance.pfs_read_gbps, node.nvme_write_gbps) if r > 0]
    rate = min(rates) if rates else 0.0
    capacity = int(node.nvme_capacity_gb * 1e9)
    shares = []
    for i, mine in enumerate(per_node):
        b = sum(int(s["bytes"]) for s in mine)
        shares.append(NodeShare(i, tuple(s["name"] for s in mine), b, b / (rate * 1e9) if rate else 0.0))
    warnings = _capacity_warnings(profile, manifest, shares, capacity, policy) if capacity else []
    return StagePlan(profile.name, nodes, policy, sum(int(s["bytes"]) for s in manifest["shards"]),
                     len(manifest["shards"]), tuple(shares), capacity, rate, tuple(warnings),
                     node_local_nvme=bool(node.nvme_path))


def _capacity_warnings(profile, manifest: Dict[str, object], shares: List[NodeShare], capacity: int,
                       policy: str) -> List[str]:
    """A shard larger than a node's NVMe, and nodes whose share is."""
    warnings = []
    for s in manifest["shards"]:
        if int(s["bytes"]) > capacity:
            warnings.append(f"shard {s['name']} ({human_bytes(s['bytes'])}) is larger than a node's NVMe "
                            f"({human_bytes(capacity)} usable on {profile.name}): pack with a smaller "
                            "--shard-size")
    over = [s for s in shares if s.bytes > capacity]
    if over:
        worst = max(over, key=lambda s: s.bytes)
        fix = ("use --policy partition or more nodes" if policy == "replicate"
               else "use more nodes or a smaller dataset")
        warnings.append(f"{len(over)} of {wording.count(len(shares), 'node')} get more than their NVMe holds: node "
                        f"{worst.node} gets {human_bytes(worst.bytes)}, {profile.name} has {human_bytes(capacity)} "
                        f"usable per node (node.nvme_capacity_gb); {fix}")
    return warnings


_seconds = units.duration


def describe(plan: StagePlan, hop1_lines: Sequence[str], hop2_command: str, train_line: str,
             max_nodes_shown: int = 16) -> str:
    """The dry run's plan: hop 1's commands, then hop 2's line and each node's share, or, on a machine without
    node-local NVMe, that there is no hop 2; ``train_line`` is the submit that trains on the staged data."""
    out = [f"stage-data plan on {plan.machine}: {wording.count(plan.shard_count, 'shard')}, "
           f"{human_bytes(plan.total_bytes)}, {wording.count(plan.nodes, 'node')}"
           + (f", policy {plan.policy}" if plan.node_local_nvme else "")]
    out += hop1_lines
    if not plan.node_local_nvme:
        out.append(f"hop 2: none, {plan.machine} has no node-local NVMe in its profile (node.nvme_path): the job's "
                   "ranks read the shards from the parallel file system folder")
        return "\n".join(out + [f"then: {train_line}"] + [f"warning: {w}" for w in plan.warnings])
    out.append("hop 2 (parallel file system -> node-local NVMe, the job's first step, one rank per node):")
    out.append(f"  {hop2_command}")
    out += _share_lines(plan, max_nodes_shown)
    worst = max(plan.shares, key=lambda s: s.bytes)
    if plan.rate_gbps:
        out.append(f"  estimate: ~{_seconds(worst.seconds)} (largest share {human_bytes(worst.bytes)} at "
                   f"{plan.rate_gbps:g} GB/s = min(performance.pfs_read_gbps, node.nvme_write_gbps) per node)")
    if plan.capacity_bytes:
        out.append(f"  NVMe: {human_bytes(plan.capacity_bytes)} usable per node; largest share uses "
                   f"{100.0 * worst.bytes / plan.capacity_bytes:.1f}%")
    out.append(f"then: {train_line}")
    out += [f"warning: {w}" for w in plan.warnings]
    return "\n".join(out)


def _share_lines(plan: StagePlan, max_nodes_shown: int) -> List[str]:
    """One line per node's share (the first and last ones of a large job)."""
    out = []
    shown = list(plan.shares)
    if len(shown) > max_nodes_shown:
        shown = shown[: max_nodes_shown - 2] + [None] + shown[-2:]  # type: ignore[list-item]
    for s in shown:
        if s is None:
            out.append(f"  ... ({wording.count(plan.nodes - max_nodes_shown + 1, 'more node')}; --json lists all)")
            continue
        names = list(s.shards)
        listed = ", ".join(names if len(names) <= 6 else names[:4] + [f"... ({len(names) - 5} more)", names[-1]])
        out.append(f"  node {s.node}: {wording.count(len(names), 'shard')}, {human_bytes(s.bytes)}, "
                   f"~{_seconds(s.seconds)}: {listed}")
    return out


# ---- hop 1 ------------------------------------------------------------------------------------

class TransferError(Exception):
    def __init__(self, msg: str, permanent: bool = False):
        super().__init__(msg)
        self.permanent = permanent


def _run(argv: List[str], cwd: Optional[Path], timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
    except FileNotFoundError:
        raise TransferError(f"{argv[0]} is not on PATH: the hpss transport needs HPSS's {argv[0]} "
                            "(run stage-data on a login or data transfer node)", permanent=True) from None
    except subprocess.TimeoutExpired:
        raise TransferError(f"{shlex.join(argv)} did not finish within {timeout:.0f} s") from None


def _said(cp: subprocess.CompletedProcess) -> str:
    text = " ".join((cp.stderr.strip() + " " + cp.stdout.strip()).split())
    return text[-400:] or f"exit {cp.returncode}"


def check_hpss_arg(value: str, option: str) -> None:
    """Refuse a path that hsi would not read as one plain path (see HPSS_ARG_RE)."""
    if not HPSS_ARG_RE.fullmatch(value):
        raise UserError(f"{option} {value!r} cannot be passed to HPSS's hsi/htar: they read their arguments as "
                        "commands, where ';', '!', spaces, quotes and ':' have meaning. Use a path of letters, "
                        "digits and . _ / + = , @ % ~ - (not starting with '-').")


def check_transfer_options(jobs: int, retries: int, retry_delay: float) -> None:
    """Parallel transfers, retries and the first delay: each within a sane range, named when not."""
    if not 1 <= jobs <= MAX_JOBS:
        raise UserError(f"--jobs {jobs} must be between 1 and {MAX_JOBS} parallel transfers.")
    if not 0 <= retries <= MAX_RETRIES:
        raise UserError(f"--retries {retries} must be between 0 and {MAX_RETRIES}.")
    if not 0 <= retry_delay <= MAX_RETRY_DELAY:   # also refuses nan
        raise UserError(f"--retry-delay {retry_delay:g} must be between 0 and {MAX_RETRY_DELAY:g} seconds.")


class Hop1:
    """Copies the manifest's shards from a source into ``dest`` (see the module docstring)."""

    def __init__(self, manifest: Dict[str, object], transport: str, source: str, dest: Path,
                 htar: Optional[str] = None, jobs: int = 4, retries: int = 3, retry_delay: float = 2.0,
                 timeout: float = 6 * 3600, progress: bool = True):
        if transport == "hpss":
            for value, option in ((source, "--source"), (str(dest), "--dest"), (htar, "--htar")):
                if value is not None:
                    check_hpss_arg(value, option)
        self.manifest, self.transport, self.source, self.dest = manifest, transport, source, dest
        self.htar, self.jobs, self.retries, self.retry_delay = htar, max(1, jobs), max(0, retries), retry_delay
        self.timeout = timeout
        self.algo = shards.hash_algo(manifest)
        self.progress_enabled = progress
        self._lock = threading.Lock()
        self._bar: Optional[Progress] = None
        self._done_bytes = 0

    # -- helpers
    def _advance(self, n: int) -> None:
        with self._lock:
            self._done_bytes += n
            if self._bar:
                self._bar.update(self._done_bytes)

    def _say(self, message: str) -> None:
        """A line of its own, between the progress bar's redraws when there is one."""
        if self._bar is not None:
            self._bar.write(message)
        else:
            sys.stderr.write(message + "\n")
            sys.stderr.flush()

    def _verify_into_place(self, tmp: Path, entry: Dict[str, object]) -> None:
        size, digest = int(entry["bytes"]), str(entry[self.algo])
        got_size = tmp.stat().st_size
        got = shards.file_hash(tmp, self.algo) if got_size == size else None
        if got != digest:
            tmp.unlink(missing_ok=True)
            what = f"{got_size} bytes instead of {size}" if got is None else f"{self.algo} mismatch"
            raise TransferError(f"shard {entry['name']} arrived corrupt ({what})")
        os.replace(tmp, self.dest / str(entry["name"]))

    def remote(self, name: str) -> str:
        return f"{self.source.rstrip('/')}/{name}"

    def commands(self, names: Sequence[str]) -> List[str]:
        """The transfer commands, for the dry run."""
        if self.transport == "posix":
            return [f"copy + {self.algo} verify: {self.source}/<shard> -> {self.dest}/<shard>"]
        if self.htar:
            return [f"cd {shlex.quote(str(self.dest))}/.htar{PARTIAL}<pid> && "
                    + shlex.join(["htar", "-xvf", self.htar, *names[:3]]) + (" ..." if len(names) > 3 else "")]
        return [shlex.join(["hsi", "-q", "get", f"{self.dest}/.{n}{PARTIAL}<pid>", ":", self.remote(n)])
                for n in names[:3]] + ([f"... ({len(names) - 3} more hsi get)"] if len(names) > 3 else [])

    # -- one shard (posix, hsi)
    def _fetch_one(self, entry: Dict[str, object]) -> None:
        name = str(entry["name"])
        if self.transport == "posix":
            src = Path(self.source) / name
            if not src.is_file():
                raise TransferError(f"shard {name} is missing from the source folder {self.source}", permanent=True)
            moved = [0]

            def advance(n: int) -> None:
                moved[0] += n
                self._advance(n)
            try:
                node_stage.copy_verified(src, self.dest / name, self.algo, str(entry[self.algo]),
                                         int(entry["bytes"]), advance)
            except node_stage.StageError as exc:
                self._advance(-moved[0])          # a retry copies them again: count each byte once
                raise TransferError(str(exc)) from None
            return
        tmp = self.dest / f".{name}{PARTIAL}{os.getpid()}"
        cp = _run(["hsi", "-q", "get", str(tmp), ":", self.remote(name)], None, self.timeout)
        if cp.returncode != 0 or not tmp.is_file():
            tmp.unlink(missing_ok=True)
            said = _said(cp)
            missing = any(k in said.lower() for k in NOT_FOUND)
            local = any(k in said.lower() for k in LOCAL_WRITE)
            why = (f" (it cannot be written into {self.dest}: free space there or choose another --dest)" if local
                   else " (it does not exist there)" if missing else "")
            raise TransferError(f"shard {name} could not be fetched from HPSS {self.remote(name)}{why}; "
                                f"hsi said: {said}", missing or local)
        self._verify_into_place(tmp, entry)
        self._advance(int(entry["bytes"]))          # verified bytes only: a corrupt copy is fetched again

    def _with_retries(self, what: str, fn, *args) -> None:
        for attempt in range(self.retries + 1):
            try:
                return fn(*args)
            except TransferError as exc:
                if exc.permanent or attempt == self.retries:
                    raise
                delay = self.retry_delay * (2 ** attempt)
                self._say(f"stage-data: {exc}; retrying {what} in {delay:g} s "
                          f"(attempt {attempt + 2} of {self.retries + 1})")
                time.sleep(delay)

    # -- htar: one call for all missing members
    def _fetch_htar(self, entries: List[Dict[str, object]]) -> None:
        work = self.dest / f".htar{PARTIAL}{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        try:
            names = [str(e["name"]) for e in entries]
            cp = _run(["htar", "-xvf", str(self.htar), *names], work, self.timeout)
            missing = [n for n in names if not (work / n).is_file()]
            if cp.returncode != 0 or missing:
                said = _said(cp)
                gone = [n for n in missing if n in said] or missing
                absent = any(k in said.lower() for k in NOT_FOUND)
                local = any(k in said.lower() for k in LOCAL_WRITE)
                why = (f" (they cannot be written into {self.dest}: free space there or choose another --dest)"
                       if local else " (not in the archive)" if absent else "")
                raise TransferError(
                    f"archive member{'s' if len(gone) > 1 else ''} {', '.join(gone)} could not be extracted from "
                    f"{self.htar}{why}; htar said: {said}", absent or local)
            for e in entries:
                self._verify_into_place(work / str(e["name"]), e)
                self._advance(int(e["bytes"]))
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _check_dest(self, force: bool) -> None:
        """``dest`` must be a folder, and any manifest in it this dataset's (or replaced with --force);
        a posix source must be a folder too (checked before anything is created)."""
        if self.transport == "posix" and not Path(self.source).is_dir():
            raise UserError(f"source folder {self.source} does not exist: give --source the folder that holds the "
                            "shards (default: the manifest's folder).")
        if self.dest.exists() and not self.dest.is_dir():
            raise UserError(f"--dest {self.dest} is a file, not a folder: give the folder on the parallel file "
                            "system the shards go to.")
        self.dest.mkdir(parents=True, exist_ok=True)
        target = self.dest / shards.MANIFEST_NAME
        if target.exists():
            try:
                existing = json.loads(target.read_text(encoding="utf-8"))
            except ValueError:
                existing = None
            if existing is not None and existing != self.manifest and not force:
                raise UserError(f"{target} already exists and describes another dataset; pass --force "
                                "to replace it, or choose another --dest.")

    def _sort(self, entries: List[Dict[str, object]]) -> Tuple[List[Dict[str, object]], List[Dict[str, object]]]:
        """(to fetch, present and verified): a shard with the wrong size or hash is fetched again."""
        todo, present = [], []
        for e in entries:
            f = self.dest / str(e["name"])
            ok = node_stage.present_and_verified(f, self.algo, str(e[self.algo]), int(e["bytes"]))
            (present if ok else todo).append(e)
        return todo, present

    def _transfer_htar(self, todo: List[Dict[str, object]]) -> None:
        remaining = list(todo)

        def batch() -> None:
            nonlocal remaining
            try:
                self._fetch_htar(remaining)
            finally:
                remaining = [e for e in remaining if not (self.dest / str(e["name"])).is_file()]
        self._with_retries(f"{len(todo)} archive members", batch)

    def _transfer_each(self, todo: List[Dict[str, object]]) -> None:
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            futures = [pool.submit(self._with_retries, str(e["name"]), self._fetch_one, e) for e in todo]
            errors = []
            for fut in futures:
                try:
                    fut.result()
                except TransferError as exc:
                    errors.append(str(exc))
            if errors:
                more = f" (and {len(errors) - 1} more failed shards)" if len(errors) > 1 else ""
                raise TransferError(errors[0] + more, True)

    def _transfer(self, todo: List[Dict[str, object]]) -> None:
        total = sum(int(e["bytes"]) for e in todo)
        self._bar = Progress("stage-data: hop 1", total, "B", enabled=self.progress_enabled)
        try:
            if self.transport == "hpss" and self.htar and todo:
                self._transfer_htar(todo)
            elif todo:
                self._transfer_each(todo)
        except TransferError as exc:
            raise UserError(f"stage-data: {exc}. Shards already verified in {self.dest} are kept; rerun the same "
                            "command to fetch the rest.") from None
        finally:
            self._bar.close()

    def run(self, force: bool = False) -> Dict[str, object]:
        """Fetch what is missing, verify it, then write the manifest into ``dest``.

        Holds ``dest``'s FolderLock throughout: a second run into the same folder is
        refused with the first one's process id, instead of deleting its transfers.
        A manifest already in ``dest`` is removed before any shard there changes,
        so it never lists a shard that is missing or holds other bytes.
        """
        self._check_dest(force)
        try:
            lock = shards.FolderLock(self.dest, "summit-jobs stage-data").acquire()
        except shards.FolderBusy as exc:
            raise UserError(f"{exc}.") from None
        try:
            node_stage.remove_partials(self.dest, lock.supported)       # left by a killed earlier run
            target = self.dest / shards.MANIFEST_NAME
            t0 = time.monotonic()
            entries = list(self.manifest["shards"])
            todo, present = self._sort(entries)
            if todo:
                target.unlink(missing_ok=True)      # first: it must never list what is being replaced
                for e in todo:
                    (self.dest / str(e["name"])).unlink(missing_ok=True)
            self._transfer(todo)
            shards.write_manifest(target, self.manifest)
        finally:
            lock.release()
        total = sum(int(e["bytes"]) for e in todo)
        dt = time.monotonic() - t0
        return {"dest": str(self.dest), "manifest": str(target), "shards": len(entries),
                "fetched": len(todo), "present": len(present), "fetched_bytes": total,
                "seconds": round(dt, 3), "rate_bytes_per_s": round(total / max(dt, 1e-9))}


# ---- hop 2 on the embedded machine --------------------------------------------------------------

def run_local_hop2(profile, manifest_path: Path, nodes: int, policy: str, timeout: float = 3600,
                   quiet: bool = False) -> List[Dict[str, object]]:
    """Run trainer.stage as one process per virtual node, with the rank variables the embedded LSF's launcher
    sets for a job's staging step."""
    from summit_jobs.schedulers.lsf.embedded import state
    if not profile.scheduler.embedded:
        raise UserError(f"--to-nvme runs hop 2 here, which only the embedded machine can do; on {profile.name} "
                        "NVMe is reachable only from compute nodes: submit with --data MANIFEST and the job "
                        "stages it first.")
    if not profile.node.nvme_path:
        raise UserError(f"{profile.name} has no node.nvme_path in its profile: nothing to stage onto.")
    home = state.home()
    names = state.node_names(max(nodes, state.virtual_nodes()))[:nodes]
    dest = nvme_data_dir(profile.node.nvme_path)
    procs = []
    for i, host in enumerate(names):
        env = dict(os.environ)
        env.update({"JSM_NAMESPACE_RANK": str(i), "JSM_NAMESPACE_SIZE": str(nodes), "OMPI_COMM_WORLD_RANK": str(i),
                    "OMPI_COMM_WORLD_SIZE": str(nodes), "PMIX_RANK": str(i), "SUMMIT_JOBS_VNODE": host,
                    "SUMMIT_JOBS_NVME": str(state.nvme_dir(home, host))})
        argv = [sys.executable, "-m", "trainer.stage", "--manifest", str(manifest_path), "--dest", dest,
                "--policy", policy, "--nodes", str(nodes), "--json"] + (["--quiet"] if quiet else [])
        procs.append((host, env["SUMMIT_JOBS_NVME"],
                      subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)))
    results, failed = [], []
    for host, nvme, p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            failed.append(f"{host}: timed out after {timeout:.0f} s")
            continue
        if p.returncode != 0:
            failed.append(f"{host}: exit {p.returncode}")
            continue
        summary = json.loads(out.strip().splitlines()[-1])
        summary.update({"host": host, "nvme": nvme})
        results.append(summary)
    if failed:
        raise UserError(f"hop 2 failed on {len(failed)} of {nodes} virtual nodes ({'; '.join(failed)}); the "
                        "messages above name the shard. Rerun to fetch only what is missing.")
    return results
