"""A real Slurm cluster on this one machine: MUNGE, slurmctld and N slurmd nodes, all under one folder.

Why real daemons and not a stand-in: what the Slurm implementation must get right (srun spanning nodes, the
task variables, ``--signal`` before the time limit, dependencies, what ``squeue --json`` and ``sacct`` print)
is what the real slurmctld does, and a stand-in would only repeat our own reading of the manual.

Each daemon runs under a small init of its own (``_enter``): it takes a UTS and a mount namespace, sets the
host name (``slurmctl``, ``node1``, ``node2``, ...), bind-mounts the node's own spool and log folders over
the paths slurm.conf names, becomes the child subreaper of everything the daemon forks, and reaps it. So each
slurmd is a node with its own host name (``srun -N2 hostname`` prints two names) and its own spool, while all
share the machine's network namespace, each at its own loopback address and port; each sees a hosts file of the
cluster's over /etc/hosts, where every node's name resolves to its address. Nothing outside the folder is
written: the daemons get ``-f slurm.conf``, the clients ``SLURM_CONF``; /etc/slurm and the system's MUNGE are
not read or touched.

Each job step (a batch script, an srun step) runs in a UTS namespace of its own, a copy of its node's: slurmd
starts every slurmstepd through the cluster's ``slurmstepd`` script (slurmd's ``-d``), which execs the real
one under ``unshare --uts``. Why: jobs run as root here, and a job's ``hostname x`` would otherwise rename the
node for every later job on it (on a real cluster a user may not rename the machine); now it renames the
step's copy only. Job processes stay in their node's mount namespace, which is how ``stop`` finds and ends
every one of them.

Accounting, two ways. By default ``accounting_storage/none`` with ``jobcomp/filetxt`` (one line per finished
job in ``jobcomp.log``): Slurm 22.05's ``sacct`` reads only slurmdbd, so it answers "Slurm accounting storage
is disabled", and ``squeue --json`` and ``scontrol show job`` know a job until MinJobAge (300 s) after it ends.
With ``accounting=True`` the cluster also runs a private MariaDB server (an empty data folder, no grant
tables, reachable only through its Unix socket in the folder) and slurmdbd, so that ``sacct`` and
``sacct --json`` answer as on a production cluster; that needs Debian's ``mariadb-server-core`` and ``slurmdbd``
and adds about 5 s to the start (slurmdbd creates its tables).

Needs root (namespaces, mounts, and slurmd runs jobs as their owner) and Debian's ``slurm-wlm`` and ``munge``.
Standard library and summit_jobs.errors only: the test fixtures import it. By hand:
``python -m summit_jobs.schedulers.slurm.localcluster start|stop|env DIR``.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from summit_jobs.errors import UserError, describe_os_error

#: The daemons and client commands a cluster needs, and where Debian puts them.
PROGRAMS = ("munged", "slurmctld", "slurmd", "slurmstepd", "sinfo", "srun", "sbatch", "squeue", "scancel",
            "scontrol", "sacct")
#: What gives each job step its own UTS namespace (util-linux, part of every Debian system).
UNSHARE = "unshare"
#: What ``accounting=True`` needs besides.
ACCOUNTING_PROGRAMS = ("mariadbd", "slurmdbd", "sacctmgr")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
INSTALL_HINT = "apt-get install -y slurm-wlm munge"
ACCOUNTING_HINT = "apt-get install -y mariadb-server-core slurmdbd"
#: The controller's host name in its own UTS namespace; the nodes are node1, node2, ...
CTLD_HOST = "slurmctl"
PARTITION = "debug"
#: The daemons stop() lets end on SIGTERM (slurmctld's helper is slurmscriptd) before it kills them.
DAEMON_NAMES = ("slurmctld", "slurmscriptd", "slurmd")
#: The daemons that run under a namespace init of their own (the others share the machine's namespaces).
NAMESPACED = ("slurmctld", "node")
MODULE = "summit_jobs.schedulers.slurm.localcluster"
#: The longest Unix socket path (sockaddr_un's sun_path, less its NUL), and a job id of the length the
#: cluster's sockets are checked for (a few million jobs).
MAX_SOCKET_PATH = 107
MAX_SOCKET_JOB_ID = 9_999_999
#: Linux constants (sched.h, sys/mount.h, sys/prctl.h).
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_CHILD_SUBREAPER = 36


class ClusterError(UserError):
    """The test cluster cannot run here or did not start or stop: what failed, and the daemon's last log lines."""


