"""One rank of the methods tests, run as a real process by tests/training/test_methods_train.py (no tests here).

Usage: python tests/methods_worker.py {aavg|compression} ENGINE OUT_DIR

aavg: each learner takes Adam steps on its own data (no gradient allreduce),
dumps its state, runs the trainer's averaging round over the engine, dumps again.
compression: the same gradients through the engine's fp32 and compressed
allreduce paths (``Engine.prepare(..., compression)``); both results are dumped.
"""
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainer.dist.engines import make_engine  # noqa: E402
from trainer.loop.train import Trainer  # noqa: E402


def tiny(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))


def state_of(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    bn = model[1]
    return {"params": [p.detach().clone() for p in model.parameters()],
            "exp_avg": [opt.state[p]["exp_avg"].clone() for p in model.parameters()],
            "exp_avg_sq": [opt.state[p]["exp_avg_sq"].clone() for p in model.parameters()],
            "bn_mean": bn.running_mean.clone(), "bn_var": bn.running_var.clone()}


def aavg(engine, out: Path) -> None:
    r = engine.rank
    model = tiny(0)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + r)
    for _ in range(3):  # K = 3 local steps on learner-specific data
        x = torch.randn(8, 6, generator=gen) * (1 + r) + r
        y = torch.randint(0, 3, (8,), generator=gen)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    pre = state_of(model, opt)
    Trainer.average(SimpleNamespace(engine=engine, core=model, opt=opt, avg_rounds=0))
    torch.save({"pre": pre, "post": state_of(model, opt)}, out / f"aavg{r}.pt")


def compression(engine, out: Path, compressed: str = "", name: str = "") -> None:
    """``compressed``: the compression to compare with fp32 (default: the command line's); ``name``: the
    file (default ``comp<rank>.pt``)."""
    r = engine.rank
    results = {}
    for comp in ("none", compressed or engine_compression(engine)):
        torch.manual_seed(0)  # no BatchNorm here: it makes the bias before it get ~0 gradients
        model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        wrapped, opt = engine.prepare(model, opt, 1, comp)
        gen = torch.Generator().manual_seed(7 + r)
        x = torch.randn(32, 6, generator=gen) * 3
        y = torch.randint(0, 3, (32,), generator=gen)
        opt.zero_grad()
        nn.functional.cross_entropy(wrapped(x), y).backward()
        engine.finish_grads(opt)
        with engine.step_context(opt):
            opt.step()
        results[comp] = [p.grad.detach().clone() for p in model.parameters()]
    torch.save(results, out / (name or f"comp{r}.pt"))


def all_of(engine, out: Path) -> None:
    """aavg, then each compression of argv[4] (comma-separated) on its own file."""
    aavg(engine, out)
    for comp in sys.argv[4].split(","):
        compression(engine, out, comp, f"comp{engine.rank}-{comp}.pt")


def engine_compression(engine) -> str:
    return "fp16" if engine.name == "horovod" else sys.argv[4] if len(sys.argv) > 4 else "fp16"


def main() -> None:
    what, engine_name, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    torch.set_num_threads(1)
    engine = make_engine(engine_name)
    try:
        {"aavg": aavg, "compression": compression, "all": all_of}[what](engine, out)
    finally:
        engine.shutdown()
    # The results are on disk. End without interpreter teardown: this process exits right after a
    # backward pass, and a gloo worker thread may still be releasing that pass's work (tensors with
    # Python owners, a hook's Python callback); doing so against a finalizing interpreter aborts the
    # rank with SIGABRT (seen in CI, core dumps: ProcessGroupGloo::runLoop -> ~AsyncWork -> take_gil).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
