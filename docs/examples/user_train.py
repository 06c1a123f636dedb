"""A plain PyTorch training script adapted to the summit-jobs chain contract (docs/user-command.md).

Submit it with:  summit-jobs submit --nodes 1 --until-complete --command 'python user_train.py --steps 400'
"""
import argparse, glob, os, signal, time
import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=400)
p.add_argument("--step-seconds", type=float, default=0.0)   # slows a demo down
args = p.parse_args()
rank = int(os.environ.get("JSM_NAMESPACE_RANK") or os.environ.get("RANK") or int(os.environ.get("LSF_PM_TASKID", "1")) - 1)
warned = []                                                   # 1. SIGUSR2 = the warning before the run limit
signal.signal(signal.SIGUSR2, lambda *_: warned.append(1))
torch.manual_seed(0)
model, x = torch.nn.Linear(8, 1), torch.randn(256, 8)
y = x @ torch.arange(8.0).unsqueeze(1)
opt, step, loss = torch.optim.SGD(model.parameters(), lr=0.01), 0, torch.tensor(float("nan"))
found = sorted(glob.glob("checkpoints/ckpt-*.pt"))           # 2. resume from the newest checkpoint
if found:
    state = torch.load(found[-1], weights_only=True)
    model.load_state_dict(state["model"]), opt.load_state_dict(state["opt"])
    step = state["step"]
    print(f"rank {rank}: resumed at step {step}", flush=True)
while step < args.steps and not warned:
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad(), loss.backward(), opt.step()
    step += 1
    time.sleep(args.step_seconds)
if rank == 0:                                                 # 3. checkpoint: temp name, then rename
    os.makedirs("checkpoints", exist_ok=True)
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, "checkpoints/part.tmp")
    os.replace("checkpoints/part.tmp", f"checkpoints/ckpt-{step:09d}.pt")
    if step >= args.steps:                                    # 4. COMPLETE when done
        open("COMPLETE", "w").write(f"step {step} loss {loss.item():.4f}\n")
signal.signal(signal.SIGUSR2, signal.SIG_IGN)                # 5. saved: a late warning must not kill the exit
print(f"rank {rank}: {'warned' if warned else 'done'} at step {step}", flush=True)   # 6. exit 0 either way
