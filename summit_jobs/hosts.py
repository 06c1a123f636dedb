"""Where LSF commands run: this machine (LocalHost) or a login node over SSH (SshHost).

Both give the same small interface (run a command, write/read files, make
folders) so that submission, status, cancel and logs never care where they
are. Commands are argument lists: LocalHost runs them without a shell, SshHost
joins them with ``shlex`` quoting (the remote side always has a shell).

SSH safety: the host key must already be known (the user's and the system's
known_hosts, plus an optional known_hosts file of the profile or the command
line); an unknown key is refused unless the user passes the loudly named
``--trust-new-host-key``, and a changed or ``@revoked`` key is always refused.
A run record (run.json) cannot add a known_hosts file of its own: only files
the user vouches for decide which hosts are trusted (see from_record).
known_hosts files are read here, not by paramiko, so that ``@revoked`` and
``@cert-authority`` lines (common at HPC sites) are understood. Authentication is by key file or agent
only; no password is asked for or stored. One SSH connection serves a whole
command invocation (upload, submit, status), opened lazily.
"""
from __future__ import annotations

import contextlib
import os
import posixpath
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from typing import Dict, Iterator, List, Optional, Sequence

from summit_jobs import resources
from summit_jobs.errors import UserError
from trainer import files

DEFAULT_TIMEOUT = 120.0
USER_KNOWN_HOSTS = "~/.ssh/known_hosts"
SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"


class ConnectionLost(UserError):
    """The SSH connection dropped in the middle of a command; a new connection may work."""


def warn(message: str) -> None:
    print(f"summit-jobs: warning: {message}", file=sys.stderr)


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()


@dataclass(frozen=True)
class SshTarget:
    """Everything needed to reach a login node; recorded with each run so status finds it again."""
    host: str
    user: Optional[str] = None
    port: int = 22
    key_file: Optional[str] = None
    known_hosts: Optional[str] = None
    trust_new_host_key: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 1 <= self.port <= 65535:
            raise UserError(f"SSH port {self.port!r} is not a port number: give --port from 1 to 65535.")
        if not self.host or self.host.startswith("-") or any(c.isspace() or ord(c) < 32 for c in self.host):
            raise UserError(f"SSH host {self.host!r} is not a host name: give --host NAME (no spaces, not "
                            "starting with '-').")

    def label(self) -> str:
        who = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port != 22 else ""
        return f"{who}{self.host}{port}"

    def record(self) -> Dict[str, object]:
        return {"host": self.host, "user": self.user, "port": self.port, "key_file": self.key_file,
                "known_hosts": self.known_hosts}


class Host:
    """Interface; see LocalHost and SshHost."""
    label = "?"
    is_remote = False

    def join(self, *parts: str) -> str:
        """A path on this host: POSIX rules on a remote login node, this machine's rules here."""
        return (posixpath.join if self.is_remote else os.path.join)(*parts)

    def run(self, argv: List[str], *, cwd: Optional[str] = None, stdin: Optional[str] = None,
            timeout: float = DEFAULT_TIMEOUT) -> Result:
        raise NotImplementedError

    def write_file(self, path: str, text: str, *, force: bool = False) -> None:
        raise NotImplementedError

    def makedirs(self, path: str) -> None:
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def read_text(self, path: str) -> Optional[str]:
        data = self.read_from(path, 0)
        return None if data is None else data.decode("utf-8", "replace")

    def read_from(self, path: str, offset: int) -> Optional[bytes]:
        """Bytes of ``path`` from ``offset`` on; None when the file does not exist."""
        raise NotImplementedError

    def listdir(self, path: str) -> List[str]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> "Host":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def embedded_environment(base: Dict[str, str], virtual_nodes: Optional[int], cores: Optional[int]) -> Dict[str, str]:
    """The environment in which the embedded LSF's commands are found and configured."""
    env = dict(base)
    env["PATH"] = str(resources.embedded_bin_dir()) + os.pathsep + env.get("PATH", os.defpath)
    env["SUMMIT_JOBS_PYTHON"] = sys.executable
    if virtual_nodes:
        env.setdefault("SUMMIT_JOBS_LSF_NODES", str(virtual_nodes))
    if cores:
        env.setdefault("SUMMIT_JOBS_LSF_CORES", str(cores))
    return env