@dataclass
class Daemon:
    """A process the cluster started, recorded in cluster.json so that another process can stop it."""
    name: str
    pid: int
    #: Its start time (clock ticks since boot): a later process that reuses the pid is not ours.
    started: int
    #: Its own log file and the file its stdout and stderr go to.
    log: str
    out: str
    #: Its mount namespace (``mnt:[N]``), shared by everything it forks (job steps included: they take a UTS
    #: namespace of their own, not a mount namespace); empty for the daemons in the machine's (munged).
    namespace: str = ""


def find_program(name: str) -> Optional[str]:
    """The program's path, also in /usr/sbin where Debian puts the daemons and a user's PATH may not look."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), SYSTEM_PATH]))


def check_can_run(accounting: bool = False) -> None:
    """Root and the packages, checked first so that a user gets one line, not a daemon's complaint."""
    if os.geteuid() != 0:
        raise ClusterError("a local Slurm cluster needs root (its nodes live in their own UTS and mount "
                           "namespaces and slurmd runs jobs as their owner): run it as root, e.g. with sudo")
    missing = [p for p in PROGRAMS if find_program(p) is None]
    if missing:
        raise ClusterError(f"Slurm or MUNGE is not installed (missing: {', '.join(missing)}): {INSTALL_HINT}")
    if find_program(UNSHARE) is None:
        raise ClusterError(f"{UNSHARE} is not installed (each job step takes a UTS namespace of its own with it): "
                           "apt-get install -y util-linux")
    missing = [p for p in ACCOUNTING_PROGRAMS if find_program(p) is None] if accounting else []
    if missing:
        raise ClusterError(f"accounting needs MariaDB and slurmdbd (missing: {', '.join(missing)}): "
                           f"{ACCOUNTING_HINT}, or start the cluster without accounting")


def start_time(pid: int) -> Optional[int]:
    """The process's start time from /proc (None when there is no such live process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def is_alive(daemon: Daemon) -> bool:
    """The recorded process still runs (and is the one recorded, not a later one with its pid)."""
    return start_time(daemon.pid) == daemon.started


def command_name(pid: int) -> str:
    """The process's command name (``comm``), or "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def namespace_of(pid: int) -> str:
    """The mount namespace of a process, or "" when it is gone (a zombie has none). The mount namespace and not
    the UTS one: a node's job steps each have a UTS namespace of their own, but share their node's mounts."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return ""


def own_namespace(pid: int) -> str:
    """The mount namespace of a daemon's init if it has one of its own; "" while it still shares the machine's
    (an init that has not yet entered its own): stop() must never take the machine's for a node's."""
    namespace = namespace_of(pid)
    return "" if namespace in ("", namespace_of(os.getpid()), namespace_of(1)) else namespace


def members(namespace: str, but: Sequence[int] = ()) -> List[int]:
    """Every live process in a mount namespace, except those in ``but``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in but and namespace_of(int(entry)) == namespace:
            found.append(int(entry))
    return found


