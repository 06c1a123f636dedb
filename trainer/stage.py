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
  system and checks the bytes that actually landed on NVMe.
- A copy goes to a hidden temporary name and is renamed only after its hash
  matched: a killed rank never leaves a partial file under a shard's name, and
  a rerun keeps what is present and verified and fetches only the rest.
- No fsync: a killed process loses nothing already written (the page cache
  survives it), and a node crash ends the job, whose NVMe is erased anyway.
- A missing or corrupt shard fails the rank with a message naming it: training
  on silently wrong data would waste the allocation.

Also: ``python -m trainer.stage collect --src S --dest D`` copies what a rank
left on NVMe (checkpoints, logs) to D/<node name> before the NVMe is erased.

Imports neither torch nor summit_jobs: it runs on compute nodes, first thing.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from trainer import shards

BUF = 8 << 20
PARTIAL_TAG = ".partial."
POLICIES = ("partition", "replicate")


class StageError(Exception):
    """A shard is missing, corrupt, or does not fit: the message names it and the way out."""


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
    """This rank's node: jsrun sets JSM_NAMESPACE_RANK (Spectrum MPI also OMPI_COMM_WORLD_RANK)."""
    value: Optional[str] = str(explicit) if explicit is not None else None
    for var in ("JSM_NAMESPACE_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if value is None and os.environ.get(var, "").strip():
            value = os.environ[var].strip()
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


def _kernel_copy(fin: int, fout: int, off: int, n: int) -> int:
    """Copy n bytes at ``off`` inside the kernel (no user-space copy); 0 if this kernel/fs pair can't."""
    done = 0
    while done < n:
        try:
            k = os.copy_file_range(fin, fout, n - done, off + done, off + done)
        except (AttributeError, OSError):
            return done
        if k == 0:
            break
        done += k
    return done


def copy_verified(src: Path, dst: Path, algo: str, digest: str, size: int,
                  progress: Optional[Callable[[int], None]] = None) -> int:
    """Copy ``src`` to ``dst`` and hash the copy; rename into place only if the hash matches.

    Chunks are copied inside the kernel (copy_file_range; read/write where the
    file systems do not allow it) while a helper thread hashes the previous chunk
    read back from the destination's page cache: the digest covers the bytes that
    landed, and copy and hash overlap (hashlib and I/O release the GIL).
    """
    tmp = dst.with_name(f".{dst.name}{PARTIAL_TAG}{os.getpid()}")
    try:
        h = shards.new_hash(algo)
    except shards.ShardError as exc:
        raise StageError(str(exc)) from None
    done = 0
    try:
        fin = os.open(src, os.O_RDONLY)
    except FileNotFoundError:
        raise StageError(f"shard {src.name} is missing from {src.parent}: stage it there first "
                         "(summit-jobs stage-data) or fix the manifest") from None
    try:
        fout = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            bufs = [bytearray(BUF), bytearray(BUF)]
            hashed = [0]

            def hash_back(off: int, n: int, buf: bytearray) -> None:
                view = memoryview(buf)
                got = os.preadv(fout, [view[:n]], off)
                h.update(view[:got])
                hashed[0] += got

            hasher: Optional[threading.Thread] = None
            kernel = True
            k = 0
            while True:
                buf = bufs[k % 2]
                n = _kernel_copy(fin, fout, done, BUF) if kernel else 0
                if kernel and n == 0 and done == 0 and size > 0:
                    kernel = False     # e.g. EXDEV across file systems on older kernels: plain copy
                if not kernel:
                    n = os.preadv(fin, [buf], done)
                    off = 0
                    view = memoryview(buf)[:n]
                    while off < n:
                        off += os.pwrite(fout, view[off:], done + off)
                if hasher is not None:
                    hasher.join()
                if not n:
                    break
                hasher = threading.Thread(target=hash_back, args=(done, n, buf))
                hasher.start()
                done += n
                k += 1
                if progress is not None:
                    progress(n)
            if hashed[0] != done:
                raise StageError(f"shard {src.name}: read back {hashed[0]} of {done} bytes from {tmp}")
        finally:
            os.close(fout)
    except BaseException:
        tmp.unlink(missing_ok=True)
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


def stage(manifest_path: Path, dest: Path, policy: str, nodes: int, node: int, threads: int = 0,
          quiet: bool = False) -> Dict[str, object]:
    """Copy and verify this node's shards into ``dest``; returns a summary."""
    prefix = f"stage[node {node}]"
    try:
        manifest = shards.read_manifest(manifest_path)
    except shards.ShardError as exc:
        raise StageError(str(exc)) from None
    src_dir = (manifest_path if manifest_path.is_dir() else manifest_path.parent).resolve()
    algo = shards.hash_algo(manifest)
    mine = placement(manifest, nodes, policy)[node]
    need = sum(int(s["bytes"]) for s in mine)
    dest.mkdir(parents=True, exist_ok=True)
    if dest.resolve() == src_dir:
        raise StageError(f"destination {dest} is the manifest's own folder: give the node-local folder")
    for stray in dest.glob(f".*{PARTIAL_TAG}*"):          # left by a killed earlier run
        stray.unlink(missing_ok=True)
    keep = {s["name"] for s in mine}
    for s in manifest["shards"]:                            # another placement's leftovers: free the space
        if s["name"] not in keep:
            (dest / s["name"]).unlink(missing_ok=True)
    present = {s["name"] for s in mine if (dest / s["name"]).is_file()}
    have = sum((dest / n).stat().st_size for n in present)
    free = shutil.disk_usage(dest).free
    if need - have > free:
        raise StageError(f"node {node}'s share is {_gb(need)} and {dest} has only {_gb(free + have)} free: use "
                         "--policy partition, more nodes, or a smaller dataset")
    t0 = time.monotonic()
    copied = skipped = 0
    moved = 0
    lock = threading.Lock()

    def one(s: Dict[str, object]) -> Tuple[str, str]:
        nonlocal copied, skipped, moved
        name, size, digest = s["name"], int(s["bytes"]), str(s[algo])
        final = dest / name
        if final.exists():
            if present_and_verified(final, algo, digest, size):
                with lock:
                    skipped += 1
                return name, "present, verified"
            final.unlink()   # wrong size or hash: never trust it, fetch again
            what = "was corrupt, "
        else:
            what = ""
        t = time.monotonic()
        last: Optional[StageError] = None
        for attempt in range(2):   # one retry: a parallel file system read can fail transiently
            try:
                n = copy_verified(src_dir / name, final, algo, digest, size)
                break
            except StageError as exc:
                last = exc
                if "missing" in str(exc):
                    raise
        else:
            assert last is not None
            raise last
        dt = max(time.monotonic() - t, 1e-9)
        with lock:
            copied += 1
            moved += n
        return name, f"{what}copied {_gb(n)} at {_gb(n / dt)}/s, verified"

    with ThreadPoolExecutor(max_workers=threads if threads > 0 else default_threads()) as pool:
        for name, what in pool.map(one, mine):
            if not quiet:
                _log(prefix, f"{name}: {what}")
    local = dict(manifest)
    local["shards"] = mine
    local["placement"] = {"policy": policy, "node": node, "nodes": nodes, "source": str(src_dir)}
    shards.write_manifest(dest / shards.MANIFEST_NAME, local)
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
        shutil.copy2(path, tmp)
        os.replace(tmp, out)
        n += 1
    if not quiet:
        _log("collect", f"{n} files from {src} -> {target}")
    return n


# ---- command line -------------------------------------------------------------------------------

def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "collect":
        p = argparse.ArgumentParser(prog="python -m trainer.stage collect",
                                    description="Copy what this node left on NVMe to DEST/<node name>.")
        p.add_argument("--src", required=True, help="Node-local folder (variables like $SUMMIT_JOBS_NVME expand).")
        p.add_argument("--dest", required=True, help="Folder on the parallel file system.")
        p.add_argument("--node-name", help="Default: $SUMMIT_JOBS_NODE_NAME, $SUMMIT_JOBS_VNODE, else the host name.")
        p.add_argument("--quiet", action="store_true")
        a = p.parse_args(argv[1:])
        try:
            collect(expand_dest(a.src), expand_dest(a.dest), a.node_name, a.quiet)
        except (StageError, OSError) as exc:
            _log("collect: error", str(exc))
            return 1
        return 0
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
        node = node_index(a.node, a.nodes)
        summary = stage(Path(os.path.expandvars(a.manifest)), expand_dest(a.dest), a.policy, a.nodes, node,
                        a.threads, a.quiet)
    except (StageError, OSError) as exc:
        _log("stage: error", f"{exc}")
        return 1
    if a.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
