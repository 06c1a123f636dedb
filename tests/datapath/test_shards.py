"""The shard format: round trip, random access, determinism, plain-tar compatibility, manifest checks."""
import copy
import io
import json
import tarfile

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from PIL import Image

from trainer import shards


def jpeg(seed: int, size=(40, 30)) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def write_shard(path, samples, split="train"):
    w = shards.ShardWriter(path, split)
    for key, label, frames in samples:
        w.add(key, label, frames, {"fps": 25})
    return w.close()


def make_dataset(root, n_shards=2, per_shard=3, frames=4):
    entries, samples = [], []
    for s in range(n_shards):
        group = [(f"vid{s}_{i}", (s + i) % 5, [jpeg(100 * s + 10 * i + t) for t in range(frames + i)])
                 for i in range(per_shard)]
        samples += group
        entries.append(write_shard(root / f"train-{s:05d}.tar", group))
    entries.append(write_shard(root / "val-00000.tar", [("v0", 1, [jpeg(999)])], "val"))
    manifest = {"format": shards.FORMAT, "name": "t", "classes": [f"c{i}" for i in range(5)], "hash": "sha256",
                "shards": entries, "frame_short_side": 256}
    shards.write_manifest(root / "manifest.json", manifest)
    return manifest, samples


def test_round_trip_random_access(tmp_path):
    manifest, samples = make_dataset(tmp_path)
    ds = shards.ShardDataset(tmp_path, "train")
    assert len(ds) == len(samples)
    assert ds.classes == manifest["classes"]
    assert ds.labels() == [s[1] for s in samples]
    for i in reversed(range(len(ds))):                    # out of order: random access, no scan
        key, label, frames = samples[i]
        assert ds.key(i) == key and ds.label(i) == label and ds.num_frames(i) == len(frames)
        assert ds.frames(i, [2, 0, 99, -5]) == [frames[2], frames[0], frames[-1], frames[0]]
    val = shards.ShardDataset(tmp_path, "val")
    assert len(val) == 1 and val.frames(0, [0]) == [jpeg(999)]


def test_shard_is_a_plain_tar_with_index(tmp_path):
    entry = write_shard(tmp_path / "a.tar", [("k1", 3, [jpeg(1), jpeg(2)])])
    with tarfile.open(tmp_path / "a.tar") as tf:
        names = tf.getnames()
        assert names == ["k1.json", "k1.00000.jpg", "k1.00001.jpg", shards.INDEX_MEMBER]
        assert json.loads(tf.extractfile("k1.json").read()) == {"label": 3, "num_frames": 2, "fps": 25}
        assert tf.extractfile("k1.00001.jpg").read() == jpeg(2)
        assert all(m.mtime == 0 and m.uid == 0 for m in tf.getmembers())
    raw = (tmp_path / "a.tar").read_bytes()
    index = json.loads(raw[entry["index_offset"]:entry["index_offset"] + entry["index_bytes"]])
    assert index["format"] == shards.FORMAT and index["samples"][0]["key"] == "k1"
    assert entry["sha256"] == shards.file_hash(tmp_path / "a.tar") and entry["bytes"] == len(raw)
    assert not list(tmp_path.glob("*.partial"))


def test_same_input_same_bytes(tmp_path):
    a = write_shard(tmp_path / "a.tar", [("x", 1, [jpeg(5), jpeg(6)])])
    b = write_shard(tmp_path / "b.tar", [("x", 1, [jpeg(5), jpeg(6)])])
    assert a["sha256"] == b["sha256"]
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.binary(min_size=1, max_size=700), min_size=1, max_size=4), min_size=1, max_size=5))
def test_any_frame_bytes_survive(tmp_path_factory, clips):
    root = tmp_path_factory.mktemp("h")
    entry = write_shard(root / "train-00000.tar", [(f"s{i}", i, c) for i, c in enumerate(clips)])
    shards.write_manifest(root / "manifest.json", {"format": shards.FORMAT, "classes": ["a"], "hash": "sha256",
                                                   "shards": [entry]})
    ds = shards.ShardDataset(root)
    for i, c in enumerate(clips):
        assert ds.frames(i, range(len(c))) == c


