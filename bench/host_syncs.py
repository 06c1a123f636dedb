"""Host syncs per optimiser step: how often the training loop reads a number back from the device
(``.item()``, ``.tolist()``, ``float()``/``int()``/``bool()`` of a tensor) and how many collectives
it issues, counted while the real trainer trains.

On a GPU each read-back waits until the device has finished everything queued,
so a loop that reads every step cannot run ahead of the GPU; each extra
collective is a latency-bound allreduce across all ranks. The counts are
properties of the code, not of the machine, so a CPU run measures them.

--tree runs another checkout of the trainer (e.g. a ``git worktree`` of an
older commit) for a before/after figure:
  git worktree add /tmp/before <commit>
  .venv/bin/python bench/host_syncs.py --tree /tmp/before
  .venv/bin/python bench/host_syncs.py
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = r'''
import json, sys, collections
sys.path.insert(0, sys.argv[1])
import torch
counts = collections.Counter()
def wrap(name):
    orig = getattr(torch.Tensor, name)
    def counted(self, *a, **k):
        counts[name] += 1
        return orig(self, *a, **k)
    setattr(torch.Tensor, name, counted)
for n in ("item", "tolist", "__float__", "__int__", "__bool__"):
    wrap(n)
from trainer.dist import engines
from trainer.loop import train
from trainer.config import parse
for cls in [engines.Engine] + engines.Engine.__subclasses__():
    if "allreduce_sum" in cls.__dict__:
        orig = cls.__dict__["allreduce_sum"]
        def make(orig):
            def f(self, t):
                counts["allreduce"] += 1
                return orig(self, t)
            return f
        setattr(cls, "allreduce_sum", make(orig))
args = parse(sys.argv[2:])
t = train.Trainer(args)
counts.clear()  # set-up is not the loop
t.run()
steps = t.state.step
t.close()
print(json.dumps({"steps": steps, **counts}))
'''


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", default=str(REPO), help="the checkout whose trainer runs (default: this one)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--log-every", type=int, default=10)
    a = p.parse_args()
    sys.path.insert(0, str(REPO / "tests"))
    from trainer_utils import make_dataset, tiny_args
    with tempfile.TemporaryDirectory() as tmp:
        data = make_dataset(Path(tmp) / "data", train=4 * a.steps, val=2)
        args = tiny_args(Path(tmp) / "run", data, epochs=1, log_every=a.log_every, eval_every=0,
                         batch_per_gpu=4, ckpt_every_minutes=0) + ["--no-test", "--keep", "1"]
        out = subprocess.run([sys.executable, "-c", CHILD, a.tree, *args], capture_output=True, text=True,
                             env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}, check=False)
    if out.returncode:
        sys.exit(out.stderr[-3000:])
    c = json.loads(out.stdout.strip().splitlines()[-1])
    steps = c.pop("steps")
    reads = sum(v for k, v in c.items() if k != "allreduce")
    print(f"trainer at {a.tree}: {steps} steps, --log-every {a.log_every}")
    print(f"  device read-backs per step: {reads / steps:.2f}  ({', '.join(f'{k} {v}' for k, v in sorted(c.items()) if k != 'allreduce')})")
    print(f"  collectives per step:       {c.get('allreduce', 0) / steps:.2f}")


if __name__ == "__main__":
    main()