class LocalHost(Host):
    """LSF on this machine: subprocesses without a shell; the embedded LSF when the profile says so."""

    def __init__(self, embedded: bool = False, virtual_nodes: Optional[int] = None, cores: Optional[int] = None):
        self.embedded = embedded
        self.label = "this machine" + (" (embedded LSF)" if embedded else "")
        self.env = embedded_environment(dict(os.environ), virtual_nodes, cores) if embedded else dict(os.environ)

    def run(self, argv, *, cwd=None, stdin=None, timeout=DEFAULT_TIMEOUT) -> Result:
        try:
            proc = subprocess.run(argv, cwd=cwd, input=stdin, capture_output=True, text=True, env=self.env,
                                  timeout=timeout)
        except FileNotFoundError:
            if cwd and not os.path.isdir(cwd):
                raise UserError(f"folder {cwd} does not exist on this machine.") from None
            raise UserError(f"{argv[0]} was not found: this machine has no LSF. Use --machine local for the "
                            "embedded LSF, or --host LOGIN_NODE to submit over SSH.") from None
        except subprocess.TimeoutExpired:
            raise UserError(f"{argv[0]} did not answer within {timeout:.0f} s; LSF may be overloaded, "
                            "try again later.") from None
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def write_file(self, path, text, *, force=False) -> None:
        if os.path.exists(path) and not force:
            raise UserError(f"{path} already exists; pass --force to overwrite it.")
        files.write_atomic(path, text)

    def makedirs(self, path) -> None:
        os.makedirs(path, exist_ok=True)

    def exists(self, path) -> bool:
        return os.path.exists(path)

    def read_from(self, path, offset) -> Optional[bytes]:
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                return fh.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def listdir(self, path) -> List[str]:
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []


def _known_hosts_files(target: SshTarget) -> List[str]:
    files = [os.path.expanduser(USER_KNOWN_HOSTS), SYSTEM_KNOWN_HOSTS]
    if target.known_hosts:
        files.insert(0, os.path.expanduser(target.known_hosts))
    return files


@dataclass
class KnownHosts:
    """Host keys from known_hosts files, with the keys those files revoke."""
    keys: object = None                  # paramiko.HostKeys, revoked keys left out
    revoked: Dict[str, str] = None       # "type base64" -> the file and line that revoked it
    listed: List[tuple] = None           # (host name or hashed name, key) as read

    def is_revoked(self, key) -> Optional[str]:
        return self.revoked.get(f"{key.get_name()} {key.get_base64()}")


def _key_line(line: str, path: str, lineno: int, known: KnownHosts) -> None:
    """One line of a known_hosts file into ``known`` (markers understood, bad lines skipped with a warning)."""
    import paramiko
    from paramiko.hostkeys import HostKeyEntry, InvalidHostKey
    fields = line.split()
    if fields[0] == "@revoked" and len(fields) >= 4:
        known.revoked[f"{fields[2]} {fields[3]}"] = f"{path}:{lineno}"
        return
    if fields[0] == "@cert-authority":
        warn(f"{path}:{lineno}: @cert-authority lines (host certificates) are not supported and are ignored; "
             "to reach such a host, list its own host key (ssh-keyscan, checked against the site's "
             "published fingerprints).")
        return
    if fields[0].startswith("@"):
        warn(f"{path}:{lineno}: unknown marker {fields[0]!r}; line ignored.")
        return
    try:
        entry = HostKeyEntry.from_line(" ".join(fields), lineno)
    except (InvalidHostKey, paramiko.SSHException, ValueError, TypeError) as exc:
        warn(f"{path}:{lineno}: cannot read this known_hosts line ({exc}); ignored.")
        return
    if entry is None:
        return                          # a key type paramiko does not know: it cannot match anyway
    for name in entry.hostnames:
        known.listed.append((name, entry.key))


def load_known_hosts(paths: List[str]) -> KnownHosts:
    """Read known_hosts files; a revoked key is removed from the trusted keys whichever file listed it.

    A file that cannot be read as text is skipped with a warning naming it
    (the connection then fails as for an unknown host, never the other way).
    """
    import paramiko
    known = KnownHosts(keys=paramiko.HostKeys(), revoked={}, listed=[])
    for path in paths:
        if not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as fh:
                text = fh.read().decode("utf-8")
        except UnicodeDecodeError as exc:
            warn(f"known_hosts file {path} is not UTF-8 text (byte {exc.start}); it is skipped.")
            continue
        except OSError as exc:
            raise UserError(f"cannot read known_hosts file {path}: {exc.strerror or exc}.") from None
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if line and not line.startswith("#"):
                _key_line(line, path, lineno, known)
    for name, key in known.listed:
        if not known.is_revoked(key):
            known.keys.add(name, key.get_name(), key)
    return known


