"""simulate's shape choice, its summary, and the scaling projection against the paper's Table 3."""
import json

import pytest

from conftest import run_cli
from summit_jobs.profiles import machines
from summit_jobs.planning import simulate
from summit_jobs.errors import UserError


def test_paper_1024_on_quota_384(cli_env, tmp_path):
    proc = run_cli(["--machine", "summit", "simulate", "--virtual-nodes", "1024", "--quota-nodes", "384",
                    "--project", "ABC123", "--dry-run"], cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "#BSUB -nnodes 256" in proc.stdout
    assert "jsrun -n 1536 -r 6 -a 1 -g 1 -c 7 -b packed:7" in proc.stdout
    assert "--accum-steps 4 " in proc.stdout and "--lr 7.68 " in proc.stdout
    assert "k = 4" in proc.stderr and "global batch 49,152" in proc.stderr and "LR 7.68" in proc.stderr
    assert "256 physical nodes" in proc.stderr and "1,024 virtual nodes" in proc.stderr


def test_json_summary(cli_env, tmp_path):
    proc = run_cli(["--machine", "summit", "simulate", "--virtual-nodes", "1024", "--quota-nodes", "384",
                    "--project", "ABC123", "--dry-run", "--json"], cli_env, cwd=tmp_path)
    sim = json.loads(proc.stdout)["simulate"]
    assert (sim["virtual_nodes"], sim["physical_nodes"], sim["accum_steps"]) == (1024, 256, 4)
    assert (sim["virtual_gpus"], sim["physical_gpus"]) == (6144, 1536)
    assert sim["global_batch"] == 49152 and sim["lr"] == pytest.approx(7.68)
    assert sim["iterations_per_epoch"] == 240000 // 49152
    assert sim["bin"] == 3 and sim["jobs_needed"] == 1
    assert sim["step_seconds"] == pytest.approx(sim["compute_seconds_per_step"] + sim["comm_seconds_per_step"])


def test_forced_nodes_must_divide(cli_env, tmp_path):
    proc = run_cli(["--machine", "summit", "simulate", "--virtual-nodes", "1024", "--nodes", "300",
                    "--quota-nodes", "384", "--project", "ABC123", "--dry-run"], cli_env, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cannot be run exactly on 300 nodes" in proc.stderr and "256" in proc.stderr


def test_uncoverable_count_explained_with_nearest(cli_env, tmp_path):
    proc = run_cli(["--machine", "summit", "simulate", "--virtual-nodes", "1009", "--quota-nodes", "384",
                    "--project", "ABC123", "--dry-run"], cli_env, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cannot be run exactly under your quota of 384" in proc.stderr
    assert "1,008" in proc.stderr and "1,010" in proc.stderr


def test_1000_runs_on_250_nodes():
    # 1,000 = 250 x 4 and 250 <= 384: exact, and the tool says which counts use more of the quota.
    shape = simulate.choose_shape(1000, 384)
    assert (shape.nodes, shape.accum_steps) == (250, 4)


@pytest.mark.parametrize("v,q,p,k", [(1024, 384, 256, 4), (512, 384, 256, 2), (4, 2, 2, 2), (4, 1, 1, 4),
                                     (384, 384, 384, 1), (6, 4, 3, 2)])
def test_choose_shape(v, q, p, k):
    s = simulate.choose_shape(v, q)
    assert (s.nodes, s.accum_steps) == (p, k) and s.nodes * s.accum_steps == v


def test_choose_shape_bad_input():
    with pytest.raises(UserError, match="at least 1"):
        simulate.choose_shape(0, 10)
    with pytest.raises(UserError, match="between 1 and your quota"):
        simulate.choose_shape(8, 4, forced_nodes=8)


def test_projection_within_15_percent_of_table3():
    """Calibrated only with the paper's inputs: one node's 49 h 55 min, 24.3M parameters, Summit's network."""
    profile = machines.load("summit")
    rows = simulate.project_scaling(profile, [8, 16, 32, 64, 128, 256], single_node_seconds=simulate.PAPER_TABLE3[1],
                                    per_node_batch=48, epochs=100, train_clips=simulate.KINETICS_TRAIN_CLIPS,
                                    model_params=simulate.TSM_R50_PARAMS)
    for r in rows:
        paper = simulate.PAPER_TABLE3[r["nodes"]]
        assert abs(r["seconds"] / paper - 1) <= 0.15, (r["nodes"], r["seconds"], paper)
    effs = [r["efficiency"] for r in rows]
    assert effs == sorted(effs, reverse=True) and effs[-1] < 1


def test_comm_model_formula():
    m = simulate.CommModel(bandwidth_gbps=10.0, latency_us=2.0, overlap=0.25, fusion_bytes=40_000_000)
    n, size = 12, 100_000_000
    expect = 0.75 * (3 * 2 * 11 * 2e-6 + 2 * 11 / 12 * size / 10e9)
    assert m.seconds(n, size) == pytest.approx(expect)
    assert m.seconds(1, size) == 0.0


def test_scaling_command_with_plot(cli_env, tmp_path):
    png = tmp_path / "scaling.png"
    proc = run_cli(["--machine", "summit", "scaling", "--compare-paper", "--png", str(png), "--json"], cli_env,
                   cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["nodes"] for r in rows if "paper_seconds" in r} == {1, 8, 16, 32, 64, 128, 256}
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_throughput_from_a_real_trainer_run(cli_env, tmp_path):
    """--throughput-from reads what the trainer actually writes (job-wide clips/s over its ranks)."""
    from trainer_utils import make_dataset, run_ranks, tiny_args
    data = make_dataset(tmp_path / "data", train=16, val=0, frames=4, size=32)
    run = tmp_path / "run"
    run_ranks(1, tiny_args(run, data, epochs=1, eval_every=0) + ["--no-test"], tmp_path / "logs", timeout=180)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rates = sorted(r["clips_per_s"] / r["ranks"] for r in records if r["kind"] == "train")
    assert rates
    proc = run_cli(["--machine", "summit", "simulate", "--virtual-nodes", "8", "--quota-nodes", "4", "--project", "A1",
                    "--throughput-from", str(run), "--dry-run", "--json"], cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    sim = json.loads(proc.stdout)["simulate"]
    assert sim["throughput_clips_per_s_per_gpu"] == pytest.approx(rates[len(rates) // 2])
    assert sim["node_hours"] == pytest.approx(sim["physical_nodes"] * sim["wall_seconds"] / 3600)
