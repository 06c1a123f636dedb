"""A pack read with the webdataset library itself: the samples and nothing else.

The shard index is a tar member like any other; webdataset groups members by
the name before the first dot and would yield the index as a sample of its own
unless its name is one webdataset skips (``__...__``). Packs written before the
index had that name still read with ShardDataset, and in webdataset with the
one-line filter the shard format's docstring gives.
"""
import json
import os
import tarfile

import pytest
import webdataset as wds

from helpers import run_cli
from trainer import shards


def _webdataset(folder, names):
    """Every sample webdataset yields for these shards, in order, as {key: {extension: bytes}}."""
    ds = wds.WebDataset([str(folder / n) for n in names], shardshuffle=False, empty_check=False)
    return [(s["__key__"], {k: v for k, v in s.items() if not k.startswith("__")}) for s in ds]


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """A real pack of a small synthetic dataset, several shards per split, through the CLI."""
    root = tmp_path_factory.mktemp("wds")
    env = dict(os.environ, XDG_CONFIG_HOME=str(root / "xdg"))
    r = run_cli(["synth", str(root / "s"), "--videos-per-class", "3", "--frames", "4", "--size", "32",
                 "--layout", "rawframes", "--quiet"], env, timeout=120)
    assert r.returncode == 0, r.stderr
    r = run_cli(["pack", str(root / "s" / "rawframes"), str(root / "p"), "--shard-size", "8KB", "-j", "1",
                 "--quiet"], env, timeout=120)
    assert r.returncode == 0, r.stderr
    return root / "p"


@pytest.mark.parametrize("split", ["train", "val"])
def test_webdataset_yields_exactly_the_samples_of_a_pack(packed, split):
    manifest = shards.read_manifest(packed)
    names = [e["name"] for e in manifest["shards"] if e["split"] == split]
    assert len(names) >= 2
    got = _webdataset(packed, names)
    ours = shards.ShardDataset(packed, split)
    assert [key for key, _ in got] == [ours.key(i) for i in range(len(ours))]
    assert all(not key.startswith("__") for key, _ in got)
    for i, (key, members) in enumerate(got):
        info = json.loads(members["json"])
        assert info["label"] == ours.label(i) and info["num_frames"] == ours.num_frames(i)
        frames = [members[f"{t:05d}.jpg"] for t in range(ours.num_frames(i))]
        assert frames == ours.frames(i, range(ours.num_frames(i)))
        assert set(members) == {"json"} | {f"{t:05d}.jpg" for t in range(ours.num_frames(i))}
    for n in names:                 # the index is still there, last, for random access
        with tarfile.open(packed / n) as tf:
            assert tf.getnames()[-1] == shards.INDEX_MEMBER


def test_webdataset_over_a_flow_shard_yields_the_pairs_only(tmp_path):
    w = shards.ShardWriter(tmp_path / "train-00000.tar", "train")
    w.add_flow("clip_a", 2, [(b"x0", b"y0"), (b"x1", b"y1")])
    w.add_flow("clip_b", 0, [(b"x2", b"y2")])
    w.close()
    got = _webdataset(tmp_path, ["train-00000.tar"])
    assert [key for key, _ in got] == ["clip_a", "clip_b"]
    assert got[0][1]["00001.y.jpg"] == b"y1" and set(got[1][1]) == {"json", "00000.x.jpg", "00000.y.jpg"}


def test_a_pack_written_with_the_old_index_name_still_reads(tmp_path, monkeypatch):
    """Before, the index was ``__index__.json``: ShardDataset reads such packs as before (it finds the index
    through the manifest), and webdataset does too with the documented filter."""
    monkeypatch.setattr(shards, "INDEX_MEMBER", shards.OLD_INDEX_MEMBER)
    w = shards.ShardWriter(tmp_path / "train-00000.tar", "train")
    w.add("k1", 1, [b"f0", b"f1"])
    w.add("k2", 0, [b"g0"])
    entry = w.close()
    monkeypatch.undo()
    with tarfile.open(tmp_path / "train-00000.tar") as tf:
        assert tf.getnames()[-1] == "__index__.json"
    shards.write_manifest(tmp_path / "manifest.json", {"format": shards.FORMAT, "name": "old", "classes": ["a", "b"],
                                                       "hash": "sha256", "shards": [entry]})
    ds = shards.ShardDataset(tmp_path, "train")
    assert [ds.key(i) for i in range(len(ds))] == ["k1", "k2"] and ds.frames(0, [1]) == [b"f1"]
    url = str(tmp_path / "train-00000.tar")
    plain = [s["__key__"] for s in wds.WebDataset([url], shardshuffle=False)]
    assert plain == ["k1", "k2", "__index__"]
    filtered = wds.WebDataset([url], shardshuffle=False).select(lambda s: s["__key__"] != "__index__")
    assert [s["__key__"] for s in filtered] == ["k1", "k2"]