def signal_pids(pids: Sequence[int], sig: int) -> None:
    """Send a signal to each pid that is still there."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def wait_until(done: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    """Poll ``done`` until it holds or ``timeout`` seconds pass; whether it held."""
    deadline = time.monotonic() + timeout
    while True:
        if done():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)


def listening(port: int) -> bool:
    """Something listens on the TCP port (read from /proc: a probe connection would be an error in the
    daemon's log)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def free_ports(count: int) -> List[int]:
    """Ports nobody listens on now (held open together, so they differ)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("0.0.0.0", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tail(path: str, lines: int = 12) -> str:
    """The last lines of a log file, for an error message."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return f"({path} was not written)"
    return "\n".join(text.rstrip().splitlines()[-lines:]) or f"({path} is empty)"


class LocalSlurmCluster:
    """A Slurm cluster whose every file lives under ``root``: ``start()``, then the Slurm commands with
    ``env()`` (or ``run``), then ``stop()``. Another process can stop it: the daemons are in cluster.json."""

    def __init__(self, root, nodes: int = 2, cpus: int = 2, memory_mb: int = 1024,
                 accounting: bool = False) -> None:
        if nodes < 1 or cpus < 1:
            raise ClusterError(f"a cluster needs at least 1 node of at least 1 CPU (asked: {nodes} x {cpus})")
        self.root = Path(root).resolve()
        # slurmstepd's socket for a step: SPOOL/<node>_<job>.<step>, at most 107 bytes (sockaddr_un); a longer
        # folder let the nodes start and then failed every job ("Unix socket path ... is too long").
        longest = len(str(self.root / "node" / "spool" / f"node{nodes}_{MAX_SOCKET_JOB_ID}.4294967291"))
        if longest > MAX_SOCKET_PATH:
            raise ClusterError(f"the cluster folder {self.root} is too long for slurmstepd's sockets ({longest} "
                               f"> {MAX_SOCKET_PATH} bytes): give a folder of at most "
                               f"{len(str(self.root)) - (longest - MAX_SOCKET_PATH)} characters, e.g. under /tmp")
        self.nodes = [f"node{i}" for i in range(1, nodes + 1)]
        self.cpus = cpus
        self.memory_mb = memory_mb
        self.accounting = accounting
        self.conf = self.root / "slurm.conf"
        self.state_file = self.root / "cluster.json"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.db_socket = self.root / "db" / "mariadb.sock"
        self.jobcomp = self.root / "jobcomp.log"
        #: What slurmd runs for each job step (``-d``): the real slurmstepd in a UTS namespace of the step's own.
        self.stepd = self.root / "slurmstepd"
        #: The hosts file the controller and the nodes see as /etc/hosts: the machine's, and the nodes' names.
        self.hosts = self.root / "hosts"
        self.ports: Dict[str, int] = {}
        self._children: Dict[int, subprocess.Popen] = {}
        #: Every daemon this start spawned, saved to cluster.json as soon as it is known, so that a start that
        #: fails half-way stops what it began.
        self._spawned: List[Daemon] = []

    # -- what users and tests call ------------------------------------------------------------------------

    def env(self, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """An environment for the Slurm commands: this cluster's slurm.conf, no SLURM_* variables of a job
        this process may run in, and the system folders on PATH."""
        env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = os.pathsep.join([env.get("PATH", ""), SYSTEM_PATH])
        return env

    def run(self, argv: Sequence[str], timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        """Run a Slurm command against this cluster; output captured as text."""
        kwargs.setdefault("env", self.env())
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kwargs)

    def node_states(self) -> Dict[str, str]:
        """Each node's state as ``sinfo`` reports it (``idle``, ``alloc``, ``down*``, ...); {} when the
        controller does not answer."""
        try:
            out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=15)
        except subprocess.TimeoutExpired:
            return {}
        if out.returncode != 0:
            return {}
        return dict(line.split(None, 1) for line in out.stdout.splitlines() if line.strip())

    def daemons(self) -> List[Daemon]:
        """The daemons cluster.json records ([] when there is none)."""
        try:
            return [Daemon(**d) for d in json.loads(self.state_file.read_text())["daemons"]]
        except FileNotFoundError:
            return []

    def start(self, timeout: float = 30.0) -> "LocalSlurmCluster":
        """Start MUNGE (and MariaDB and slurmdbd with accounting), slurmctld and the nodes; return once
        ``sinfo`` shows every node idle, or stop what started and raise ClusterError naming the daemon that
        failed and its log's last lines."""
        check_can_run(self.accounting)
        self._refuse_if_running()
        deadline = time.monotonic() + timeout
        self._prepare()
        self._spawned = []
        try:
            self._start_munged(deadline)
            if self.accounting:
                self._start_accounting(deadline)
            self._start_slurm(deadline)
            self._save(self._spawned)
            self._wait_idle(self._spawned, deadline)
            self._save([self._with_namespace(d) for d in self._spawned])
        except BaseException:
            self._save(self._spawned)
            with contextlib.suppress(ClusterError):   # the start's own error says more
                self.stop()
            raise
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """End every daemon and every process of every job (they live in the nodes' namespaces), so that no
        process, mount or namespace of the cluster is left. Raises ClusterError if one outlives ``timeout``."""
        daemons = self.daemons()
        left = self._end_namespaces([d for d in daemons if d.namespace or d.name.startswith(NAMESPACED)],
                                    timeout)
        for d in reversed(daemons):
            if not (d.namespace or d.name.startswith(NAMESPACED)):
                left += self._end_process(d, timeout)
        self._reap()
        if left:
            raise ClusterError(f"the Slurm test cluster in {self.root} left processes that would not end: "
                               f"{sorted(left)}; end them by hand (kill -9)")
        self.state_file.unlink(missing_ok=True)

    def __enter__(self) -> "LocalSlurmCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- starting -----------------------------------------------------------------------------------------

    def _refuse_if_running(self) -> None:
        """One cluster per folder: a second start would fight the first over ports and files."""
        running = [d.name for d in self.daemons() if is_alive(d)]
        if running:
            raise ClusterError(f"a Slurm test cluster already runs in {self.root} ({', '.join(running)}): "
                               f"stop it first (python -m {MODULE} stop {self.root})")

    def _prepare(self) -> None:
        """Fresh folders, a MUNGE key and the configuration files; the last cluster's state and logs go."""
        for sub in ("munge", "db", "dbd", "ctld", "node", "nodes"):
            shutil.rmtree(self.root / sub, ignore_errors=True)
        self.jobcomp.unlink(missing_ok=True)
        # munged wants its socket's folder searchable by all and its key readable by its owner only.
        (self.root / "munge").mkdir(parents=True, mode=0o755)
        os.chmod(self.root / "munge", 0o755)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        for sub in ("ctld/state", "node/spool", "node/log", "dbd"):
            (self.root / sub).mkdir(parents=True)
        (self.root / "db").mkdir(mode=0o700)
        for node in self.nodes:
            for sub in ("spool", "log"):
                (self.root / "nodes" / node / sub).mkdir(parents=True)
        (self.root / "plugstack.conf").write_text("")
        self.stepd.write_text(stepd_script())
        self.stepd.chmod(0o755)
        self.hosts.write_text(hosts_file(self, _read_text("/etc/hosts")))
        names = ["slurmctld", "slurmd", "slurmdbd", *self.nodes]
        self.ports = dict(zip(names, free_ports(len(names))))
        self.conf.write_text(slurm_conf(self))
        dbd_conf = self.root / "slurmdbd.conf"
        dbd_conf.unlink(missing_ok=True)
        if self.accounting:
            # slurmdbd reads slurmdbd.conf next to SLURM_CONF and refuses it unless only its owner may read it.
            dbd_conf.touch(mode=0o600)
            dbd_conf.write_text(slurmdbd_conf(self))

    def _spawn(self, name: str, argv: List[str], log: Path, out: Path, env: Optional[Dict[str, str]] = None
               ) -> Daemon:
        """Start one daemon in the foreground, its output to ``out``, in a session of its own."""
        env = dict(env or self.env())
        package_root = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        with open(out, "wb") as fh:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                    env=env, cwd=str(self.root), start_new_session=True)
        self._children[proc.pid] = proc
        daemon = Daemon(name, proc.pid, start_time(proc.pid) or 0, str(log), str(out))
        self._spawned.append(daemon)
        return daemon

    def _await(self, daemon: Daemon, ready: Callable[[], bool], what: str, deadline: float) -> None:
        """Wait until the daemon is ready; fail with its log if it exits or the time is up."""
        if not wait_until(lambda: not is_alive(daemon) or ready(), max(0.0, deadline - time.monotonic())):
            self._fail(f"{daemon.name} did not {what} in time", daemon)
        if not is_alive(daemon):
            self._fail(f"{daemon.name} exited", daemon)

    def _start_munged(self, deadline: float) -> None:
        """munged with its own key, socket, log and seed; --force because the folder's parents may be
        private (pytest's are), which munged otherwise refuses."""
        m = self.root / "munge"
        daemon = self._spawn("munged", [find_program("munged"), "--foreground", "--force",
                                        f"--socket={self.munge_socket}", f"--key-file={m / 'munge.key'}",
                                        f"--log-file={m / 'munged.log'}", f"--pid-file={m / 'munged.pid'}",
                                        f"--seed-file={m / 'munged.seed'}"],
                             m / "munged.log", m / "munged.out")
        self._await(daemon, self.munge_socket.exists, "create its socket", deadline)

    def _start_accounting(self, deadline: float) -> None:
        """A MariaDB server of our own on an empty data folder (no grant tables: only its Unix socket, in a
        folder only root may enter, reaches it), then slurmdbd, which creates its tables on first contact
        and finds the socket through MYSQL_UNIX_PORT."""
        db = self.root / "db"
        mariadb = self._spawn("mariadbd", [find_program("mariadbd"), *mariadb_options(db, self.db_socket)],
                              db / "mariadbd.err", self.root / "dbd" / "mariadbd.out")
        self._await(mariadb, self.db_socket.exists, "open its socket", deadline)
        env = {**self.env(), "MYSQL_UNIX_PORT": str(self.db_socket)}
        dbd = self._spawn("slurmdbd", [find_program("slurmdbd"), "-D"], self.root / "dbd" / "slurmdbd.log",
                          self.root / "dbd" / "slurmdbd.out", env=env)
        port = self.ports["slurmdbd"]
        self._await(dbd, lambda: listening(port), f"listen on port {port}", deadline)

    def _enter_argv(self, hostname: str, binds: Sequence[Tuple[Path, Path]], program: List[str]) -> List[str]:
        """The command line that runs ``program`` under this module's namespace init (``_enter``)."""
        argv = [sys.executable, "-m", MODULE, "_enter", hostname]
        for src, dst in binds:
            argv += ["--bind", str(src), str(dst)]
        return argv + ["--", *program]

    def _start_slurm(self, deadline: float) -> None:
        """slurmctld (cleared state, -c), then one slurmd per node once it listens, each under its own
        namespace init; the nodes see their own spool and log folders at the paths slurm.conf names."""
        ctld = self.root / "ctld"
        hosts = [(self.hosts, Path("/etc/hosts"))]
        ctl = self._spawn("slurmctld", self._enter_argv(CTLD_HOST, hosts, [
            find_program("slurmctld"), "-D", "-c", "-f", str(self.conf)]),
            ctld / "slurmctld.log", ctld / "slurmctld.out")
        port = self.ports["slurmctld"]
        self._await(ctl, lambda: listening(port), f"listen on port {port}", deadline)
        for node in self.nodes:
            own = self.root / "nodes" / node
            binds = [(own / "spool", self.root / "node" / "spool"), (own / "log", self.root / "node" / "log"),
                     *hosts]
            argv = self._enter_argv(node, binds, [find_program("slurmd"), "-D", "-f", str(self.conf),
                                                  "-d", str(self.stepd)])
            self._spawn(node, argv, own / "log" / "slurmd.log", own / "slurmd.out")

    def _wait_idle(self, started: List[Daemon], deadline: float) -> None:
        """Until sinfo shows every node idle; a daemon that exits meanwhile fails the start at once."""
        while True:
            for d in started:
                if not is_alive(d):
                    self._fail(f"{d.name} exited", d)
            states = self.node_states()
            if states and all(states.get(n) == "idle" for n in self.nodes):
                return
            if time.monotonic() >= deadline:
                late = [n for n in self.nodes if states.get(n) != "idle"] or self.nodes
                shown = ", ".join(f"{n}={states.get(n, 'absent')}" for n in late)
                blamed = next((d for d in started if d.name == late[0]), None) if states else None
                self._fail(f"the nodes were not idle in time ({shown})",
                           blamed or next(d for d in started if d.name == "slurmctld"))
            time.sleep(0.1)

    def _with_namespace(self, daemon: Daemon) -> Daemon:
        """The daemon's record with its namespace, read once its init has surely entered it."""
        if not daemon.name.startswith(NAMESPACED):
            return daemon
        return Daemon(**{**asdict(daemon), "namespace": own_namespace(daemon.pid)})

    def _fail(self, what: str, daemon: Daemon) -> None:
        """Raise the one start error: what failed and the daemon's last log lines (its output if no log)."""
        log = daemon.log if Path(daemon.log).is_file() and Path(daemon.log).stat().st_size else daemon.out
        raise ClusterError(f"the Slurm test cluster in {self.root} did not start: {what}. "
                           f"Last lines of {log}:\n{tail(log)}")

    def _save(self, daemons: List[Daemon]) -> None:
        self.state_file.write_text(json.dumps({"daemons": [asdict(d) for d in daemons]}, indent=1) + "\n")

    # -- stopping -----------------------------------------------------------------------------------------

    def _end_namespaces(self, daemons: List[Daemon], timeout: float) -> List[int]:
        """SIGTERM each init (it passes it on to its daemon) and SIGKILL every job step and task of the
        namespaces at once; a daemon still there after 2 s is killed too. Done when the inits, having reaped
        everything, exit."""
        live = [d for d in daemons if is_alive(d)]
        inits = [d.pid for d in live]
        namespaces = [ns for ns in (d.namespace or own_namespace(d.pid) for d in live) if ns]
        signal_pids(inits, signal.SIGTERM)
        grace_ends = time.monotonic() + min(2.0, timeout)

        def all_gone() -> bool:
            rest = [p for ns in namespaces for p in members(ns, but=inits)]
            graced = time.monotonic() < grace_ends
            signal_pids([p for p in rest if not (graced and command_name(p) in DAEMON_NAMES)], signal.SIGKILL)
            self._reap()
            return not rest and not any(is_alive(d) for d in live)

        if not wait_until(all_gone, timeout):
            signal_pids([d.pid for d in live if is_alive(d)], signal.SIGKILL)
            wait_until(all_gone, 2.0)
        return [d.pid for d in live if is_alive(d)] + [p for ns in namespaces for p in members(ns)]

    def _end_process(self, daemon: Daemon, timeout: float) -> List[int]:
        """SIGTERM, then SIGKILL after ``timeout``; the pid if it still runs."""
        if not is_alive(daemon):
            return []
        signal_pids([daemon.pid], signal.SIGTERM)
        if not wait_until(lambda: self._reap() or not is_alive(daemon), timeout):
            signal_pids([daemon.pid], signal.SIGKILL)
            wait_until(lambda: self._reap() or not is_alive(daemon), 2.0)
        return [daemon.pid] if is_alive(daemon) else []

    def _reap(self) -> None:
        """Collect the exit of the daemons this process started, so none stays a zombie."""
        for pid, proc in list(self._children.items()):
            if proc.poll() is not None:
                del self._children[pid]


