"""The #SBATCH lines of the Slurm sites' scripts, each held to what the site (or Slurm) documents, with the source.

Why as tests: a profile is data typed from a site's guide, and one wrong letter (a partition where the site
selects nodes by constraint, --gpus-per-node where it binds one GPU per task) fails only on the machine, after
the queue wait. Every header line the shipped profiles produce must appear in the table below with the source
that says so; a new line fails here until someone cites where it comes from. The sources are those of the
profiles' ``reference`` (read 2026-11-24):

- [SBATCH] Slurm's sbatch(1), https://slurm.schedmd.com/sbatch.html (SchedMD/slurm tag slurm-26-05-3-1,
  doc/man/man1/sbatch.1): option names and forms; --time "hours:minutes:seconds"; --signal=[{R|B}:]sig[@secs]
  with B: signalling the batch shell only and secs up to 65535; --mem=0 all of a node's memory.
- [NERSC-LAUNCH] https://docs.nersc.gov/machinelearning/launchers: -C gpu, --ntasks-per-node=4,
  --gpus-per-node=4, --cpus-per-task=32, no partition.
- [NERSC-POL] https://docs.nersc.gov/jobs/policy/: with no -q a job runs in debug; [IRI-49]
  doe-iri/iri-facility-api-python#49 (2026-03-03): gpu_regular MaxWall 2-00:00:00.
- [OLCF-FUG] https://docs.olcf.ornl.gov/systems/frontier_user_guide.html (olcf/olcf-user-docs@f0571fe8):
  -A, -p batch, the batch bin of 1-91 nodes at 2 h, -C nvme, 56 allocatable cores of 8 GCDs, srun
  --gpus-per-task=1 --gpu-bind=closest.

One test hands every rendered Slurm script to the real sbatch (``--test-only``, on the local test cluster): an
option name sbatch does not know fails there whatever the cluster lacks. The last holds the Slurm script's
run-directory, exit-code file, signal and chain logic to the LSF script's, line for line, less the lines that
name a scheduler's own commands.
"""
from __future__ import annotations

import re
from typing import Dict, List, Tuple

import pytest

from summit_jobs.planning import render
from summit_jobs.planning.plan import JobOptions, describe, make_plan
from summit_jobs.profiles import machines
from lsf_jobs import cli, lsf_environment
from test_render_golden import CASES, _render

#: Each site's header for its case below: (the line, its source).
PERLMUTTER: List[Tuple[str, str]] = [
    ("--job-name=tsm", "[SBATCH] --job-name"),
    ("--nodes=8", "[SBATCH] --nodes"),
    ("--ntasks-per-node=4", "[NERSC-LAUNCH] one task per GPU"),
    ("--cpus-per-task=32", "[NERSC-LAUNCH] --cpus-per-task=32"),
    ("--gpus-per-node=4", "[NERSC-LAUNCH] --gpus-per-node=4"),
    ("--time=12:00:00", "[SBATCH] hours:minutes:seconds; [IRI-49] within gpu_regular's 2-00:00:00"),
    ("--output=tsm.%j.out", "[SBATCH] filename pattern %j"),
    ("--error=tsm.%j.err", "[SBATCH] filename pattern %j"),
    ("--signal=B:USR2@600", "[SBATCH] --signal=B:sig@secs, the batch shell only"),
    ("--no-requeue", "[SBATCH] --no-requeue: never requeued (Slurm's JobRequeue=1 would start it again)"),
    ("--qos=regular", "[NERSC-POL] without -q the job would run in debug"),
    ("--constraint=gpu", "[NERSC-LAUNCH] -C gpu"),
]
FRONTIER: List[Tuple[str, str]] = [
    ("--job-name=tsm", "[SBATCH] --job-name; [OLCF-FUG] -J"),
    ("--account=abc123", "[OLCF-FUG] -A <projid>, the project to charge"),
    ("--nodes=8", "[OLCF-FUG] -N"),
    ("--ntasks-per-node=8", "[OLCF-FUG] one rank per GCD, 8 GCDs per node"),
    ("--cpus-per-task=7", "[OLCF-FUG] 56 allocatable cores (-S 8) over 8 GCDs"),
    ("--time=2:00:00", "[OLCF-FUG] batch partition, bin 5 (1-91 nodes): 2 h"),
    ("--output=tsm.%j.out", "[SBATCH] filename pattern %j; [OLCF-FUG] -o %x-%j.out"),
    ("--error=tsm.%j.err", "[SBATCH] filename pattern %j"),
    ("--signal=B:USR2@600", "[OLCF-FUG] --signal=B:USR1@300 form; [SBATCH] B: the batch shell only"),
    ("--no-requeue", "[SBATCH] --no-requeue: never requeued (Slurm's JobRequeue=1 would start it again)"),
    ("--partition=batch", "[OLCF-FUG] -p batch, the default partition"),
    ("--constraint=nvme", "[OLCF-FUG] -C nvme for the node-local NVMe"),
]
SITES = {"perlmutter-8-until-complete": PERLMUTTER, "frontier-8-data": FRONTIER}
#: What each site's srun line must hold, and must not (the training step).
SRUN = {"perlmutter-8-until-complete": (["--ntasks-per-node=4", "--cpus-per-task=32"], ["--gpu-bind"]),
        "frontier-8-data": (["--ntasks-per-node=8", "--cpus-per-task=7", "--gpus-per-task=1",
                             "--gpu-bind=closest"], ["--gpus-per-node"])}


