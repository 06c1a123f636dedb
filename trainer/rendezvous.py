"""Where the ranks of one job meet: a port that another job cannot take from it.

Why not just the port derived from LSB_JOBID: two embedded-LSF homes on one
machine number their jobs from 1, a job id is reused after a scheduler restart,
and any other program may hold that port. The rank that found the port taken
failed with EADDRINUSE; worse, ranks of one job could reach the store of
another job that owned it.

The protocol, when the trainer knows its run directory:

1. Rank 0 (on the rendezvous host) opens a torch ``TCPStore`` on the derived
   port, or on the next free one (derived + 2, + 4, ...), and stores a random
   token in it.
2. It publishes ``{port, token, size}`` in ``<run-dir>/.rendezvous.<job>.json``
   (temp name, then rename: a reader sees a whole record or none), after
   removing the records of earlier, killed jobs.
3. The other ranks wait for the record (``SUMMIT_JOBS_RENDEZVOUS_TIMEOUT``
   seconds, default 600, then a clear error), connect to its port and accept
   the store only if it holds the same token. A record left by an earlier
   launch of the same job id names a port that is dead or someone else's: its
   token does not match, and the rank waits for rank 0's fresh record.
4. Once every rank has joined, rank 0 removes the record.

The run directory is on the parallel file system, which every node sees. The
record also names the host rank 0 serves on: a rank that computed another
host from its host list stops at once instead of dialling the wrong node.

Rank 0 checks first that the rendezvous host is its own (``check_host``):
a launch that put rank 0 elsewhere (a launch node taken for a compute node, a
wrong MASTER_ADDR) fails in seconds with the two hosts named, instead of the
other ranks waiting for a store nobody serves. On the embedded LSF every
virtual node is a loopback address of its own (SUMMIT_JOBS_VNODE) and rank
0's store listens on that address only, so dialling another virtual node
fails there as it does between real nodes; elsewhere it listens on every
address (a node's own name may resolve to a loopback address on that node).

DDP uses the store itself; Horovod's gloo rendezvous (an HTTP server on rank 0)
takes any free port and passes its number through the store.
"""
from __future__ import annotations

import datetime
import errno
import json
import os
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

from trainer import files
from trainer.rankenv import PORT_BASE, PORT_SPAN, job_id, torchrun_run_id

TOKEN_KEY = "summit_jobs/rendezvous_token"
#: How many ports rank 0 tries (every second one, so the derived pair p, p+1 keeps its parity).
TRIES = 64
#: A probe of a published port: long enough for a loaded node, short enough to move on from a dead one.
PROBE_SECONDS = 5.0
STORE_TIMEOUT = datetime.timedelta(minutes=30)


class RendezvousError(SystemExit):
    """The ranks could not meet: the trainer ends with this one line, no traceback."""


def record_path(folder: os.PathLike, job: str) -> Path:
    return Path(folder) / f".rendezvous.{job}.json"


def wait_seconds() -> float:
    raw = os.environ.get("SUMMIT_JOBS_RENDEZVOUS_TIMEOUT", "")
    try:
        return max(float(raw), 1.0) if raw else 600.0
    except ValueError:
        return 600.0


def _candidates(derived: int, stride: int = 1):
    """``derived``, then every ``stride``-th second port after it (wrapping within the range)."""
    for i in range(TRIES):
        yield PORT_BASE + (derived - PORT_BASE + 2 * stride * i) % PORT_SPAN


def _in_use(exc: BaseException) -> bool:
    text = str(exc)
    return "EADDRINUSE" in text or "ddress already in use" in text


def _address(host: str) -> Optional[str]:
    """The first address ``host`` resolves to, or None."""
    try:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
    except (socket.gaierror, UnicodeError, IndexError):
        return None


def _not_here(addr: str, here: str, why: str) -> RendezvousError:
    return RendezvousError(
        f"trainer: rank 0 runs on {here}, but the rendezvous host is {addr} ({why}): rank 0 must run on the "
        "first compute host of the allocation. Check MASTER_ADDR / SUMMIT_JOBS_RENDEZVOUS_ADDR and the "
        "profile's launch-node rule (SUMMIT_JOBS_LSF_CSM, SUMMIT_JOBS_LAUNCH_NODE_PREFIXES).")


