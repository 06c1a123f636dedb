"""Hop 2 of staging: parallel file system -> this node's NVMe, inside the job.

Run by jsrun with ONE rank per node (``jsrun -n N -r 1 -a 1 ...``): not one
process per file, because a launch node allows only a few thousand processes.
Each rank works out its node's share from the manifest (the same placement the
login side prints with ``stage-data --dry-run``), copies it, verifies it, and
writes a node-local ``manifest.json`` listing exactly the shards present, so
``trainer.shards.ShardDataset(dest)`` works on that node.

Why it is shaped this way:
- One pass per shard: the copy is made inside the kernel (copy_file_range)
  and hashed chunk by chunk from the destination's page cache while the next
  chunk is copied, so verification costs no second read of the parallel file
  system. It checks the bytes the kernel holds for the destination file right
  after the copy (its page cache), not a read-back from the device.
- A copy goes to a hidden temporary name and is renamed only after its hash
  matched: a killed rank never leaves a partial file under a shard's name, and
  a rerun keeps what is present and verified and fetches only the rest.
- No fsync: a killed process loses nothing already written (the page cache
  survives it), and a node crash ends the job, whose NVMe is erased anyway.
- A missing or corrupt shard fails the rank with a message naming it: training
  on silently wrong data would waste the allocation.
- The node-local manifest is removed before anything in the folder changes and
  written last, and one run at a time holds the folder (a FolderLock): a full,
  read-only or busy folder fails with one line naming it, never a traceback.

Also: ``python -m trainer.stage check --manifest M --nodes N --policy P`` checks
the manifest alone (readable, well formed, enough training shards for N nodes)
in one process: the job script runs it before the ranks start, so a fault of the
manifest is reported as one, naming it, and not as a missing or corrupt shard.
``python -m trainer.stage collect --src S --dest D`` copies what a rank left on
NVMe (checkpoints, logs) to D/<node name> before the NVMe is erased.

Imports neither torch nor summit_jobs: it runs on compute nodes, first thing.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import re
import shutil
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from trainer import files, rankenv, shards

BUF = 8 << 20
PARTIAL_TAG = ".partial."
POLICIES = ("partition", "replicate")
MAX_THREADS = 256
#: copy_file_range errors that mean "not between these files": copy in user space instead.
#: Any other error (a full or read-only disk, an I/O error) is real and is raised.
_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF, errno.EPERM,
                   errno.ETXTBSY}
#: What to do about the operating-system errors a node-local folder gives (one line, no traceback).
_OS_FIXES = {
    errno.ENOSPC: "the folder is full: free space there, or stage a smaller share (more nodes, --policy partition)",
    errno.EDQUOT: "the disk quota is used up: free space there or choose another folder",
    errno.EROFS: "that file system is read-only: choose a writable folder",
    errno.EACCES: "check the permissions, or choose a folder you can write",
    errno.EPERM: "check the permissions, or choose a folder you can write",
    errno.ENOTDIR: "a part of the path is a file, not a folder: check the path",
}


class StageError(Exception):
    """A shard is missing, corrupt, or does not fit: the message names it and the way out."""


class ManifestError(StageError):
    """The manifest itself is at fault (unreadable, malformed, too few training shards): the message names it."""


# ---- placement (shared with the login side's dry run) -------------------------------------------

def placement(manifest: Dict[str, object], nodes: int, policy: str) -> List[List[Dict[str, object]]]:
    """Each node's shards, in manifest order.

    partition: training shards are spread over the nodes, largest first onto the
    least loaded node (so bytes per node differ by at most one shard); every node
    gets ALL validation/test shards, so each rank can evaluate its share of the
    validation set from local NVMe. replicate: every node gets every shard.
    """
    if policy not in POLICIES:
        raise StageError(f"placement policy {policy!r} is not known: use partition or replicate")
    if nodes < 1:
        raise StageError(f"node count {nodes} must be at least 1")
    all_shards = list(manifest["shards"])
    if policy == "replicate":
        return [list(all_shards) for _ in range(nodes)]
    train = [(i, s) for i, s in enumerate(all_shards) if s["split"] == "train"]
    if len(train) < nodes:
        raise StageError(
            f"partition over {nodes} nodes needs at least {nodes} training shards, and the manifest has "
            f"{len(train)}: pack with a smaller --shard-size, use fewer nodes, or use --policy replicate")
    load = [0] * nodes
    owner: Dict[int, int] = {}
    for i, s in sorted(train, key=lambda x: (-int(x[1]["bytes"]), x[0])):
        node = min(range(nodes), key=lambda n: (load[n], n))
        owner[i] = node
        load[node] += int(s["bytes"])
    return [[s for i, s in enumerate(all_shards) if s["split"] != "train" or owner.get(i) == n]
            for n in range(nodes)]


def node_index(explicit: Optional[int], nodes: int) -> int:
    """This rank's node: ``--node``, else what its launcher says (rankenv.node_index: jsrun's, blaunch's or an
    srun step's variables)."""
    value = str(explicit) if explicit is not None else rankenv.node_index(os.environ)
    if value is None:
        if nodes == 1:
            return 0
        raise StageError("no node index: run under jsrun with one rank per node (it sets JSM_NAMESPACE_RANK), "
                         "or pass --node")
    if not value.isdigit() or int(value) >= nodes:
        raise StageError(f"node index {value!r} is not between 0 and {nodes - 1}: launch exactly --nodes "
                         f"{nodes} ranks, one per node (jsrun -n {nodes} -r 1 -a 1)")
    return int(value)