def header(script: str) -> List[str]:
    return [line[len("#SBATCH "):] for line in script.splitlines() if line.startswith("#SBATCH ")]


@pytest.mark.parametrize("name", sorted(SITES))
def test_every_header_line_of_a_site_is_documented(name):
    lines = header(_render(name))
    assert lines == [line for line, _source in SITES[name]], "\n".join(lines)
    assert all(source.startswith("[") for _line, source in SITES[name])


@pytest.mark.parametrize("name", sorted(SRUN))
def test_the_training_srun_line_is_the_sites(name):
    line = next(x for x in _render(name).splitlines() if x.startswith("run_step srun") and "-m trainer " in x)
    must, never = SRUN[name]
    words = line.split()
    assert all(w in words for w in must), line
    assert not any(w.startswith(tuple(never)) for w in words), line


def test_frontier_debug_qos_and_perlmutter_debug_are_held_to_their_documented_limits():
    """[OLCF-FUG] Frontier's debug QOS: 2 h, no chaining; [IRI-49] Perlmutter's gpu_debug: 30 minutes."""
    frontier, perlmutter = machines.load("frontier"), machines.load("perlmutter")
    plan = make_plan(frontier, JobOptions(nodes=2, run_dir="/lustre/r", project="abc123", qos="debug"))
    assert "--qos=debug" in header(render.render(plan)) and plan.walltime == "2:00"
    with pytest.raises(Exception, match="QOS 'debug' does not allow chained jobs"):
        make_plan(frontier, JobOptions(nodes=2, run_dir="/lustre/r", project="abc123", qos="debug", chain=2))
    plan = make_plan(perlmutter, JobOptions(nodes=2, run_dir="/pscratch/r", qos="debug"))
    assert "--time=0:30:00" in header(render.render(plan))
    # The summary a user reads before submitting names the QOS that set those limits: --qos, else the profile's
    # default QOS; a profile that lists none names none.
    assert plan.summary()["limits"] == ["QOS 'debug'"] and "queue gpu (QOS 'debug'), walltime 0:30" in describe(plan)
    plain = make_plan(perlmutter, JobOptions(nodes=2, run_dir="/pscratch/r"))
    assert plain.summary()["limits"] == ["QOS 'regular'"] and "queue gpu (QOS 'regular'), walltime" in describe(plain)
    local = make_plan(machines.load("local-slurm"), JobOptions(nodes=2, run_dir="/tmp/r"))
    assert "limits" not in local.summary() and "(QOS" not in describe(local)


def _slurm_cases() -> List[str]:
    return sorted(n for n, (machine, _) in CASES.items() if machines.load(machine).scheduler.kind == "slurm")


def test_the_real_sbatch_knows_every_option_of_every_rendered_script(slurm_cluster, tmp_path):
    """sbatch parses a script's #SBATCH options before it asks the controller anything: an option it does not
    know ends it with "unrecognized option"; what the test cluster lacks (accounts, partitions, GPUs) is a
    later, other error."""
    answers: Dict[str, str] = {}
    for name in _slurm_cases():
        script = tmp_path / f"{name}.sbatch"
        script.write_text(_render(name))
        out = slurm_cluster.run(["sbatch", "--test-only", str(script)], cwd=tmp_path, timeout=60)
        answers[name] = out.stderr.strip()
        assert not re.search(r"unrecognized option|invalid option|invalid argument|Invalid --", out.stderr), \
            (name, out.stderr)
    local = answers["local-slurm-2"]
    assert "to start at" in local and "error" not in local.lower(), local


# ---- the Slurm script keeps the LSF script's logic ----------------------------------------------------------

