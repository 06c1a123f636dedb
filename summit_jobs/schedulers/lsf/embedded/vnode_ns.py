"""Virtual nodes with host names: each task runs where ``gethostname()`` is its node's name.

Why: client code finds its own node by looking ``socket.gethostname()`` up in
the job's host lists (Lightning's LSFEnvironment reads LSB_DJOB_RANKFILE that
way; Open MPI decides which hostfile entry is local by it; torchrun's c10d
rendezvous decides which agent serves the store by it). With virtual nodes
named by their loopback addresses every task saw the real machine's name,
found in no list.

How: where the kernel allows it, every task of a virtual node (the batch
script too, on its node; the CSM launch node is ``batch1``) starts in a UTS
namespace whose host name is the node's name, ``vnode1``, ``vnode2``, ...
(enter(), run in the child between fork and exec), and in a mount namespace
where a private hosts file is bind-mounted over /etc/hosts: the machine's own
lines plus one line per virtual node naming its loopback address
(node_address: ``127.1.0.1 vnode1``). So ``gethostbyname(gethostname())``
gives the node's own address for glibc, Python, torch's c10d and Open MPI
alike (HOSTALIASES would not: glibc reads it for some lookups only, and it
maps names to names, not to addresses). The names need not be unique on the
machine: a name lives only in its task's namespaces, and two LSF homes' nodes
``vnode1`` share the address 127.1.0.1 exactly as they did before.

As root (CAP_SYS_ADMIN) plain ``unshare(CLONE_NEWUTS | CLONE_NEWNS)`` does;
elsewhere a user namespace is added that maps the user's own uid and gid onto
themselves, so files, signals and /proc stay the user's. The mounts are made
private first, so the bind mount never reaches the machine's own /etc/hosts.
Python 3.11 has no os.unshare, hence ctypes.

Where neither works (no user namespaces, a seccomp filter), or with
``SUMMIT_JOBS_LSF_HOSTNAMES=off``, the nodes keep their loopback addresses as
names and tasks run as before; the supervisor says so in the job's output
(fallback_note).

The names and the namespaces are this module's; the state folder is the state
module's, which writes the private hosts file there and asks this module for
the task's entry (state.preexec). This module imports nothing of the embedded
LSF, so state may build on it.
"""
from __future__ import annotations

import ctypes
import errno
import functools
import ipaddress
import os
import re
from pathlib import Path
from typing import Callable, Iterable, List, Optional

#: The switch: ``auto`` (names where namespaces work) or ``off`` (always addresses).
SWITCH = "SUMMIT_JOBS_LSF_HOSTNAMES"
PREFIX = "vnode"
NAME_RE = re.compile(rf"^{PREFIX}([1-9][0-9]*)$")
#: The CSM launch node's address: above every node's (node_address stops far below it).
LAUNCH_ADDRESS = "127.1.255.254"
MARKER = "# summit-jobs embedded LSF: virtual nodes (this file is mounted over /etc/hosts in their tasks)"
HOSTS_FILE = "vnode-hosts"
#: The CSM launch node, where a job's batch script runs (its tasks start on the virtual nodes).
LAUNCH_NODE = "batch1"

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWUSER = 0x10000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18


def node_address(index: int) -> str:
    """The loopback address that is virtual node ``index`` (from 1): 127.1.0.1, 127.1.0.2, ...

    Why addresses as host names: the host lists of a job must name hosts that
    every program can reach (the trainer, torchrun, an MPI) without editing
    /etc/hosts, and each virtual node needs an address of its own so that a
    rank which dials the wrong node fails as it would on a cluster. Linux
    routes all of 127.0.0.0/8 to the loopback device, so each of these can be
    bound and dialled; no other program uses 127.1.x.x.
    """
    return f"127.1.{(index - 1) // 250}.{(index - 1) % 250 + 1}"