def expand_dest(dest: str) -> Path:
    """``$SUMMIT_JOBS_NVME/...`` (embedded machine) or ``/mnt/bb/$USER/...`` (Summit)."""
    out = os.path.expanduser(os.path.expandvars(dest))
    if "$" in out:
        raise StageError(f"destination {dest!r} names an unset variable ({out}); on the embedded machine the "
                         "job sets SUMMIT_JOBS_NVME, on Summit /mnt/bb/$USER needs -alloc_flags nvme")
    return Path(out)


# ---- copying ------------------------------------------------------------------------------------

def default_threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def hash_file(path: Path, algo: str) -> str:
    return shards.file_hash(path, algo)


def describe_os_error(exc: OSError) -> str:
    """The path, the system's words and the way out, for a full, read-only or missing folder."""
    where = " -> ".join(os.fsdecode(p) for p in (exc.filename, getattr(exc, "filename2", None)) if p)
    fix = _OS_FIXES.get(exc.errno or -1, "check the path and try again")
    return f"{where + ': ' if where else ''}{exc.strerror or exc}; {fix}"


def _kernel_copy(fin: int, fout: int, off: int, n: int) -> int:
    """Copy n bytes at ``off`` inside the kernel (no user-space copy); 0 if this kernel/fs pair can't.

    A full or read-only destination raises: treating it as end of file would report
    a short, "corrupt" shard and send the user to the archive for nothing.
    """
    done = 0
    while done < n:
        try:
            k = os.copy_file_range(fin, fout, n - done, off + done, off + done)
        except AttributeError:
            return done
        except OSError as exc:
            if exc.errno in _NO_KERNEL_COPY:
                return done
            raise
        if k == 0:
            break
        done += k
    return done


class _BackHasher:
    """Hashes each chunk read back from the destination in a helper thread, one chunk behind the copy.

    Errors of the thread are kept and raised by ``wait``; ``close`` always waits for
    the thread, so the destination is never closed while the thread still reads it.
    """

    def __init__(self, fd: int, h) -> None:
        self.fd, self.h = fd, h
        self.hashed = 0
        self.error: Optional[OSError] = None
        self._thread: Optional[threading.Thread] = None

    def _run(self, off: int, n: int, buf: bytearray) -> None:
        try:
            view = memoryview(buf)
            got = os.preadv(self.fd, [view[:n]], off)
            self.h.update(view[:got])
            self.hashed += got
        except OSError as exc:
            self.error = exc

    def start(self, off: int, n: int, buf: bytearray) -> None:
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(off, n, buf))
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def wait(self) -> None:
        self.close()
        if self.error is not None:
            raise self.error


