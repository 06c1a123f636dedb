"""Rendered scripts pinned as golden files; every rendered script must parse with `bash -n`.

Regenerate after an intended template change with:  UPDATE_GOLDEN=1 pytest tests/planning/test_render_golden.py
and review the diff.
"""
import os
import subprocess
from pathlib import Path

import pytest

from summit_jobs.profiles import machines
from summit_jobs.planning import render
from summit_jobs.planning.plan import JobOptions, make_plan

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

CASES = {
    "summit-256-gpu": ("summit", dict(nodes=256, project="ABC123")),
    "summit-256-node": ("summit", dict(nodes=256, project="ABC123", layout="node", walltime="0:20")),
    "summit-8-data-chain": ("summit", dict(nodes=8, project="ABC123", data="/gpfs/alpine/abc123/k400/manifest.json",
                                           chain=3, epochs=100, job_name="k400-r50")),
    "summit-1-debug": ("summit", dict(nodes=1, project="ABC123", queue="debug", walltime="0:30",
                                      # Hostile text byte for byte, as a user template's own program may take it.
                                      trainer_args=("--sampling", "uniform", "--note", "it's $HOME; `x`"),
                                      check_trainer_args=False)),
    "lassen-4": ("lassen", dict(nodes=4, project="mybank", walltime="4:00")),
    "summit-16-until-complete": ("summit", dict(nodes=16, project="ABC123", until_complete=True, max_links=12)),
    "lassen-2-until-complete": ("lassen", dict(nodes=2, project="mybank", until_complete=True)),
    "local-2": ("local", dict(nodes=2, python="/usr/bin/python3", epochs=2, walltime="0:10",
                              data="/home/u/shards/manifest.json")),
    # The generic LSF form (-n, span[ptile]) with each launcher of today's clusters.
    "local-2-slots-blaunch": ("local", dict(nodes=2, python="/usr/bin/python3", epochs=2, walltime="0:10",
                                            request="slots", launcher="blaunch", mem="4GB",
                                            data="/home/u/shards/manifest.json")),
    "local-2-slots-mpirun": ("local", dict(nodes=2, python="/usr/bin/python3", epochs=2, walltime="0:10",
                                           request="slots", launcher="mpirun", bsub_options=("-B", "-N"))),
    "local-2-slots-torchrun": ("local", dict(nodes=2, python="/usr/bin/python3", epochs=2, walltime="0:10",
                                             request="slots", launcher="torchrun", until_complete=True)),
    # The documented generic GPU cluster (envs/lsf-gpu.yaml) with each launcher.
    "lsf-gpu-4-torchrun": ("lsf-gpu", dict(nodes=4, walltime="6:00", mem="256GB",
                                           data="/gpfs/proj/k400/manifest.json", until_complete=True)),
    "lsf-gpu-4-blaunch": ("lsf-gpu", dict(nodes=4, walltime="6:00", launcher="blaunch", project="lab1")),
    "lsf-gpu-4-mpirun": ("lsf-gpu", dict(nodes=4, walltime="6:00", launcher="mpirun",
                                         bsub_options=("-U resv1", "-R select[mem>400000]"))),
    "local-1-user-command": ("local", dict(nodes=1, python="/usr/bin/python3", walltime="0:10", request="slots",
                                           launcher="blaunch",
                                           command=("python3", "train.py", "--note", "it's $HOME; `x`"))),
    # The AAVG paper's recipe as a preset: every value it sets written out as a trainer option.
    "local-2-preset-aavg": ("local", dict(nodes=2, python="/usr/bin/python3", epochs=2, walltime="0:10",
                                          preset="aavg-paper")),
    # Slurm (templates/slurm): the documented generic GPU cluster (envs/slurm-gpu.yaml) with each launcher, the
    # two sites, and the local test cluster.
    "slurm-gpu-4-srun": ("slurm-gpu", dict(nodes=4, walltime="6:00", mem="256GB", project="lab1",
                                           data="/scratch/proj/k400/manifest.json", until_complete=True)),
    "slurm-gpu-2-torchrun": ("slurm-gpu", dict(nodes=2, launcher="torchrun", qos="debug", walltime="0:20",
                                               bsub_options=("--reservation=resv1", "--gpu-bind=closest"))),
    "slurm-gpu-1-user-command": ("slurm-gpu", dict(nodes=1, walltime="1:00", queue="gpu",
                                                   command=("python3", "train.py", "--note", "it's $HOME; `x`"))),
    "perlmutter-8-until-complete": ("perlmutter", dict(nodes=8, walltime="12:00", until_complete=True,
                                                       max_links=6)),
    "frontier-8-data": ("frontier", dict(nodes=8, project="abc123",
                                         data="/lustre/orion/abc123/proj-shared/k400/manifest.json")),
    "local-slurm-2": ("local-slurm", dict(nodes=2, python="/usr/bin/python3", epochs=2, walltime="0:10")),
}


