"""The seed papers' other methods inside the trainer, with real data, real processes and both engines:
multigrid (shapes per iteration from the loader, LR multipliers, sub-batch BN), LARS and Adam,
AAVG averaging rounds, compressed allreduce, and the run record of what took effect."""
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from trainer_utils import REPO, run_ranks, tiny_args

from trainer.loop import checkpoint as ckpt
from trainer.methods.aavg import merge_bn_stats
from trainer.data.clips import ClipSpec
from trainer.data.datasets import TrainClips, shape_loader
from trainer.dist.engines import horovod_available
from trainer.loop.metrics import read_metrics
from trainer.methods.mgsteps import MultigridSteps
from trainer.methods.optim import build_optimizer
from trainer.models.subbn import SubBatchNorm2d, convert_to_sub_bn, group_clips
from trainer.loop.train import lr_at

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch computes here too

WORKER = str(REPO / "tests" / "methods_worker.py")
ENGINES = ["ddp"] + (["horovod"] if horovod_available() else [])


# -- sub-batch BatchNorm -----------------------------------------------------------------------
def test_sub_batch_bn_normalises_each_group_of_clips_on_its_own():
    torch.manual_seed(0)
    frames, clips, c = 2, 24, 5
    x = torch.randn(clips * frames, c, 4, 4) * 3 + torch.arange(clips * frames).view(-1, 1, 1, 1) * 0.1
    sub = SubBatchNorm2d(c, bn_clips=8, frames=frames, momentum=0.1)
    with torch.no_grad():
        sub.weight.uniform_(0.5, 1.5)
        sub.bias.uniform_(-1, 1)
    out = sub(x)
    # Reference: three stock BatchNorm2d, one per group of 8 clips (16 consecutive frames).
    groups = x.split(8 * frames)
    means, vars_ = [], []
    for i, g in enumerate(groups):
        ref = nn.BatchNorm2d(c, momentum=0.1)
        ref.load_state_dict({k: v for k, v in sub.state_dict().items() if k != "num_batches_tracked"},
                            strict=False)
        ref.running_mean.zero_()
        ref.running_var.fill_(1)
        assert torch.allclose(out[i * 16:(i + 1) * 16], ref(g), atol=1e-5)
        means.append(g.mean(dim=(0, 2, 3)))
        vars_.append(g.var(dim=(0, 2, 3), unbiased=True))
    # Running statistics: the groups' statistics merged (mean of means; pooled variance).
    mean, var = merge_bn_stats(torch.stack(means), torch.stack(vars_))
    assert torch.allclose(sub.running_mean, 0.1 * mean, atol=1e-5)
    assert torch.allclose(sub.running_var, 0.9 + 0.1 * var, atol=1e-5)
    # Gradients flow to the shared affine parameters.
    out.square().sum().backward()
    assert sub.weight.grad is not None and sub.weight.grad.abs().sum() > 0
    # Evaluation is plain BatchNorm on the running statistics.
    sub.eval()
    ref = nn.BatchNorm2d(c).eval()
    ref.load_state_dict(sub.state_dict())
    assert torch.allclose(sub(x), ref(x), atol=1e-6)


def test_group_size_stays_fixed_whatever_the_batch():
    # Multigrid batches of a base batch of 8: x1, x2, x4, x8, (short cycle) x16, x32.
    assert [group_clips(8 * m, 8) for m in (1, 2, 4, 8, 16, 32)] == [8] * 6
    assert group_clips(3, 8) == 3 and group_clips(12, 8) == 6  # a batch below or not divisible by 8
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Sequential(nn.BatchNorm2d(4)))
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    convert_to_sub_bn(model, 8, 4)
    assert [type(m).__name__ for m in model.modules()].count("SubBatchNorm2d") == 2
    assert all(torch.equal(sd[k], v) for k, v in model.state_dict().items())  # same tensors and keys