def _plain_copy(fin: int, fout: int, at: int, buf: bytearray) -> int:
    """One chunk through user space (where copy_file_range cannot be used)."""
    n = os.preadv(fin, [buf], at)
    off = 0
    view = memoryview(buf)[:n]
    while off < n:
        off += os.pwrite(fout, view[off:], at + off)
    return n


def _copy_chunks(fin: int, fout: int, size: int, hasher: _BackHasher,
                 progress: Optional[Callable[[int], None]]) -> int:
    """Copy everything, chunk by chunk, handing each landed chunk to ``hasher``; returns the bytes."""
    bufs = [bytearray(BUF), bytearray(BUF)]
    done = k = 0
    kernel = True
    while True:
        buf = bufs[k % 2]
        n = _kernel_copy(fin, fout, done, BUF) if kernel else 0
        if kernel and n == 0 and done == 0 and size > 0:
            kernel = False     # e.g. EXDEV across file systems on older kernels: plain copy
        if not kernel:
            n = _plain_copy(fin, fout, done, buf)
        hasher.wait()
        if not n:
            return done
        hasher.start(done, n, buf)
        done += n
        k += 1
        if progress is not None:
            progress(n)


def _open_source(src: Path) -> int:
    try:
        return os.open(src, os.O_RDONLY)
    except FileNotFoundError:
        raise StageError(f"shard {src.name} is missing from {src.parent}: stage it there first "
                         "(summit-jobs stage-data) or fix the manifest") from None


def copy_verified(src: Path, dst: Path, algo: str, digest: str, size: int,
                  progress: Optional[Callable[[int], None]] = None) -> int:
    """Copy ``src`` to ``dst`` and hash the copy; rename into place only if the hash matches.

    Chunks are copied inside the kernel (copy_file_range; read/write where the
    file systems do not allow it) while a helper thread hashes the previous chunk
    read back from the destination's page cache: the digest covers the bytes that
    landed, and copy and hash overlap (hashlib and I/O release the GIL). A write
    error (full or read-only disk) is raised naming ``dst``, and the hidden
    temporary file is removed.
    """
    tmp = dst.with_name(f".{dst.name}{PARTIAL_TAG}{os.getpid()}")
    try:
        h = shards.new_hash(algo)
    except shards.ShardError as exc:
        raise StageError(str(exc)) from None
    fin = _open_source(src)
    try:
        try:
            fout = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(dst)) from None
        hasher = _BackHasher(fout, h)
        try:
            done = _copy_chunks(fin, fout, size, hasher, progress)
            if hasher.hashed != done:
                raise StageError(f"shard {src.name}: read back {hasher.hashed} of {done} bytes from {tmp}")
        except OSError as exc:
            # Name the shard being written, not its hidden temporary name.
            raise OSError(exc.errno, exc.strerror, str(dst)) from None
        finally:
            hasher.close()
            os.close(fout)
    except BaseException:
        files.discard(tmp)
        raise
    finally:
        os.close(fin)
    got = h.hexdigest()
    if done != size or got != digest:
        tmp.unlink(missing_ok=True)
        what = f"{done} bytes instead of {size}" if done != size else f"{algo} {got[:16]}... instead of {digest[:16]}..."
        raise StageError(f"shard {src.name} in {src.parent} is corrupt ({what}): fetch it again from the "
                         "archive (summit-jobs stage-data) before training")
    os.replace(tmp, dst)
    return done


def present_and_verified(path: Path, algo: str, digest: str, size: int) -> bool:
    try:
        if path.stat().st_size != size:
            return False
    except FileNotFoundError:
        return False
    return hash_file(path, algo) == digest


def _log(prefix: str, msg: str) -> None:
    sys.stderr.write(f"{prefix}: {msg}\n")
    sys.stderr.flush()


