"""The paper's test protocol, BatchNorm statistics shared by all ranks, and worker pools started once.

The paper (and the official TSM checkpoint it reports) tests each video with
10 clips x 3 crops of the full-resolution frame (shorter side 256, 256 x 256
crops along the longer side) and averages the logits (the official test script;
``--softmax`` there averages probabilities instead).
"""
import io
import json

import numpy as np
import pytest
import torch
from PIL import Image

from trainer_utils import REPO, make_dataset, run_ranks, tiny_args

from trainer.loop import checkpoint as ckpt
from trainer.data import transforms as T
from trainer.dist.bnstats import merge_running_stats, running_stats
from trainer.data.clips import ClipSpec
from trainer.config import parse
from trainer.data.datasets import EvalClips, Pipeline, TrainClips, eval_batches
from trainer.loop.metrics import read_metrics
from trainer.loop.steps import video_scores

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch computes here too

WORKER = str(REPO / "tests" / "protocol_worker.py")


def jpeg(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def gradient(w: int, h: int) -> np.ndarray:
    x = np.linspace(0, 255, w, dtype=np.float32)[None, :].repeat(h, 0)
    return np.stack([x, np.full_like(x, 90), 255 - x], -1).astype(np.uint8)


def test_the_papers_protocol_is_the_default():
    a = parse(["--run-dir", "r"])
    assert (a.test_clips, a.test_crops, a.test_size, a.scale_size, a.test_average) == (10, 3, 256, 256, "logits")
    small = parse(["--run-dir", "r", "--input-size", "32"])
    assert small.test_size == small.scale_size == 37           # the full-resolution frame at every input size
    old = parse(["--run-dir", "r", "--test-crops", "1", "--test-size", "224", "--test-average", "probs"])
    assert (old.test_crops, old.test_size, old.test_average) == (1, 224, "probs")


def test_three_full_resolution_crops_of_a_landscape_frame():
    frame = jpeg(gradient(340, 256))
    crops = T.test_crops([frame], size=256, short_side=256, num_crops=3)
    assert crops.shape == (3, 1, 256, 256, 3)
    # left, centre, right: the red channel grows left to right
    means = [crops[c, 0, :, :, 0].mean() for c in range(3)]
    assert means[0] < means[1] < means[2]
    ref = np.asarray(Image.open(io.BytesIO(frame)).convert("RGB"))
    assert np.abs(crops[0, 0].astype(int) - ref[:, :256].astype(int)).mean() < 2      # x = 0 .. 256
    assert np.abs(crops[2, 0].astype(int) - ref[:, 84:].astype(int)).mean() < 2       # x = 84 .. 340
    assert T.test_boxes(340, 256, 256, 256, 3) == [(0.0, 0.0, 256.0, 256.0), (42.0, 0.0, 298.0, 256.0),
                                                    (84.0, 0.0, 340.0, 256.0)]


def test_one_decode_serves_all_crops_exactly_as_separate_decodes():
    frame = jpeg(gradient(400, 300))
    together = T.test_crops([frame], size=96, short_side=128, num_crops=3)
    boxes = T.test_boxes(400, 300, 96, 128, 3)
    for c, box in enumerate(boxes):
        alone = T._decode_box(frame, (box[0] / 400, box[1] / 300, box[2] / 400, box[3] / 300), 96, 96)
        assert np.array_equal(together[c, 0], alone)


def test_test_items_and_batches_have_the_protocols_shapes(tmp_path):
    data = make_dataset(tmp_path / "d", train=4, val=3, frames=8, size=48)
    spec = ClipSpec(num_segments=4, stride=2, size=40, scale_size=48, test_crops=3, test_size=48)
    test = EvalClips(str(data), spec, clips=10, split="val", crops=3, size=48)
    x, y = test[(1, 9)]
    assert tuple(x.shape) == (3, 4, 48, 48, 3) and x.dtype == torch.uint8 and y == 1 % 4
    val = EvalClips(str(data), spec, clips=1, split="val")
    assert tuple(val[(0, 0)][0].shape) == (1, 4, 40, 40, 3) and val.views == 1 and test.views == 30
    batches = eval_batches([0, 1, 2], test.clips, test.views, batch=64)   # two whole videos of 30 views fit
    assert [len(b) for b in batches] == [20, 10] and batches[0][:2] == [(0, 0), (0, 1)]
    assert eval_batches([0, 1], test.clips, test.views, batch=8) == [[(0, c) for c in range(10)],
                                                                     [(1, c) for c in range(10)]]
    pipe = Pipeline(TrainClips(str(data), spec, 0), {"test": test}, workers=0, pin=False)
    xb, yb = next(iter(pipe.eval_batches(test, [0, 1, 2], 64)))
    assert tuple(xb.shape) == (20, 3, 4, 48, 48, 3) and yb.tolist() == [0] * 10 + [1] * 10


def test_logits_and_probabilities_averaging_can_disagree():
    out = torch.tensor([[10.0, 0.0], [0.0, 2.0], [0.0, 2.0]])  # three views of one video
    logits = video_scores(out, 3, "logits")
    probs = video_scores(out, 3, "probs")
    assert torch.allclose(logits, torch.tensor([[10 / 3, 4 / 3]]))
    assert logits.argmax(1).item() == 0 and probs.argmax(1).item() == 1
    expect = out.softmax(1).mean(0).log()
    assert torch.allclose(probs[0], expect)
    one = torch.tensor([[1.0, 3.0, -2.0]])                    # one view: the two agree on the ranking and loss
    assert torch.allclose(torch.nn.functional.cross_entropy(video_scores(one, 1, "logits"), torch.tensor([1])),
                          torch.nn.functional.cross_entropy(video_scores(one, 1, "probs"), torch.tensor([1])))


def test_merging_running_statistics_pools_the_ranks_batches():
    torch.manual_seed(0)
    bns = [torch.nn.BatchNorm1d(5) for _ in range(3)]
    for i, bn in enumerate(bns):
        bn(torch.randn(64, 5) * (i + 1) + i)            # each "rank" saw different data
    stack = torch.stack([running_stats(bn) for bn in bns])
    assert not torch.allclose(stack[0], stack[1])

    flats = [torch.cat([bn.running_mean.double(), bn.running_var.double() + bn.running_mean.double() ** 2])
             for bn in bns]
    pooled = torch.stack(flats).mean(0)
    for bn in bns:
        merge_running_stats(bn, lambda t: pooled.clone())
    means = torch.stack([f[:5] for f in flats]).mean(0)
    for bn in bns:
        assert torch.allclose(bn.running_mean.double(), means, atol=1e-6)
    assert torch.equal(running_stats(bns[0]), running_stats(bns[2]))


def _probe(run):
    return [json.loads((run / f"probe-rank{r}.json").read_text()) for r in range(2)]


def test_two_ranks_validate_and_save_the_same_statistics_and_start_workers_once(tmp_path):
    data = make_dataset(tmp_path / "data", train=16, val=6)
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=2, workers=1, eval_every=1)       # test protocol: the defaults
    run_ranks(2, args, tmp_path / "logs", timeout=300, module=(WORKER,))
    p0, p1 = _probe(run)
    assert (p0["rank"], p1["rank"]) == (0, 1)
    assert len(p0["merges"]) == len(p1["merges"]) >= 2
    for a, b in zip(p0["merges"], p1["merges"]):
        assert a["step"] == b["step"] and a["after"] == b["after"]
    assert any(a["before"] != b["before"] for a, b in zip(p0["merges"], p1["merges"])), \
        "the ranks' own statistics never differed: this run cannot show the merge"
    state = ckpt.load(ckpt.epoch_path(run, 1))["model"]
    saved = torch.cat([v.double().flatten() for k, v in state.items() if k.endswith(("running_mean", "running_var"))])
    assert torch.equal(saved, torch.tensor(p0["merges"][-1]["after"], dtype=torch.float64))
    # one pool for training, one for validation and the test, for the whole run
    assert p0["pool_starts"] == p1["pool_starts"] == 2
    tests = [r for r in read_metrics(run) if r["kind"] == "test" and not r.get("summary")]
    assert len(tests) == 2 and all(r["views"] == 2 * 3 for r in tests)   # tiny_args: 2 clips x 3 crops


def test_without_persistent_workers_every_pass_starts_a_pool(tmp_path):
    data = make_dataset(tmp_path / "data", train=16, val=6)
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=2, workers=1, eval_every=1, persistent_workers="off")
    run_ranks(2, args, tmp_path / "logs", timeout=300, module=(WORKER,))
    # 2 epochs + 2 validations + the test of 2 checkpoints
    assert [p["pool_starts"] for p in _probe(run)] == [6, 6]