# -- multigrid in the loader and the loop --------------------------------------------------------
def test_the_loader_produces_the_scheduled_shapes_with_one_set_of_workers(data):
    mg = MultigridSteps(epochs=10, frames=4, size=32, base_batch=1, clips_per_epoch=24, short_cycle=True)
    # Short cycle: 1/2, 1/sqrt2, 1 of the current long-cycle crop (here 23), batch x4, x2, x1 of its 8.
    assert [(s.frames, s.size, s.batch) for s in mg.steps[:3]] == [(1, 11, 32), (1, 16, 16), (1, 23, 8)]
    ds = TrainClips(str(data), ClipSpec(num_segments=4, stride=2, size=32), seed=0)
    for epoch, workers in ((3, 0), (8, 1)):
        first, last = mg.epoch_range(epoch)
        steps = [(s.frames, s.size, s.batch) for s in mg.steps[first:last]]
        assert len(set(steps)) >= (2 if epoch == 3 else 5)  # several shapes from one loader (one worker)
        loader = shape_loader(ds, 0, 1, 1, 0, epoch, steps, 0, workers=workers, pin=False)
        got = [tuple(x.shape) for x, _ in loader]
        assert got == [(b, f, s, s, 3) for f, s, b in steps]
    # Resuming mid-epoch continues the very same samples (epoch 4: its batches run past one permutation).
    first, last = mg.epoch_range(4)
    steps = [(s.frames, s.size, s.batch) for s in mg.steps[first:last]]
    full = [y.tolist() for _, y in shape_loader(ds, 0, 1, 1, 0, 4, steps, 0, 0, False)]
    tail = [y.tolist() for _, y in shape_loader(ds, 0, 1, 1, 0, 4, steps, 2, 0, False)]
    assert tail == full[2:] and sum(map(len, full)) > 24


def test_multigrid_run_follows_the_schedule_and_trains(data, tmp_path):
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=5, schedule="multigrid", short_cycle=True, batch_per_gpu=1,
                     bn_clips=2, lr=0.05, warmup_epochs=1, test_last=1) + ["--no-test"]
    run_ranks(2, args, tmp_path / "logs", timeout=240)
    assert (run / "COMPLETE").exists()
    cfg = json.loads((run / "run_config.json").read_text())
    assert cfg["schedule"] == "multigrid" and cfg["short_cycle"] and cfg["bn_clips"] == 2
    # The steps the ranks executed, as the schedule says (2 ranks: 12 clips per rank per epoch).
    mg = MultigridSteps(epochs=5, frames=4, size=32, base_batch=1, clips_per_epoch=12, short_cycle=True)
    assert cfg["multigrid_iterations"] == mg.total_steps < cfg["standard_iterations"] == 60
    train = {r["step"]: r for r in read_metrics(run) if r["kind"] == "train"}
    assert sorted(train) == list(range(1, mg.total_steps + 1))
    steps_per_epoch, warmup = 12, 12
    for s, st in enumerate(mg.steps):
        r = train[s + 1]
        assert (r["frames"], r["size"], r["batch"], r["global_batch"]) == (st.frames, st.size, st.batch, 2 * st.batch)
        # LR: the standard curve over clips seen, times the long-cycle multiplier.
        assert r["lr"] == pytest.approx(lr_at(mg.base_step(s), 0.05, warmup, 5 * steps_per_epoch) * st.lr_mult)
    assert {r["lr_mult"] for r in train.values()} == {8.0, 4.0, 2.0, 1.0}
    assert all(math.isfinite(r["loss"]) for r in train.values())
    evals = [r for r in read_metrics(run) if r["kind"] == "eval"]
    assert [r["epoch"] for r in evals] == [0, 1, 2, 3, 4]


# -- optimisers ----------------------------------------------------------------------------------
def test_lars_groups_and_one_update_by_the_formula():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4))
    opt = build_optimizer("lars", model, lr=0.5, momentum=0.9, weight_decay=1e-2, trust_coefficient=0.001)
    decay, rest = opt.param_groups
    assert decay["lars"] and decay["weight_decay"] == 1e-2 and [p.shape for p in decay["params"]] == [(4, 5)]
    assert not rest["lars"] and rest["weight_decay"] == 0.0 and len(rest["params"]) == 3  # bias, BN w, BN b
    w0 = model[0].weight.detach().clone()
    b0 = model[1].bias.detach().clone()
    model(torch.randn(6, 5)).pow(2).sum().backward()
    g, gb = model[0].weight.grad.clone(), model[1].bias.grad.clone()
    opt.step()
    rate = 0.001 * w0.norm() / (g.norm() + 1e-2 * w0.norm())
    assert torch.allclose(model[0].weight, w0 - 0.5 * rate * (g + 1e-2 * w0), atol=1e-7)
    assert torch.allclose(model[1].bias, b0 - 0.5 * gb, atol=1e-7)  # excluded: plain SGD, no decay