class SshHost(Host):
    """A login node reached with paramiko; one connection per command invocation."""
    is_remote = True

    def __init__(self, target: SshTarget):
        self.target = target
        self.label = target.label()
        self._client = None
        self._sftp = None

    # -- connection -----------------------------------------------------------------
    def _connect(self):
        if self._client is not None:
            return self._client
        import paramiko

        t = self.target
        client = paramiko.SSHClient()
        known = self._known_hosts()
        for name, key in known.listed:
            if not known.is_revoked(key):
                client.get_host_keys().add(name, key.get_name(), key)
        client.set_missing_host_key_policy(_Policy(t, known))
        key_file = os.path.expanduser(t.key_file) if t.key_file else None
        if key_file and not os.path.isfile(key_file):
            raise UserError(f"SSH key file {key_file} does not exist; fix --key-file or the profile's ssh.key_file.")
        try:
            client.connect(t.host, port=t.port, username=t.user, key_filename=key_file, allow_agent=True,
                           look_for_keys=key_file is None, timeout=20, banner_timeout=20, auth_timeout=20)
        except Exception as exc:  # noqa: BLE001 - each kind becomes its own clean message
            client.close()
            raise _connect_error(t, exc) from None
        self._client = client
        return client

    def _known_hosts(self) -> KnownHosts:
        files = _known_hosts_files(self.target)
        named = os.path.expanduser(self.target.known_hosts) if self.target.known_hosts else None
        if named and os.path.isdir(named):
            raise UserError(f"known_hosts file {named} is a folder; give the path of a file (--known-hosts).")
        if named and not os.path.exists(named) and not self.target.trust_new_host_key:
            warn(f"known_hosts file {named} does not exist.")
        return load_known_hosts(files)

    def _alive(self) -> bool:
        transport = self._client.get_transport() if self._client is not None else None
        return bool(transport and transport.is_active())

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """Turn a connection that drops in the middle of ``what`` into ConnectionLost (one clean line)."""
        import paramiko
        try:
            yield
        except UserError:
            raise
        except (paramiko.SSHException, EOFError, OSError) as exc:
            if isinstance(exc, OSError) and not isinstance(exc, socket.timeout) and self._alive():
                raise                   # a file error on a working connection: the caller's to handle
            self._drop()
            raise ConnectionLost(f"the SSH connection to {self.label} dropped while {what} "
                                 f"({exc or type(exc).__name__}). Check the network and run the command "
                                 "again.") from None

    def _drop(self) -> None:
        """Forget a broken connection (the next call opens a new one)."""
        with contextlib.suppress(Exception):
            self.close()
        self._sftp = None
        self._client = None

    def _sftp_client(self):
        if self._sftp is None:
            client = self._connect()
            with self._guard("opening SFTP"):
                self._sftp = client.open_sftp()
        return self._sftp

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- commands -------------------------------------------------------------------
    def run(self, argv, *, cwd=None, stdin=None, timeout=DEFAULT_TIMEOUT) -> Result:
        command = shlex.join(argv)
        if cwd:
            command = f"cd {shlex.quote(cwd)} && {command}"
        client = self._connect()
        with self._guard(f"running {argv[0]}"):
            return self._exec(client, argv, command, stdin, timeout)

    def _exec(self, client, argv: List[str], command: str, stdin: Optional[str], timeout: float) -> Result:
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise EOFError("the connection is closed")
        chan = transport.open_session()
        chan.settimeout(timeout)
        chan.exec_command(command)
        if stdin is not None:
            chan.sendall(stdin.encode())
        chan.shutdown_write()
        out, err = [], []
        deadline = time.monotonic() + timeout
        while True:
            got = False
            if chan.recv_ready():
                out.append(chan.recv(65536))
                got = True
            if chan.recv_stderr_ready():
                err.append(chan.recv_stderr(65536))
                got = True
            if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                break
            if time.monotonic() > deadline:
                chan.close()
                raise UserError(f"{argv[0]} on {self.label} did not answer within {timeout:.0f} s.")
            if not got:
                time.sleep(0.01)
        rc = chan.recv_exit_status()
        chan.close()
        if rc == -1 and not transport.is_active():
            raise EOFError("the server closed the connection before the command ended")
        return Result(rc, b"".join(out).decode("utf-8", "replace"), b"".join(err).decode("utf-8", "replace"))

    # -- files (SFTP) ---------------------------------------------------------------
    def write_file(self, path, text, *, force=False) -> None:
        sftp = self._sftp_client()
        if self.exists(path) and not force:
            raise UserError(f"{self.label}:{path} already exists; pass --force to overwrite it.")
        tmp = posixpath.join(posixpath.dirname(path), f".{posixpath.basename(path)}.tmp{os.getpid()}")
        with self._guard(f"writing {path}"):
            with sftp.open(tmp, "w") as fh:
                fh.write(text.encode())
            sftp.posix_rename(tmp, path)

    def makedirs(self, path) -> None:
        sftp = self._sftp_client()
        parts = []
        p = path.rstrip("/")
        while p and not self.exists(p):
            parts.append(p)
            p = posixpath.dirname(p)
        for d in reversed(parts):
            try:
                sftp.mkdir(d)
            except OSError as exc:
                raise UserError(f"cannot create {self.label}:{d}: {exc}") from None

    def exists(self, path) -> bool:
        sftp = self._sftp_client()
        with self._guard(f"looking for {path}"):
            try:
                sftp.stat(path)
                return True
            except OSError:
                if self._alive():
                    return False
                raise

    def read_from(self, path, offset) -> Optional[bytes]:
        sftp = self._sftp_client()
        with self._guard(f"reading {path}"):
            try:
                with sftp.open(path, "rb") as fh:
                    fh.seek(offset)
                    return fh.read()
            except OSError:
                if self._alive():
                    return None
                raise

    def listdir(self, path) -> List[str]:
        sftp = self._sftp_client()
        with self._guard(f"listing {path}"):
            try:
                return sorted(sftp.listdir(path))
            except OSError:
                if self._alive():
                    return []
                raise


