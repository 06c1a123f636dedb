"""Clip transforms: real JPEG decoding, shared crop and flip, draft-mode accuracy, test crops."""
import io

import numpy as np
import pytest
from PIL import Image

from trainer.data import transforms as T


def jpeg_of(arr: np.ndarray, quality=95) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def gradient(w, h):
    x = np.linspace(0, 255, w)[None, :, None]
    y = np.linspace(0, 255, h)[:, None, None]
    return np.concatenate([np.broadcast_to(x, (h, w, 1)), np.broadcast_to(y, (h, w, 1)),
                           np.full((h, w, 1), 128.0)], axis=2).astype(np.uint8)


FRAME = jpeg_of(gradient(340, 256))


def test_train_clip_shape_and_determinism():
    frames = [FRAME] * 5
    a = T.train_clip(frames, np.random.default_rng(3))
    b = T.train_clip(frames, np.random.default_rng(3))
    assert a.shape == (5, 224, 224, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b)
    outs = {T.train_clip(frames, np.random.default_rng(s)).tobytes() for s in range(8)}
    assert len(outs) > 1                       # the augmentation does vary
    assert all(np.array_equal(a[0], a[t]) for t in range(5))   # one crop for the whole clip


def test_flip_is_shared_and_mirrors():
    flipped = unflipped = 0
    for seed in range(12):
        plain = T.train_clip([FRAME, FRAME], np.random.default_rng(seed), size=64, flip=False)
        maybe = T.train_clip([FRAME, FRAME], np.random.default_rng(seed), size=64, flip=True)
        if np.array_equal(maybe, plain):
            unflipped += 1
        else:
            assert np.array_equal(maybe, plain[:, :, ::-1])
            flipped += 1
    assert flipped and unflipped


def test_multiscale_boxes_follow_tsm():
    rng = np.random.default_rng(0)
    sides = set()
    for _ in range(300):
        x0, y0, x1, y1 = T.multiscale_box(340, 256, rng)
        assert 0 <= x0 < x1 <= 340 and 0 <= y0 < y1 <= 256
        w, h = round(x1 - x0), round(y1 - y0)
        sides.update((w, h))
        allowed = [int(256 * s) for s in T.SCALES]
        allowed = [224 if abs(a - 224) < 3 else a for a in allowed]
        assert w in allowed and h in allowed
        assert abs(allowed.index(w) - allowed.index(h)) <= 1     # max_distort 1
    assert sides == {256, 224, 192, 168}


def test_draft_decoding_matches_full_decode():
    big = gradient(1024, 768)
    data = jpeg_of(big)
    fast = T.test_clip([data], size=112, short_side=128)[0].astype(float)
    img = Image.open(io.BytesIO(data)).convert("RGB").resize((171, 128), Image.BILINEAR)
    left, top = (171 - 112) // 2, 8
    ref = np.asarray(img.crop((left, top, left + 112, top + 112))).astype(float)
    assert np.abs(fast - ref).mean() < 3.0


def test_test_crops_centre_and_three():
    arr = gradient(340, 256)
    c1 = T.test_crops([jpeg_of(arr)], num_crops=1)
    c3 = T.test_crops([jpeg_of(arr)], num_crops=3)
    assert c1.shape == (1, 1, 224, 224, 3) and c3.shape == (3, 1, 224, 224, 3)
    assert np.abs(c3[1].astype(int) - c1[0].astype(int)).mean() < 1
    # The red channel grows left to right: left crop < centre < right crop.
    means = [c3[i, 0, :, :, 0].mean() for i in range(3)]
    assert means[0] < means[1] < means[2]
    boxes = T.test_boxes(256, 340, num_crops=3)       # portrait: crops move down the long side
    assert boxes[0][1] == 0 and boxes[2][3] == pytest.approx(340)


def test_grayscale_and_non_jpeg():
    gray = io.BytesIO()
    Image.fromarray(np.full((80, 100), 77, np.uint8)).save(gray, "JPEG")
    out = T.train_clip([gray.getvalue()], np.random.default_rng(0), size=32)
    assert out.shape == (1, 32, 32, 3) and abs(int(out.mean()) - 77) <= 2
    png = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(png, "PNG")
    with pytest.raises(ValueError, match="not JPEG"):
        T.test_clip([png.getvalue()])
    with pytest.raises(ValueError):
        T.train_clip([], np.random.default_rng(0))


def test_sample_indices():
    assert T.sample_indices(16, 8, None) == [1, 3, 5, 7, 9, 11, 13, 15]
    rng = np.random.default_rng(0)
    for _ in range(50):
        idx = T.sample_indices(20, 8, rng)
        assert len(idx) == 8 and idx == sorted(idx) and 0 <= idx[0] and idx[-1] < 20
    assert T.sample_indices(3, 8, None) == sorted(T.sample_indices(3, 8, None))
    assert max(T.sample_indices(3, 8, np.random.default_rng(1))) <= 2