def check_host(addr: str, env=None) -> None:
    """Rank 0: the rendezvous host must be this host; a RendezvousError names both otherwise."""
    env = os.environ if env is None else env
    resolved = _address(addr)
    if resolved is None:
        raise RendezvousError(f"trainer: the rendezvous host {addr!r} does not resolve to an address; "
                              "set MASTER_ADDR or SUMMIT_JOBS_RENDEZVOUS_ADDR to this node's name")
    vnode = env.get("SUMMIT_JOBS_VNODE", "")
    if vnode and _address(vnode) is not None:
        if _address(vnode) != resolved:
            raise _not_here(addr, f"virtual node {vnode}", "a different virtual node")
        return
    probe = socket.socket(socket.AF_INET6 if ":" in resolved else socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.bind((resolved, 0))
    except OSError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:
            raise _not_here(addr, socket.gethostname(), f"{resolved}, not an address of this host") from None
    finally:
        probe.close()


def _listen_host(addr: str) -> str:
    """Where rank 0's store listens: the virtual node's own address on the embedded LSF, else everywhere."""
    vnode = os.environ.get("SUMMIT_JOBS_VNODE", "")
    resolved = _address(addr) or ""
    if vnode and resolved.startswith("127."):
        return resolved
    return "::" if socket.has_ipv6 and ":" in resolved else "0.0.0.0"


def _listener(host: str, port: int) -> Optional[int]:
    """A listening socket's descriptor on (host, port), or None when the port is taken."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            return None
        raise RendezvousError(f"trainer: cannot listen on {host}:{port} for the rendezvous: {exc}") from None
    return sock.detach()


def host_store(addr: str, derived: int):
    """Rank 0: a master TCPStore on the first free candidate port; returns (store, port)."""
    from trainer.dist import compat
    check_host(addr)
    where = _listen_host(addr)
    for port in _candidates(derived):
        fd = _listener(where, port)
        if fd is None:
            continue
        try:
            return compat.listening_store(addr, port, STORE_TIMEOUT, fd), port
        except RuntimeError as exc:  # torch's DistNetworkError; the descriptor is closed
            if not _in_use(exc):
                raise
    raise RendezvousError(f"trainer: no free port for the rendezvous among {TRIES} tried from {derived} "
                          f"(every second port up to {PORT_BASE + PORT_SPAN}); free some, or set LSB_JOBID")


def publish(path: Path, record: Dict[str, object]) -> None:
    """Write the record atomically; records (and half-written ones) of earlier, killed jobs go."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.glob(".rendezvous.*"):
        if old != path:
            old.unlink(missing_ok=True)
    files.write_atomic(path, json.dumps(record))


def _read(path: Path) -> Optional[Dict[str, object]]:
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(rec, dict) and isinstance(rec.get("port"), int) and isinstance(rec.get("token"), str)
    return rec if ok else None


def _connect(addr: str, port: int):
    """A client store on ``port``, or None. In a thread: a client that reaches a listener which is not
    a TCPStore waits for its reply forever, whatever its timeout."""
    from torch.distributed import TCPStore
    out: Dict[str, object] = {}

    def attempt() -> None:
        try:
            out["store"] = TCPStore(addr, port, None, False, datetime.timedelta(seconds=PROBE_SECONDS),
                                    wait_for_workers=False)
        except Exception:  # refused, reset, timed out: not (yet) our store
            pass

    t = threading.Thread(target=attempt, daemon=True, name=f"rendezvous-probe-{port}")
    t.start()
    t.join(PROBE_SECONDS + 2)
    return out.get("store")


def _ours(store, token: str) -> bool:
    from trainer.dist import compat
    value = compat.store_value(store, TOKEN_KEY)
    return value is not None and value.decode(errors="replace") == token


def join_store(addr: str, path: Path, size: int, rank: int):
    """Ranks other than 0: the store that rank 0 published for this launch."""
    deadline = time.monotonic() + wait_seconds()
    failed: Tuple[object, float] = (None, 0.0)
    while time.monotonic() < deadline:
        rec = _read(path)
        fresh = rec is not None and (rec != failed[0] or time.monotonic() - failed[1] > 10)
        if fresh and rec.get("size") == size:
            if rec.get("host", addr) != addr:
                raise RendezvousError(
                    f"trainer: rank {rank} expects the rendezvous on {addr}, but rank 0 serves it on "
                    f"{rec['host']} ({path}): the ranks read different host lists or MASTER_ADDR values")
            store = _connect(addr, rec["port"])
            if store is not None and _ours(store, rec["token"]):
                store.set_timeout(STORE_TIMEOUT)
                return store
            failed = (rec, time.monotonic())  # an earlier launch's record: wait for rank 0's
        time.sleep(0.1)
    raise RendezvousError(f"trainer: rank {rank} waited {wait_seconds():g} s for rank 0 to publish the "
                          f"rendezvous in {path} (host {addr}): did rank 0 start? (SUMMIT_JOBS_RENDEZVOUS_TIMEOUT "
                          "sets the wait)")


def meet(addr: str, derived: int, folder: os.PathLike, job: str, rank: int, size: int,
         extra: Optional[Dict[str, str]] = None):
    """The job's store on every rank (rank 0 hosts it); ``extra`` keys are set before the others join."""
    path = record_path(folder, job)
    if rank != 0:
        return join_store(addr, path, size, rank)
    store, port = host_store(addr, derived)
    token = secrets.token_hex(16)
    for key, value in (extra or {}).items():
        store.set(key, value)
    store.set(TOKEN_KEY, token)
    # A set is sent without waiting for the server; a get on the same connection returns only after the
    # server has applied it. Without this round trip a rank reading the record at once can find no token
    # yet (its check arrives on another connection first) and waits 10 s before it looks again.
    store.get(TOKEN_KEY)
    publish(path, {"job": job, "port": port, "token": token, "size": size, "pid": os.getpid(), "host": addr})
    return store


def agent_store(addr: str, port: int):
    """The store torchrun's agent hosts for the job (TORCHELASTIC_USE_AGENT_STORE): joined as a client,
    under a prefix of its own so that its keys never meet torchrun's."""
    from torch.distributed import PrefixStore, TCPStore
    try:
        store = TCPStore(addr, port, None, False, STORE_TIMEOUT, wait_for_workers=False)
    except RuntimeError as exc:
        raise RendezvousError(f"trainer: cannot reach torchrun's store at {addr}:{port} (MASTER_ADDR, "
                              f"MASTER_PORT): {str(exc).splitlines()[0]}") from None
    return PrefixStore(f"summit_jobs/{torchrun_run_id(os.environ)}/", store)


def done(folder: os.PathLike, job: str, rank: int) -> None:
    """After every rank has joined: rank 0 removes the record."""
    if rank == 0:
        try:
            record_path(folder, job).unlink(missing_ok=True)
        except OSError:
            pass


#: free_port's step between candidates, in job ids (odd, so 64 steps never meet again within the range).
FREE_PORT_STRIDE = 1777


def free_port(job: str) -> int:
    """A port for a launcher's own rendezvous (torchrun's c10d store): derived from the job id, half the
    range away from the trainer's own (so the two never meet); if taken, the next free one FREE_PORT_STRIDE
    ids' ports on.

    Why the stride: this only probes; the launcher binds the port seconds later. Jobs submitted together
    get consecutive ids, hence neighbouring ports, and a job whose port was taken moved onto the next
    job's, which that job's probe still found free: both launchers then met in one store.
    """
    derived = PORT_BASE + (int(job) * 2 + PORT_SPAN // 2) % PORT_SPAN if job.isdecimal() else PORT_BASE + 1
    for port in _candidates(derived, FREE_PORT_STRIDE):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("", port))
            except OSError:
                continue
            return port
    raise RendezvousError(f"trainer: no free port among {TRIES} tried from {derived}")


def main(argv: Optional[list] = None) -> int:
    """``python -m trainer.rendezvous --free-port``: print free_port of the job's id (LSB_JOBID or SLURM_JOB_ID)
    for a job script."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    if args != ["--free-port"]:
        print("usage: python -m trainer.rendezvous --free-port", file=sys.stderr)
        return 2
    try:
        print(free_port(job_id(os.environ)))
    except RendezvousError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
