"""One rank of the test-protocol tests (tests/training/test_test_protocol.py), run as a real process; no tests here.

Usage: python tests/protocol_worker.py TRAINER_ARGS...

Runs the trainer as ``python -m trainer`` would, and records what the tests
check from outside: each rank's BatchNorm running statistics just before and
just after every cross-rank merge, and how many times a DataLoader started a
pool of worker processes (torch's multi-process iterator is created once per
pool start). Written to <run-dir>/probe-rank<N>.json.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from torch.utils.data import dataloader  # noqa: E402

from trainer.loop import train  # noqa: E402
from trainer.dist.bnstats import running_stats  # noqa: E402
from trainer.config import parse  # noqa: E402

PROBE = {"pool_starts": 0, "merges": [], "rank": None}
_start = dataloader._MultiProcessingDataLoaderIter.__init__
_merge = train.Trainer.merge_bn


def counted_start(self, *a, **kw):
    PROBE["pool_starts"] += 1
    _start(self, *a, **kw)


def recorded_merge(self):
    before = running_stats(self.core).tolist()
    _merge(self)
    PROBE["rank"] = self.engine.rank
    PROBE["merges"].append({"step": self.state.step, "before": before, "after": running_stats(self.core).tolist()})


dataloader._MultiProcessingDataLoaderIter.__init__ = counted_start
train.Trainer.merge_bn = recorded_merge

if __name__ == "__main__":
    args = parse(sys.argv[1:])
    rc = train.main(args)
    Path(args.run_dir, f"probe-rank{PROBE['rank'] or 0}.json").write_text(json.dumps(PROBE))
    sys.exit(rc)
