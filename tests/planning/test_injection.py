"""Shell injection: hostile job names, paths and trainer arguments go through render, local submit
and SSH submit; nothing runs that was not meant to, and what was meant arrives unchanged.

A payload that plan.py refuses with a clean error (invalid job name, newline in
a path) is safe by construction; everything else must reach the ranks'
argv byte for byte, and the canary file that the payloads try to create must
never appear.
"""
from __future__ import annotations

import itertools
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsf_jobs import BIN, PROGRAM, bjobs_state, cli, lsf_environment, wait_state, write_template
from summit_jobs.profiles import machines
from summit_jobs.planning import render
from summit_jobs.errors import UserError
from summit_jobs.planning.plan import JOB_NAME_RE, JobOptions, make_plan

CANARY_DIR = None   # set per module fixture


def fragments(canary: str):
    hostile = [
        "'", '"', "`touch {c}`", "$(touch {c})", "; touch {c}", "\n", "\ntouch {c}\n", " ", "\\", "&& touch {c}",
        "| touch {c}", "$HOME", "${{IFS}}", "*", "#", "\n#BSUB -J evil\n", "-x", "%J", "'$(touch {c})'",
        "\"; touch {c}; \"", "\t", "é", "\r", "\u2028", "  \n\n  ", "\x0b\x0c",
    ]
    pieces = st.sampled_from([h.format(c=canary) for h in hostile]) | st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0/"), min_size=1, max_size=4)
    return st.lists(pieces, min_size=1, max_size=4).map("".join)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("inject")
    env = lsf_environment(base, minute=60)
    env["PROG_OUT"] = str(base / "argv")
    (base / "argv").mkdir()
    (base / "prog.py").write_text(PROGRAM)
    templates = write_template(base / "templates", base / "prog.py")
    return {"base": base, "env": env, "templates": templates, "canary": base / "CANARY",
            "counter": itertools.count()}


def test_job_names_are_validated_or_rendered_safely(world):
    profile = machines.load("local")
    canary = str(world["canary"])

    @settings(max_examples=150, deadline=None)
    @given(name=fragments(canary) | st.from_regex(JOB_NAME_RE, fullmatch=True))
    def check(name):
        opts = JobOptions(nodes=1, run_dir="/tmp/x", job_name=name, python=sys.executable)
        try:
            plan = make_plan(profile, opts)
        except UserError as exc:
            assert "job name" in str(exc)
            return
        assert JOB_NAME_RE.fullmatch(name)
        script = render.render(plan)
        assert f"#BSUB -J {name}\n" in script
        assert all(ch not in name for ch in "'\"`$;\n \\|&#")

    check()


def test_render_keeps_line_breaks_in_arguments():
    import shlex
    profile = machines.load("local")
    args = ("a\x1cb", "two\n\nlines", "trailing \nspace")
    plan = make_plan(profile, JobOptions(nodes=1, run_dir="/tmp/x", python=sys.executable, trainer_args=args,
                                         check_trainer_args=False))
    script = render.render(plan)
    assert all(shlex.quote(a) in script for a in args)


def _wait_finished(jid: str, run_dir: str, env: dict, timeout: float = 60) -> dict:
    """The job's final bjobs record, waited for on its exit-code file (the job script writes it as it ends).

    Why the file: looking for it costs nothing, where each bjobs poll is a Python process; bjobs is still
    asked once a second meanwhile, so a job that ends without writing the file is seen as soon.
    """
    code = Path(run_dir) / f"exitcode.{jid}"
    deadline = asked = time.time()
    deadline += timeout
    while time.time() < deadline and not code.exists():
        if time.time() >= asked:
            if bjobs_state(jid, env).get("STAT") in ("DONE", "EXIT"):
                break
            asked = time.time() + 1
        time.sleep(0.05)
    return wait_state(jid, env, timeout=max(1.0, deadline - time.time()))