def _gb(n: float) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= k:
            return f"{n / k:.2f} {unit}"
    return f"{n:.0f} B"


def _pid_of(name: str) -> Optional[int]:
    """The process id in a temporary name this package writes (``.x.partial.<pid>``, ``.x.tmp<pid>``)."""
    m = re.fullmatch(r"\..+(?:" + re.escape(PARTIAL_TAG) + r"|\.tmp)(\d+)", name)
    return int(m.group(1)) if m else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_partials(folder: Path, locked: bool) -> int:
    """Remove the hidden temporary files and folders killed runs left in ``folder``.

    Under the folder's lock (``locked``) every one of them is a leftover: no other
    run can be writing there. Where the file system cannot lock, only those whose
    process is gone are removed, so a run in progress keeps its files.
    """
    n = 0
    for stray in sorted(set(folder.glob(f".*{PARTIAL_TAG}*")) | set(folder.glob(".*.tmp*"))):
        pid = _pid_of(stray.name)
        if pid is None or (not locked and _alive(pid)):
            continue
        if stray.is_dir():
            shutil.rmtree(stray, ignore_errors=True)
        else:
            stray.unlink(missing_ok=True)
        n += 1
    return n


def _prepare_dest(dest: Path, src_dir: Path) -> None:
    if dest.exists() and not dest.is_dir():
        raise StageError(f"destination {dest} is a file, not a folder: give the node-local folder")
    dest.mkdir(parents=True, exist_ok=True)
    if dest.resolve() == src_dir:
        raise StageError(f"destination {dest} is the manifest's own folder: give the node-local folder")


def _make_room(manifest: Dict[str, object], mine: List[Dict[str, object]], dest: Path, node: int) -> None:
    """Remove other placements' shards, then check that the rest of this node's share fits."""
    keep = {s["name"] for s in mine}
    for s in manifest["shards"]:
        if s["name"] not in keep:
            (dest / s["name"]).unlink(missing_ok=True)
    need = sum(int(s["bytes"]) for s in mine)
    present = {s["name"] for s in mine if (dest / s["name"]).is_file()}
    have = sum((dest / n).stat().st_size for n in present)
    free = shutil.disk_usage(dest).free
    if need - have > free:
        raise StageError(f"node {node}'s share is {_gb(need)} and {dest} has only {_gb(free + have)} free: use "
                         "--policy partition, more nodes, or a smaller dataset")


def _stage_shard(s: Dict[str, object], src_dir: Path, dest: Path, algo: str) -> Tuple[str, str, int]:
    """One shard: (name, what happened, bytes copied or -1 when it was present and verified)."""
    name, size, digest = str(s["name"]), int(s["bytes"]), str(s[algo])
    final = dest / name
    what = ""
    if final.exists():
        if present_and_verified(final, algo, digest, size):
            return name, "present, verified", -1
        final.unlink()   # wrong size or hash: never trust it, fetch again
        what = "was corrupt, "
    t = time.monotonic()
    for attempt in range(2):   # one retry: a parallel file system read can fail transiently
        try:
            n = copy_verified(src_dir / name, final, algo, digest, size)
            break
        except StageError as exc:
            if "missing" in str(exc) or attempt == 1:
                raise
    dt = max(time.monotonic() - t, 1e-9)
    return name, f"{what}copied {_gb(n)} at {_gb(n / dt)}/s, verified", n


def _read_manifest(manifest_path: Path) -> Dict[str, object]:
    try:
        return shards.read_manifest(manifest_path)
    except shards.ShardError as exc:
        text = str(exc)
        raise ManifestError(text if text.startswith("manifest ") else f"manifest {text}") from None


def check(manifest_path: Path, policy: str, nodes: int) -> List[List[Dict[str, object]]]:
    """Each node's shards, after checking the manifest alone: readable, well formed, and with enough
    training shards for ``nodes`` under ``policy``. Every fault raises ManifestError naming the manifest."""
    return _placement(manifest_path, _read_manifest(manifest_path), nodes, policy)


