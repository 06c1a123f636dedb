"""Bad input to ``summit-jobs doctor``: what it cannot even start checking is refused in one line, exit 2,
naming the value (a machine no profile names, a profile file that is not valid, a --host or --port that
is not one). What doctor finds wrong on a site is not refused: it is reported (tests/cli/test_doctor.py)."""
from __future__ import annotations

from typing import List, Tuple

import pytest

from badinput import assert_refused, run_module

#: (command line, needles in stderr). A profile file "broken.yaml" (not a mapping) is on the profile path.
CASES: List[Tuple[List[str], List[str]]] = [
    (["doctor", "--machine", "nosuch"], ["unknown machine 'nosuch'", "lsf-gpu.yaml"]),
    (["--machine", "nosuch", "doctor"], ["unknown machine 'nosuch'"]),
    (["doctor", "--machine", "broken"], ["broken.yaml", "must hold a mapping"]),
    (["doctor", "--host", "-oProxyCommand=sh"], ["SSH host '-oProxyCommand=sh'"]),
    (["doctor", "--host", "login node"], ["SSH host 'login node'"]),
    (["doctor", "--host", "login:99999"], ["'login:99999'", "port '99999'"]),
    (["--port", "70000", "doctor", "--host", "login"], ["70000"]),
    (["doctor", "--data"], ["--data"]),
]


@pytest.mark.parametrize("args,needles", CASES, ids=[str(i) for i in range(len(CASES))])
def test_bad_doctor_input_is_refused(cli_env, tmp_path, args, needles):  # noqa: F811
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "broken.yaml").write_text("- just\n- a list\n")
    env = dict(cli_env, HOME=str(tmp_path / "home"), SUMMIT_JOBS_MACHINES_PATH=str(profiles),
               SUMMIT_JOBS_SSH_CONFIG="none")
    env.pop("SSH_AUTH_SOCK", None)
    proc = run_module("summit_jobs", args, env, timeout=60)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert_refused(proc, needles)
    assert not proc.stdout.strip(), proc.stdout                     # no check was reported
