"""simulate end to end: V = 4 virtual nodes on p = 2 and p = 1 physical nodes give the weights of a real
4-node run, through the CLI -> embedded LSF -> jsrun -> trainer (real rank processes, fp32, CPU).

The real 4-node run (8 ranks) is made once per session (``real_four_node_run``, tests/conftest.py):
tests/schedulers/slurm/test_slurm_jobs.py holds simulate on Slurm to the same run."""
import json

import pytest

from lsf_jobs import cli, lsf_environment, wait_state
from simulate_reference import COMMON, STEPS, TINY, params_after

from trainer.loop import checkpoint as ckpt


@pytest.mark.slow
def test_simulated_runs_match_real_four_node_run(tmp_path, real_four_node_run):
    env = lsf_environment(tmp_path, minute=60)
    trainer = ["--", "--data", str(real_four_node_run["data"]), *TINY]
    jobs = {}
    for label, args in {
        "simulate p=2": ["simulate", "--virtual-nodes", "4", "--quota-nodes", "2"],
        "simulate p=1": ["simulate", "--virtual-nodes", "4", "--quota-nodes", "2", "--nodes", "1"],
    }.items():
        run_dir = tmp_path / label.replace(" ", "-").replace("=", "")
        res = cli(["--machine", "local", *args, *COMMON, "--run-dir", str(run_dir), "--json", *trainer], env,
                  timeout=120)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        jobs[label] = (out["job_ids"][0], run_dir)
        assert "k = 4" in res.stderr if "p=1" in label else "k = 2" in res.stderr
    results = {"real 4 nodes": params_after(real_four_node_run["run"], STEPS)}
    for label, (job_id, run_dir) in jobs.items():
        state = wait_state(job_id, env, timeout=600)
        assert state["STAT"] == "DONE", (label, state, (run_dir / f"acc.{job_id}.err").read_text()[-3000:])
        # The run record notes both shapes: 4 virtual nodes, and the physical node count of this job.
        plan = json.loads((run_dir / "plan.json").read_text())
        assert plan["virtual_nodes"] == 4
        assert plan["nodes"] == {"simulate p=2": 2, "simulate p=1": 1}[label]
        results[label] = params_after(run_dir, STEPS)
    ref = results["real 4 nodes"]
    for label, params in results.items():
        worst = max((params[k] - ref[k]).abs().max().item() for k in ref)
        print(f"{label}: max abs weight difference to the real 4-node run {worst:.3g}")
        assert worst <= 1e-5, f"{label}: max abs difference {worst:g} to the real 4-node run"
    # The weights did move (non-zero momentum after 4 steps): agreement is not the trivial kind.
    opt = ckpt.load(ckpt.latest(real_four_node_run["run"]))["optimizer"]["state"]
    assert opt and max(v["momentum_buffer"].abs().max().item() for v in opt.values()) > 1e-6
