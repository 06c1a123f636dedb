"""Bad input to the job lifecycle: status, logs, cancel, the SSH options, damaged run records, and the
embedded bsub/bjobs/bkill/jsrun invoked as commands. Each case must be refused with a non-zero exit, no
traceback and the offending value named."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from badinput import assert_refused, run_module
from helpers import run_cli
from lsf_jobs import lsf_environment

#: A run record that is fine, to be spoiled by the cases below.
GOOD = {"name": "r", "run_dir": "/x", "machine": "local", "job_ids": ["1"], "ssh": None}

#: (command line, needles in stderr). RUN is replaced by a run folder, KH by a folder used as known_hosts.
CLI_CASES: List[Tuple[List[str], List[str]]] = [
    (["status", "0"], ["'0' is not a job id"]),
    (["status", "99999999999"], ["'99999999999' is not a job id"]),
    (["status", "\u0663"], ["'\u0663' is not a job id"]),
    (["cancel", "0"], ["'0' is not a job id"]),
    (["logs", "0"], ["'0' is not a job id"]),
    (["status", "no-such-run"], ["no run named 'no-such-run'"]),
    (["cancel", "no-such-run"], ["no run named 'no-such-run'"]),
    (["logs", "no-such-run"], ["no run named 'no-such-run'"]),
    (["status", "--interval", "nan", "5"], ["--interval nan"]),
    (["status", "--watch", "--interval", "-1", "5"], ["--interval -1.0"]),
    (["status", "--interval", "inf", "5"], ["--interval inf"]),
    (["logs", "--follow", "--interval", "0", "5"], ["--interval 0.0"]),
    (["--port", "0", "--host", "127.0.0.1", "status", "5"], ["0"]),
    (["--port", "70000", "--host", "127.0.0.1", "status", "5"], ["70000"]),
    (["--port", "-1", "--host", "127.0.0.1", "status", "5"], ["-1"]),
    (["--host", "-oProxyCommand=touch /tmp/x", "status", "5"], ["'-oProxyCommand=touch /tmp/x'"]),
    (["--host", "login 1", "cancel", "5"], ["SSH host 'login 1'"]),
    (["--host", "127.0.0.1", "--port", "1", "--key-file", "/no/such/key", "status", "5"], ["/no/such/key"]),
    (["--host", "127.0.0.1", "--port", "1", "--known-hosts", "KH", "status", "5"], ["KH", "is a folder"]),
]

#: (what run.json holds, as bytes or a record spoiled from GOOD; needles). FILE is the run.json path.
RECORD_CASES: List[Tuple[object, List[str]]] = [
    (b"{not json", ["FILE", "is not valid JSON"]),
    (b"\xff\xfe\x00garbage", ["FILE", "is not UTF-8"]),
    (b"[1, 2]", ["FILE", "is not a run record"]),
    ({"job_ids": ["abc"]}, ["FILE", "'abc'"]),
    ({"job_ids": [-5]}, ["FILE", "-5"]),
    ({"job_ids": [[1]]}, ["FILE", "[1]"]),
    ({"job_ids": [1.5]}, ["FILE", "1.5"]),
    ({"job_ids": [True]}, ["FILE", "True"]),
    ({"job_ids": None}, ["FILE", "'job_ids'", "None"]),
    ({"job_ids": "123"}, ["FILE", "'123'"]),
    ({"run_dir": None}, ["FILE", "'run_dir' None"]),
    ({"ssh": {"host": "h", "port": "abc"}}, ["FILE", "'abc'"]),
    ({"ssh": {"host": "h", "port": 70000}}, ["FILE", "70000"]),
    ({"ssh": "login1"}, ["FILE", "'login1'"]),
    ({"cancelled": ["x"]}, ["FILE", "'x'"]),
]

#: (module, arguments, extra environment, needles): the embedded LSF's own commands.
LSF_CASES: List[Tuple[str, List[str], Dict[str, str], List[str]]] = [
    ("bsub", ["-nnodes", "abc", "true"], {}, ["-nnodes 'abc'"]),
    ("bsub", ["-nnodes", "0", "true"], {}, ["-nnodes '0'"]),
    ("bsub", ["-nnodes", "99", "true"], {}, ["-nnodes 99"]),
    ("bsub", ["-W", "0", "true"], {}, ["-W '0'"]),
    ("bsub", ["-W", "1:2:3", "true"], {}, ["-W '1:2:3'"]),
    ("bsub", ["-wa", "NOSUCHSIG", "-wt", "1", "true"], {}, ["'NOSUCHSIG'"]),
    ("bsub", ["-wa", "USR2", "true"], {}, ["-wa and -wt"]),
    ("bsub", ["-q", "bad queue!", "true"], {}, ["'bad queue!'"]),
    ("bsub", ["-w", "done(abc)", "true"], {}, ["done(abc)"]),
    ("bsub", ["-w", "done(424242)", "true"], {}, ["424242"]),
    ("bsub", ["-Z", "true"], {}, ["'-Z'"]),
    ("bsub", ["-J"], {}, ["-J needs a value"]),
    ("bsub", ["true"], {"SUMMIT_JOBS_LSF_FIRST_ID": "abc"}, ["SUMMIT_JOBS_LSF_FIRST_ID='abc'"]),
    ("bsub", ["true"], {"SUMMIT_JOBS_LSF_NODES": "nan"}, ["SUMMIT_JOBS_LSF_NODES='nan'"]),
    ("bsub", ["true"], {"SUMMIT_JOBS_LSF_NODES": "2.5"}, ["SUMMIT_JOBS_LSF_NODES='2.5'"]),
    ("bsub", ["-W", "5", "true"], {"SUMMIT_JOBS_LSF_MINUTE": "-3"}, ["SUMMIT_JOBS_LSF_MINUTE='-3'"]),
    ("bsub", ["true"], {"SUMMIT_JOBS_LSF_CORES": "inf"}, ["SUMMIT_JOBS_LSF_CORES='inf'"]),
    ("bjobs", ["-o", "jobid bogus"], {}, ["'bogus'"]),
    ("bjobs", ["-x"], {}, ["'-x'"]),
    ("bjobs", ["12abc"], {}, ["'12abc'"]),
    ("bkill", ["abc"], {}, ["'abc'"]),
    ("bkill", ["-s", "NOSIG", "1"], {}, ["'NOSIG'"]),
    ("bkill", ["-1"], {}, ["'-1'"]),
    ("jsrun", ["-n", "abc", "true"], {"LSB_MCPU_HOSTS": "batch1 1 vnode01 2"}, ["'abc'"]),
    ("jsrun", ["-g", "1", "true"], {"LSB_MCPU_HOSTS": "batch1 1 vnode01 2"}, ["-g 1"]),
    ("jsrun", ["--bogus", "1", "true"], {"LSB_MCPU_HOSTS": "batch1 1 vnode01 2"}, ["'--bogus'"]),
    ("jsrun", ["-n", "1", "true"], {"LSB_MCPU_HOSTS": "batch1 1 vnode01 2", "SUMMIT_JOBS_LSF_HOME": "/dev/null/lsf"},
     ["/dev/null/lsf", "Not a directory"]),
    ("bsub", ["true"], {"SUMMIT_JOBS_LSF_HOME": "/dev/null/lsf"}, ["/dev/null/lsf", "Not a directory"]),
    ("bjobs", ["-a"], {"SUMMIT_JOBS_LSF_HOME": "/dev/null/lsf"}, ["/dev/null/lsf", "Not a directory"]),
    ("bkill", ["7"], {"SUMMIT_JOBS_LSF_HOME": "/dev/null/lsf"}, ["/dev/null/lsf", "Not a directory"]),
]


@pytest.fixture
def env(cli_env, tmp_path) -> Dict[str, str]:
    """The CLI's environment with an isolated embedded LSF and run index, and no ~/.ssh of the developer."""
    lsf = lsf_environment(tmp_path)
    out = dict(cli_env)
    for key in ("SUMMIT_JOBS_LSF_HOME", "SUMMIT_JOBS_LSF_MINUTE", "SUMMIT_JOBS_LSF_KILL_GRACE", "XDG_DATA_HOME",
                "SUMMIT_JOBS_PYTHON", "PATH"):
        out[key] = lsf[key]
    out["HOME"] = str(tmp_path / "home")
    out.pop("SUMMIT_JOBS_HOST", None)
    return out