def _render(name):
    machine, kw = CASES[name]
    kw = dict(kw)
    kw.setdefault("run_dir", f"/runs/{name} (x)")
    plan = make_plan(machines.load(machine), JobOptions(**kw))
    return render.render(plan)


def golden_path(name: str) -> Path:
    """Where a case's script is pinned: ``.lsf`` for an LSF machine's, ``.sbatch`` for a Slurm machine's."""
    suffix = ".sbatch" if machines.load(CASES[name][0]).scheduler.kind == "slurm" else ".lsf"
    return GOLDEN / f"{name}{suffix}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    text = _render(name)
    path = golden_path(name)
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_bash_accepts_every_script(name, tmp_path):
    script = tmp_path / "job.lsf"
    script.write_text(_render(name))
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", sorted(CASES))
def test_exactly_one_alloc_flags_directive(name):
    lines = [l for l in _render(name).splitlines() if l.startswith("#BSUB -alloc_flags")]
    assert len(lines) <= 1
    if name.startswith("summit"):
        assert len(lines) == 1


def test_summit_256_script_content():
    text = _render("summit-256-gpu")
    assert "#BSUB -nnodes 256\n" in text
    assert "#BSUB -P ABC123\n" in text
    assert "#BSUB -W 12:00\n" in text
    assert "jsrun -n 1536 -r 6 -a 1 -g 1 -c 7 -b packed:7 " in text
    assert "--batch-per-gpu 8 " in text and "--lr 1.92 " in text
    # All directives come before the first command, or LSF ignores them.
    lines = text.splitlines()
    first_cmd = next(i for i, l in enumerate(lines) if l and not l.startswith("#"))
    assert all(i < first_cmd for i, l in enumerate(lines) if l.startswith("#BSUB"))


def test_staging_and_nvme_in_data_script():
    text = _render("summit-8-data-chain")
    assert '#BSUB -alloc_flags "smt4 nvme"' in text
    assert "jsrun -n 8 -r 1 -a 1 -c 42 -b packed:42 python3 -m trainer.stage" in text
    assert "--data '/mnt/bb/$USER/summit-jobs/data'" in text


def test_trainer_args_arrive_unchanged(tmp_path):
    """Extra trainer arguments are quoted: bash hands them to the trainer byte for byte."""
    text = _render("summit-1-debug")
    launch = next(l for l in text.splitlines() if l.startswith("run_step jsrun"))
    argv_part = launch.split(" -h \"$RUN_DIR\" ", 1)[1]
    out = subprocess.run(["bash", "-c", f"printf '%s\\n' {argv_part}"], capture_output=True, text=True).stdout
    assert out.splitlines()[-4:] == ["--sampling", "uniform", "--note", "it's $HOME; `x`"]


def test_user_template_dir_overrides_a_partial(tmp_path):
    (tmp_path / "lsf" / "partials").mkdir(parents=True)
    (tmp_path / "lsf" / "partials" / "environment.j2").write_text("# site environment\nsource /site/env.sh\n")
    machine, kw = CASES["lassen-4"]
    plan = make_plan(machines.load(machine), JobOptions(run_dir="/r", **kw))
    text = render.render(plan, str(tmp_path))
    assert "source /site/env.sh" in text and "HOROVOD_FUSION_THRESHOLD" not in text
    assert "#BSUB -G mybank" in text