def slurm_conf(cluster: LocalSlurmCluster) -> str:
    """slurm.conf of the cluster. The choices that make it work on one machine without cgroups:
    proctrack/linuxproc (processes tracked by parentage), task/none (the nodes' CPUs are declared, not real:
    SlurmdParameters=config_overrides), jobcomp/filetxt for finished jobs, KillWait=2 so that scancel and time
    limits end a job in seconds, batch_sched_delay=0 so that a batch job starts when it is submitted (Slurm
    defers them up to 3 s), MailProg=/bin/true (no mail). Each node has its own loopback address and
    port."""
    root, ports = cluster.root, cluster.ports
    lines = [
        f"# Written by {MODULE}: a test cluster on one machine.",
        "ClusterName=summitlocal", f"SlurmctldHost={CTLD_HOST}(127.0.0.1)",
        f"SlurmctldPort={ports['slurmctld']}", f"SlurmdPort={ports['slurmd']}",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={cluster.munge_socket}",
        "SlurmUser=root", "SlurmdUser=root",
        f"StateSaveLocation={root}/ctld/state", f"SlurmctldPidFile={root}/ctld/slurmctld.pid",
        f"SlurmctldLogFile={root}/ctld/slurmctld.log",
        f"SlurmdSpoolDir={root}/node/spool", f"SlurmdPidFile={root}/node/log/slurmd.pid",
        f"SlurmdLogFile={root}/node/log/slurmd.log", f"PlugStackConfig={root}/plugstack.conf",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "SchedulerType=sched/builtin",
        "SchedulerParameters=batch_sched_delay=0",
        "MpiDefault=none", "SwitchType=switch/none", "SlurmdParameters=config_overrides",
        "JobCompType=jobcomp/filetxt", f"JobCompLoc={cluster.jobcomp}", "MailProg=/bin/true",
        "ReturnToService=2", "KillWait=2", "MinJobAge=300", "MessageTimeout=10", "InactiveLimit=0",
        "SlurmctldTimeout=30", "SlurmdTimeout=60", "SlurmctldDebug=info", "SlurmdDebug=info",
    ]
    if cluster.accounting:
        # The connection to slurmdbd authenticates with the MUNGE socket that AccountingStoragePass names.
        lines += ["AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=127.0.0.1",
                  f"AccountingStoragePort={ports['slurmdbd']}",
                  f"AccountingStoragePass=socket={cluster.munge_socket}"]
    else:
        lines.append("AccountingStorageType=accounting_storage/none")
    for i, node in enumerate(cluster.nodes, start=1):
        lines.append(f"NodeName={node} NodeHostname={node} NodeAddr=127.0.1.{i} Port={ports[node]} "
                     f"CPUs={cluster.cpus} RealMemory={cluster.memory_mb} State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes={','.join(cluster.nodes)} Default=YES MaxTime=INFINITE "
                 "State=UP")
    return "\n".join(lines) + "\n"


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def hosts_file(cluster: LocalSlurmCluster, machine: str) -> str:
    """/etc/hosts as the controller and the nodes see it: the machine's lines, then each node's name at its
    loopback address and the controller's, so that a job's ranks reach the first node by its name (MASTER_ADDR,
    torchrun's rendezvous endpoint) as they do on a real cluster."""
    lines = [machine.rstrip("\n"), f"# Added by {MODULE}: the test cluster's nodes.", f"127.0.0.1 {CTLD_HOST}"]
    lines += [f"127.0.1.{i} {node}" for i, node in enumerate(cluster.nodes, start=1)]
    return "\n".join(line for line in lines if line) + "\n"


