"""A real OpenSSH server on 127.0.0.1 for the SSH tests: generated host key and user key.

The server runs in the foreground (``sshd -D -e -f <config>``) on a free port,
accepts only the generated user key (AuthorizedKeysFile points at the test's
file, StrictModes off), and gives sessions the environment a login node with
LSF would have: the embedded LSF's commands on PATH (through ``environment=``
options of the authorized key, hence PermitUserEnvironment).

Options change one server: another listen address (a login node behind a jump
host), a host certificate signed by a test CA, more logging, or a login that
wants a key AND a one-time code checked by PAM (otp_pam_service: sshd names
its PAM service after its program, so it runs through a symbolic link of its
own name).
"""
from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
import contextlib
import glob
import shlex
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, Optional

import pytest

from lsf_jobs import limit, stretched

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
KEYGEN = shutil.which("ssh-keygen")


@dataclass
class Sshd:
    port: int
    user: str
    host_key_pub: str        # "ssh-ed25519 AAAA..."
    user_key: Path
    folder: Path
    remote_env: Dict[str, str]
    address: str = "127.0.0.1"

    def known_hosts_line(self) -> str:
        return f"[{self.address}]:{self.port} {self.host_key_pub}\n"

    @property
    def log(self) -> Path:
        return self.folder / "sshd.log"


def remote_lsf_env(base: Path, **extra: str) -> Dict[str, str]:
    """What the login node's shell gives a session: the embedded LSF on PATH, its own state folder,
    scaled minutes (2 s on a quiet machine, stretched by the measured slowdown: a walltime of 10 LSF minutes
    outlasts a busy machine's round trips before a cancel); ``extra`` adds test variables."""
    import sys
    bin_dir = Path(__file__).resolve().parent.parent / "summit_jobs" / "schedulers" / "lsf" / "embedded" / "bin"
    return {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "SUMMIT_JOBS_PYTHON": sys.executable,
            "SUMMIT_JOBS_LSF_HOME": str(base / "lsf"), "SUMMIT_JOBS_LSF_MINUTE": f"{stretched(2.0):.2f}",
            "SUMMIT_JOBS_LSF_KILL_GRACE": "1",
            # The code under test on both sides of the connection (a worktree's, not the installed one).
            **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}), **extra}


def _free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=limit(30))


def _config(folder: Path, port: int, address: str, user: str, options: Dict[str, str]) -> Path:
    """sshd_config: the test defaults, each replaced by ``options`` of the same name (first value wins in sshd)."""
    lines = {"Port": str(port), "ListenAddress": address, "HostKey": str(folder / "ssh_host_ed25519_key"),
             "PidFile": str(folder / "sshd.pid"), "AuthorizedKeysFile": str(folder / "authorized_keys"),
             "StrictModes": "no", "PubkeyAuthentication": "yes", "PasswordAuthentication": "no",
             "KbdInteractiveAuthentication": "no", "UsePAM": "no", "PermitRootLogin": "prohibit-password",
             "PermitUserEnvironment": "yes", "AllowUsers": user, "Subsystem": "sftp internal-sftp",
             "LogLevel": "ERROR", **options}
    config = folder / "sshd_config"
    config.write_text("".join(f"{k} {v}\n" for k, v in lines.items()))
    return config


def sign_host_key(folder: Path, ca: Path, principal: str, validity: str = "-5m:+1h") -> Path:
    """An OpenSSH host certificate for the server's key, signed by the CA key ``ca``."""
    subprocess.run([KEYGEN, "-q", "-s", str(ca), "-I", "test-host", "-h", "-n", principal, "-V", validity,
                    str(folder / "ssh_host_ed25519_key.pub")], check=True, timeout=limit(30), capture_output=True)
    return folder / "ssh_host_ed25519_key-cert.pub"