def test_writer_rejects_bad_keys(tmp_path):
    w = shards.ShardWriter(tmp_path / "a.tar", "train")
    with pytest.raises(shards.ShardError, match="1-80 characters"):
        w.add("a/b", 0, [b"x"])
    w.add("ok", 0, [b"x"])
    with pytest.raises(shards.ShardError, match="twice"):
        w.add("ok", 0, [b"x"])
    with pytest.raises(shards.ShardError, match="no frames"):
        w.add("empty", 0, [])
    w.abort()
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("mutate, message", [
    (lambda m: m.pop("classes"), "missing key 'classes'"),
    (lambda m: m.update(extra=1), "unknown key 'extra'"),
    (lambda m: m["shards"][0].pop("bytes"), r"shards\[0\] is missing key 'bytes'"),
    (lambda m: m["shards"][0].update(colour="red"), r"shards\[0\] has unknown key 'colour'"),
    (lambda m: m["shards"][0].update(sha256="abc"), "not a lowercase hex digest"),
    (lambda m: m["shards"][1].update(name=m["shards"][0]["name"]), "listed twice"),
    (lambda m: m["shards"][0].update(name="../x.tar"), "plain file name"),
    (lambda m: m["shards"][0].update(split="holdout"), "split 'holdout'"),
    (lambda m: m["shards"][0].update(bytes=-1), "whole number"),
    (lambda m: m.update(hash="nohash"), "hash algorithm 'nohash'"),
    (lambda m: m.update(format="other/1"), "format"),
])
def test_manifest_validation_names_the_problem(tmp_path, mutate, message):
    manifest, _ = make_dataset(tmp_path, n_shards=2, per_shard=1, frames=1)
    bad = copy.deepcopy(manifest)
    mutate(bad)
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(shards.ShardError, match=message):
        shards.read_manifest(tmp_path / "bad.json")


def test_manifest_names_its_hash_algorithm(tmp_path):
    w = shards.ShardWriter(tmp_path / "train-00000.tar", "train", algo="blake2b")
    w.add("a", 0, [jpeg(1)])
    entry = w.close()
    assert entry["blake2b"] == shards.file_hash(tmp_path / "train-00000.tar", "blake2b")
    m = {"format": shards.FORMAT, "classes": ["a"], "hash": "blake2b", "shards": [entry]}
    shards.write_manifest(tmp_path / "manifest.json", m)
    assert shards.shard_digest(shards.read_manifest(tmp_path), entry) == entry["blake2b"]
    assert len(shards.ShardDataset(tmp_path)) == 1


def test_missing_or_damaged_shard_is_named(tmp_path):
    manifest, _ = make_dataset(tmp_path, n_shards=2, per_shard=1, frames=1)
    (tmp_path / "train-00001.tar").unlink()
    with pytest.raises(shards.ShardError, match="train-00001.tar listed in the manifest is missing"):
        shards.ShardDataset(tmp_path)
    manifest, _ = make_dataset(tmp_path, n_shards=2, per_shard=1, frames=1)
    p = tmp_path / "train-00000.tar"
    data = bytearray(p.read_bytes())
    off = manifest["shards"][0]["index_offset"]
    data[off:off + 5] = b"XXXXX"
    p.write_bytes(bytes(data))
    with pytest.raises(shards.ShardError, match="train-00000.tar: its index cannot be read"):
        shards.ShardDataset(tmp_path)


def test_write_manifest_is_atomic_and_validated(tmp_path):
    with pytest.raises(shards.ShardError):
        shards.write_manifest(tmp_path / "m.json", {"format": shards.FORMAT})
    assert not list(tmp_path.iterdir())
    with pytest.raises(shards.ShardError, match="does not exist"):
        shards.read_manifest(tmp_path / "m.json")
    (tmp_path / "m.json").write_text("{not json")
    with pytest.raises(shards.ShardError, match="cannot be read as JSON"):
        shards.read_manifest(tmp_path / "m.json")