def stepd_script() -> str:
    """The program slurmd starts for each job step instead of slurmstepd: slurmstepd itself (exec'd, so the
    process, its arguments and its pipes to slurmd are slurmd's own), in a new UTS namespace that starts as a
    copy of the node's. A job that renames its host renames its step's copy; the node keeps its name."""
    unshare, stepd = shlex.quote(find_program(UNSHARE) or UNSHARE), shlex.quote(find_program("slurmstepd") or "")
    return (f"#!/bin/sh\n# Written by {MODULE}: each job step in a UTS namespace of its own.\n"
            f'exec {unshare} --uts -- {stepd} "$@"\n')


def slurmdbd_conf(cluster: LocalSlurmCluster) -> str:
    """slurmdbd.conf: DbdHost=localhost (which slurmdbd accepts on any host), the database through the
    MariaDB socket (StorageHost=localhost and MYSQL_UNIX_PORT), root as its user."""
    dbd = cluster.root / "dbd"
    return "\n".join([
        f"# Written by {MODULE}.",
        "AuthType=auth/munge", f"AuthInfo=socket={cluster.munge_socket}",
        "DbdHost=localhost", "DbdAddr=127.0.0.1", f"DbdPort={cluster.ports['slurmdbd']}",
        "SlurmUser=root", f"PidFile={dbd}/slurmdbd.pid", f"LogFile={dbd}/slurmdbd.log", "DebugLevel=info",
        "StorageType=accounting_storage/mysql", "StorageHost=localhost", "StorageUser=root",
        "StorageLoc=slurm_acct_db", "",
    ])


