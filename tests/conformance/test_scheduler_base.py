"""The schedulers' shared parts: one submit (schedulers/base.py) under LSF's and Slurm's command lines and answers,
the header filters each scheduler gives its own templates, and the shared templates with a scheduler's folder
holding only what differs.

Why: the submit path is the one every run goes through, and its refusal is what a user reads; the filters are
the last check before a value reaches a #BSUB or #SBATCH line; and a shared partial that a scheduler copied back
would drift from the other's unseen.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from summit_jobs.errors import UserError
from summit_jobs.hosts.host import Result
from summit_jobs.planning import render
from summit_jobs.planning.plan import JobOptions, make_plan
from summit_jobs.profiles import machines
from summit_jobs.schedulers import SubmitRefused, Submitted
from summit_jobs.schedulers.base import CommandScheduler
from summit_jobs.schedulers.lsf import header as lsf_header
from summit_jobs.schedulers.lsf.scheduler import LsfScheduler
from summit_jobs.schedulers.slurm import header as slurm_header
from summit_jobs.schedulers.slurm.scheduler import SlurmScheduler

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


class Answers:
    """A host that answers each command (by its name) with a fixed Result and keeps what it was given."""
    label = "the test login node"

    def __init__(self, answers: Dict[str, Result]):
        self.answers = answers
        self.calls: List[Tuple[List[str], Optional[str], Optional[str]]] = []

    def run(self, argv, *, cwd=None, stdin=None, timeout=None) -> Result:
        self.calls.append((list(argv), cwd, stdin))
        return self.answers[argv[0]]


# -- one submit ----------------------------------------------------------------------------------------------

def test_both_schedulers_submit_through_the_base():
    assert issubclass(LsfScheduler, CommandScheduler) and issubclass(SlurmScheduler, CommandScheduler)
    assert "submit" not in vars(LsfScheduler) and "submit" not in vars(SlurmScheduler)


def test_lsf_gives_the_script_on_stdin_or_by_name_and_reads_id_and_queue_from_bsubs_answer():
    host = Answers({"bsub": Result(0, "Job <4711> is submitted to queue <batch>.\n", "")})
    got = LsfScheduler().submit(host, "job.lsf", cwd="/r", script="#BSUB -J x\n", submit_mode="stdin",
                                depends_on="12")
    assert got == Submitted("4711", "batch")
    assert host.calls == [(["bsub", "-w", "ended(12)"], "/r", "#BSUB -J x\n")]
    LsfScheduler().submit(host, "job.lsf", cwd="/r", script="#BSUB -J x\n", submit_mode="file")
    assert host.calls[-1] == (["bsub", "job.lsf"], "/r", None)


def test_slurm_gives_the_file_and_asks_squeue_for_the_partition():
    host = Answers({"sbatch": Result(0, "77\n", ""), "squeue": Result(0, "gpu\n", "")})
    got = SlurmScheduler().submit(host, "job.sbatch", cwd="/r", script="#SBATCH --partition=x\n",
                                  submit_mode="stdin", depends_on="5")
    assert got == Submitted("77", "gpu")
    assert host.calls[0] == (["sbatch", "--parsable", "--dependency=afterany:5", "job.sbatch"], "/r", None)
    quiet = Answers({"sbatch": Result(0, "78\n", ""), "squeue": Result(1, "", "squeue: error")})
    assert SlurmScheduler().submit(quiet, "job.sbatch", cwd="/r", script="#SBATCH --partition=x\n",
                                   submit_mode="file").queue == "x"


@pytest.mark.parametrize("scheduler,command", [(LsfScheduler(), "bsub"), (SlurmScheduler(), "sbatch")])
def test_a_refusal_names_the_command_the_host_and_the_schedulers_words(scheduler, command):
    host = Answers({command: Result(255, "", "Bad queue. Job not submitted.")})
    with pytest.raises(SubmitRefused) as err:
        scheduler.submit(host, scheduler.script_name, cwd="/r", script="", submit_mode="file")
    assert str(err.value) == (f"{command} on the test login node refused the job (exit 255):\n"
                              "Bad queue. Job not submitted.")


def test_an_unknown_submit_mode_is_a_programming_error():
    for scheduler in (LsfScheduler(), SlurmScheduler()):
        with pytest.raises(ValueError, match="submit mode"):
            scheduler.submit(Answers({}), "job", cwd="/r", script="", submit_mode="pipe")


def test_query_commands_that_fail_are_worded_once():
    down = Result(1, "", "slurm_load_jobs error: Unable to contact slurm controller")
    with pytest.raises(UserError, match=r"^sacct on the test login node failed \(exit 1\):\nslurm_load_jobs"):
        SlurmScheduler().accounted(Answers({"sacct": down}), ["3"])
    nothing = Result(255, "", "LSF is down. Please wait")
    with pytest.raises(UserError, match=r"^bjobs on the test login node failed \(exit 255\):\nLSF is down"):
        LsfScheduler().query(Answers({"bjobs": nothing}), ["3"])
    off = Result(1, "", "sacct: error: Slurm accounting storage is disabled")
    assert SlurmScheduler().accounted(Answers({"sacct": off}), ["3"]) == {}


# -- the header filters are the scheduler's ------------------------------------------------------------------

def test_each_scheduler_gives_its_own_filters_and_render_keeps_the_neutral_ones(tmp_path):
    assert set(LsfScheduler().template_filters()) == {"bsub_directive", "bsub_words"}
    assert set(SlurmScheduler().template_filters()) == {"sbatch_directive", "srun_option"}
    assert not any(hasattr(render, name) for name in ("bsub_words", "bsub_directive", "sbatch_directive",
                                                        "srun_option"))
    for scheduler in ("lsf", "slurm"):
        (tmp_path / scheduler).mkdir()
        (tmp_path / scheduler / "job.sh.j2").write_text(
            "#!/bin/bash\n{{ ('-n', '8') | bsub_directive }} {{ ('--gpu-bind', 'a|b') | srun_option }}\n")
    with pytest.raises(UserError, match="srun_option"):
        _script("lsf-gpu", str(tmp_path))
    with pytest.raises(UserError, match="bsub_directive"):
        _script("slurm-gpu", str(tmp_path))
    (tmp_path / "slurm" / "job.sh.j2").write_text("{{ ('--gpu-bind', 'a|b') | srun_option }}\n")
    assert _script("slurm-gpu", str(tmp_path)) == "'--gpu-bind=a|b'\n"


@pytest.mark.parametrize("pair,line", [(("-n", "8"), "-n 8"), (("-R", "span[ptile=4]"), '-R "span[ptile=4]"'),
                                       (("-B", ""), "-B")])
def test_bsub_directive(pair, line):
    assert lsf_header.bsub_directive(pair) == line


@pytest.mark.parametrize("pair", [("-R", 'a" ; id'), ("-R", "a\nb"), ("R", "x"), ("-J", "$(id)")])
def test_bsub_directive_refuses_what_could_leave_the_line(pair):
    with pytest.raises(UserError, match="#BSUB"):
        lsf_header.bsub_directive(pair)


def test_sbatch_directive_and_srun_option():
    assert slurm_header.sbatch_directive(("--nodes", "4")) == "--nodes=4"
    assert slurm_header.sbatch_directive(("--exclusive", "")) == "--exclusive"
    assert slurm_header.srun_option(("--constraint", "gpu&hbm80g")) == "'--constraint=gpu&hbm80g'"
    assert slurm_header.srun_option(("--gpu-bind", "closest")) == "--gpu-bind=closest"
    for bad in (("-N", "4"), ("--nodes", "4 5"), ("--x", "a\nb"), ("--x", "$(id)")):
        with pytest.raises(UserError, match="#SBATCH"):
            slurm_header.sbatch_directive(bad)


# -- shared templates ----------------------------------------------------------------------------------------

def test_a_schedulers_folder_holds_no_copy_of_the_other_schedulers_or_a_shared_file():
    texts: Dict[str, List[str]] = {}
    for path in sorted(TEMPLATES.rglob("*.j2")):
        texts.setdefault(path.read_text(), []).append(str(path.relative_to(TEMPLATES)))
    assert [names for names in texts.values() if len(names) > 1] == []
    for scheduler in ("lsf", "slurm"):
        own = {p.name for p in (TEMPLATES / scheduler / "partials").glob("*.j2")}
        assert own & {"environment.j2", "summary.j2", "epilogue.j2", "launch.j2", "link_events.j2"} == set()


def _script(machine: str, template_dir: Optional[str] = None, **kw) -> str:
    plan = make_plan(machines.load(machine), JobOptions(run_dir="/r", nodes=2, walltime="1:00", **kw))
    return render.render(plan, template_dir)


def test_a_shared_partial_overrides_for_every_scheduler_and_a_schedulers_own_path_for_it_alone(tmp_path):
    shared = tmp_path / "shared"
    (shared / "common" / "partials").mkdir(parents=True)
    epilogue = (TEMPLATES / "common" / "partials" / "epilogue.j2").read_text()
    (shared / "common" / "partials" / "epilogue.j2").write_text(epilogue + "# site epilogue\n")
    for machine in ("lsf-gpu", "slurm-gpu"):
        assert _script(machine, str(shared)).endswith('finish "$rc"\n# site epilogue\n')
    own = tmp_path / "own"
    (own / "slurm" / "partials").mkdir(parents=True)
    (own / "slurm" / "partials" / "environment.j2").write_text("source /site/slurm-env.sh\n")
    assert "source /site/slurm-env.sh" in _script("slurm-gpu", str(own))
    assert "source /site/slurm-env.sh" not in _script("lsf-gpu", str(own))


def test_the_scheduler_words_reach_the_shared_prologue_and_chain():
    lsf = _script("lsf-gpu", until_complete=True)
    slurm = _script("slurm-gpu", until_complete=True)
    assert 'JOB_ID="${LSB_JOBID:-unknown}"' in lsf and 'JOB_ID="${SLURM_JOB_ID:-unknown}"' in slurm
    assert 'bsub -w "ended($JOB_ID)"' in lsf and "sbatch --parsable --dependency=afterany:" in slurm
    assert "scancel" not in lsf and "bkill" not in slurm
    assert "{%" not in lsf + slurm and "{{" not in lsf + slurm
