"""Bad input to the embedded LSF's dependency expressions, -ti and run-limit settings, as a user types them
to bsub. Each case must be refused with a non-zero exit, no traceback, the offending value named, LSF's
"Job not submitted." where bsub refuses a job, and no job id used up."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from badinput import assert_refused, run_module
from lsf_jobs import lsf_environment

#: (bsub arguments, extra environment, needles in stderr). @ID is replaced by the id of a job that exists.
CASES: List[Tuple[List[str], Dict[str, str], List[str]]] = [
    (["-w", "done(@ID"], {}, ["done(@ID", "Dependency condition syntax error", "expected ')'"]),
    (["-w", "done(@ID) &&"], {}, ["done(@ID) &&", "syntax error"]),
    (["-w", "&& done(@ID)"], {}, ["&& done(@ID)", "syntax error"]),
    (["-w", "done(@ID) done(@ID)"], {}, ["done(@ID) done(@ID)", "join conditions with && or ||"]),
    (["-w", "done(@ID) & ended(@ID)"], {}, ["done(@ID) & ended(@ID)", "'&'"]),
    (["-w", "done(@ID) | ended(@ID)"], {}, ["done(@ID) | ended(@ID)", "'|'"]),
    (["-w", "(done(@ID)"], {}, ["(done(@ID)", "expected ')'"]),
    (["-w", "done(@ID))"], {}, ["done(@ID))", "unexpected ')'"]),
    (["-w", "!"], {}, ["!: Dependency condition syntax error", "the end"]),
    (["-w", "()"], {}, ["()", "expected a condition"]),
    (["-w", "exit(@ID, !3)"], {}, ["exit(@ID, !3)", "exit code"]),
    (["-w", "exit(@ID, >)"], {}, ["exit(@ID, >)", "exit code"]),
    (["-w", "exit(@ID, => 3)"], {}, ["exit(@ID, => 3)", "'='"]),
    (["-w", "exit(@ID, -1)"], {}, ["exit(@ID, -1)", "'-'"]),
    (["-w", "numdone(@ID, 1)"], {}, ["numdone(@ID, 1)", "needs an operator"]),
    (["-w", "numdone(@ID)"], {}, ["numdone(@ID)", "expected ','"]),
    (["-w", "done(@ID, 1)"], {}, ["done(@ID, 1)", "expected ')'"]),
    (["-w", "finished(@ID)"], {}, ["finished(@ID)", "unknown condition 'finished'"]),
    (["-w", "done(myjob)"], {}, ["done(myjob)", "job names"]),
    (["-w", 'done("myjob")'], {}, ['done("myjob")', "job names"]),
    (["-w", "myjob"], {}, ["myjob", "job names"]),
    (["-w", "done(@ID[1])"], {}, ["done(@ID[1])", "array"]),
    (["-w", "post_done(@ID)"], {}, ["post_done(@ID)", "not supported"]),
    (["-w", 'external(@ID, "x")'], {}, ['external(@ID, "x")', "not supported"]),
    (["-w", "done(\u0661\u0662)"], {}, ["done(\u0661\u0662)"]),
    (["-w", "done(@ID)\nx"], {}, ["done(@ID)", "'\\n'"]),
    (["-w", "done(@ID) && ended(424242)"], {}, ["done(@ID) && ended(424242)", "No matching job found",
                                                 "<424242>"]),
    (["-w", "!exit(424242, 3)"], {}, ["424242", "No matching job found"]),
    (["-w", "(" * 101 + "@ID" + ")" * 101], {}, ["nested deeper than 100 levels"]),
    (["-w", "!" * 200 + "@ID"], {}, ["!!!!@ID", "nested deeper than 100 levels"]),
    (["-ti"], {}, ["-ti", "use it with -w"]),
    (["-W", "1"], {"SUMMIT_JOBS_LSF_RUNLIMIT_GRACE": "soon"}, ["SUMMIT_JOBS_LSF_RUNLIMIT_GRACE='soon'"]),
    (["-W", "1"], {"SUMMIT_JOBS_LSF_RUNLIMIT_GRACE": "-1"}, ["SUMMIT_JOBS_LSF_RUNLIMIT_GRACE='-1'"]),
    (["-W", "1"], {"SUMMIT_JOBS_LSF_RUNLIMIT_GRACE": "inf"}, ["SUMMIT_JOBS_LSF_RUNLIMIT_GRACE='inf'"]),
    (["true"], {"SUMMIT_JOBS_LSF_KILL_GRACE": "0"}, ["SUMMIT_JOBS_LSF_KILL_GRACE='0'"]),
    # The generic allocation form: -n and -R span[...] (4 virtual nodes of 2 cores by default).
    (["-n", "abc"], {}, ["-n 'abc'", "positive whole number"]),
    (["-n", "0"], {}, ["-n '0'"]),
    (["-n", "2,4"], {}, ["-n '2,4'"]),
    (["-n", "3", "-nnodes", "1"], {}, ["-n 3 with -nnodes 1", "could never start"]),
    (["-nnodes", "1", "-csm", "y"], {}, ["-nnodes", "-csm y"]),
    (["-R", "span[ptile=2]"], {}, ["span[ptile=2]", "give -n"]),
    (["-n", "2", "-R", "rusage[swp=100]"], {}, ["rusage[swp=100]", "only select[mem>X && ncpus>=N], span[ptile=N], span[hosts=1] and rusage[mem=X]"]),
    (["-n", "2", "-R", "select[swp>10] span[ptile=2]"], {}, ["swp: Unknown resource name"]),
    (["-n", "2", "-R", "span[ptile=0]"], {}, ["span[ptile=] '0'"]),
    (["-n", "2", "-R", "span[ptile=two]"], {}, ["span[ptile=] 'two'"]),
    (["-n", "2", "-R", "span[hosts=2]"], {}, ["span[hosts=2]", "hosts=1"]),
    (["-n", "2", "-R", "span[ptile=1:hosts=1]"], {}, ["not both"]),
    (["-n", "2", "-R", "span[ptile=2"], {}, ["span[ptile=2: Bad resource requirement syntax"]),
    (["-n", "2", "-R", "span[ptile=2]; rm -rf ~"], {}, ["Bad resource requirement syntax"]),
    (["-n", "2", "-R", "span[ptile=2]\nx"], {}, ["Bad resource requirement syntax"]),
    (["-n", "4", "-R", "span[ptile=3]"], {}, ["3 slots on one host", "2 cores", "could never start"]),
    (["-n", "3", "-R", "span[hosts=1]"], {}, ["3 slots on one host", "could never start"]),
    (["-n", "9"], {}, ["-n 9", "needs 5 hosts", "4 virtual nodes"]),
    # Counts in ASCII digits only, and a count no virtual cluster could hold refused by its arithmetic (the
    # huge ones, -n 600000000 and a 20-digit -n, in tests/schedulers/lsf/test_lsf_bad_bsub.py, in 1 GiB of address space).
    (["-n", "\u0663"], {}, ["-n '\u0663'", "positive whole number", "digits 0-9"]),
    (["-n", "1e20"], {}, ["-n '1e20'", "positive whole number"]),
    (["-nnodes", "99999999999999999999"], {}, ["-nnodes 99999999999999999999", "could never start"]),
    (["-n", "2", "-R", "span[ptile=\u0662]"], {}, ["span[ptile=] '\u0662'"]),
    (["-W", "\u0663"], {}, ["-W '\u0663'", "[hours:]minutes"]),
    (["-W", "9" * 30], {}, ["-W '" + "9" * 30 + "'", "longer than"]),
    # The -wa signal: a name, or a number from 1 to 31 (a number with no signal failed the job's supervisor
    # at the warning and lost the job; 0 sent nothing).
    (["-wa", "99", "-wt", "1", "-W", "5"], {}, ["-wa '99' is not a signal", "1 to 31"]),
    (["-wa", "0", "-wt", "1", "-W", "5"], {}, ["-wa '0' is not a signal"]),
    (["-wa", "32", "-wt", "1", "-W", "5"], {}, ["-wa '32' is not a signal"]),
    (["-wa", "RTMIN", "-wt", "1", "-W", "5"], {}, ["-wa 'RTMIN' is not a signal"]),
    (["-wa", "_IGN", "-wt", "1", "-W", "5"], {}, ["-wa '_IGN' is not a signal"]),
    (["-wa", "\u0662", "-wt", "1", "-W", "5"], {}, ["is not a signal"]),
    # Queue and job names as IBM's bsub refuses them.
    (["-q", ""], {}, ["-q ''", "No such queue", "empty"]),
    (["-J", ""], {}, ["-J ''", "Bad job name"]),
    (["-J", "a[b][1]"], {}, ["a[b][1]", "Bad job name"]),
    (["-J", "a]"], {}, ["-J 'a]'", "Bad job name"]),
    (["-J", "a[\u0661-\u0662]"], {}, ["Bad job name", "not an index range"]),
    # -gpu (IBM LSF 10.1 syntax); the virtual nodes have SUMMIT_JOBS_LSF_GPUS GPUs (default 0).
    (["-gpu", "num=1"], {}, ['-gpu "num=1"', "asks 1 GPUs per host", "has 0 (SUMMIT_JOBS_LSF_GPUS)",
                             "could never start"]),
    (["-gpu", "-"], {}, ['-gpu "-"', "could never start"]),
    (["-gpu", "num=3"], {"SUMMIT_JOBS_LSF_GPUS": "2"}, ['-gpu "num=3"', "has 2", "could never start",
                                                         "Job not submitted."]),
    (["-gpu", "num=0"], {"SUMMIT_JOBS_LSF_GPUS": "2"}, ["num='0'", "from 1 to 64"]),
    (["-gpu", "num=two"], {"SUMMIT_JOBS_LSF_GPUS": "2"}, ["num='two'"]),
    (["-gpu", "num=1/task"], {"SUMMIT_JOBS_LSF_GPUS": "2"}, ["num='1/task'"]),
    (["-gpu", "mode=exclusive"], {"SUMMIT_JOBS_LSF_GPUS": "2"}, ["mode='exclusive'", "shared|exclusive_process"]),
    (["-gpu", "mps=maybe"], {"SUMMIT_JOBS_LSF_GPUS": "2"}, ["mps='maybe'", "yes|no"]),
    (["-gpu", "j_exclusive=y"], {"SUMMIT_JOBS_LSF_GPUS": "2"}, ["j_exclusive='y'", "yes|no"]),
    (["-gpu", "gmem=lots"], {"SUMMIT_JOBS_LSF_GPUS": "2"}, ["gmem 'lots'", "positive whole number"]),
    (["-gpu", "gmodel=V100;rm"], {"SUMMIT_JOBS_LSF_GPUS": "2"}, ["gmodel='V100;rm'"]),
    (["-gpu", "num=1:gpus=2"], {"SUMMIT_JOBS_LSF_GPUS": "2"}, ["unknown keyword 'gpus'", "num, mode"]),
    (["-gpu", "num=1:num=2"], {"SUMMIT_JOBS_LSF_GPUS": "2"}, ['"num=1:num=2"', "num needs one value"]),
    (["-gpu", "mode"], {"SUMMIT_JOBS_LSF_GPUS": "2"}, ['-gpu "mode"', "mode needs one value"]),
    (["-gpu", "num=1"], {"SUMMIT_JOBS_LSF_GPUS": "many"}, ["SUMMIT_JOBS_LSF_GPUS='many'", "from 0 to 64"]),
    (["-n", "2", "-R", "rusage[ngpus_excl_p=1]"], {}, ["rusage[ngpus_excl_p=...]", "legacy GPU request",
                                                       '-gpu "num=N"']),
    # -M (KB unless a unit is given) and -R rusage[mem=] (MB unless a unit is given).
    (["-M", "abc"], {}, ["-M 'abc'", "positive whole number", "KB without one"]),
    (["-M", "0"], {}, ["-M '0'"]),
    (["-M", "-5"], {}, ["-M '-5'"]),
    (["-M", "4PB"], {}, ["-M '4PB'", "KB, MB, GB, TB"]),
    (["-M", "1.5GB"], {}, ["-M '1.5GB'"]),
    (["-R", "rusage[mem=abc]"], {}, ["rusage[mem=]", "'abc'", "MB without one"]),
    (["-R", "rusage[mem=100:mem=200]"], {}, ["rusage[mem=200]", "not honoured"]),
    (["-R", "rusage[]"], {}, ["rusage[]", "names no resource"]),
    (["-R", "select[mem>64000 || ncpus>1] rusage[mem=64000]"], {}, ["select[mem>64000 || ncpus>1]", "joined by &&"]),
    (["-R", "rusage[mem=100] span[ptile=1]"], {}, ["span[...] places the slots of -n", "give -n"]),
    # -app: the profiles named in SUMMIT_JOBS_LSF_APPS.
    (["-app", "parallel-96"], {}, ["-app parallel-96", "Application profile does not exist", "none are configured"]),
    (["-app", "gpu"], {"SUMMIT_JOBS_LSF_APPS": "parallel-96,parallel-48"},
     ["-app gpu", "Application profile does not exist", "parallel-96, parallel-48", "Job not submitted."]),
]


@dataclass
class Home:
    """The embedded LSF every case submits to, and the ids of the jobs it accepted, in order."""
    env: Dict[str, str]
    accepted: List[int]


@pytest.fixture(scope="module")
def lsf(tmp_path_factory) -> Home:
    """One isolated embedded LSF for every case (ids from 700, numbered by this home alone), holding one
    finished job, 700; no user config leaks in (as conftest's cli_env). One home for all the cases, not one
    each: every home cost a job of its own, and a refused bsub changes nothing in it (checked per case)."""
    tmp = tmp_path_factory.mktemp("bad-lsf")
    env = {k: v for k, v in os.environ.items() if k not in (
        "SUMMIT_JOBS_MACHINE", "SUMMIT_JOBS_PROJECT", "SUMMIT_JOBS_CONFIG", "SUMMIT_JOBS_MACHINES_PATH")}
    env["XDG_CONFIG_HOME"] = str(tmp / "xdg")
    env.update({k: v for k, v in lsf_environment(tmp).items()
                if k.startswith("SUMMIT_JOBS_") or k in ("PATH", "XDG_DATA_HOME")})
    env["SUMMIT_JOBS_LSF_FIRST_ID"] = "700"
    res = run_module("summit_jobs.schedulers.lsf.embedded.commands.bsub", ["/bin/true"], env, cwd=tmp)
    assert res.returncode == 0 and "Job <700>" in res.stdout, res.stderr
    return Home(env, [700])


@pytest.mark.parametrize("args,extra,needles", CASES, ids=[" ".join(a) + " " + " ".join(e) for a, e, _ in CASES])
def test_bsub_refuses(lsf, tmp_path, args, extra, needles):
    """The refusal (one clean paragraph naming the value), no job folder left behind, and no id used up:
    the next accepted job gets the id after the last one accepted."""
    env, job = lsf.env, "700"
    args = [a.replace("@ID", job) for a in args]
    if args[-1] != "true":
        args.append("/bin/true")
    res = run_module("summit_jobs.schedulers.lsf.embedded.commands.bsub", args, dict(env, **extra), cwd=tmp_path)
    assert_refused(res, [n.replace("@ID", job) for n in needles])
    assert "is submitted" not in res.stdout
    if not extra:
        assert "Job not submitted." in res.stderr
    jobs = Path(env["SUMMIT_JOBS_LSF_HOME"]) / "jobs"
    assert sorted(int(p.name) for p in jobs.iterdir()) == lsf.accepted      # no job folder left behind
    ok = run_module("summit_jobs.schedulers.lsf.embedded.commands.bsub", ["/bin/true"], env, cwd=tmp_path)
    expected = lsf.accepted[-1] + 1
    assert f"Job <{expected}>" in ok.stdout, ok.stderr                      # no id used up
    lsf.accepted.append(expected)