def mariadb_options(datadir: Path, sock: Path) -> List[str]:
    """A throw-away server: no option files read, no network, no grant tables, small InnoDB files and no
    flushing to disk (a test cluster's accounting need not survive a power cut)."""
    return ["--no-defaults", f"--datadir={datadir}", f"--socket={sock}", "--skip-networking", "--user=root",
            f"--pid-file={datadir}/mariadbd.pid", f"--log-error={datadir}/mariadbd.err", "--skip-grant-tables",
            "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M", "--innodb-lock-wait-timeout=900",
            "--innodb-flush-method=nosync", "--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0"]


# -- the namespace init each Slurm daemon runs under ----------------------------------------------------------

def _libc_call(libc, name: str, *args) -> None:
    """Call a libc function that returns -1 and sets errno on failure."""
    if getattr(libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def enter_namespaces(hostname: str, binds: Sequence[Tuple[str, str]]) -> None:
    """Take a UTS and a mount namespace of our own, name the host, and bind the node's folders; mounts made
    here are private, so the machine's mount table never sees them and they vanish with the namespace."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    _libc_call(libc, "unshare", CLONE_NEWUTS | CLONE_NEWNS)
    _libc_call(libc, "mount", b"none", b"/", None, MS_REC | MS_PRIVATE, None)
    socket.sethostname(hostname)
    for src, dst in binds:
        _libc_call(libc, "mount", src.encode(), dst.encode(), None, MS_BIND, None)
    _libc_call(libc, "prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def run_as_init(program: Sequence[str]) -> int:
    """Run the daemon as our child, pass it SIGTERM/SIGINT/SIGHUP, and reap every process that the daemon's
    forks leave to us (slurmd's job steps are orphaned on purpose); exit when none is left."""
    child = os.fork()
    if child == 0:
        try:
            os.execv(program[0], list(program))
        except OSError as exc:
            os.write(2, f"cannot run {program[0]}: {exc}\n".encode())
        os._exit(127)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: signal_pids([child], signum))
    code = 0
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return code
        if pid == child:
            code = os.waitstatus_to_exitcode(status)


def parse_enter(args: List[str]) -> Tuple[str, List[Tuple[str, str]], List[str]]:
    """``HOSTNAME [--bind SRC DST]... -- PROGRAM [ARG]...``, as ``_enter_argv`` writes it."""
    split = args.index("--")
    head, program = args[:split], args[split + 1:]
    binds = [(head[i + 1], head[i + 2]) for i in range(1, len(head), 3) if head[i] == "--bind"]
    if not program or len(head) != 1 + 3 * len(binds):
        raise SystemExit(f"_enter: cannot read {args}")
    return head[0], binds, program


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``start DIR [--nodes N]``, ``stop DIR``, ``env DIR`` (a line to source), and the internal ``_enter``."""
    parser = argparse.ArgumentParser(prog="python -m summit_jobs.schedulers.slurm.localcluster",
                                     description="A Slurm test cluster on this machine (needs root).")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start a cluster whose files live in DIR")
    start.add_argument("dir")
    start.add_argument("--nodes", type=int, default=2)
    start.add_argument("--cpus", type=int, default=2, help="CPUs declared per node")
    start.add_argument("--accounting", action="store_true", help="also run MariaDB and slurmdbd (for sacct)")
    sub.add_parser("stop", help="stop the cluster of DIR").add_argument("dir")
    sub.add_parser("env", help="print the SLURM_CONF line for DIR's cluster").add_argument("dir")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_enter"]:
        hostname, binds, program = parse_enter(argv[1:])
        enter_namespaces(hostname, binds)
        return run_as_init(program)
    args = parser.parse_args(argv)
    try:
        return command(args)
    except UserError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:      # the folder cannot be written: one line, not a traceback
        print(f"Error: {describe_os_error(exc)}", file=sys.stderr)
        return UserError.exit_code


def command(args: argparse.Namespace) -> int:
    """The user's commands of ``main``."""
    if args.command == "start":
        cluster = LocalSlurmCluster(args.dir, nodes=args.nodes, cpus=args.cpus,
                                    accounting=args.accounting).start()
        print(f"export SLURM_CONF={cluster.conf}")
    elif args.command == "stop":
        LocalSlurmCluster(args.dir).stop()
    else:
        print(f"export SLURM_CONF={LocalSlurmCluster(args.dir).conf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