@pytest.mark.parametrize("name", ["lars", "adam"])
def test_optimizer_option_trains_a_step(data, tmp_path, name):
    run = tmp_path / "run"
    args = tiny_args(run, data, optimizer=name, max_steps=2, eval_every=0, lr=0.01) + ["--no-test"]
    run_ranks(1, args, tmp_path / "logs", timeout=120)
    state = torch.load(ckpt.latest(run), weights_only=False)
    kinds = {k for s in state["optimizer"]["state"].values() for k in s}
    assert kinds == ({"momentum_buffer"} if name == "lars" else {"step", "exp_avg", "exp_avg_sq"})
    assert json.loads((run / "run_config.json").read_text())["optimizer"] == name


# -- AAVG over both engines ----------------------------------------------------------------------
#: The compressions each engine's worker run checks (Horovod's compression is fp16 only).
COMPRESSIONS = {"ddp": ("fp16", "bf16"), "horovod": ("fp16",)}


@pytest.fixture(scope="module")
def worker_run(tmp_path_factory):
    """``worker_run(engine)``: the folder of one 2-rank methods_worker run ("all": the AAVG round, then the
    fp32 and each compressed allreduce), started once per engine for the AAVG and the compression tests."""
    done = {}

    def get(engine: str) -> Path:
        if engine not in done:
            out = tmp_path_factory.mktemp(f"worker-{engine}")
            run_ranks(2, ["all", engine, str(out), ",".join(COMPRESSIONS[engine])], out / "logs", timeout=120,
                      module=(WORKER,))
            done[engine] = out
        return done[engine]
    return get


@pytest.mark.parametrize("engine", ENGINES)
def test_aavg_round_leaves_identical_learners_holding_the_averages(engine, worker_run):
    out = worker_run(engine)
    a, b = (torch.load(out / f"aavg{r}.pt") for r in (0, 1))
    for key in ("params", "exp_avg", "exp_avg_sq"):
        for x, y, px, py in zip(a["post"][key], b["post"][key], a["pre"][key], b["pre"][key]):
            assert not torch.equal(px, py)  # the learners had diverged
            assert torch.equal(x, y)
            assert torch.allclose(x, (px + py) / 2, atol=1e-7, rtol=1e-6)
    mean, var = merge_bn_stats(torch.stack([a["pre"]["bn_mean"], b["pre"]["bn_mean"]]),
                               torch.stack([a["pre"]["bn_var"], b["pre"]["bn_var"]]))
    assert torch.allclose(a["post"]["bn_mean"], mean, atol=1e-6)
    assert torch.allclose(a["post"]["bn_var"], var, atol=1e-5)
    assert torch.equal(a["post"]["bn_var"], b["post"]["bn_var"])


