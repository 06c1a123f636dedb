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
``@cert-authority`` lines (common at HPC sites) are understood: a host
certificate signed by a listed CA is accepted for the hosts its line names.

How the connection is made (the ssh config file, jump hosts, keys, a PIN and
token code typed at the terminal) is summit_jobs/hosts/sshlogin.py's business. One
SSH connection (one login, so one token code) serves a whole command
invocation (upload, submit, status, logs), opened lazily; ``status --watch``
and ``logs --follow`` open a new one, asking again, when it drops.
"""
from __future__ import annotations

import contextlib
import os
import posixpath
import shlex
import shutil
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
    """The SSH connection dropped in the middle of a command, or the host could not be reached; a new
    connection may work. ``host`` names the host for the reconnect message."""

    def __init__(self, message: str, host: str = ""):
        super().__init__(message)
        self.host = host


class Unreachable(ConnectionLost):
    """A connection could not be opened (network, name, port): worth another try only after one has worked."""


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
    port: Optional[int] = None          # None: the ssh config's Port, else 22
    key_file: Optional[str] = None
    known_hosts: Optional[str] = None
    trust_new_host_key: bool = False

    def __post_init__(self) -> None:
        if self.port is not None and (isinstance(self.port, bool) or not isinstance(self.port, int)
                                      or not 1 <= self.port <= 65535):
            raise UserError(f"SSH port {self.port!r} is not a port number: give --port from 1 to 65535.")
        if not self.host or self.host.startswith("-") or any(c.isspace() or ord(c) < 32 for c in self.host):
            raise UserError(f"SSH host {self.host!r} is not a host name: give --host NAME (no spaces, not "
                            "starting with '-').")

    def label(self) -> str:
        who = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port not in (None, 22) else ""
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

    def remove(self, path: str) -> None:
        """Remove the file ``path``; one that is not there is fine."""
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def mtime(self, path: str) -> Optional[float]:
        """When ``path`` was last written (seconds since the epoch, the host's clock); None when it is not
        there. Status ages a job's end by its exit-code file's time: schedulers give the finish time to the
        minute, or not at all."""
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
        import subprocess  # here, not at the top: a dry run reads this module but runs nothing
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

    def remove(self, path) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def exists(self, path) -> bool:
        return os.path.exists(path)

    def mtime(self, path) -> Optional[float]:
        try:
            return os.stat(path).st_mtime
        except OSError:
            return None

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
    """Host keys from known_hosts files, with the keys those files revoke and the CAs they trust."""
    keys: object = None                  # paramiko.HostKeys, revoked keys left out
    revoked: Dict[str, str] = None       # "type base64" -> the file and line that revoked it
    listed: List[tuple] = None           # (host name or hashed name, key) as read
    authorities: List[tuple] = None      # (host patterns, CA key, "file:line") of @cert-authority lines

    def is_revoked(self, key) -> Optional[str]:
        return self.revoked.get(f"{key.get_name()} {key.get_base64()}")

    def is_revoked_blob(self, blob: bytes) -> Optional[str]:
        from summit_jobs.hosts import sshlogin
        try:
            return self.revoked.get(sshlogin.blob_line(blob))
        except Exception:  # noqa: BLE001 - an unreadable blob matches no line
            return None

    def authorities_for(self, known_name: str) -> List[tuple]:
        """The @cert-authority entries whose host patterns match ``known_name``."""
        from summit_jobs.hosts import sshlogin
        return [a for a in self.authorities if sshlogin.host_matches(a[0], known_name)]


def _authority_line(fields: List[str], path: str, lineno: int, known: KnownHosts) -> None:
    """An ``@cert-authority PATTERNS TYPE BASE64`` line: a CA whose host certificates are trusted for PATTERNS."""
    import base64

    import paramiko
    try:
        key = paramiko.PKey.from_type_string(fields[2], base64.b64decode(fields[3], validate=True))
    except Exception as exc:  # noqa: BLE001 - unknown key types, bad base64, short lines: skipped, said why
        warn(f"{path}:{lineno}: cannot read this @cert-authority line ({exc or type(exc).__name__}); ignored.")
        return
    known.authorities.append((fields[1], key, f"{path}:{lineno}"))


def _key_line(line: str, path: str, lineno: int, known: KnownHosts) -> None:
    """One line of a known_hosts file into ``known`` (markers understood, bad lines skipped with a warning)."""
    import paramiko
    from paramiko.hostkeys import HostKeyEntry, InvalidHostKey
    fields = line.split()
    if fields[0] == "@revoked" and len(fields) >= 4:
        known.revoked[f"{fields[2]} {fields[3]}"] = f"{path}:{lineno}"
        return
    if fields[0] == "@cert-authority":
        _authority_line(fields, path, lineno, known)
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


#: The fields a known_hosts line is read by, after any marker (the rest is a comment): host patterns, key type,
#: key. A @revoked line is honoured by its key alone, whatever hosts it names.
_NEEDED_FIELDS = {"@revoked": (2, 4), "@cert-authority": (1, 4)}


def _text_line(raw: bytes, path: str, lineno: int) -> Optional[str]:
    """One known_hosts line as text; None, with a warning naming the file and line, where it cannot be used.

    OpenSSH reads the file line by line as bytes, so one stray byte costs that
    line only, not the file. Here a line that is not UTF-8 is still read when
    the bad bytes sit in parts that do not decide trust (its comment, or the
    host patterns of a @revoked line, which revokes the key for every host).
    Otherwise it is skipped: a skipped trust line can only make a host unknown,
    and a @revoked line whose key cannot be read matches no key anyway.
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = exc
    fields = raw.decode("utf-8", "surrogateescape").split()
    if not fields or fields[0].startswith("#"):
        return ""                                       # a comment: OpenSSH does not read it either
    marker = fields[0] if fields[0].startswith("@") else ""
    if not marker or marker in _NEEDED_FIELDS:
        first, last = _NEEDED_FIELDS.get(marker, (0, 3))
        if len(fields) >= last and all(_is_text(f) for f in fields[first:last]):
            return " ".join(f if _is_text(f) else "-" for f in fields[:last])
    warn(f"{path}:{lineno}: this known_hosts line is not UTF-8 text (byte 0x{raw[bad.start]:02x} at column "
         f"{bad.start + 1}); line skipped, the file's other lines are read.")
    return None


def _is_text(field: str) -> bool:
    """No undecodable byte in ``field`` (they were kept as lone surrogates, which UTF-8 cannot encode)."""
    try:
        field.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def load_known_hosts(paths: List[str]) -> KnownHosts:
    """Read known_hosts files; a revoked key is removed from the trusted keys whichever file listed it.

    Lines are read one by one, as OpenSSH does: a line that cannot be used
    (not UTF-8, not a key line) is skipped with a warning naming the file and
    the line, and the file's other lines still count.
    """
    import paramiko
    known = KnownHosts(keys=paramiko.HostKeys(), revoked={}, listed=[], authorities=[])
    for path in paths:
        if not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise UserError(f"cannot read known_hosts file {path}: {exc.strerror or exc}.") from None
        for lineno, raw in enumerate(data.split(b"\n"), 1):
            line = _text_line(raw, path, lineno)
            line = line.strip() if line is not None else ""
            if line and not line.startswith("#"):
                _key_line(line, path, lineno, known)
    for name, key in known.listed:
        if not known.is_revoked(key):
            known.keys.add(name, key.get_name(), key)
    return known


class SshHost(Host):
    """A login node reached with paramiko (through its jump hosts); one connection per command invocation."""
    is_remote = True

    def __init__(self, target: SshTarget):
        self.target = target
        self.label = target.label()
        self._client = None
        self._jumps: List[object] = []
        self._sftp = None

    # -- connection -----------------------------------------------------------------
    def _connect(self):
        """The connection to the login node, made on first use: each jump host in turn, then the node.

        Each hop is a connection of its own, with its own host-key check and
        login; the next one runs inside its direct-tcpip channel.
        """
        if self._client is not None:
            return self._client
        from summit_jobs.hosts import sshlogin
        known = self._known_hosts()
        hops = sshlogin.route(self.target)
        clients: List[object] = []
        try:
            for index, hop in enumerate(hops):
                sock = sshlogin.forward(clients[-1], hops[index - 1], hop) if index else None
                clients.append(self._open(hop, known, sock))
        except BaseException:
            for client in reversed(clients):
                client.close()
            raise
        self._jumps, self._client = clients[:-1], clients[-1]
        return self._client

    def _open(self, hop, known: KnownHosts, sock):
        """One SSH connection (over ``sock`` when a jump host carries it), host key checked, logged in."""
        import paramiko

        from summit_jobs.hosts import sshlogin
        client = paramiko.SSHClient()
        for name, key in known.listed:
            if not known.is_revoked(key):
                client.get_host_keys().add(name, key.get_name(), key)
        client.set_missing_host_key_policy(_Policy(self.target, known, hop.label))
        factory = sshlogin.transport_factory(bool(known.authorities_for(hop.known_name)))
        try:
            client.connect(hop.hostname, port=hop.port, username=hop.user, sock=sock, timeout=20,
                           banner_timeout=20, auth_timeout=20, auth_strategy=sshlogin.Login(hop),
                           transport_factory=factory)
        except BaseException as exc:
            client.close()
            if not isinstance(exc, Exception):
                raise                   # Ctrl-C at a prompt: the connection is closed, the interrupt stands
            raise _connect_error(hop.label, exc, hop) from None
        if hop.keepalive:
            client.get_transport().set_keepalive(hop.keepalive)
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
        import socket

        import paramiko
        try:
            yield
        except UserError:
            raise
        except (paramiko.SSHException, EOFError, OSError) as exc:
            if isinstance(exc, OSError) and not isinstance(exc, socket.timeout) and self._alive():
                raise                   # a file error on a working connection: the caller's to handle
            from summit_jobs.hosts import sshlogin
            self._drop()
            raise ConnectionLost(f"the SSH connection to {self.label} dropped while {what} "
                                 f"({sshlogin.error_reason(exc)}). Check the network and run the command "
                                 "again.", host=self.label) from None

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
                self._sftp.get_channel().settimeout(DEFAULT_TIMEOUT)   # a dead network ends, not hangs
        return self._sftp

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None
        for jump in reversed(self._jumps):
            jump.close()
        self._jumps = []

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

    def remove(self, path) -> None:
        sftp = self._sftp_client()
        with self._guard(f"removing {path}"):
            try:
                sftp.remove(path)
            except FileNotFoundError:       # paramiko's SFTP "no such file" is an OSError with ENOENT
                pass

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

    def mtime(self, path) -> Optional[float]:
        sftp = self._sftp_client()
        with self._guard(f"looking at {path}"):
            try:
                return float(sftp.stat(path).st_mtime)
            except (OSError, TypeError):
                if self._alive():
                    return None
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


def _connect_error(label: str, exc: Exception, hop=None) -> UserError:
    """The clean message for a failed SSH connection to ``label`` (the login node or a jump host, ``hop``)."""
    import socket

    import paramiko

    from summit_jobs.hosts import sshlogin
    if isinstance(exc, UserError):
        return exc
    if isinstance(exc, socket.gaierror) and hop is not None:
        return Unreachable(f"cannot find the host {hop.hostname!r} of {label} ({exc.strerror or exc}): "
                           f"{hop.name!r} is neither a Host alias of your ssh config{hop.config} nor a host name "
                           "that resolves. Check the spelling of --host, the profile's ssh.host or the ProxyJump "
                           "line, or add a Host block with its HostName.", host=label)
    if isinstance(exc, paramiko.BadHostKeyException):
        return UserError(
            f"THE HOST KEY OF {label} HAS CHANGED (got {exc.key.get_name()} "
            f"{_fingerprint(exc.key)}). This can mean someone is intercepting the connection; nothing "
            "was sent. If the site announced a key change, remove the old entry from your known_hosts "
            "(ssh-keygen -R HOST) after checking the new fingerprint with the site.")
    if isinstance(exc, paramiko.AuthenticationException):
        return UserError(f"SSH login to {label} was refused: {exc}. Keys come from --key-file, the profile's "
                         "ssh.key_file, IdentityFile in your ssh config, ssh-agent or ~/.ssh/id_*; sites that "
                         "want a PIN and token code ask for it at the terminal (see docs/cluster.md, "
                         "'Submitting from a laptop over SSH').")
    if isinstance(exc, paramiko.SSHException):
        return UserError(f"SSH connection to {label} failed: {sshlogin.error_reason(exc)}")
    if isinstance(exc, (OSError, EOFError, ValueError, OverflowError)):
        return Unreachable(f"cannot reach {label} over SSH: {sshlogin.error_reason(exc)}. Check --host/--port, "
                           "the HostName, Port and ProxyJump of your ssh config, and your network.", host=label)
    raise exc


def _unknown_key(label: str, why: str = "") -> UserError:
    because = f" ({why})" if why else ""
    return UserError(
        f"the host key of {label} is not in your known_hosts{because}, so the connection was refused. "
        "Check the key's fingerprint with the site (e.g. `ssh-keyscan` and the site's published "
        "fingerprints), then add it to ~/.ssh/known_hosts (or the profile's ssh.known_hosts), or "
        "accept it once with --trust-new-host-key.")


class _Policy:
    """What to do with a host key that no trusted known_hosts line lists.

    A revoked key, or a certificate signed by a revoked CA, is refused,
    always. A host certificate that a @cert-authority line's CA vouches for is
    accepted. Otherwise the key is refused, unless --trust-new-host-key: then
    it is accepted ONCE, loudly, and remembered.
    """

    def __init__(self, target: SshTarget, known: KnownHosts, label: str):
        self.target = target
        self.known = known
        self.label = label

    def missing_host_key(self, client, hostname, key) -> None:
        from summit_jobs.hosts import sshlogin
        cert = sshlogin.host_certificate(key)
        where = self.known.is_revoked(key) or (self.known.is_revoked_blob(cert.ca) if cert else None)
        if where:
            what = "IS REVOKED" if self.known.is_revoked(key) else "IS SIGNED BY A REVOKED CA"
            raise UserError(f"THE HOST KEY OF {self.label} {what} ({key.get_name()} "
                            f"{_fingerprint(key)}, @revoked at {where}); the connection was refused and "
                            "nothing was sent. Ask the site for the current key.")
        why = sshlogin.check_certificate(cert, hostname, self.known.authorities) if cert else ""
        if cert is not None and why is None:
            return                      # a CA the user lists for this host signed it
        if not self.target.trust_new_host_key:
            raise _unknown_key(self.label, why or "")
        path = os.path.expanduser(self.target.known_hosts or USER_KNOWN_HOSTS)
        print(f"WARNING: trusting a NEW host key for {hostname}: {key.get_name()} {_fingerprint(key)} "
              f"(--trust-new-host-key). It is saved to {path}; check it against the site's published "
              "fingerprint.", file=sys.stderr)
        client.get_host_keys().add(hostname, key.get_name(), key)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "a") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def ssh_target_for(profile, options: Optional[Dict[str, object]] = None, *,
                   login_command: str) -> Optional[SshTarget]:
    """The SSH target from the profile's ``ssh`` block and the CLI, or None to run on this machine.

    ``--host`` selects SSH; without it the profile's ssh.host is used when this
    machine has no LSF of its own (a laptop) or the profile is the embedded
    LSF reached through SSH. ``--host local`` forces this machine. The host may
    be written ``[USER@]HOST[:PORT]`` and may be an alias of the ssh config;
    what is given here (--user, --port, --key-file, the profile's ssh block)
    wins over that file. A profile's ssh.port of 22, the default, leaves the
    port to the file.
    """
    from summit_jobs.hosts import sshlogin
    opts = options or {}
    ssh = profile.ssh
    host = opts.get("host")
    if host in ("local", "localhost-direct"):
        return None
    if not host:
        if not ssh.host:
            return None
        if not profile.scheduler.embedded and shutil.which(login_command):
            return None          # the scheduler's submit command is here: we are on the login node already
        host = ssh.host
    user, name, port = sshlogin.split_spec(str(host), "SSH host")
    port = opts.get("port") or port or (ssh.port if ssh.port != 22 else None)
    target = SshTarget(host=name, user=opts.get("user") or user or ssh.user,
                       port=int(port) if port is not None else None,
                       key_file=opts.get("key_file") or ssh.key_file,
                       known_hosts=opts.get("known_hosts") or ssh.known_hosts,
                       trust_new_host_key=bool(opts.get("trust_new_host_key")))
    return target


def for_profile(profile, options: Optional[Dict[str, object]] = None, *, login_command: str) -> Host:
    """This machine, or the profile's login node over SSH (``ssh_target_for``; ``login_command``: the
    scheduler's submit command, whose presence here means this is a login node)."""
    target = ssh_target_for(profile, options, login_command=login_command)
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
    port = ssh.get("port")
    target = SshTarget(host=ssh["host"], user=ssh.get("user"), port=int(port) if port else None,
                       key_file=ssh.get("key_file"), known_hosts=known)
    over = {k: v for k, v in opts.items() if v and k in ("user", "key_file", "port")}
    if over:
        target = replace(target, **over)
    if opts.get("trust_new_host_key"):
        target = replace(target, trust_new_host_key=True)
    return SshHost(target)