def _wait_ready(proc: subprocess.Popen, folder: Path, address: str, port: int) -> None:
    deadline = time.time() + limit(20)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {(folder / 'sshd.log').read_text()}")
        try:
            with socket.create_connection((address, port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if time.time() > deadline:
            raise RuntimeError(f"sshd did not start: {(folder / 'sshd.log').read_text()}")
        time.sleep(0.1)


def start_sshd(folder: Path, remote_env: Dict[str, str], *, address: str = "127.0.0.1",
               options: Optional[Dict[str, str]] = None, program: Optional[Path] = None,
               certificate_ca: Optional[Path] = None) -> Iterator[Sshd]:
    """A running sshd (a generator: the fixture's ``for server in start_sshd(...)``).

    ``program``: a link to sshd under another name (its PAM service);
    ``certificate_ca``: sign the host key with this CA key and serve the certificate.
    """
    if not SSHD or not KEYGEN:
        pytest.skip("OpenSSH server not installed (.ci/run installs openssh-server)")
    folder.mkdir(parents=True, exist_ok=True)
    user_key = folder / "id_ed25519"
    _keygen(folder / "ssh_host_ed25519_key")
    _keygen(user_key)
    opts = dict(options or {})
    if certificate_ca is not None:
        opts["HostCertificate"] = str(sign_host_key(folder, certificate_ca, address))
    env_options = ",".join(f'environment="{k}={v}"' for k, v in remote_env.items())
    (folder / "authorized_keys").write_text(f"{env_options} {(folder / 'id_ed25519.pub').read_text().strip()}\n")
    port = _free_port(address)
    user = pwd.getpwuid(os.getuid()).pw_name
    config = _config(folder, port, address, user, opts)
    if os.getuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    log = open(folder / "sshd.log", "wb")
    proc = subprocess.Popen([str(program or SSHD), "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    try:
        _wait_ready(proc, folder, address, port)
        pub = " ".join((folder / "ssh_host_ed25519_key.pub").read_text().split()[:2])
        yield Sshd(port=port, user=user, host_key_pub=pub, user_key=user_key, folder=folder,
                   remote_env=remote_env, address=address)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=limit(10))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=limit(10))
        log.close()


def _pam_exec_installed() -> bool:
    patterns = ("/lib/*/security/pam_exec.so", "/lib/security/pam_exec.so", "/usr/lib/*/security/pam_exec.so",
                "/usr/lib/security/pam_exec.so", "/lib64/security/pam_exec.so", "/usr/lib64/security/pam_exec.so")
    return any(glob.glob(p) for p in patterns)


@contextlib.contextmanager
def otp_pam_service(folder: Path) -> Iterator[tuple]:
    """(sshd program, code file): an sshd whose keyboard-interactive login asks PAM for a one-time code.

    sshd uses its program name as the PAM service, so the program is a link
    named ``sshd-otp-<random>`` and /etc/pam.d holds that service while the
    test runs: pam_exec hands the typed code to a script that compares it with
    the code file. Skips when PAM cannot be set up (not root, no pam_exec).
    """
    if not SSHD or not KEYGEN:
        pytest.skip("OpenSSH server not installed (.ci/run installs openssh-server)")
    if os.getuid() != 0 or not os.path.isdir("/etc/pam.d") or not _pam_exec_installed():
        pytest.skip("a PAM one-time-code login needs root, /etc/pam.d and pam_exec.so")
    folder.mkdir(parents=True, exist_ok=True)
    name = f"sshd-otp-{uuid.uuid4().hex[:8]}"
    program = folder / name
    program.symlink_to(os.path.realpath(SSHD))
    code = folder / "code"
    script = folder / "check-code"
    script.write_text(f"#!/bin/sh\ntyped=$(tr -d '\\000')\n[ -n \"$typed\" ] && [ \"$typed\" = "
                      f"\"$(cat {shlex.quote(str(code))})\" ]\n")
    script.chmod(0o755)
    service = Path("/etc/pam.d") / name
    service.write_text(f"auth required pam_exec.so expose_authtok quiet {script}\nauth optional pam_permit.so\n"
                       "account required pam_permit.so\n"
                       "session required pam_permit.so\npassword required pam_deny.so\n")
    try:
        yield program, code
    finally:
        service.unlink()


#: sshd options of a login node that wants a key AND a one-time code (OLCF's login).
OTP_OPTIONS = {"UsePAM": "yes", "KbdInteractiveAuthentication": "yes", "PermitRootLogin": "yes",
               "AuthenticationMethods": "publickey,keyboard-interactive"}


def ssh_profile(folder: Path, server: Sshd, remote_dir: Path, known_hosts: Path, name: str = "viassh") -> Path:
    """A user profile: the embedded LSF on this machine, reached through the test's sshd."""
    from summit_jobs import resources
    folder.mkdir(parents=True, exist_ok=True)
    text = (resources.envs_dir() / "local.yaml").read_text().replace("name: local", f"name: {name}")
    text += (f"ssh:\n  host: 127.0.0.1\n  port: {server.port}\n  user: {server.user}\n"
             f"  key_file: {server.user_key}\n  known_hosts: {known_hosts}\n  remote_dir: {remote_dir}\n")
    (folder / f"{name}.yaml").write_text(text)
    return folder
