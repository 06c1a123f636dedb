"""torch.compile (--compile): the shift compiles to the eager values, and a real two-rank run with the
compiled step trains as the eager one does, writing checkpoints the eager trainer resumes.

Inductor generates and builds C++ kernels on a CPU, which takes tens of seconds even for a small graph, so
the inductor check is on the smallest graph that went wrong (two residual blocks with the shift), and the
runs use the aot_eager backend (dynamo's trace and AOT autograd, without code generation).
"""
import pytest
import torch

from badinput import run_module, trainer_env

from trainer_utils import make_dataset, run_ranks, tiny_args

from trainer.loop import checkpoint as ckpt
from trainer.dist import compat
from trainer.models import tsm
from trainer.loop.metrics import read_metrics
from trainer.models.model import build_model
from trainer.rundir import COMPLETE

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch computes here too


def _forward_backward(module: torch.nn.Module, x: torch.Tensor):
    x = x.clone().requires_grad_(True)
    out = module(x)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    plain = getattr(module, "_orig_mod", module)  # the compiled wrapper's parameters are the module's
    grads = {k: p.grad.clone() for k, p in plain.named_parameters()}
    module.zero_grad()
    return out.detach(), x.grad, grads


def _two_blocks() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model("resnet18", 5, 4, width=0.25).layer2  # a strided block with its downsample, then another


def test_inductor_compiles_the_shift_to_the_eager_values():
    """Two residual blocks with the shift, compiled by inductor: the same output (inference, and training
    with its gradients) as eagerly. With the shift written as slice assignments into a fresh tensor,
    inductor's inference output here was NaN (and a whole network's training output too)."""
    blocks = _two_blocks()
    x = torch.randn(8, 16, 8, 8)
    with torch.no_grad():  # the inference graph: where the NaN showed with two blocks
        blocks.eval()
        want_eval = blocks(x)
        torch._dynamo.reset()
        got_eval = torch.compile(blocks, backend="inductor")(x)
        blocks.train()
    assert torch.isfinite(got_eval).all()
    torch.testing.assert_close(got_eval, want_eval, rtol=1e-5, atol=1e-5)
    want = _forward_backward(blocks, x)
    torch._dynamo.reset()
    got = _forward_backward(torch.compile(blocks, backend="inductor"), x)
    assert torch.isfinite(got[0]).all()
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)
    for k in want[2]:
        torch.testing.assert_close(got[2][k], want[2][k], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reverse", [False, True])
def test_the_shift_traced_for_compile_equals_the_eager_shift(reverse):
    """The form the shift takes under torch.compile is the eager shift, bit for bit, either way (backward
    moves values the other way), with folds of 1 and more channels and whole clips of 1 and more frames."""
    for nt, c, n_segment in ((8, 16, 4), (6, 8, 3), (4, 64, 1), (16, 24, 8)):
        x = torch.randn(nt, c, 3, 2)
        fold = c // 8
        traced = tsm._shift_padded(x.view(nt // n_segment, n_segment, c, 3, 2), fold, reverse).view(nt, c, 3, 2)
        assert torch.equal(traced, tsm._shift(x, n_segment, 8, reverse))


def test_bottleneck_blocks_trace_with_the_cpu_one_by_one_path():
    """ResNet-50's blocks route 1x1 convs through the fused CPU product (a custom autograd Function with
    in-place products on views); traced by dynamo and AOT autograd it gives the eager values."""
    torch.manual_seed(0)
    model = build_model("resnet50", 4, 4, width=0.125).layer1  # three bottleneck blocks, a downsample first
    x = torch.randn(8, 8, 8, 8)
    assert tsm._gemm_1x1_ok(torch.randn(8, 32, 8, 8), model[1].conv1, 4)  # the path is in use here
    want = _forward_backward(model, x)
    torch._dynamo.reset()
    got = _forward_backward(torch.compile(model, backend="aot_eager"), x)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)
    for k in want[2]:
        torch.testing.assert_close(got[2][k], want[2][k], rtol=1e-4, atol=1e-5)
    assert not compat.is_compiling()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("compile") / "data", train=16, val=8, frames=8, size=32)


def _train_losses(run) -> list:
    return [(r["step"], r["loss"]) for r in read_metrics(run) if r["kind"] == "train"]


def test_two_ranks_with_the_compiled_step_train_as_the_eager_ranks_and_resume_eagerly(data, tmp_path):
    """DDP under torch.compile (dynamo splits the graph at the gradient buckets): four steps give the eager
    run's losses and weights to rounding (the kernels sum in another order); the checkpoint holds the
    plain module's names, so a run without --compile resumes it and completes."""
    eager, compiled = tmp_path / "eager", tmp_path / "compiled"
    run_ranks(2, tiny_args(eager, data, epochs=2, max_steps=4), tmp_path / "logs-eager", timeout=180)
    args = tiny_args(compiled, data, epochs=2, max_steps=4) + ["--compile", "default", "--compile-backend",
                                                               "aot_eager"]
    run_ranks(2, args, tmp_path / "logs-compiled", timeout=240)
    want, got = dict(_train_losses(eager)), dict(_train_losses(compiled))
    assert sorted(got) == sorted(want) == [1, 2, 3, 4], (want, got)
    for step, loss in want.items():
        assert got[step] == pytest.approx(loss, rel=1e-5), (step, want, got)
    mine, theirs = ckpt.load(ckpt.latest(compiled)), ckpt.load(ckpt.latest(eager))
    assert mine["step"] == 4 and sorted(mine["model"]) == sorted(theirs["model"])  # no _orig_mod./module.
    for k, v in theirs["model"].items():
        if v.is_floating_point():
            torch.testing.assert_close(mine["model"][k], v, rtol=1e-4, atol=1e-5)
    run_ranks(2, tiny_args(compiled, data, epochs=2), tmp_path / "logs-resumed", timeout=180)
    assert (compiled / COMPLETE).exists()
    assert [s for s, _ in _train_losses(compiled)] == list(range(1, 9))


def test_a_multigrid_run_under_compile_says_it_compiles_once_per_shape(data, tmp_path):
    """Multigrid changes the clip shape through the run and every new shape compiles anew (minutes each with
    inductor): the run says how many shapes it has before the first compile, and its compiled step trains."""
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=3, max_steps=1, schedule="multigrid", test_clips=None, test_last=None)
    proc = run_module("trainer", args + ["--no-test", "--compile", "default", "--compile-backend", "aot_eager"],
                      trainer_env(RANK="0", WORLD_SIZE="1"), timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [x for x in proc.stderr.splitlines() if "--compile default with multigrid" in x]
    assert len(said) == 1 and "its 4 clip shapes" in said[0] and "--compile off" in said[0], said
    assert [r["step"] for r in read_metrics(run) if r["kind"] == "train"] == [1]