def _job_story(jid: str, run_dir: str, env: dict) -> str:
    """What the job wrote and what the embedded LSF logged about it: the explanation of a job that failed."""
    parts = [f"{p}:\n{p.read_text(errors='replace')[-2000:]}" for p in sorted(Path(run_dir).glob(f"*.{jid}.*"))]
    log = Path(env["SUMMIT_JOBS_LSF_HOME"]) / "jobs" / str(jid) / "supervisor.log"
    if log.is_file():
        parts.append(f"{log}:\n{log.read_text(errors='replace')[-2000:]}")
    return "\n".join(parts)


def _submit_and_check(world, extra_cli, run_dir: str, args):
    env = world["env"]
    res = cli([*extra_cli, "submit", "--nodes", "1", "--json", "--job-name", "inj", "--template-dir",
               str(world["templates"]), "--run-dir", run_dir, "--", *args], env, timeout=90)
    if res.returncode == 2:
        # Refused cleanly by the planner: only a newline or a '$' in the path may cause that here.
        assert ("newline" in res.stderr and ("\n" in run_dir or "\r" in run_dir)) or \
            ("contains '$'" in res.stderr and "$" in run_dir), res.stderr
        assert "Traceback" not in res.stderr
        return
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    (jid,) = out["job_ids"]
    real_dir = out["run_dir"]
    assert real_dir == os.path.abspath(run_dir) or extra_cli       # over SSH: the remote path itself
    state = _wait_finished(jid, real_dir, env)
    assert state["STAT"] == "DONE", (state, _job_story(jid, real_dir, env))
    for rank in (0, 1):
        argv = json.loads((Path(env["PROG_OUT"]) / f"argv.{jid}.{rank}.json").read_text())
        assert argv[-len(args):] == list(args) if args else True
        assert argv[argv.index("--run-dir") + 1] == real_dir
    assert (Path(real_dir) / f"exitcode.{jid}").read_text() == "0\n"
    assert not world["canary"].exists(), "a payload was executed"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_local_submit_paths_and_args_arrive_unchanged(world, data):
    canary = str(world["canary"])
    dir_part = data.draw(fragments(canary), label="run dir part")
    args = data.draw(st.lists(fragments(canary), min_size=1, max_size=3), label="trainer args")
    n = next(world["counter"])
    run_dir = str(world["base"] / "runs" / f"r{n}{dir_part}"[:120])
    os.makedirs(world["base"] / "runs", exist_ok=True)
    _submit_and_check(world, [], run_dir, args)


@pytest.fixture(scope="module")
def ssh_world(world, tmp_path_factory):
    from helpers_sshd import ssh_profile, start_sshd
    base = tmp_path_factory.mktemp("inject-ssh")
    remote_env = {"PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin", "SUMMIT_JOBS_PYTHON": sys.executable,
                  "SUMMIT_JOBS_LSF_HOME": world["env"]["SUMMIT_JOBS_LSF_HOME"],
                  "PROG_OUT": world["env"]["PROG_OUT"]}
    for server in start_sshd(base / "sshd", remote_env):
        known = base / "known_hosts"
        known.write_text(server.known_hosts_line())
        ssh_profile(base / "profiles", server, base / "remote", known, name="injssh")
        yield dict(world, machines_path=str(base / "profiles"), remote=base / "remote")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_ssh_submit_paths_and_args_arrive_unchanged(ssh_world, data):
    canary = str(ssh_world["canary"])
    dir_part = data.draw(fragments(canary), label="run dir part")
    args = data.draw(st.lists(fragments(canary), min_size=1, max_size=3), label="trainer args")
    n = next(ssh_world["counter"])
    ssh_world["remote"].mkdir(exist_ok=True)
    run_dir = str(ssh_world["remote"] / f"s{n}{dir_part}"[:120])
    env = dict(ssh_world["env"], SUMMIT_JOBS_MACHINES_PATH=ssh_world["machines_path"])
    _submit_and_check(dict(ssh_world, env=env), ["--machine", "injssh"], run_dir, args)
    assert re.match(r"^/", run_dir)
