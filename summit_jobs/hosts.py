"""Where LSF commands run: this machine (LocalHost) or a login node over SSH (SshHost).

Both give the same small interface (run a command, write/read files, make
folders) so that submission, status, cancel and logs never care where they
are. Commands are argument lists: LocalHost runs them without a shell, SshHost
joins them with ``shlex`` quoting (the remote side always has a shell).

SSH safety: the host key must already be known (the user's and the system's
known_hosts, plus an optional known_hosts file of the profile); an unknown key
is refused unless the user passes the loudly named ``--trust-new-host-key``,
and a changed key is always refused. Authentication is by key file or agent
only; no password is asked for or stored. One SSH connection serves a whole
command invocation (upload, submit, status), opened lazily.
"""
from __future__ import annotations

import os
import posixpath
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from typing import Dict, List, Optional

from summit_jobs import resources
from summit_jobs.errors import UserError

DEFAULT_TIMEOUT = 120.0


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
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp{os.getpid()}")
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)

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
    files = [os.path.expanduser("~/.ssh/known_hosts"), "/etc/ssh/ssh_known_hosts"]
    if target.known_hosts:
        files.insert(0, os.path.expanduser(target.known_hosts))
    return files


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
        for f in _known_hosts_files(t):
            if os.path.isfile(f):
                try:
                    client.load_system_host_keys(f)
                except (OSError, paramiko.SSHException) as exc:
                    raise UserError(f"cannot read known_hosts file {f}: {exc}") from None
        if t.trust_new_host_key:
            client.set_missing_host_key_policy(_TrustAndRecord(t))
        else:
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        key_file = os.path.expanduser(t.key_file) if t.key_file else None
        if key_file and not os.path.isfile(key_file):
            raise UserError(f"SSH key file {key_file} does not exist; fix --key-file or the profile's ssh.key_file.")
        try:
            client.connect(t.host, port=t.port, username=t.user, key_filename=key_file, allow_agent=True,
                           look_for_keys=key_file is None, timeout=20, banner_timeout=20, auth_timeout=20)
        except paramiko.BadHostKeyException as exc:
            raise UserError(
                f"THE HOST KEY OF {t.label()} HAS CHANGED (got {exc.key.get_name()} "
                f"{_fingerprint(exc.key)}). This can mean someone is intercepting the connection; nothing "
                "was sent. If the site announced a key change, remove the old entry from your known_hosts "
                "(ssh-keygen -R HOST) after checking the new fingerprint with the site.") from None
        except paramiko.AuthenticationException as exc:
            raise UserError(f"SSH login to {t.label()} was refused ({exc}). Authentication uses keys only: "
                            "pass --key-file, set ssh.key_file in the profile, or load the key into "
                            "ssh-agent (sites with one-time passwords: open a ControlMaster session "
                            "first).") from None
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc):
                raise UserError(
                    f"the host key of {t.label()} is not in your known_hosts, so the connection was refused. "
                    "Check the key's fingerprint with the site (e.g. `ssh-keyscan` and the site's published "
                    "fingerprints), then add it to ~/.ssh/known_hosts (or the profile's ssh.known_hosts), or "
                    "accept it once with --trust-new-host-key.") from None
            raise UserError(f"SSH connection to {t.label()} failed: {exc}") from None
        except (OSError, socket.error) as exc:
            raise UserError(f"cannot reach {t.label()} over SSH: {exc}. Check --host/--port and your "
                            "network.") from None
        self._client = client
        return client

    def _sftp_client(self):
        if self._sftp is None:
            self._sftp = self._connect().open_sftp()
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
        chan = client.get_transport().open_session()
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
        return Result(rc, b"".join(out).decode("utf-8", "replace"), b"".join(err).decode("utf-8", "replace"))

    # -- files (SFTP) ---------------------------------------------------------------
    def write_file(self, path, text, *, force=False) -> None:
        sftp = self._sftp_client()
        if self.exists(path) and not force:
            raise UserError(f"{self.label}:{path} already exists; pass --force to overwrite it.")
        tmp = posixpath.join(posixpath.dirname(path), f".{posixpath.basename(path)}.tmp{os.getpid()}")
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
        try:
            self._sftp_client().stat(path)
            return True
        except FileNotFoundError:
            return False
        except OSError:
            return False

    def read_from(self, path, offset) -> Optional[bytes]:
        try:
            with self._sftp_client().open(path, "rb") as fh:
                fh.seek(offset)
                return fh.read()
        except (FileNotFoundError, IOError):
            return None

    def listdir(self, path) -> List[str]:
        try:
            return sorted(self._sftp_client().listdir(path))
        except (FileNotFoundError, IOError):
            return []


def _fingerprint(key) -> str:
    import base64
    import hashlib
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


class _TrustAndRecord:
    """--trust-new-host-key: accept an unknown key ONCE, say so loudly, and remember it."""

    def __init__(self, target: SshTarget):
        self.target = target

    def missing_host_key(self, client, hostname, key) -> None:
        path = os.path.expanduser(self.target.known_hosts or "~/.ssh/known_hosts")
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


def from_record(record: Dict[str, object], options: Optional[Dict[str, object]] = None) -> Host:
    """The host a recorded run was submitted to (CLI options may override key and known_hosts)."""
    opts = options or {}
    ssh = record.get("ssh")
    if not ssh or opts.get("host") in ("local", "localhost-direct"):   # e.g. now on the login node itself
        return LocalHost(embedded=bool(record.get("embedded")), virtual_nodes=record.get("virtual_nodes"),
                         cores=record.get("cores"))
    target = SshTarget(host=ssh["host"], user=ssh.get("user"), port=int(ssh.get("port") or 22),
                       key_file=ssh.get("key_file"), known_hosts=ssh.get("known_hosts"))
    over = {k: v for k, v in opts.items() if v and k in ("user", "key_file", "known_hosts", "port")}
    if over:
        target = replace(target, **over)
    if opts.get("trust_new_host_key"):
        target = replace(target, trust_new_host_key=True)
    return SshHost(target)
