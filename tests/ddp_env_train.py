"""A plain DDP training script that knows nothing of LSF: env:// only, its own SIGUSR2 handler.

It is what a user brings to ``summit-jobs submit --command``: ``init_process_group("gloo")`` reads
torchrun's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (every launcher's job line provides them),
the ranks agree on stopping with one all-reduce per step, rank 0 saves under a temporary name and
renames, and COMPLETE is written after the last step. Each rank writes its pid and its final weights
(``ranks/<job>.<rank>.pid``, ``ranks/<job>.<rank>.pt``) so a test can check that no rank outlives its
job and that all ranks end with the same weights.

Usage: python ddp_env_train.py --steps N [--step-seconds S]
"""
import argparse
import glob
import json
import os
import signal
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, required=True)
p.add_argument("--step-seconds", type=float, default=0.0)
args = p.parse_args()

warned = []
signal.signal(signal.SIGUSR2, lambda *_: warned.append(1))
dist.init_process_group("gloo")                       # env:// : RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
rank, world = dist.get_rank(), dist.get_world_size()
job = os.environ.get("LSB_JOBID", "none")
os.makedirs("ranks", exist_ok=True)
with open(f"ranks/{job}.{rank}.pid", "w") as fh:
    json.dump({"pid": os.getpid(), "ppid": os.getppid(), "world": world,
               "local_rank": os.environ.get("LOCAL_RANK"), "group_rank": os.environ.get("GROUP_RANK")}, fh)

torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
found = sorted(glob.glob("checkpoints/ckpt-*.pt"))
if found:
    state = torch.load(found[-1], weights_only=True)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    step = state["step"]
target = torch.arange(8.0).unsqueeze(1)
while step < args.steps:
    g = torch.Generator().manual_seed(step * 1000 + rank)    # each rank its own batch, the same on a rerun
    x = torch.randn(32, 8, generator=g)
    loss = ((model(x) - x @ target) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if rank == 0:
        with open("metrics.jsonl", "a") as fh:
            fh.write(json.dumps({"kind": "train", "step": step, "loss": loss.item()}) + "\n")
    time.sleep(args.step_seconds)
    flag = torch.tensor([1.0 if warned else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)            # every rank stops after the same step
    if flag.item() > 0:
        break
torch.save(model.module.state_dict(), f"ranks/{job}.{rank}.pt")
if rank == 0:
    os.makedirs("checkpoints", exist_ok=True)
    tmp = f"checkpoints/part{os.getpid()}.tmp"
    torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, f"checkpoints/ckpt-{step:09d}.pt")
    if step >= args.steps:
        with open("COMPLETE", "w") as fh:
            fh.write(f"step {step}\n")
signal.signal(signal.SIGUSR2, signal.SIG_IGN)          # saved: a late warning must not turn exit 0 into 140
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank}: {'warned' if warned else 'done'} at step {step}", flush=True)