#: The shell functions both scripts define: the exit-code file, forwarding signals to a step, waiting for it,
#: the warning, and the chain's decisions. Lines naming a scheduler's own commands or words are left out.
FUNCTIONS = ("finish", "forward", "on_warning", "run_step", "newest_checkpoint", "chain_stopped", "next_link")
#: Functions each scheduler defines in its own words (their bodies differ by design), named in both scripts.
OWN_FUNCTIONS = ("scheduler_end",)
SCHEDULER_WORDS = re.compile(r"bsub|bkill|sbatch|Submitted batch job|scancel|LSB_|SLURM_|\bid=|run limit|time limit|afterany|ended\(")


def _function(script: str, name: str) -> List[str]:
    """The body of ``name() { ... }`` (one line or several), its comments and scheduler-worded lines left out."""
    one_line = re.search(rf"^{name}\(\) \{{(.*)\}}$", script, re.M)
    body = one_line.group(1) if one_line else re.search(rf"^{name}\(\) \{{\n(.*?)^\}}$", script, re.M | re.S).group(1)
    return [line for line in body.splitlines()
            if line.strip() and not line.strip().startswith("#") and not SCHEDULER_WORDS.search(line)]


def _block(script: str, first: str) -> str:
    """The lines from ``first`` up to its ``fi``."""
    start = script.index(first)
    return script[start:script.index("\nfi\n", start)]


def test_the_slurm_script_keeps_the_lsf_scripts_run_directory_exit_code_and_chain_logic():
    # Both stage data and chain; their manifests' paths differ.
    lsf = _render("lsf-gpu-4-torchrun").replace(CASES["lsf-gpu-4-torchrun"][1]["data"], "MANIFEST")
    slurm = _render("slurm-gpu-4-srun").replace(CASES["slurm-gpu-4-srun"][1]["data"], "MANIFEST")
    for name in FUNCTIONS:
        assert _function(slurm, name) == _function(lsf, name), name
    for first in ('if [ -e "$RUN_DIR"/COMPLETE ]; then', 'if [ "$rc" -ne 0 ]; then'):
        assert _block(slurm, first) == _block(lsf, first), first
    for line in ('WARNING_FILE="$RUN_DIR/".warning."$JOB_ID"', "trap on_warning USR2",
                 "trap 'CANCELLED=1; forward TERM' TERM", 'next_link "$rc" || { [ "$rc" -ne 0 ] || rc=1; }',
                 'finish "$rc"', 'CHAIN_FILE="$RUN_DIR"/chain.jobs'):
        assert line in lsf and line in slurm, line
    assert 'JOB_ID="${SLURM_JOB_ID:-unknown}"' in slurm and 'JOB_ID="${LSB_JOBID:-unknown}"' in lsf
    for name in OWN_FUNCTIONS:
        assert re.search(rf"^{name}\(\) \{{", lsf, re.M) and re.search(rf"^{name}\(\) \{{", slurm, re.M), name


def test_a_slurm_run_keeps_its_script_as_job_sbatch_and_a_folder_holding_one_holds_a_run(tmp_path):
    """Slurm's users name job scripts .sbatch (or .sh), never .lsf: the plan names the run directory's script
    job.sbatch, the chain's next link submits that file, and submit refuses a folder that holds one (as it
    refuses one that holds an LSF run's job.lsf) instead of writing a second run over it."""
    plan = make_plan(machines.load("perlmutter"), JobOptions(nodes=8, until_complete=True, run_dir="/runs/x"))
    text = render.render(plan)
    assert plan.script_name == "job.sbatch"
    assert '--dependency=afterany:"$JOB_ID" job.sbatch 2>&1' in text and "job.lsf" not in text
    assert make_plan(machines.load("summit"), JobOptions(nodes=2, run_dir="/runs/y", project="ABC123")).script_name == "job.lsf"
    for name in ("job.sbatch", "job.lsf"):
        run_dir = tmp_path / name.replace(".", "-")
        run_dir.mkdir()
        (run_dir / name).write_text("#!/bin/bash\n")
        res = cli(["--machine", "local-slurm", "submit", "--nodes", "2", "--run-dir", str(run_dir), "--command",
                   "true"], lsf_environment(tmp_path / "home"), timeout=60)
        assert res.returncode == 2 and "already holds a run" in res.stderr, (name, res.stderr)
        assert "Traceback" not in res.stderr and (run_dir / name).read_text() == "#!/bin/bash\n"
        assert sorted(p.name for p in run_dir.iterdir()) == [name]
