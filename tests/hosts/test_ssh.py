"""The lifecycle over SSH to a real OpenSSH server on 127.0.0.1 (generated host and user keys):
SFTP upload + bsub + status + logs + cancel through paramiko, and host-key verification."""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from lsf_jobs import (PROGRAM, bjobs_state, cli, lsf_environment, run, stretched, submitted_id, wait_for,
    wait_state, write_template)
from summit_jobs.schedulers.lsf.embedded.state import node_names

#: The virtual nodes' host names on this machine: vnode1... where tasks get host names, else 127.1.0.1...
NODE1, NODE2, NODE3, NODE4 = node_names(4)
from helpers_sshd import remote_lsf_env, ssh_profile, start_sshd
from summit_jobs.schedulers import FINISHED


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """sshd + the embedded LSF it reaches + a laptop-side environment with an SSH profile."""
    base = tmp_path_factory.mktemp("ssh")
    remote_env = remote_lsf_env(base, XDG_DATA_HOME=str(base / "remote-data"), PROG_SLEEP="2")
    for server in start_sshd(base / "sshd", remote_env):
        laptop = lsf_environment(base / "laptop")
        laptop["SUMMIT_JOBS_LSF_HOME"] = remote_env["SUMMIT_JOBS_LSF_HOME"]   # for the tests' own bjobs
        laptop["HOME"] = str(base / "home")            # no ~/.ssh of the developer leaks in
        known = base / "known_hosts"
        known.write_text(server.known_hosts_line())
        remote_runs = base / "remote runs"            # a space: paths are quoted on the remote side
        profiles = ssh_profile(base / "profiles", server, remote_runs, known)
        laptop["SUMMIT_JOBS_MACHINES_PATH"] = str(profiles)
        (base / "prog.py").write_text(PROGRAM)
        templates = write_template(base / "templates", base / "prog.py")
        yield {"server": server, "env": laptop, "base": base, "templates": templates, "known": known,
               "remote_runs": remote_runs}


def status_rows(env, target, *extra):
    res = cli(["--machine", "viassh", *extra, "status", "--json", target], env)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_end_to_end_over_ssh(world):
    env, base = world["env"], world["base"]
    blocker = base / "blocker.sh"
    blocker.write_text("#!/bin/bash\nwhile [ ! -e release ]; do sleep 0.1; done\n")
    # Its run limit (10 LSF minutes, stretched) outlasts a busy machine's submit over SSH; released long before.
    jb = submitted_id(run(["bsub", "-nnodes", "4", "-W", f"{stretched(10):.0f}", "-o", "/dev/null", str(blocker)],
                          env, cwd=base).stdout)
    wait_for(lambda: bjobs_state(jb, env)["STAT"] == "RUN", 20, "the blocker to run")

    res = cli(["--machine", "viassh", "submit", "--nodes", "2", "--job-name", "remote",
               "--template-dir", str(world["templates"]), "--", "--flag", "a b"], env)
    assert res.returncode == 0, res.stderr
    assert "submitted to queue batch on " in res.stdout and "@127.0.0.1:" in res.stdout
    jid = re.search(r"^job (\d+) submitted", res.stdout, re.M).group(1)
    run_dir = Path(re.search(r"^run directory: (.+)$", res.stdout, re.M).group(1))
    assert str(run_dir).startswith(str(world["remote_runs"]))
    assert (run_dir / "job.lsf").is_file() and (run_dir / "run.json").is_file()   # uploaded over SFTP
    assert json.loads((run_dir / "run.json").read_text())["ssh"]["port"] == world["server"].port

    seen = [status_rows(env, run_dir.name)[0]["state"]]
    assert seen == ["pending"]
    (base / "release").write_text("")
    deadline = time.time() + stretched(40)
    while time.time() < deadline and seen[-1] not in FINISHED + ("unknown",):
        state = status_rows(env, jid)[0]["state"]
        if state != seen[-1]:
            seen.append(state)
        time.sleep(0.2)
    # RUN shows when a poll (an SSH round trip each) falls inside the job's short run; on a loaded machine
    # the job can start and end between two polls. Its exit-code file (below) shows that it ran.
    assert seen in (["pending", "running", "done"], ["pending", "done"]), seen
    logs = cli(["--machine", "viassh", "logs", run_dir.name], env)
    assert logs.returncode == 0, logs.stderr
    lines = sorted(line for line in logs.stdout.splitlines() if line.startswith("RANK "))
    assert len(lines) == 4
    for rank, line in enumerate(lines):
        assert f"JSM_NAMESPACE_RANK={rank} JSM_NAMESPACE_SIZE=4 JSM_NAMESPACE_LOCAL_RANK={rank % 2}" in line
        assert f"SUMMIT_JOBS_VNODE={node_names(4)[rank // 2]}" in line
    assert (run_dir / f"exitcode.{jid}").read_text() == "0\n"
    run(["bkill", jb], env)


