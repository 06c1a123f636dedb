"""`--command 'python3 train.py'` runs the Python the user meant: the profile's interpreter, not whatever
`python3` the submitting shell's PATH holds; a relative script is found as it was in the folder the user
submitted from; `doctor --command` checks that interpreter and what the script imports.

The shell of these tests has a `python3` (and `python`) first on PATH that cannot import torch: the
interpreter of this checkout run with -S (no site-packages), as a system Python or an inactive virtual
environment would be. Jobs run for real on the embedded LSF.
"""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Dict

import pytest

from lsf_jobs import cli, lsf_environment, wait_state

from summit_jobs.planning.plan import command_with_python, script_index

#: The user's program: imports torch (which the shim on PATH cannot), and says which interpreter ran it.
PROGRAM = """import json, os, sys
import torch
with open("ran.%s.json" % os.environ.get("RANK", "x"), "w") as fh:
    json.dump({"executable": sys.executable, "torch": torch.__version__, "cwd": os.getcwd()}, fh)
"""


def shimmed_environment(tmp_path: Path) -> Dict[str, str]:
    """The embedded LSF's environment with a torch-less ``python3`` and ``python`` first on PATH."""
    env = lsf_environment(tmp_path)
    shims = tmp_path / "shims"
    shims.mkdir()
    for name in ("python3", "python"):
        shim = shims / name
        shim.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    env["PATH"] = f"{shims}{os.pathsep}{env['PATH']}"
    return env


@pytest.mark.parametrize("command,python,expected", [
    (("python3", "train.py"), "/opt/py/bin/python", ("/opt/py/bin/python", "train.py")),
    (("python", "-u", "train.py"), "python3", ("python3", "-u", "train.py")),
    (("python3.11", "-m", "pkg.train"), "/p", ("/p", "-m", "pkg.train")),
    (("/usr/bin/python3", "train.py"), "/p", ("/usr/bin/python3", "train.py")),
    (("./train.sh",), "/p", ("./train.sh",)),
    (("pythonic", "x"), "/p", ("pythonic", "x")),
])
def test_a_bare_python_is_the_profiles_interpreter_and_a_path_runs_as_given(command, python, expected):
    assert command_with_python(command, python) == expected


@pytest.mark.parametrize("command,index", [
    (("python3", "train.py", "--lr", "1"), 1),
    (("python3", "-u", "-X", "dev", "train.py"), 4),
    (("/opt/bin/python3.11", "-W", "ignore", "t.py"), 3),
    (("python3", "-m", "pkg.train"), None),
    (("python3", "-c", "print(1)"), None),
    (("torchrun", "train.py"), None),
    (("python3",), None),
])
def test_the_script_of_a_python_command_is_found_past_the_interpreters_options(command, index):
    assert script_index(command) == index


