"""A plain PyTorch DDP training script adapted to the summit-jobs chain contract (docs/user-command.md).

Submit it with:  summit-jobs submit --nodes 2 --until-complete --command 'python user_train.py --steps 400'
Every launcher (torchrun, blaunch, mpirun, jsrun) gives each rank torchrun's env:// variables.
"""
import argparse, os, time
import torch
import torch.distributed as dist
from trainer.loop.chain import Chain                              # torch-free: stop, resume, save, complete

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=400)
p.add_argument("--step-seconds", type=float, default=0.0)   # slows a demo down
args = p.parse_args()
chain = Chain(every=5)                                       # 1. the warning (SIGUSR2 or the job's warning file)
world = int(os.environ.get("WORLD_SIZE", "1"))
if world > 1:
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")   # env://
rank = dist.get_rank() if world > 1 else 0
torch.manual_seed(0)
model, x = torch.nn.Linear(8, 1), torch.randn(256, 8)
model = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
y = x @ torch.arange(8.0).unsqueeze(1)
opt, step, loss = torch.optim.SGD(model.parameters(), lr=0.01), 0, torch.tensor(float("nan"))
state = chain.resume(lambda path: torch.load(path, weights_only=True))  # 2. the newest checkpoint, or None
if state:
    getattr(model, "module", model).load_state_dict(state["model"]), opt.load_state_dict(state["opt"])
    step = state["step"]
    print(f"rank {rank}: resumed at step {step}", flush=True)
while step < args.steps:
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad(), loss.backward(), opt.step()
    step += 1
    chain.record(step, loss=loss.item())                     # metrics.jsonl: status and report show it
    time.sleep(args.step_seconds)
    if chain.should_stop(step):                              # every rank stops after the same step
        break
weights = {"model": getattr(model, "module", model).state_dict(), "opt": opt.state_dict(), "step": step}
chain.save(step, lambda path: torch.save(weights, path))     # 3. rank 0: temporary name, then rename
if step >= args.steps:
    chain.complete(f"step {step} loss {loss.item():.4f}")    # 4. COMPLETE when done
chain.finish()                                               # 5. saved: a late warning must not kill the exit
if world > 1:
    dist.barrier()                                           # no rank tears down while rank 0 still saves
    dist.destroy_process_group()
print(f"rank {rank}: {'done' if step >= args.steps else 'warned'} at step {step}", flush=True)  # exit 0 either way
