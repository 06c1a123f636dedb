"""A Lightning Trainer on the summit-jobs chain contract (docs/user-command.md, "Lightning").

Submit it with:  summit-jobs submit --nodes 2 --until-complete --command 'python lightning_train.py --steps 400'
Lightning finds its ranks itself: LSF's jsrun (LSFEnvironment), Slurm's srun (SLURMEnvironment), or the env://
variables every other launcher's job line gives (RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK, MASTER_ADDR).
"""
import argparse, time
import torch
import lightning as L
from trainer.loop.lightning_chain import ChainCallback       # torch-free: stop, save, resume, complete

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=400)
p.add_argument("--nodes", type=int, default=2)               # as submit's --nodes
p.add_argument("--devices", type=int, default=2)             # ranks per node
p.add_argument("--step-seconds", type=float, default=0.0)    # slows a demo down
args = p.parse_args()
chain = ChainCallback()                                       # catches the warning from here on


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        time.sleep(args.step_seconds)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


class ResumableLoader(torch.utils.data.DataLoader):
    """A DataLoader that Lightning resumes mid-epoch where it stopped (state_dict/load_state_dict); a plain
    one starts the resumed epoch's data over. torchdata's StatefulDataLoader does the same for any loader."""
    _given = _skip = 0

    def __iter__(self):
        batches, self._given, self._skip = super().__iter__(), self._skip, 0
        for _ in range(self._given):                          # the batches trained before the checkpoint
            next(batches)
        for batch in batches:
            self._given += 1
            yield batch

    def state_dict(self):
        return {"batches": self._given}

    def load_state_dict(self, state):
        self._skip = state["batches"]


g = torch.Generator().manual_seed(0)
x = torch.randn(256, 8, generator=g)
loader = ResumableLoader(torch.utils.data.TensorDataset(x, x @ torch.arange(8.0).unsqueeze(1)), batch_size=8)
torch.manual_seed(0)
trainer = L.Trainer(accelerator="auto", strategy="ddp", num_nodes=args.nodes, devices=args.devices,
                    max_steps=args.steps, callbacks=[chain], logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Regression(), loader, ckpt_path=chain.resume_path())   # the newest checkpoint, mid-epoch too
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()                 # a gloo group left alive may abort the exit