def _fingerprint(key) -> str:
    import base64
    import hashlib
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def _connect_error(t: SshTarget, exc: Exception) -> UserError:
    """The clean message for a failed SSH connection."""
    import paramiko
    if isinstance(exc, UserError):
        return exc
    if isinstance(exc, paramiko.BadHostKeyException):
        return UserError(
            f"THE HOST KEY OF {t.label()} HAS CHANGED (got {exc.key.get_name()} "
            f"{_fingerprint(exc.key)}). This can mean someone is intercepting the connection; nothing "
            "was sent. If the site announced a key change, remove the old entry from your known_hosts "
            "(ssh-keygen -R HOST) after checking the new fingerprint with the site.")
    if isinstance(exc, paramiko.AuthenticationException):
        return UserError(f"SSH login to {t.label()} was refused ({exc}). Authentication uses keys only: "
                         "pass --key-file, set ssh.key_file in the profile, or load the key into "
                         "ssh-agent (sites with one-time passwords: open a ControlMaster session first).")
    if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in str(exc):
        return UserError(
            f"the host key of {t.label()} is not in your known_hosts, so the connection was refused. "
            "Check the key's fingerprint with the site (e.g. `ssh-keyscan` and the site's published "
            "fingerprints), then add it to ~/.ssh/known_hosts (or the profile's ssh.known_hosts), or "
            "accept it once with --trust-new-host-key.")
    if isinstance(exc, paramiko.SSHException):
        return UserError(f"SSH connection to {t.label()} failed: {exc}")
    if isinstance(exc, (OSError, EOFError, ValueError, OverflowError)):
        return UserError(f"cannot reach {t.label()} over SSH: {exc or type(exc).__name__}. Check --host/--port "
                         "and your network.")
    raise exc