def _placement(manifest_path: Path, manifest: Dict[str, object], nodes: int,
               policy: str) -> List[List[Dict[str, object]]]:
    """placement(), its refusal naming the manifest: too few training shards is the manifest's fault."""
    try:
        return placement(manifest, nodes, policy)
    except StageError as exc:
        raise ManifestError(f"manifest {manifest_path}: {exc}") from None


def stage(manifest_path: Path, dest: Path, policy: str, nodes: int, node: int, threads: int = 0,
          quiet: bool = False) -> Dict[str, object]:
    """Copy and verify this node's shards into ``dest``; returns a summary.

    Holds ``dest``'s FolderLock throughout (a second run into the same folder is
    refused, naming the first). The node-local manifest is removed before
    anything in ``dest`` changes and written again last, so at no instant does
    it list a shard that is absent or unverified.
    """
    prefix = f"stage[node {node}]"
    manifest = _read_manifest(manifest_path)
    src_dir = (manifest_path if manifest_path.is_dir() else manifest_path.parent).resolve()
    algo = shards.hash_algo(manifest)
    mine = _placement(manifest_path, manifest, nodes, policy)[node]
    need = sum(int(s["bytes"]) for s in mine)
    _prepare_dest(dest, src_dir)
    try:
        lock = shards.FolderLock(dest, f"trainer.stage (node {node})").acquire()
    except shards.FolderBusy as exc:
        raise StageError(str(exc)) from None
    try:
        remove_partials(dest, lock.supported)
        (dest / shards.MANIFEST_NAME).unlink(missing_ok=True)
        _make_room(manifest, mine, dest, node)
        t0 = time.monotonic()
        copied = skipped = moved = 0
        with ThreadPoolExecutor(max_workers=threads if threads > 0 else default_threads()) as pool:
            for name, what, n in pool.map(lambda s: _stage_shard(s, src_dir, dest, algo), mine):
                copied, skipped, moved = copied + (n >= 0), skipped + (n < 0), moved + max(n, 0)
                if not quiet:
                    _log(prefix, f"{name}: {what}")
        local = dict(manifest)
        local["shards"] = mine
        local["placement"] = {"policy": policy, "node": node, "nodes": nodes, "source": str(src_dir)}
        shards.write_manifest(dest / shards.MANIFEST_NAME, local)
    finally:
        lock.release()
    dt = time.monotonic() - t0
    summary = {"node": node, "shards": len(mine), "copied": copied, "present": skipped, "bytes": need,
               "copied_bytes": moved, "seconds": round(dt, 3), "dest": str(dest)}
    if not quiet:
        _log(prefix, f"{len(mine)} shards ({_gb(need)}) in {dest}: {copied} copied ({_gb(moved)}, "
                     f"{_gb(moved / max(dt, 1e-9))}/s), {skipped} already present; all verified")
    return summary


# ---- collect ------------------------------------------------------------------------------------

def node_name() -> str:
    """Unique per node: the embedded machine's virtual nodes share one host name, so its jsrun
    names them in SUMMIT_JOBS_VNODE; SUMMIT_JOBS_NODE_NAME overrides both."""
    return (os.environ.get("SUMMIT_JOBS_NODE_NAME") or os.environ.get("SUMMIT_JOBS_VNODE")
            or socket.gethostname().split(".")[0])


def collect(src: Path, dest: Path, name: Optional[str] = None, quiet: bool = False) -> int:
    """Copy every file under ``src`` to ``dest/<node name>/`` (atomically, skipping identical ones)."""
    if not src.is_dir():
        _log("collect", f"{src} does not exist on {name or node_name()}: nothing to collect")
        return 0
    target = dest / (name or node_name())
    n = 0
    for path in sorted(p for p in src.rglob("*") if p.is_file() and PARTIAL_TAG not in p.name):
        rel = path.relative_to(src)
        out = target / rel
        st = path.stat()
        if out.is_file() and out.stat().st_size == st.st_size and out.stat().st_mtime >= st.st_mtime:
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}{PARTIAL_TAG}{os.getpid()}")
        try:
            shutil.copy2(path, tmp)
            os.replace(tmp, out)
        except BaseException:
            files.discard(tmp)
            raise
        n += 1
    if not quiet:
        _log("collect", f"{n} files from {src} -> {target}")
    return n


