"""Which known_hosts files may vouch for a host, and known_hosts files as sites write them (@cert-authority,
@revoked, broken lines), against real OpenSSH servers on 127.0.0.1, one of them presenting a host certificate;
a connection that drops during `status --watch` or `logs --follow`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lsf_jobs import cli, lsf_environment, run, submitted_id
from helpers_sshd import KEYGEN, remote_lsf_env, start_sshd


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("trust")
    remote_env = remote_lsf_env(base)
    for sshd in start_sshd(base / "sshd", remote_env):
        yield {"sshd": sshd, "base": base, "remote_env": remote_env}


@pytest.fixture
def laptop(server, tmp_path):
    """A user whose own ~/.ssh/known_hosts is empty; the embedded LSF is the server's."""
    env = lsf_environment(tmp_path / "laptop")
    env["SUMMIT_JOBS_LSF_HOME"] = server["remote_env"]["SUMMIT_JOBS_LSF_HOME"]
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    (tmp_path / "home" / ".ssh" / "known_hosts").write_text("")
    return env


def make_run(folder: Path, sshd, known_hosts, job_ids=("1",)) -> Path:
    """A run folder whose run.json sends status/logs/cancel to the test's sshd."""
    folder.mkdir(parents=True, exist_ok=True)
    record = {"name": folder.name, "run_dir": str(folder), "machine": "local", "job_name": "tsm",
              "job_ids": list(job_ids),
              "ssh": {"host": "127.0.0.1", "port": sshd.port, "user": sshd.user, "key_file": str(sshd.user_key),
                      "known_hosts": str(known_hosts) if known_hosts else None}}
    (folder / "run.json").write_text(json.dumps(record))
    return folder


def test_run_record_cannot_bring_its_own_known_hosts(server, laptop, tmp_path):
    sshd = server["sshd"]
    attacker = tmp_path / "attacker_known_hosts"
    attacker.write_text(sshd.known_hosts_line())
    run_dir = make_run(tmp_path / "shared" / "run1", sshd, attacker)
    res = cli(["status", str(run_dir)], laptop)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "not in your known_hosts" in res.stderr
    assert f"names the known_hosts file {attacker}" in res.stderr and "ignored" in res.stderr
    for command in (["logs", str(run_dir)], ["cancel", str(run_dir)]):
        res = cli(command, laptop)
        assert res.returncode == 2 and "not in your known_hosts" in res.stderr, res.stderr
    # The same file given by the user on the command line vouches for the host.
    res = cli(["--known-hosts", str(attacker), "status", "--json", str(run_dir)], laptop)
    assert res.returncode == 0, res.stderr
    # And so does the user's own known_hosts.
    Path(laptop["HOME"], ".ssh", "known_hosts").write_text(sshd.known_hosts_line())
    res = cli(["status", "--json", str(run_dir)], laptop)
    assert res.returncode == 0, res.stderr


def test_site_known_hosts_with_cert_authority_and_broken_lines_still_reaches_a_listed_host(server, laptop, tmp_path):
    sshd = server["sshd"]
    ca = " ".join((sshd.folder / "id_ed25519.pub").read_text().split()[:2])
    known = Path(laptop["HOME"], ".ssh", "known_hosts")
    known.write_text(
        "# site file\n"
        f"@cert-authority *.olcf.ornl.gov {ca}\n"
        "@cert-authority * ssh-ed25519 !!!notbase64!!!\n"
        "not-a-valid-line\n"
        f"[127.0.0.1]:{sshd.port} ssh-ed25519 !!!notbase64!!!\n"
        + sshd.known_hosts_line())
    run_dir = make_run(tmp_path / "run2", sshd, None)
    res = cli(["status", "--json", str(run_dir)], laptop)
    assert res.returncode == 0, res.stderr
    assert f"{known}:3: cannot read this @cert-authority line" in res.stderr
    assert "not supported" not in res.stderr and "Traceback" not in res.stderr


def _pub(path: Path) -> str:
    return " ".join(Path(f"{path}.pub").read_text().split()[:2])


def test_cert_authority_and_revoked_lines_with_the_real_key(server, laptop, tmp_path):
    """A site's known_hosts: a CA for its hosts, a revoked old key, and the host's own key. The connection works;
    once the host's own key is revoked as well, it is refused whatever else the file says."""
    sshd = server["sshd"]
    other = tmp_path / "old_host_key"
    subprocess.run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True, timeout=30)
    known = Path(laptop["HOME"], ".ssh", "known_hosts")
    lines = [f"@cert-authority * {_pub(sshd.folder / 'id_ed25519')}\n", f"@revoked * {_pub(other)}\n",
             sshd.known_hosts_line()]
    known.write_text("".join(lines))
    run_dir = make_run(tmp_path / "run-ca", sshd, None)
    res = cli(["status", "--json", str(run_dir)], laptop)
    assert res.returncode == 0 and "warning" not in res.stderr, res.stderr
    known.write_text("".join(lines) + f"@revoked [127.0.0.1]:* {sshd.host_key_pub}\n")
    res = cli(["--trust-new-host-key", "status", str(run_dir)], laptop)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "IS REVOKED" in res.stderr and f"{known}:4" in res.stderr