class _Policy:
    """What to do with a host key that no trusted known_hosts line lists.

    A revoked key is refused, always. Otherwise the key is refused, unless
    --trust-new-host-key: then it is accepted ONCE, loudly, and remembered.
    """

    def __init__(self, target: SshTarget, known: KnownHosts):
        self.target = target
        self.known = known

    def missing_host_key(self, client, hostname, key) -> None:
        import paramiko
        where = self.known.is_revoked(key)
        if where:
            raise UserError(f"THE HOST KEY OF {self.target.label()} IS REVOKED ({key.get_name()} "
                            f"{_fingerprint(key)}, @revoked at {where}); the connection was refused and "
                            "nothing was sent. Ask the site for the current key.")
        if not self.target.trust_new_host_key:
            raise paramiko.SSHException(f"Server {hostname!r} not found in known_hosts")
        path = os.path.expanduser(self.target.known_hosts or USER_KNOWN_HOSTS)
        print(f"WARNING: trusting a NEW host key for {hostname}: {key.get_name()} {_fingerprint(key)} "
              f"(--trust-new-host-key). It is saved to {path}; check it against the site's published "
              "fingerprint.", file=sys.stderr)
        client.get_host_keys().add(hostname, key.get_name(), key)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "a") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def ssh_target_for(profile, options: Optional[Dict[str, object]] = None) -> Optional[SshTarget]:
    """The SSH target from the profile's ``ssh`` block and the CLI, or None to run on this machine.

    ``--host`` selects SSH; without it the profile's ssh.host is used when this
    machine has no LSF of its own (a laptop) or the profile is the embedded
    LSF reached through SSH. ``--host local`` forces this machine.
    """
    opts = options or {}
    ssh = profile.ssh
    host = opts.get("host")
    if host in ("local", "localhost-direct"):
        return None
    if not host:
        if not ssh.host:
            return None
        if not profile.scheduler.embedded and shutil.which("bsub"):
            return None          # we are on the login node already
        host = ssh.host
    port = opts.get("port") or ssh.port or 22
    target = SshTarget(host=str(host), user=opts.get("user") or ssh.user, port=int(port),
                       key_file=opts.get("key_file") or ssh.key_file,
                       known_hosts=opts.get("known_hosts") or ssh.known_hosts,
                       trust_new_host_key=bool(opts.get("trust_new_host_key")))
    return target


def for_profile(profile, options: Optional[Dict[str, object]] = None) -> Host:
    target = ssh_target_for(profile, options)
    if target is not None:
        return SshHost(target)
    return local_for(profile)


def local_for(profile) -> LocalHost:
    return LocalHost(embedded=profile.scheduler.embedded, virtual_nodes=profile.scheduler.virtual_nodes,
                     cores=profile.node.cores)


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(os.path.expanduser(a)) == os.path.realpath(os.path.expanduser(b))


def vouched_known_hosts(record: Dict[str, object], vouched: Sequence[str]) -> Optional[str]:
    """The record's known_hosts file if the user vouches for it, else None (with a warning).

    A run.json can come from anywhere (a shared project folder, a copied run,
    a hand edit). If the file it names could make a host trusted, whoever can
    write a run folder could point status, logs and cancel at a host of their
    choosing. So only the user's and the system's known_hosts, the file given
    with --known-hosts and the ones named in the user's own profiles decide.
    """
    ssh = record.get("ssh") or {}
    named = ssh.get("known_hosts") if isinstance(ssh, dict) else None
    if not named:
        return None
    allowed = [USER_KNOWN_HOSTS, SYSTEM_KNOWN_HOSTS, *[v for v in vouched if v]]
    if any(_same_file(str(named), v) for v in allowed):
        return str(named)
    warn(f"the run record of {record.get('name') or record.get('run_dir')} names the known_hosts file "
         f"{named}, which is not one of yours (~/.ssh/known_hosts, the system's, --known-hosts or a "
         "profile's ssh.known_hosts); it is ignored. Pass --known-hosts FILE if you trust it.")
    return None


def from_record(record: Dict[str, object], options: Optional[Dict[str, object]] = None,
                vouched: Sequence[str] = ()) -> Host:
    """The host a recorded run was submitted to (CLI options may override key and known_hosts).

    ``vouched``: known_hosts files named in the user's own profiles; the
    record's own known_hosts counts only if it is one of them (vouched_known_hosts).
    """
    opts = options or {}
    ssh = record.get("ssh")
    if not ssh or opts.get("host") in ("local", "localhost-direct"):   # e.g. now on the login node itself
        return LocalHost(embedded=bool(record.get("embedded")), virtual_nodes=record.get("virtual_nodes"),
                         cores=record.get("cores"))
    known = opts.get("known_hosts") or vouched_known_hosts(record, [*vouched, opts.get("known_hosts") or ""])
    target = SshTarget(host=ssh["host"], user=ssh.get("user"), port=int(ssh.get("port") or 22),
                       key_file=ssh.get("key_file"), known_hosts=known)
    over = {k: v for k, v in opts.items() if v and k in ("user", "key_file", "port")}
    if over:
        target = replace(target, **over)
    if opts.get("trust_new_host_key"):
        target = replace(target, trust_new_host_key=True)
    return SshHost(target)