# ---- command line -------------------------------------------------------------------------------

def _error(prefix: str, exc: BaseException) -> int:
    """One line, no traceback: the job log shows which node failed and why."""
    _log(prefix, describe_os_error(exc) if isinstance(exc, OSError) else str(exc))
    return 1


def _collect_main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.stage collect",
                                description="Copy what this node left on NVMe to DEST/<node name>.")
    p.add_argument("--src", required=True, help="Node-local folder (variables like $SUMMIT_JOBS_NVME expand).")
    p.add_argument("--dest", required=True, help="Folder on the parallel file system.")
    p.add_argument("--node-name", help="Default: $SUMMIT_JOBS_NODE_NAME, $SUMMIT_JOBS_VNODE, else the host name.")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    try:
        collect(expand_dest(a.src), expand_dest(a.dest), a.node_name, a.quiet)
    except (StageError, OSError) as exc:
        return _error("collect: error", exc)
    return 0


def _check_counts(nodes: int, threads: int) -> None:
    if nodes < 1:
        raise StageError(f"--nodes {nodes} must be at least 1 (the number of nodes staging together)")
    if not 0 <= threads <= MAX_THREADS:
        raise StageError(f"--threads {threads} must be between 0 (the default: one per core, at most 8) and "
                         f"{MAX_THREADS}")


def _check_main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.stage check",
                                description="Check the manifest alone before staging: readable, well formed, "
                                            "enough training shards for the nodes. Copies nothing.")
    p.add_argument("--manifest", required=True, help="manifest.json on the parallel file system.")
    p.add_argument("--policy", choices=POLICIES, default="partition")
    p.add_argument("--nodes", type=int, required=True, help="Number of nodes (ranks) staging together.")
    a = p.parse_args(argv)
    try:
        _check_counts(a.nodes, 0)
        check(Path(os.path.expandvars(a.manifest)), a.policy, a.nodes)
    except (StageError, OSError) as exc:
        return _error("trainer.stage check: error", exc)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "collect":
        return _collect_main(argv[1:])
    if argv and argv[0] == "check":
        return _check_main(argv[1:])
    p = argparse.ArgumentParser(
        prog="python -m trainer.stage",
        description="Copy and verify this node's share of the shards onto node-local NVMe "
                    "(run with one rank per node).")
    p.add_argument("--manifest", required=True, help="manifest.json on the parallel file system (shards next to it).")
    p.add_argument("--dest", required=True, help="Node-local folder; $VARS expand ($SUMMIT_JOBS_NVME, $USER).")
    p.add_argument("--policy", choices=POLICIES, default="partition")
    p.add_argument("--nodes", type=int, required=True, help="Number of nodes (ranks) staging together.")
    p.add_argument("--node", type=int, help="This node's index. Default: $JSM_NAMESPACE_RANK / $OMPI_COMM_WORLD_RANK.")
    p.add_argument("--threads", type=int, default=default_threads(),
                   help="Shards copied (and hashed) at once on this node. Default: the cores this rank may "
                        "use, at most 8 (hashing is CPU-bound: about 1 GB/s per core for sha256).")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true", help="Print the summary as JSON on stdout.")
    a = p.parse_args(argv)
    try:
        _check_counts(a.nodes, a.threads)
        node = node_index(a.node, a.nodes)
        summary = stage(Path(os.path.expandvars(a.manifest)), expand_dest(a.dest), a.policy, a.nodes, node,
                        a.threads, a.quiet)
    except (StageError, OSError) as exc:
        return _error("trainer.stage: error", exc)
    if a.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