@pytest.mark.parametrize("engine", ENGINES)
def test_aavg_run_with_the_batch_rule(data, tmp_path, engine):
    run = tmp_path / "run"
    args = tiny_args(run, data, engine=engine, epochs=3, optimizer="adam", optimizer_sync="aavg",
                     avg_interval=2, aavg_eval_every=2, aavg_b2=2, aavg_max_batch=8, lr=0.01,
                     eval_every=0) + ["--no-test"]
    run_ranks(2, args, tmp_path / "logs", timeout=240)
    recs = read_metrics(run)
    checks = [r for r in recs if r["kind"] == "eval" and "aavg_batch" in r]
    assert checks and [r["step"] for r in checks] == list(range(2, 2 * len(checks) + 1, 2))
    # The rule, replayed on the accuracies the run measured.
    best, batch = float("-inf"), 2
    for r in checks:
        if r["top1"] < best:
            batch = min(8, batch * 2)
        best = max(best, r["top1"])
        assert r["aavg_batch"] == batch
    # A grown batch takes effect at the next epoch start; an epoch has 24 / (2 learners x batch) steps.
    train = [r for r in recs if r["kind"] == "train"]
    rounds = 0
    for epoch in range(3):
        earlier = [c["aavg_batch"] for c in checks if c["epoch"] < epoch]
        expect = earlier[-1] if earlier else 2
        steps = [r for r in train if r["epoch"] == epoch]
        assert {r["batch"] for r in steps} == {expect} and len(steps) == 24 // (2 * expect)
        rounds += -(-len(steps) // 2)  # every K=2 local steps, and at the epoch end
        assert steps[-1]["avg_rounds"] == rounds
    cfg = json.loads((run / "run_config.json").read_text())
    assert cfg["optimizer_sync"] == "aavg" and cfg["avg_interval"] == 2 and cfg["engine"] == engine


# -- compressed allreduce ------------------------------------------------------------------------
@pytest.mark.parametrize("engine,comp", [(e, c) for e in ENGINES for c in COMPRESSIONS[e]])
def test_compressed_allreduce_matches_fp32_within_its_precision(engine, comp, worker_run):
    out = worker_run(engine)
    r0, r1 = (torch.load(out / f"comp{r}-{comp}.pt") for r in (0, 1))
    eps = {"fp16": 2 ** -10, "bf16": 2 ** -7}[comp]
    differs = False
    for full, packed, other in zip(r0["none"], r0[comp], r1[comp]):
        assert torch.equal(packed, other)  # every rank got the same reduced gradient
        scale = full.abs().max().item()
        assert torch.allclose(packed, full, rtol=2 * eps, atol=2 * eps * scale)
        differs |= not torch.equal(packed, full)
    assert differs, "the compressed path gave bit-identical fp32 results: no compression happened"


def test_run_record_shows_the_fusion_buffer_and_methods(data, tmp_path):
    run = tmp_path / "run"
    engine = ENGINES[-1]
    args = tiny_args(run, data, engine=engine, max_steps=1, eval_every=0, compression="fp16") + ["--no-test"]
    run_ranks(1, args, tmp_path / "logs", timeout=120, extra_env={"HOROVOD_FUSION_THRESHOLD": "8388608"})
    cfg = json.loads((run / "run_config.json").read_text())
    assert cfg["compression"] == cfg["compression_effective"] == "fp16"
    assert (cfg["schedule"], cfg["optimizer"], cfg["optimizer_sync"]) == ("standard", "sgd", "sync")
    if engine == "horovod":
        assert cfg["fusion_threshold_bytes"] == 8388608 and cfg["fusion_threshold_source"] == "HOROVOD_FUSION_THRESHOLD"
    else:
        assert cfg["fusion_threshold_bytes"] == 25 * 1024 * 1024


def test_multigrid_run_stopped_mid_epoch_resumes_to_the_same_weights(data, tmp_path):
    """--max-steps stops after a checkpoint mid-epoch (in the coarse shapes); the resumed run ends bitwise
    where an uninterrupted one does: the shape sequence, sampler offsets and LR all restart exactly."""
    def args(run, **kw):
        return tiny_args(run, data, epochs=5, schedule="multigrid", short_cycle=True, batch_per_gpu=1, bn_clips=2,
                         lr=0.05, warmup_epochs=1, eval_every=0, **kw) + ["--no-test"]
    run_ranks(1, args(tmp_path / "ref"), tmp_path / "logs-ref", timeout=240)
    run_ranks(1, args(tmp_path / "cut", max_steps=4), tmp_path / "logs-cut", timeout=240)
    assert not (tmp_path / "cut" / "COMPLETE").exists()
    run_ranks(1, args(tmp_path / "cut"), tmp_path / "logs-cut2", timeout=240)
    assert "resumed from" in (tmp_path / "logs-cut2" / "rank0.log").read_text()
    a = torch.load(ckpt.latest(tmp_path / "ref"), weights_only=False)
    b = torch.load(ckpt.latest(tmp_path / "cut"), weights_only=False)
    assert a["step"] == b["step"] > 4
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
