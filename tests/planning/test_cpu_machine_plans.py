"""The TSM path on machines whose nodes have no GPU or no node-local NVMe, through the real CLI (dry runs: the
plan is the point, and the Slurm test cluster is not needed to print it).

- stage-data on a machine without node-local NVMe (local-slurm) suggests the submit that submit accepts there
  (the ranks read the folder in place: ``-- --data DIR``), and simulate plans for that folder's data set.
- submit's expected links count what a link really trains: its minutes as the embedded LSF's minute lasts them,
  less the profile's start-up per link, for the network the job trains.
- The plan's counts read as counts ("1 node", "1 epoch", "1 link"), and the ranks of CPU-only nodes as CPU
  ranks, never GPUs.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from helpers import run_cli
from slurm_cluster import stretched

#: The tiny set: 8 classes x 4 videos, a quarter held out: 24 training clips, 8 validation clips.
TRAIN_CLIPS = 24


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    """A real synthetic set packed by the real CLI (8 classes x 4 videos of 8 frames, 24 train clips)."""
    root = tmp_path_factory.mktemp("cpu-plans")
    env = _env(root)
    for args in (["synth", str(root / "d"), "--videos-per-class", "4", "--frames", "8", "--size", "32", "--layout",
                  "rawframes", "--quiet"],
                 ["pack", str(root / "d" / "rawframes"), str(root / "shards"), "--short-side", "32", "--shard-size",
                  "64KB", "--quiet"]):
        r = run_cli(args, env, timeout=stretched(120))
        assert r.returncode == 0, r.stderr
    return root / "shards"


def _env(root: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUMMIT_JOBS_")}
    env.update(XDG_CONFIG_HOME=str(root / "xdg"), XDG_DATA_HOME=str(root / "data"),
               SUMMIT_JOBS_LSF_HOME=str(root / "lsf"), **extra)
    return env


def sj(args, env, cwd=None):
    return run_cli(args, env, cwd=cwd, timeout=stretched(60))


def test_stage_data_without_nvme_suggests_what_submit_takes(packed, tmp_path):
    env = _env(tmp_path)
    pfs = tmp_path / "pfs"
    r = sj(["--machine", "local-slurm", "stage-data", "-M", str(packed / "manifest.json"), "--nodes", "2",
            "--policy", "replicate", "--dest", str(pfs), "--quiet"], env)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr, r.stderr
    (line,) = [ln for ln in r.stdout.splitlines() if "submit" in ln]
    assert line.startswith(f"stage-data: no hop 2 on local-slurm (no node-local NVMe): the job's ranks read the "
                           f"shards from {pfs}: "), line
    suggested = shlex.split(line[line.index("summit-jobs "):])
    assert suggested == ["summit-jobs", "--machine", "local-slurm", "submit", "--nodes", "2", "--", "--data",
                         str(pfs)]
    # The suggestion, as given, is a job submit plans (a dry run: the options go before `--`).
    dash = suggested.index("--")
    plan = sj([*suggested[1:dash], "--run-dir", str(tmp_path / "run"), "--dry-run", *suggested[dash:]], env)
    assert plan.returncode == 0, plan.stderr
    assert f"--data {pfs}" in plan.stdout
    # --to-nvme has no hop 2 to run there: refused before anything is copied, with the same way out.
    nvme = sj(["--machine", "local-slurm", "stage-data", "-M", str(packed / "manifest.json"), "--nodes", "2",
               "--dest", str(tmp_path / "pfs2"), "--to-nvme"], env)
    assert nvme.returncode == 2 and "Traceback" not in nvme.stderr
    assert "local-slurm has no node-local NVMe" in nvme.stderr and "drop --to-nvme" in nvme.stderr
    assert f"submit --nodes 2 -- --data {tmp_path / 'pfs2'}" in nvme.stderr
    assert not (tmp_path / "pfs2").exists()


def test_stage_data_dry_run_names_no_hop_2_without_nvme_and_the_staged_submit_with_it(packed, tmp_path):
    env = _env(tmp_path)
    args = ["stage-data", "-M", str(packed / "manifest.json"), "--nodes", "1", "--dest", str(tmp_path / "pfs"),
            "--dry-run"]
    r = sj(["--machine", "local-slurm", *args], env)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^stage-data plan on local-slurm: \d+ shards, .*, 1 node$", r.stdout, re.M), r.stdout
    assert "hop 2: none, local-slurm has no node-local NVMe" in r.stdout and "<no nvme>" not in r.stdout
    assert f"then: summit-jobs --machine local-slurm submit --nodes 1 -- --data {tmp_path / 'pfs'}" in r.stdout
    staged = sj(["--machine", "local", *args], env)
    assert staged.returncode == 0, staged.stderr
    assert f"then: summit-jobs --machine local submit --nodes 1 --data {tmp_path / 'pfs' / 'manifest.json'} " \
           "--stage-policy partition" in staged.stdout
    assert f"{sys.executable} -m trainer.stage" in staged.stdout     # environment.python auto: this interpreter


def test_simulate_plans_for_the_folder_the_trainer_is_given(packed, tmp_path):
    env = _env(tmp_path)
    # 4 virtual nodes on 2 of local-slurm's (2 CPU ranks each), 1 clip per rank: global batch 8 -> 3 steps per
    # epoch of the 24 training clips; 7 epochs, 21 steps: one job, never Kinetics' 15,000 steps per epoch.
    r = sj(["--machine", "local-slurm", "simulate", "--virtual-nodes", "4", "--nodes", "2", "--clips-per-gpu", "1",
            "--epochs", "7", "--run-dir", str(tmp_path / "run"), "--dry-run", "--", "--data", str(packed)], env)
    assert r.returncode == 0, r.stderr
    assert (f"3 iterations per epoch ({TRAIN_CLIPS} clips, counted in {packed / 'manifest.json'}), 7 epochs"
            in r.stderr), r.stderr
    assert "fits one job" in r.stderr and "Kinetics" not in r.stderr and "--chain" not in r.stderr
    js = sj(["--machine", "local-slurm", "simulate", "--virtual-nodes", "4", "--nodes", "2", "--clips-per-gpu", "1",
             "--epochs", "7", "--run-dir", str(tmp_path / "run"), "--dry-run", "--json", "--", "--data",
             str(packed)], env)
    sim = json.loads(js.stdout)["simulate"]
    assert (sim["train_clips"], sim["iterations_per_epoch"], sim["jobs_needed"]) == (TRAIN_CLIPS, 3, 1)


#: The demo's chain link: 8 LSF minutes of walltime, the warning 2 before the limit; the demo's small TSM.
DEMO_LINK = ["--walltime", "0:08", "--warning-minutes", "2", "--until-complete", "--max-links", "60"]
DEMO_MODEL = ["--width", "0.25", "--num-segments", "8", "--frame-stride", "2", "--input-size", "48", "--workers",
              "0", "--num-classes", "0", "--no-flip", "--threads", "1"]


def test_expected_links_count_the_lsf_minute_and_each_links_start_up(packed, tmp_path):
    env = _env(tmp_path, SUMMIT_JOBS_LSF_MINUTE="6")
    r = sj(["--machine", "local", "submit", "--nodes", "2", "--clips-per-gpu", "2", "--engine", "ddp", "--arch",
            "resnet18", "--data", str(packed / "manifest.json"), "--epochs", "200", *DEMO_LINK, "--run-dir",
            str(tmp_path / "run"), "--dry-run", "--", *DEMO_MODEL], env)
    assert r.returncode == 0, r.stderr
    # 24 clips / (4 ranks x 2 clips) = 3 steps x 200 epochs = 600 steps of 2 clips at 20 clips/s per rank plus the
    # allreduce of 0.75 M parameters (4.8 ms): 62.9 s. A link's 6 minutes before its warning last 36 s here, less
    # the profile's 10 s of start-up: 26 s. 3 links (counted in 60-second minutes without the start-up: 1).
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("expected links:")]
    assert line.startswith(f"expected links: about 3 (1 min 03 s of training for {TRAIN_CLIPS} clips (counted in "
                           f"{packed / 'manifest.json'}) x 200 epochs at 20 clips/s per CPU rank"), line
    assert line.endswith("; 26.0 s of training per link: 6 minutes of 6 s before its warning less 10.0 s of "
                         "start-up)"), line


def test_cpu_nodes_plan_in_cpu_ranks_and_counts_read_as_counts(packed, tmp_path):
    env = _env(tmp_path)
    r = sj(["--machine", "local-slurm", "submit", "--nodes", "1", "--epochs", "1", "--clips-per-gpu", "1",
            "--walltime", "0:02", "--until-complete", "--max-links", "1", "--run-dir", str(tmp_path / "run"),
            "--dry-run", "--", "--data", str(packed)], env)
    assert r.returncode == 0, r.stderr
    assert "machine local-slurm: 1 node x 2 CPU ranks = 2 CPU ranks (one rank per CPU slot)" in r.stderr
    assert "chained until complete, at most 1 link\n" in r.stderr
    assert "global batch 2 clips (1 per CPU rank), LR " in r.stderr and ", 1 epoch with " in r.stderr
    assert "of training per link: 1 minute before its warning)" in r.stderr
    sim = sj(["--machine", "local", "simulate", "--virtual-nodes", "2", "--nodes", "1", "--epochs", "1",
              "--run-dir", str(tmp_path / "sim"), "--dry-run", "--", "--data", str(packed)], env)
    assert sim.returncode == 0, sim.stderr
    assert "simulate: 2 virtual nodes (4 CPU ranks) on 1 physical node (2 CPU ranks), k = 2 accumulation steps" \
        in sim.stderr
    assert "reproduces a 2-node run (4 virtual ranks) exactly" in sim.stderr and ", 1 epoch\n" in sim.stderr
    scaling = sj(["--machine", "local", "scaling", "--nodes-list", "1,2"], env)
    assert scaling.stdout.split()[:2] == ["nodes", "ranks"]
    for out in (r.stderr, sim.stderr, scaling.stdout):
        assert not re.search(r"\bGPUs?\b|\b1 (nodes|epochs|links|minutes)\b", out), out
    quota = sj(["--machine", "local", "simulate", "--virtual-nodes", "20", "--quota-nodes", "1", "--dry-run"], env)
    assert quota.returncode == 2
    assert "under your quota of 1 node: at most 1 node x 16 accumulation steps = 16 virtual nodes" in quota.stderr
