"""A real OpenSSH server on 127.0.0.1 for the SSH tests: generated host key and user key.

The server runs in the foreground (``sshd -D -e -f <config>``) on a free port,
accepts only the generated user key (AuthorizedKeysFile points at the test's
file, StrictModes off), and gives sessions the environment a login node with
LSF would have: the embedded LSF's commands on PATH (through ``environment=``
options of the authorized key, hence PermitUserEnvironment).
"""
from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator

import pytest

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

    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_key_pub}\n"


def remote_lsf_env(base: Path, **extra: str) -> Dict[str, str]:
    """What the login node's shell gives a session: the embedded LSF on PATH, its own state folder,
    scaled minutes; ``extra`` adds test variables."""
    import sys
    bin_dir = Path(__file__).resolve().parent.parent / "summit_jobs" / "embedded" / "bin"
    return {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "SUMMIT_JOBS_PYTHON": sys.executable,
            "SUMMIT_JOBS_LSF_HOME": str(base / "lsf"), "SUMMIT_JOBS_LSF_MINUTE": "2",
            "SUMMIT_JOBS_LSF_KILL_GRACE": "1", **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=30)


def start_sshd(folder: Path, remote_env: Dict[str, str]) -> Iterator[Sshd]:
    if not SSHD or not KEYGEN:
        pytest.skip("OpenSSH server not installed (.ci/run installs openssh-server)")
    folder.mkdir(parents=True, exist_ok=True)
    host_key = folder / "ssh_host_ed25519_key"
    user_key = folder / "id_ed25519"
    _keygen(host_key)
    _keygen(user_key)
    options = ",".join(f'environment="{k}={v}"' for k, v in remote_env.items())
    (folder / "authorized_keys").write_text(f"{options} {(folder / 'id_ed25519.pub').read_text().strip()}\n")
    port = _free_port()
    user = pwd.getpwuid(os.getuid()).pw_name
    config = folder / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}", f"PidFile {folder / 'sshd.pid'}",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}", "StrictModes no", "PubkeyAuthentication yes",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "PermitRootLogin prohibit-password", "PermitUserEnvironment yes", f"AllowUsers {user}",
        "Subsystem sftp internal-sftp", "LogLevel ERROR", "",
    ]))
    if os.getuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    log = open(folder / "sshd.log", "wb")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    try:
        deadline = time.time() + 20
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(folder / 'sshd.log').read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"sshd did not start: {(folder / 'sshd.log').read_text()}")
            time.sleep(0.1)
        pub = " ".join((folder / "ssh_host_ed25519_key.pub").read_text().split()[:2])
        yield Sshd(port=port, user=user, host_key_pub=pub, user_key=user_key, folder=folder,
                   remote_env=remote_env)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def ssh_profile(folder: Path, server: Sshd, remote_dir: Path, known_hosts: Path, name: str = "viassh") -> Path:
    """A user profile: the embedded LSF on this machine, reached through the test's sshd."""
    from summit_jobs import resources
    folder.mkdir(parents=True, exist_ok=True)
    text = (resources.envs_dir() / "local.yaml").read_text().replace("name: local", f"name: {name}")
    text += (f"ssh:\n  host: 127.0.0.1\n  port: {server.port}\n  user: {server.user}\n"
             f"  key_file: {server.user_key}\n  known_hosts: {known_hosts}\n  remote_dir: {remote_dir}\n")
    (folder / f"{name}.yaml").write_text(text)
    return folder
