"""Logging in as the sites require, against real OpenSSH servers on 127.0.0.1 and the real CLI.

- A login node that wants a key AND a one-time code (OLCF: ``AuthenticationMethods
  publickey,keyboard-interactive``, the code checked by PAM): the CLI runs with a
  pseudo-terminal as its controlling terminal, the test types the code when the
  server's prompt appears there. One prompt per command; a watch that loses its
  connection asks again. A wrong code, and no terminal at all, end in one line.
  The code is found in no file, log or output the tool wrote.
- ~/.ssh/config through paramiko's parser: an alias with HostName, User, Port and
  IdentityFile (the first that exists), the command line winning over it, and a
  login node behind a jump host (ProxyJump): each hop's host key checked, the
  connection carried by the jump host's direct-tcpip channel, ServerAliveInterval
  sending keepalives.
"""
from __future__ import annotations

import json
import os
import secrets
import select
import signal
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

from lsf_jobs import PROGRAM, cli, lsf_environment, run, submitted_id, wait_for, write_template
from helpers_sshd import OTP_OPTIONS, otp_pam_service, remote_lsf_env, ssh_profile, start_sshd

#: Makes the pseudo-terminal on stdin the controlling terminal of a new session, then runs Python with the rest.
CONTROLLING_TTY = ("import os, sys; os.close(os.open(os.ttyname(0), os.O_RDWR)); "
                   "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


@dataclass
class TtyRun:
    rc: Optional[int]
    tty: str            # everything the command wrote on its terminal (prompts; typed codes would show here)
    stdout: str
    stderr: str
    echo_after: bool = True     # the terminal echoes again once the command has ended


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:                 # EIO on the terminal's master side once the command has gone
        return b""


def run_in_terminal(args: Sequence[str], env: Dict[str, str], answers: List[Tuple[str, str]],
                    timeout: float = 90, on_output=None) -> TtyRun:
    """``python -m summit_jobs ARGS`` with a pseudo-terminal as its controlling terminal (stdout and stderr
    stay pipes). Each time the terminal shows the next ``(prompt text, answer)``'s text, the answer is typed
    (``answers`` may grow while the command runs). ``on_output(stdout so far)`` is called as output arrives."""
    master, slave = os.openpty()
    proc = subprocess.Popen([sys.executable, "-c", CONTROLLING_TTY, "-m", "summit_jobs", *args], env=env,
                            stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    os.close(slave)
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    got = {master: b"", out_fd: b"", err_fd: b""}
    live = set(got)
    typed, seen = 0, 0
    deadline = time.time() + timeout
    try:
        while live and time.time() < deadline:
            for fd in select.select(list(live), [], [], 0.2)[0]:
                chunk = _read(fd)
                if not chunk:
                    live.discard(fd)
                    continue
                got[fd] += chunk
                if on_output is not None and fd == out_fd:
                    on_output(got[fd].decode(errors="replace"))
            if typed < len(answers) and answers[typed][0].encode() in got[master][seen:]:
                seen = len(got[master])
                os.write(master, (answers[typed][1] + "\n").encode())
                typed += 1
            if proc.poll() is not None and not live & {out_fd, err_fd}:
                break
        rc = proc.wait(timeout=max(1.0, deadline - time.time()))
        echo = bool(termios.tcgetattr(master)[3] & termios.ECHO)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
        proc.stdout.close()
        proc.stderr.close()
    return TtyRun(rc, *(got[fd].decode(errors="replace") for fd in (master, out_fd, err_fd)), echo_after=echo)


def make_run(folder: Path, ssh: Dict[str, object], job_ids: Sequence[str]) -> Path:
    """A run folder whose run.json sends status/logs/cancel to the host ``ssh`` names."""
    folder.mkdir(parents=True, exist_ok=True)
    record = {"name": folder.name, "run_dir": str(folder), "machine": "local", "job_name": "tsm",
              "job_ids": list(job_ids), "ssh": ssh}
    (folder / "run.json").write_text(json.dumps(record))
    return folder


def laptop_env(tmp_path: Path, remote_env: Dict[str, str], known_hosts: str) -> Dict[str, str]:
    """A user with their own HOME (known_hosts given, no ssh config, no agent); the embedded LSF is the server's."""
    env = lsf_environment(tmp_path / "laptop")
    env["SUMMIT_JOBS_LSF_HOME"] = remote_env["SUMMIT_JOBS_LSF_HOME"]
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    (tmp_path / "home" / ".ssh" / "known_hosts").write_text(known_hosts)
    env.pop("SUMMIT_JOBS_SSH_CONFIG", None)
    return env


def new_code(code_file: Path) -> str:
    code = f"{secrets.randbelow(10**8):08d}"
    code_file.write_text(code + "\n")
    return code


# -- a key AND a one-time code --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def otp(tmp_path_factory):
    base = tmp_path_factory.mktemp("otp")
    remote_env = remote_lsf_env(base / "state", XDG_DATA_HOME=str(base / "state" / "remote-data"), PROG_SLEEP="0")
    with otp_pam_service(base / "pam") as (program, code_file):
        for sshd in start_sshd(base / "sshd", remote_env, options=OTP_OPTIONS, program=program):
            yield {"sshd": sshd, "base": base, "code": code_file, "remote_env": remote_env, "program": program}


@pytest.fixture
def otp_laptop(otp, tmp_path):
    return laptop_env(tmp_path, otp["remote_env"], otp["sshd"].known_hosts_line())


def otp_record(otp) -> Dict[str, object]:
    sshd = otp["sshd"]
    return {"host": "127.0.0.1", "port": sshd.port, "user": sshd.user, "key_file": str(sshd.user_key)}


def files_holding(folder: Path, secret: str) -> List[str]:
    """Every file under ``folder`` whose bytes contain ``secret``."""
    hits = []
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if secret.encode() in path.read_bytes():
                    hits.append(str(path))
            except OSError:
                pass
    return hits


def test_key_and_one_time_code_one_prompt_per_command_and_no_trace_of_the_code(otp, otp_laptop, tmp_path):
    """submit over SSH (SFTP upload, bsub, run.json saves) and then status: one code typed per command, at the
    server's own prompt on the terminal, never echoed, and never written anywhere by the tool."""
    env = otp_laptop
    remote_runs = tmp_path / "remote-runs"
    profiles = ssh_profile(tmp_path / "profiles", otp["sshd"], remote_runs, Path(env["HOME"], ".ssh", "known_hosts"))
    env["SUMMIT_JOBS_MACHINES_PATH"] = str(profiles)
    (tmp_path / "prog.py").write_text(PROGRAM)
    templates = write_template(tmp_path / "templates", tmp_path / "prog.py")
    codes, outputs = [], []
    code = new_code(otp["code"])
    codes.append(code)
    res = run_in_terminal(["--machine", "viassh", "submit", "--nodes", "1", "--job-name", "otp",
                           "--template-dir", str(templates)], env, [("Password:", code)])
    outputs.append(res)
    assert res.rc == 0, (res.tty, res.stderr)
    assert res.tty.count("Password:") == 1 and f"({otp['sshd'].user}@127.0.0.1:{otp['sshd'].port})" in res.tty
    run_dir = Path(next(line.split(": ", 1)[1] for line in res.stdout.splitlines() if line.startswith("run directory")))
    assert (run_dir / "job.lsf").is_file() and (run_dir / "run.json").is_file()

    code = new_code(otp["code"])
    codes.append(code)
    res = run_in_terminal(["--machine", "viassh", "status", "--watch", "--interval", "0.5", run_dir.name], env,
                          [("Password:", code)])
    outputs.append(res)
    assert res.rc == 0 and "done" in res.stdout, (res.tty, res.stdout, res.stderr)
    assert res.tty.count("Password:") == 1          # one login for the whole watch

    folders = [Path(env["HOME"]), tmp_path, run_dir, Path(env["XDG_DATA_HOME"]), Path(env["XDG_CONFIG_HOME"]),
               Path(otp["remote_env"]["SUMMIT_JOBS_LSF_HOME"]), otp["sshd"].folder]
    for secret in codes:
        for out in outputs:
            assert secret not in out.tty + out.stdout + out.stderr
        for folder in folders:
            assert files_holding(folder, secret) == [], secret


def test_a_wrong_code_is_refused_in_one_line(otp, otp_laptop, tmp_path):
    new_code(otp["code"])
    run_dir = make_run(tmp_path / "run-wrong", otp_record(otp), ["1"])
    res = run_in_terminal(["status", str(run_dir)], otp_laptop, [("Password:", "00000000x")])
    assert res.rc == 2, (res.tty, res.stderr)
    assert "Traceback" not in res.stderr + res.tty
    assert res.stderr.startswith("summit-jobs: error: SSH login to ") and res.stderr.count("\n") == 1
    assert "keyboard-interactive prompts were not accepted" in res.stderr and "fresh code" in res.stderr
    assert "00000000x" not in res.tty + res.stdout + res.stderr


def test_no_terminal_is_a_clear_error_and_stdin_is_never_read_for_the_code(otp, otp_laptop, tmp_path):
    code = new_code(otp["code"])
    run_dir = make_run(tmp_path / "run-notty", otp_record(otp), ["1"])
    proc = subprocess.run([sys.executable, "-m", "summit_jobs", "status", str(run_dir)], env=otp_laptop,
                          input=code + "\n", capture_output=True, text=True, timeout=60, start_new_session=True)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{otp['sshd'].user}@127.0.0.1:{otp['sshd'].port} asks for a keyboard-interactive login" in proc.stderr
    assert "run the command from a terminal" in proc.stderr
    assert code not in proc.stdout + proc.stderr


def test_ctrl_c_at_the_prompt_ends_cleanly_and_gives_the_terminal_its_echo_back(otp, otp_laptop, tmp_path):
    new_code(otp["code"])
    run_dir = make_run(tmp_path / "run-ctrlc", otp_record(otp), ["1"])
    res = run_in_terminal(["status", str(run_dir)], otp_laptop, [("Password:", "\x03")])
    assert res.rc == 130 and "Traceback" not in res.stderr, (res.tty, res.stderr)
    assert res.echo_after


def test_a_server_that_gives_up_waiting_ends_the_prompt(otp, tmp_path):
    """The server's LoginGraceTime runs out while the prompt waits: one line, instead of a command that hangs."""
    new_code(otp["code"])
    for sshd in start_sshd(tmp_path / "sshd", otp["remote_env"], program=otp["program"],
                           options={**OTP_OPTIONS, "LoginGraceTime": "2"}):
        env = laptop_env(tmp_path, otp["remote_env"], sshd.known_hosts_line())
        run_dir = make_run(tmp_path / "run-grace", {"host": "127.0.0.1", "port": sshd.port, "user": sshd.user,
                                                     "key_file": str(sshd.user_key)}, ["1"])
        started = time.time()
        res = run_in_terminal(["status", str(run_dir)], env, [], timeout=30)
        assert res.rc == 2 and "Traceback" not in res.stderr, (res.tty, res.stderr)
        assert f"logging in to {sshd.user}@127.0.0.1:{sshd.port}: the server closed the connection while waiting " \
               "for the answer" in res.stderr
        assert time.time() - started < 20 and res.echo_after


def _sessions(sshd) -> List[int]:
    """The per-connection processes of the test's sshd (children of the listener)."""
    main = int((sshd.folder / "sshd.pid").read_text())
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(main)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_a_watch_that_loses_its_connection_logs_in_again(otp, otp_laptop, tmp_path):
    """The connection drops in the middle of status --watch: one line says so, the server asks for a new code,
    the watch goes on to the end."""
    env = otp_laptop
    run_dir = tmp_path / "run-drop"
    run_dir.mkdir()
    go = run_dir / "go"                                     # the job runs until the connection has dropped
    jid = submitted_id(run(["bsub", "-o", "/dev/null", "sh", "-c", f"while [ ! -e '{go}' ]; do sleep 0.05; done"],
                           env, cwd=run_dir).stdout)
    make_run(run_dir, otp_record(otp), [jid])
    first, second = new_code(otp["code"]), None
    dropped = []

    def drop_once(stdout: str) -> None:
        nonlocal second
        if not dropped and jid in stdout:
            dropped.append(True)
            second = new_code(otp["code"])                  # a token shows a new code a minute later
            answers.append(("Password:", second))
            for pid in _sessions(otp["sshd"]):
                os.kill(pid, signal.SIGKILL)
            go.touch()

    answers = [("Password:", first)]
    res = run_in_terminal(["status", "--watch", "--interval", "0.5", str(run_dir)], env, answers,
                          on_output=drop_once)
    assert res.rc == 0 and "done" in res.stdout, (res.tty, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    assert f"summit-jobs: connection to {otp['sshd'].user}@127.0.0.1:{otp['sshd'].port} lost; reconnecting..." \
           in res.stderr
    assert res.tty.count("Password:") == 2
    assert first not in res.tty + res.stderr + res.stdout and second not in res.tty + res.stderr + res.stdout


# -- ~/.ssh/config, jump hosts ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def jumped(tmp_path_factory):
    """A jump host on 127.0.0.1 and a login node on 127.0.0.2, both logging enough to show forwarding."""
    base = tmp_path_factory.mktemp("jump")
    remote_env = remote_lsf_env(base / "state")
    for jump in start_sshd(base / "jump", remote_env, options={"LogLevel": "DEBUG1"}):
        for target in start_sshd(base / "target", remote_env, address="127.0.0.2", options={"LogLevel": "DEBUG1"}):
            yield {"jump": jump, "target": target, "base": base, "remote_env": remote_env}


def jump_config(path: Path, jump, target, *, missing_first: Optional[str] = None) -> Path:
    lines = [f"Host jump\n    HostName 127.0.0.1\n    Port {jump.port}\n    User {jump.user}\n"
             f"    IdentityFile {jump.user_key}\n",
             "Host target\n    HostName 127.0.0.2\n", f"    Port {target.port}\n", f"    User {target.user}\n",
             f"    IdentityFile {missing_first}\n" if missing_first else "",
             f"    IdentityFile {target.user_key}\n    ProxyJump jump\n    ServerAliveInterval 1\n"]
    path.write_text("".join(lines))
    return path


def test_login_node_behind_a_jump_host_from_the_ssh_config(jumped, tmp_path):
    jump, target = jumped["jump"], jumped["target"]
    env = laptop_env(tmp_path, jumped["remote_env"], jump.known_hosts_line() + target.known_hosts_line())
    env["SUMMIT_JOBS_SSH_CONFIG"] = str(jump_config(tmp_path / "ssh_config", jump, target,
                                                    missing_first=str(tmp_path / "no-such-key")))
    run_dir = tmp_path / "run-jump"
    run_dir.mkdir()
    jid = submitted_id(run(["bsub", "-o", "/dev/null", "sleep", "3"], env, cwd=run_dir).stdout)
    make_run(run_dir, {"host": "target"}, [jid])           # the run remembers the alias, as submit records it
    before = jump.log.read_text()
    res = cli(["status", "--watch", "--interval", "2.5", "--json", str(run_dir)], env, timeout=90)
    assert res.returncode == 0, res.stderr
    assert '"state": "done"' in res.stdout
    log = jump.log.read_text()[len(before):]
    assert f"server_request_direct_tcpip: originator 127.0.0.1 port 0, target 127.0.0.2 port {target.port}" in log
    assert "rtype keepalive@lag.net" in target.log.read_text()       # ServerAliveInterval 1 over a 2.5 s pause


def test_each_hop_host_key_is_checked_and_a_wrong_jump_key_is_named(jumped, tmp_path):
    jump, target = jumped["jump"], jumped["target"]
    wrong_jump = f"[127.0.0.1]:{jump.port} {target.host_key_pub}\n"
    env = laptop_env(tmp_path, jumped["remote_env"], wrong_jump + target.known_hosts_line())
    env["SUMMIT_JOBS_SSH_CONFIG"] = str(jump_config(tmp_path / "ssh_config", jump, target))
    run_dir = make_run(tmp_path / "run-wrongjump", {"host": "target"}, ["1"])
    res = cli(["status", str(run_dir)], env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"THE HOST KEY OF jump host {jump.user}@jump:{jump.port} (127.0.0.1) (ProxyJump of target in " \
           f"{env['SUMMIT_JOBS_SSH_CONFIG']}) HAS CHANGED" in res.stderr
    # The jump host is known, the login node behind it is not: refused, naming the login node.
    Path(env["HOME"], ".ssh", "known_hosts").write_text(jump.known_hosts_line())
    res = cli(["status", str(run_dir)], env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"the host key of {target.user}@target:{target.port} (127.0.0.2) is not in your known_hosts" in res.stderr


def _closed_port(address: str) -> int:
    """A port on ``address`` that nothing listens on (bound, then let go)."""
    import socket
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def test_an_unreachable_host_or_hop_gives_the_real_reason(jumped, tmp_path):
    """Not paramiko's '[Errno None] Unable to connect' nor a ChannelException tuple: what refused, and why."""
    jump, target = jumped["jump"], jumped["target"]
    env = laptop_env(tmp_path, jumped["remote_env"], jump.known_hosts_line() + target.known_hosts_line())
    closed = _closed_port("127.0.0.1")
    res = cli(["--host", f"{jump.user}@127.0.0.1:{closed}", "status", "5"], env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"127.0.0.1 port {closed}: Connection refused" in res.stderr and "Errno None" not in res.stderr
    # The jump host is up, the login node behind it is not: the jump host's own answer.
    config = jump_config(tmp_path / "ssh_config", jump, target)
    config.write_text(config.read_text().replace(f"Port {target.port}", f"Port {_closed_port('127.0.0.2')}"))
    env["SUMMIT_JOBS_SSH_CONFIG"] = str(config)
    res = cli(["--host", "target", "status", "5"], env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "could not open a connection to 127.0.0.2:" in res.stderr and "(SSH channel error " in res.stderr
    assert "ChannelException" not in res.stderr and "Errno None" not in res.stderr


def test_command_line_wins_over_the_ssh_config(jumped, tmp_path):
    """~/.ssh/config (the default place) gives a wrong port, user and key for an alias; --host USER@ALIAS:PORT
    and --key-file put them right, and the alias's HostName is still used."""
    target = jumped["target"]
    env = laptop_env(tmp_path, jumped["remote_env"], target.known_hosts_line())
    Path(env["HOME"], ".ssh", "config").write_text(
        f"Host login\n    HostName 127.0.0.2\n    Port 1\n    User nobody\n    IdentityFile {tmp_path / 'absent'}\n")
    run_dir = tmp_path / "run-cli"
    run_dir.mkdir()
    jid = submitted_id(run(["bsub", "-o", "/dev/null", "true"], env, cwd=run_dir).stdout)
    wait_for(lambda: "DONE" in run(["bjobs", "-a", jid], env).stdout, 30, "the job to end")
    res = cli(["--host", f"{target.user}@login:{target.port}", "--key-file", str(target.user_key), "status",
               "--json", jid], env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["state"] == "done"
    # Without the overrides, the file's values are used (and refused, naming the file's line).
    res = cli(["--host", "login", "status", jid], env)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"IdentityFile {tmp_path / 'absent'} for host 'login' in {env['HOME']}/.ssh/config does not exist" \
           in res.stderr


def test_a_passphrase_protected_key_is_unlocked_at_the_terminal(jumped, tmp_path):
    target = jumped["target"]
    env = laptop_env(tmp_path, jumped["remote_env"], target.known_hosts_line())
    key = tmp_path / "locked_key"
    key.write_bytes(target.user_key.read_bytes())
    key.chmod(0o600)
    phrase = f"phrase-{secrets.token_hex(4)}"
    subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", phrase, "-f", str(key)], check=True, timeout=30,
                   capture_output=True)
    run_dir = tmp_path / "run-locked"
    run_dir.mkdir()
    jid = submitted_id(run(["bsub", "-o", "/dev/null", "true"], env, cwd=run_dir).stdout)
    args = ["--host", f"{target.user}@127.0.0.2:{target.port}", "--key-file", str(key), "status", "--json", jid]
    res = run_in_terminal(args, env, [("Passphrase for key", phrase)])
    assert res.rc == 0, (res.tty, res.stderr)
    assert f"Passphrase for key {key}:" in res.tty and phrase not in res.tty + res.stdout + res.stderr
    res = run_in_terminal(args, env, [("Passphrase for key", "wrong")])
    assert res.rc == 2 and f"the passphrase for SSH key {key} was not accepted" in res.stderr, res.stderr