@pytest.mark.parametrize("args,needles", CLI_CASES, ids=[" ".join(a) for a, _ in CLI_CASES])
def test_lifecycle_command_refuses(env, tmp_path, args, needles):
    folder = tmp_path / "known_hosts.d"
    folder.mkdir()
    args = [str(folder) if a == "KH" else a for a in args]
    needles = [str(folder) if n == "KH" else n for n in needles]
    assert_refused(run_cli(args, env, cwd=tmp_path), needles)


@pytest.mark.parametrize("command", ["status", "logs", "cancel"])
@pytest.mark.parametrize("content,needles", RECORD_CASES, ids=[str(c)[:40] for c, _ in RECORD_CASES])
def test_damaged_run_record_is_named(env, tmp_path, command, content, needles):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = run_dir / "run.json"
    path.write_bytes(content if isinstance(content, bytes) else json.dumps({**GOOD, **content}).encode())
    if isinstance(content, dict) and content.get("job_ids", ...) is None:
        record = dict(GOOD)
        del record["job_ids"]                      # missing altogether
        path.write_text(json.dumps(record))
        needles = ["FILE", "'job_ids'"]
    needles = [str(path) if n == "FILE" else n for n in needles]
    assert_refused(run_cli([command, str(run_dir)], env, cwd=tmp_path), needles, prefix="summit-jobs: error:")


@pytest.mark.parametrize("module,args,extra,needles", LSF_CASES,
                         ids=[f"{m} {' '.join(a)} {' '.join(e)}" for m, a, e, _ in LSF_CASES])
def test_embedded_command_refuses(env, tmp_path, module, args, extra, needles):
    res = run_module(f"summit_jobs.schedulers.lsf.embedded.commands.{module}", args, dict(env, **extra), cwd=tmp_path, timeout=60)
    assert_refused(res, needles)
    assert "is submitted" not in res.stdout
    assert not os.path.exists(Path(env["SUMMIT_JOBS_LSF_HOME"]) / "jobs" / "1")
