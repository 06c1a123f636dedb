"""simulate's shape choice, its summary, and the scaling projection against the paper's Table 3."""
import json

import pytest

from helpers import run_cli
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


# -- the input pipeline in the projection ------------------------------------------------------------------
def _summit_rows(feed=None, counts=(1, 8, 64, 256)):
    profile = machines.load("summit")
    return simulate.project_scaling(profile, list(counts), single_node_seconds=simulate.PAPER_TABLE3[1],
                                    per_node_batch=48, epochs=100, train_clips=simulate.KINETICS_TRAIN_CLIPS,
                                    model_params=simulate.TSM_R50_PARAMS, feed=feed)


def test_summits_input_figures_keep_up_and_leave_table3_as_it_was():
    """Summit's profile: 36 cores x 118 clips/s decode a 48-clip step in 11 ms against its ~0.36 s of compute,
    and no epoch-start wait: the projection is the communication model's alone."""
    feed = simulate.input_model(machines.load("summit"))
    assert (feed.cores_per_node, feed.clips_per_second_per_core, feed.epoch_start_seconds) == (36, 118.0, 0.0)
    rows = _summit_rows()
    bare = _summit_rows(simulate.InputModel(0.0, 36, 0.0))
    assert [r["seconds"] for r in rows] == [r["seconds"] for r in bare]
    assert all(not r["input_bound"] and r["input_share"] == 0 for r in rows)
    assert rows[0]["input_seconds_per_iter"] == pytest.approx(48 / (36 * 118))
    assert rows[0]["seconds"] == pytest.approx(simulate.PAPER_TABLE3[1]) and rows[0]["efficiency"] == 1.0
    # 256 nodes: the paper's ~19 steps per epoch at 1,536 GPUs (the trainer runs whole steps: 240,000 // 12,288).
    assert rows[-1]["steps_per_epoch"] == 240000 // (48 * 256) == 19


def test_an_epoch_start_wait_weighs_where_epochs_are_short():
    """0.45 s per epoch (one pool pass per epoch on an H200), 100 epochs: the measured single-node time holds
    its own 45 s of starts, which are taken off before it is divided into iterations; every node count pays
    the same 45 s, a sliver on one node and several percent at 1,536 GPUs."""
    rows = {r["nodes"]: r for r in _summit_rows(simulate.InputModel(118.0, 36, 0.45))}
    bare = {r["nodes"]: r for r in _summit_rows(simulate.InputModel(118.0, 36, 0.0))}
    assert rows[1]["seconds"] == pytest.approx(bare[1]["seconds"]) == pytest.approx(simulate.PAPER_TABLE3[1])
    for n in (1, 8, 64, 256):
        assert rows[n]["seconds"] == pytest.approx(bare[n]["seconds"] + 45 - 45 / n)
        assert rows[n]["input_share"] == pytest.approx(45 / rows[n]["seconds"])
    assert rows[8]["input_share"] < 0.005 < 0.03 < rows[256]["input_share"] < 0.1
    assert rows[256]["efficiency"] < bare[256]["efficiency"]
    with pytest.raises(UserError, match="all of the single-node time"):
        _summit_rows(simulate.InputModel(118.0, 36, 2000.0))


def test_input_that_cannot_keep_up_sets_the_step():
    """1 clip/s per core: 36 cores need 1.33 s for a 48-clip step, longer than its compute: that is the step.
    The batch per node is the same at every count, so it is no scaling loss: efficiency is against the
    projection's own one-node time."""
    rows = _summit_rows(simulate.InputModel(1.0, 36, 0.0), counts=(1, 256))
    t_compute = simulate.PAPER_TABLE3[1] / (100 * 240000 / 48)
    for r in rows:
        iters = 100 * 240000 / r["batch"]
        assert r["input_bound"] and r["input_seconds_per_iter"] == pytest.approx(48 / 36)
        assert r["seconds"] == pytest.approx(iters * (48 / 36 + r["comm_seconds_per_iter"]))
        assert r["input_share"] == pytest.approx(iters * (48 / 36 - t_compute) / r["seconds"])
    assert rows[0]["efficiency"] == 1.0 and rows[1]["efficiency"] > 0.9


def test_where_the_ranks_take_every_core_decoding_adds_to_the_step():
    """A CPU machine (the embedded LSF's: 2 cores, 2 ranks): no core is left for the workers, so their
    decoding is not hidden behind the compute."""
    local = machines.load("local")
    feed = simulate.input_model(local, clips_per_second_per_core=100.0)
    assert (feed.cores_per_node, feed.overlapped) == (2, False)
    assert feed.step_seconds(0.5, 0.2) == pytest.approx(0.7)
    summit = simulate.input_model(machines.load("summit"))
    assert summit.overlapped and summit.step_seconds(0.5, 0.2) == 0.5


def test_scaling_prints_steps_per_epoch_and_the_input_line(cli_env, tmp_path):
    proc = run_cli(["--machine", "summit", "scaling", "--nodes-list", "1,256"], cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["nodes", "GPUs", "batch", "steps/ep", "time", "to", "train", "efficiency", "input"]
    assert lines[2].split()[:4] == ["256", "1,536", "12,288", "19"]
    assert lines[-1] == ("INPUT: the input pipeline's share of the time: 36 cores x 118 clips/s = 4,248 clips/s per "
                         "node against the 134 a step takes: they keep up; no wait at an epoch's start counted")
    slow = run_cli(["--machine", "summit", "scaling", "--nodes-list", "1,256", "--epoch-start-seconds", "0.45",
                    "--input-clips-per-core", "3", "--json"], cli_env, cwd=tmp_path)
    rows = json.loads(slow.stdout)
    assert rows[1]["input_bound"] and rows[1]["input_seconds_per_iter"] == pytest.approx(48 / (36 * 3))
    for bad in (["--epoch-start-seconds", "-1"], ["--input-clips-per-core", "nan"]):
        res = run_cli(["--machine", "summit", "scaling", *bad], cli_env, cwd=tmp_path)
        assert res.returncode == 2 and "Traceback" not in res.stderr and bad[0] in res.stderr, res.stderr


def test_simulate_says_whether_the_input_keeps_up(cli_env, tmp_path):
    proc = run_cli(["--machine", "summit", "simulate", "--virtual-nodes", "1024", "--quota-nodes", "384",
                    "--project", "ABC123", "--dry-run", "--json"], cli_env, cwd=tmp_path)
    sim = json.loads(proc.stdout)["simulate"]
    # 6 ranks x k=4 x 8 clips = 192 clips a step per node, 36 cores x 118 clips/s.
    assert sim["input_seconds_per_step"] == pytest.approx(192 / (36 * 118)) and sim["epoch_start_seconds"] == 0
    text = run_cli(["--machine", "summit", "simulate", "--virtual-nodes", "1024", "--quota-nodes", "384",
                    "--project", "ABC123", "--dry-run"], cli_env, cwd=tmp_path)
    assert "input: the node's data workers decode a step's clips in 0.045 s, within its 1.43 s of compute" \
        in text.stderr, text.stderr