@pytest.fixture(scope="module")
def certified(tmp_path_factory, server):
    """A second server whose host key is signed by a test CA (HostCertificate); its LSF is the first one's."""
    base = tmp_path_factory.mktemp("certified")
    ca = base / "ca"
    subprocess.run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(ca)], check=True, timeout=30)
    for sshd in start_sshd(base / "sshd", server["remote_env"], certificate_ca=ca):
        yield {"sshd": sshd, "ca": ca, "base": base}


def test_host_certificate_signed_by_a_listed_ca_is_accepted(certified, laptop, tmp_path):
    sshd, ca = certified["sshd"], certified["ca"]
    known = Path(laptop["HOME"], ".ssh", "known_hosts")
    known.write_text(f"@cert-authority [127.0.0.1]:*,*.example.org {_pub(ca)}\n")    # no line for the host itself
    run_dir = make_run(tmp_path / "run-cert", sshd, None)
    res = cli(["status", "--json", str(run_dir)], laptop)
    assert res.returncode == 0, res.stderr
    assert "NEW host key" not in res.stderr and known.read_text().count("\n") == 1     # nothing was added


@pytest.mark.parametrize("case", ["other CA", "CA for other hosts", "revoked CA"])
def test_host_certificate_without_a_valid_ca_is_refused(certified, laptop, tmp_path, case):
    sshd, ca = certified["sshd"], certified["ca"]
    other = tmp_path / "other_ca"
    subprocess.run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True, timeout=30)
    text = {"other CA": f"@cert-authority * {_pub(other)}\n",
            "CA for other hosts": f"@cert-authority *.example.org,!127.0.0.1 {_pub(ca)}\n",
            "revoked CA": f"@cert-authority * {_pub(ca)}\n@revoked * {_pub(ca)}\n"}[case]
    Path(laptop["HOME"], ".ssh", "known_hosts").write_text(text)
    run_dir = make_run(tmp_path / "run-nocert", sshd, None)
    res = cli(["status", str(run_dir)], laptop)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    if case == "revoked CA":
        assert "IS SIGNED BY A REVOKED CA" in res.stderr
    else:
        assert "not in your known_hosts" in res.stderr
    if case == "other CA":
        assert "signed by a key that no @cert-authority line of your known_hosts lists" in res.stderr


def test_revoked_key_is_never_accepted(server, laptop, tmp_path):
    sshd = server["sshd"]
    known = Path(laptop["HOME"], ".ssh", "known_hosts")
    known.write_text(sshd.known_hosts_line() + f"@revoked * {sshd.host_key_pub}\n")
    run_dir = make_run(tmp_path / "run3", sshd, None)
    for extra in ([], ["--trust-new-host-key"]):
        res = cli([*extra, "status", str(run_dir)], laptop)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert "IS REVOKED" in res.stderr and f"{known}:2" in res.stderr
    assert "@revoked" in known.read_text() and known.read_text().count(sshd.host_key_pub) == 2


def _openssh_connects(sshd, known: Path, env: dict) -> bool:
    """Whether OpenSSH's own client, trusting only ``known``, logs in to the test's sshd (never asking)."""
    proc = subprocess.run(["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                           "-o", f"UserKnownHostsFile={known}", "-o", "GlobalKnownHostsFile=/dev/null",
                           "-o", "IdentitiesOnly=yes", "-i", str(sshd.user_key), "-p", str(sshd.port),
                           f"{sshd.user}@{sshd.address}", "true"], env=env, capture_output=True, timeout=60)
    return proc.returncode == 0


#: known_hosts files with one non-UTF-8 byte: (the bytes before the server's line, the server's line's own bytes
#: as a function of the line, whether the host is trusted, the line the warning names or None).
NON_UTF8 = {
    "bad line before": (b"\xff\xfe garbage \x80\n", lambda line: line, True, 1),
    "bad byte in the comment": (b"", lambda line: line.rstrip(b"\n") + b" laptop-caf\xe9\n", True, None),
    "bad byte in the host": (b"# site keys\n", lambda line: line.replace(b"127.0.0.1", b"127.0.0.1\xff"), False, 2),
    "bad byte in a comment line": (b"# caf\xe9\n", lambda line: line, True, None),
}