@functools.lru_cache(maxsize=None)
def _libc():
    """The C library, loaded in the parent: loading it between fork and exec could wait forever on a lock
    another thread of the parent held at the fork."""
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _unshare(libc) -> None:
    """New UTS and mount namespaces; with a user namespace (own ids mapped) where plain unshare is refused."""
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(CLONE_NEWUTS | CLONE_NEWNS) == 0:
        return
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWUTS | CLONE_NEWNS), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)


def enter(hostname: str, hosts_file: Optional[str]) -> None:
    """In the child before exec: become ``hostname`` with ``hosts_file`` as /etc/hosts (None: keep it)."""
    libc = _libc()
    _unshare(libc)
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    src = (hosts_file or "/etc/hosts").encode()
    _check(libc.mount(src, b"/etc/hosts", None, MS_BIND, None), "mount --bind over /etc/hosts")
    name = hostname.encode()
    _check(libc.sethostname(name, len(name)), "sethostname")


@functools.lru_cache(maxsize=None)
def unavailable() -> Optional[str]:
    """Why tasks cannot get host names here (None when they can): a child tries the whole of enter()."""
    if os.environ.get(SWITCH, "auto").strip().lower() in ("off", "0", "no", "false"):
        return f"{SWITCH}=off"
    if not Path("/proc/self/ns/uts").exists():
        return "this system has no Linux namespaces"
    _libc()
    pid = os.fork()
    if pid == 0:                                        # pragma: no cover - the child
        code = 0
        try:
            enter("vnode-probe", None)
        except OSError as exc:
            code = exc.errno or errno.EPERM
        except BaseException:
            code = errno.EPERM
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return None
    return (f"cannot enter UTS and mount namespaces ({os.strerror(code) if code > 0 else f'signal {-code}'}; "
            "needs root or unprivileged user namespaces)")


def fallback_note() -> Optional[str]:
    """The one line a job's output gets when its nodes keep their addresses as names for lack of namespaces."""
    why = unavailable()
    if why is None or why.startswith(SWITCH):
        return None
    return (f"embedded LSF: virtual nodes are named by their loopback addresses, and gethostname() in a task is "
            f"this machine's name: {why}")


def node_names(count: int) -> List[str]:
    """The virtual nodes' host names: ``vnode1``... where namespaces work, else their addresses."""
    if unavailable() is None:
        return [f"{PREFIX}{i}" for i in range(1, count + 1)]
    return [node_address(i) for i in range(1, count + 1)]


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def address_of(host: str) -> str:
    """A virtual node's loopback address, whichever way it is named (``vnode2`` and ``127.1.0.2`` are one
    node: jobs started with and without host names must never share it)."""
    m = NAME_RE.match(host)
    if m:
        return node_address(int(m.group(1)))
    return LAUNCH_ADDRESS if host == LAUNCH_NODE else host


def other_name(host: str) -> Optional[str]:
    """The node's name in the other naming: its address for ``vnodeN``, ``vnodeN`` for its address; None
    for anything that is not a virtual node."""
    address = address_of(host)
    if address != host:
        return address
    parts = host.split(".")
    if len(parts) == 4 and parts[:2] == ["127", "1"] and all(p.isdigit() for p in parts):
        index = int(parts[2]) * 250 + int(parts[3])
        if node_address(index) == host:
            return f"{PREFIX}{index}"
    return None


def hosts_text(base: str, count: int) -> str:
    """The private hosts file: ``base`` (the machine's /etc/hosts, any earlier block of ours cut off), a
    line per virtual node and one for the launch node."""
    own = base.split(MARKER, 1)[0].rstrip("\n")
    lines = ([own] if own else []) + [MARKER]
    lines += [f"{node_address(i)}\t{PREFIX}{i}" for i in range(1, count + 1)]
    lines.append(f"{LAUNCH_ADDRESS}\t{LAUNCH_NODE}")
    return "\n".join(lines) + "\n"


def entry(hostname: str, hosts_file: Optional[str]) -> Callable[[], None]:
    """What a task runs between fork and exec to become ``hostname`` (enter). The C library is loaded here,
    in the parent: loading it in the child could wait forever on a lock another thread held at the fork."""
    _libc()
    return lambda: enter(hostname, hosts_file)