def test_unknown_host_key_is_refused_by_default(world, tmp_path):
    env = dict(world["env"])
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    remote_runs = tmp_path / "refused-runs"
    res = cli(["--machine", "viassh", "--known-hosts", str(empty), "--remote-dir", str(remote_runs), "submit",
               "--nodes", "1", "--template-dir", str(world["templates"])], env)
    assert res.returncode == 2, res.stdout
    assert "not in your known_hosts" in res.stderr and "--trust-new-host-key" in res.stderr
    assert "Traceback" not in res.stderr
    assert not remote_runs.exists()          # nothing was uploaded or submitted
    # A changed key is refused even with --trust-new-host-key.
    other = " ".join((world["server"].folder / "id_ed25519.pub").read_text().split()[:2])
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(f"[127.0.0.1]:{world['server'].port} {other}\n")
    res = cli(["--machine", "viassh", "--known-hosts", str(wrong), "--trust-new-host-key", "--remote-dir",
               str(remote_runs), "submit", "--nodes", "1", "--template-dir", str(world["templates"])], env)
    assert res.returncode == 2 and "HAS CHANGED" in res.stderr
    assert not remote_runs.exists()


def test_trust_new_host_key_accepts_loudly_and_remembers(world, tmp_path):
    env = dict(world["env"])
    fresh = tmp_path / "known_hosts"
    remote_runs = tmp_path / "trusted-runs"
    # The job runs on the far side of SSH, in sshd's environment: --env, not this one, stops its 2 s sleep.
    res = cli(["--machine", "viassh", "--known-hosts", str(fresh), "--trust-new-host-key", "--remote-dir",
               str(remote_runs), "submit", "--nodes", "1", "--job-name", "trusted", "--env", "PROG_SLEEP=0",
               "--template-dir", str(world["templates"])], env)
    assert res.returncode == 0, res.stderr
    assert "WARNING: trusting a NEW host key" in res.stderr and "SHA256:" in res.stderr
    assert world["server"].host_key_pub in fresh.read_text()
    jid = re.search(r"^job (\d+) submitted", res.stdout, re.M).group(1)
    assert wait_state(jid, env)["STAT"] == "DONE"
    # Later commands find the key in the file without the option.
    rows = status_rows(env, jid, "--known-hosts", str(fresh))
    assert rows[0]["state"] == "done" and rows[0]["exit_code"] == 0


def test_cancel_over_ssh(world):
    env = dict(world["env"])
    res = cli(["--machine", "viassh", "submit", "--nodes", "1", "--job-name", "tocancel", "--walltime", "10",
               "--chain", "2", "--env", "PROG_SLEEP=30", "--template-dir", str(world["templates"])], dict(env))
    assert res.returncode == 0, res.stderr
    ids = re.search(r"^job ([\d ]+) submitted", res.stdout, re.M).group(1).split()
    run_dir = Path(re.search(r"^run directory: (.+)$", res.stdout, re.M).group(1))
    wait_for(lambda: bjobs_state(ids[0], env)["STAT"] == "RUN", 20, "link 1 to run")
    res = cli(["--machine", "viassh", "cancel", run_dir.name], env)
    assert res.returncode == 0, res.stderr
    for jid in ids:
        assert wait_state(jid, env, timeout=20)["STAT"] == "EXIT"
    assert [r["state"] for r in status_rows(env, run_dir.name)] == ["cancelled", "cancelled"]
    assert os.path.isdir(run_dir)