@pytest.mark.parametrize("case", NON_UTF8)
def test_a_non_utf8_byte_costs_its_line_only_as_in_openssh(server, laptop, tmp_path, case):
    sshd = server["sshd"]
    before, server_line, trusted, warned = NON_UTF8[case]
    known = Path(laptop["HOME"], ".ssh", "known_hosts")
    known.write_bytes(before + server_line(sshd.known_hosts_line().encode()))
    run_dir = make_run(tmp_path / "run4", sshd, None)
    res = cli(["status", "--json", str(run_dir)], laptop)
    assert "Traceback" not in res.stderr and "is skipped" not in res.stderr, res.stderr
    if trusted:
        assert res.returncode == 0, res.stderr
    else:
        assert res.returncode == 2 and "not in your known_hosts" in res.stderr, res.stderr
    if warned:
        assert f"{known}:{warned}: this known_hosts line is not UTF-8 text" in res.stderr, res.stderr
        assert "line skipped, the file's other lines are read" in res.stderr
    else:
        assert "warning" not in res.stderr, res.stderr
    assert _openssh_connects(sshd, known, laptop) == trusted


def test_a_revoked_line_with_a_non_utf8_host_pattern_still_revokes(server, laptop, tmp_path):
    """The revocation holds for every host, so bytes in its host patterns cannot lift it."""
    sshd = server["sshd"]
    known = Path(laptop["HOME"], ".ssh", "known_hosts")
    known.write_bytes(sshd.known_hosts_line().encode() + f"@revoked \xff* {sshd.host_key_pub}\n".encode("latin-1"))
    run_dir = make_run(tmp_path / "run4r", sshd, None)
    res = cli(["status", str(run_dir)], laptop)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "IS REVOKED" in res.stderr and f"{known}:2" in res.stderr


def _session_processes(sshd) -> list:
    """The per-connection processes of the test's sshd (children of the listener)."""
    main = int((sshd.folder / "sshd.pid").read_text())
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(main)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_connection_dropping_during_watch_is_clean(server, laptop, tmp_path):
    sshd = server["sshd"]
    Path(laptop["HOME"], ".ssh", "known_hosts").write_text(sshd.known_hosts_line())
    run_dir = tmp_path / "run5"
    run_dir.mkdir()
    go = run_dir / "go"                             # the job runs until the test releases it
    jid = submitted_id(run(["bsub", "-o", "/dev/null", "sh", "-c", f"while [ ! -e '{go}' ]; do sleep 0.05; done"],
                           laptop, cwd=run_dir).stdout)
    make_run(run_dir, sshd, None, job_ids=[jid])
    watch = subprocess.Popen([sys.executable, "-m", "summit_jobs", "status", "--watch", "--interval", "0.3",
                              str(run_dir)], env=laptop, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    try:
        # Unbuffered (bufsize=0): this reads the first line only, none of the next.
        first = watch.stdout.readline().decode()    # one round over the connection has been shown
        assert first, watch.stderr.read().decode()
        for pid in _session_processes(sshd):
            os.kill(pid, signal.SIGKILL)            # the connection drops
        go.touch()
        out, err = (x.decode() for x in watch.communicate(timeout=60))
        out = first + out
    finally:
        watch.kill()
    assert "Traceback" not in err, err
    assert f"summit-jobs: connection to {sshd.user}@127.0.0.1:{sshd.port} lost; reconnecting... (1/3)" in err, err
    assert watch.returncode == 0 and "done" in out, (out, err)


def test_connection_dropping_during_logs_follow_is_clean(server, laptop, tmp_path):
    """logs --follow reconnects and goes on from where it was: every line once, none lost."""
    sshd = server["sshd"]
    Path(laptop["HOME"], ".ssh", "known_hosts").write_text(sshd.known_hosts_line())
    run_dir = tmp_path / "run6"
    run_dir.mkdir()
    (run_dir / "job.lsf").write_text("#BSUB -o out.%J\n")
    go = run_dir / "go"                             # the job's second half waits until the test releases it
    body = (f"for i in 1 2 3 4; do echo line $i; done; while [ ! -e '{go}' ]; do sleep 0.05; done; "
            "for i in 5 6 7 8; do echo line $i; sleep 0.2; done")
    jid = submitted_id(run(["bsub", "-o", str(run_dir / "out.%J"), "bash", "-c", body], laptop, cwd=run_dir).stdout)
    make_run(run_dir, sshd, None, job_ids=[jid])
    follow = subprocess.Popen([sys.executable, "-m", "summit_jobs", "logs", "--follow", "--interval", "0.3",
                               str(run_dir)], env=laptop, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    try:
        # Unbuffered (bufsize=0): this reads the first line only, none of the next.
        first = follow.stdout.readline().decode()   # the follow has read over the connection
        assert first, follow.stderr.read().decode()
        for pid in _session_processes(sshd):
            os.kill(pid, signal.SIGKILL)            # the connection drops mid-follow
        go.touch()
        out, err = (x.decode() for x in follow.communicate(timeout=60))
        out = first + out
    finally:
        follow.kill()
    assert "Traceback" not in err, err
    assert f"summit-jobs: connection to {sshd.user}@127.0.0.1:{sshd.port} lost; reconnecting..." in err, err
    assert follow.returncode == 0, err
    assert [line for line in out.splitlines() if line.startswith("line ")] == [f"line {i}" for i in range(1, 9)]
