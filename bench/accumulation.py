"""Exact accumulation's cost: time per sample and allreduces per sample, k = 1 vs k = K, same run.

    python bench/accumulation.py [--ranks 2] [--accum 4] [--samples 64] [--rounds 3]

Two real rank processes (gloo on CPU) run the trainer's own DDP engine path
(trainer.dist.engines: no_sync() for the first k-1 micro-batches) on a small TSM.
Both modes process the same number of samples in micro-batches of the same
size; a counting DDP comm hook records every allreduce (one per gradient
bucket). Rounds alternate the two modes so machine noise hits both alike.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def worker(args) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from trainer.dist.engines import launch_from_env, make_engine
    from trainer.models.model import build_model

    torch.set_num_threads(1)
    engine = make_engine("ddp", launch_from_env())
    torch.manual_seed(0)
    model = build_model("resnet18", 8, num_segments=4, width=0.25)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model, opt = engine.prepare(model, opt, args.accum, "none")
    calls = {"n": 0}

    def counting_hook(state, bucket):
        calls["n"] += 1
        return default_hooks.allreduce_hook(state, bucket)

    model.register_comm_hook(dist.group.WORLD, counting_hook)
    micro = args.micro
    x = torch.randn(micro * 4, 3, args.size, args.size)
    y = torch.randint(0, 8, (micro,))
    results = {1: [0.0, 0, 0], args.accum: [0.0, 0, 0]}   # seconds, samples, allreduces

    def run(k: int) -> None:
        steps = args.samples // (micro * k)
        engine.barrier()
        calls["n"] = 0
        t0 = time.perf_counter()
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            for m in range(k):
                with engine.micro_context(model, m, k):
                    loss = torch.nn.functional.cross_entropy(model(x), y) / k
                    loss.backward()
            engine.finish_grads(opt)
            opt.step()
        engine.barrier()
        r = results[k]
        r[0] += time.perf_counter() - t0
        r[1] += steps * k * micro
        r[2] += calls["n"]

    run(1)  # warm-up, not counted
    results = {1: [0.0, 0, 0], args.accum: [0.0, 0, 0]}
    for i in range(args.rounds):
        for k in ((1, args.accum) if i % 2 == 0 else (args.accum, 1)):
            run(k)
    if engine.rank == 0:
        print(json.dumps({str(k): v for k, v in results.items()}), flush=True)
    engine.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--accum", type=int, default=4)
    ap.add_argument("--micro", type=int, default=2, help="clips per micro-batch")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--samples", type=int, default=64, help="samples per rank per round and mode")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.ranks):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LSB_", "JSM_", "OMPI_"))}
        env.update(JSM_NAMESPACE_RANK=str(r), JSM_NAMESPACE_SIZE=str(args.ranks), JSM_NAMESPACE_LOCAL_RANK=str(r),
                   SUMMIT_JOBS_RENDEZVOUS_ADDR="127.0.0.1", SUMMIT_JOBS_RENDEZVOUS_PORT=str(port),
                   OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", *sys.argv[1:]], env=env,
                                      stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL, text=True))
    out = procs[0].communicate()[0]
    for p in procs[1:]:
        p.wait()
    res = json.loads(out.strip().splitlines()[-1])
    (t1, n1, c1), (tk, nk, ck) = res["1"], res[str(args.accum)]
    print(f"{args.ranks} ranks, micro-batch {args.micro} clips x 4 frames x {args.size}^2, "
          f"{args.rounds} alternating rounds of {args.samples} samples per rank")
    print(f"{'mode':>12} {'ms/sample':>10} {'allreduces/sample':>18}")
    print(f"{'k = 1':>12} {1000 * t1 / n1:>10.2f} {c1 / n1:>18.3f}")
    print(f"{'k = ' + str(args.accum):>12} {1000 * tk / nk:>10.2f} {ck / nk:>18.3f}")
    print(f"time per sample ratio (k={args.accum} / k=1): {(tk / nk) / (t1 / n1):.3f}; "
          f"allreduces per sample drop {(c1 / n1) / (ck / nk):.2f}x")


if __name__ == "__main__":
    main()