def test_the_plan_prints_the_interpreter_the_ranks_run(tmp_path):
    env = shimmed_environment(tmp_path)
    (tmp_path / "train.py").write_text(PROGRAM)
    args = ["--machine", "local", "submit", "--nodes", "1", "--walltime", "0:10", "--dry-run"]
    res = cli([*args, "--command", "python3 train.py --lr 1"], env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert f"runs your command on every rank: {sys.executable} {tmp_path / 'train.py'} --lr 1" in res.stderr
    assert "python3: the profile's interpreter (environment.python)" in res.stderr
    as_json = json.loads(cli([*args, "--json", "--command", "python3 train.py"], env, cwd=tmp_path).stdout)["plan"]
    assert as_json["command"] == [sys.executable, str(tmp_path / "train.py")], as_json
    assert as_json["command_python"] == "python3"
    given = json.loads(cli([*args, "--json", "--command", "/usr/bin/python3 /abs/train.py"], env,
                           cwd=tmp_path).stdout)["plan"]
    assert given["command"] == ["/usr/bin/python3", "/abs/train.py"] and "command_python" not in given


def test_python3_on_the_ranks_is_the_profiles_even_when_the_shells_lacks_torch(tmp_path):
    env = shimmed_environment(tmp_path)
    work = tmp_path / "project"
    work.mkdir()
    (work / "train.py").write_text(PROGRAM)
    run_dir = tmp_path / "run"
    res = cli(["--machine", "local", "submit", "--nodes", "1", "--walltime", "0:10", "--run-dir", str(run_dir),
               "--json", "--command", "python3 train.py"], env, cwd=work)
    assert res.returncode == 0, res.stderr
    (jid,) = json.loads(res.stdout)["job_ids"]
    state = wait_state(jid, env, timeout=90)
    err = "".join(p.read_text() for p in run_dir.glob("*.err"))
    assert state["STAT"] == "DONE", (state, err)
    ran = [json.loads(p.read_text()) for p in sorted(run_dir.glob("ran.*.json"))]
    assert len(ran) == 2, (ran, err)
    for rank in ran:
        assert rank["executable"] == sys.executable and rank["torch"], rank
        assert os.path.realpath(rank["cwd"]) == os.path.realpath(run_dir), rank


def test_a_relative_script_not_in_the_submitting_folder_is_refused_before_anything_is_queued(tmp_path):
    env = shimmed_environment(tmp_path)
    run_dir = tmp_path / "run"
    res = cli(["--machine", "local", "submit", "--nodes", "1", "--walltime", "0:10", "--run-dir", str(run_dir),
               "--command", "python3 -u missing.py --lr 1"], env, cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "'missing.py' is not in this folder" in res.stderr and "absolute path" in res.stderr, res.stderr
    assert not run_dir.exists()


def _doctor(env: Dict[str, str], cwd: Path, command: str) -> Dict[str, dict]:
    res = cli(["--machine", "local", "doctor", "--json", "--command", command], env, cwd=cwd, timeout=120)
    assert "Traceback" not in res.stderr, res.stderr
    checks = json.loads(res.stdout)
    return {c["check"]: c for c in checks if c["check"].startswith("command")}


def test_doctor_checks_the_interpreter_the_ranks_run_and_what_the_script_imports(tmp_path):
    env = shimmed_environment(tmp_path)
    (tmp_path / "train.py").write_text(PROGRAM + "try:\n    import apex_optional\nexcept ImportError:\n    pass\n")
    found = _doctor(env, tmp_path, "python3 train.py --lr 1")
    assert found["command interpreter"]["status"] == "ok", found
    assert sys.executable in found["command interpreter"]["found"], found
    assert found["command imports"]["status"] == "ok" and "torch" in found["command imports"]["found"], found
    # The shell's own python3 (no torch): what `python3 train.py` ran before the plan replaced it.
    shim = str(tmp_path / "shims" / "python3")
    found = _doctor(env, tmp_path, f"{shim} train.py")
    assert found["command imports"]["status"] == "FAIL", found
    assert "imports torch, which" in found["command imports"]["found"], found
    assert "apex_optional" not in found["command imports"]["found"], found
    assert "install it into" in found["command imports"]["fix"], found
    found = _doctor(env, tmp_path, "python3 nowhere.py")
    assert found["command script"]["status"] == "FAIL" and "nowhere.py" in found["command script"]["found"]
    found = _doctor(env, tmp_path, "python -m no_such_package.train")
    assert found["command imports"]["status"] == "FAIL" and "no_such_package" in found["command imports"]["found"]
    found = _doctor(env, tmp_path, "no-such-launcher train.py")
    assert found["command"]["status"] == "FAIL" and "not on PATH" in found["command"]["found"], found


def test_over_ssh_a_relative_script_is_refused_before_connecting(tmp_path):
    env = shimmed_environment(tmp_path)
    (tmp_path / "train.py").write_text(PROGRAM)
    res = cli(["--machine", "local", "--host", "login.invalid", "--remote-dir", "/scratch", "submit", "--nodes", "1",
               "--walltime", "0:10", "--command", "python3 train.py"], env, cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "'train.py' is a relative path" in res.stderr and "on login.invalid" in res.stderr, res.stderr
