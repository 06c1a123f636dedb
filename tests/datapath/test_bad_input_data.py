"""Bad input to the data path (synth, pack, stage-data, python -m trainer.stage): a table of refusals.

Every case is a command a user could type, or a file a user could hand over,
run through the real entry point in a real process. Each must end with a
non-zero exit, no traceback, and a message naming the value that was refused.
"""
import hashlib
import json
import os
from pathlib import Path

import pytest

from badinput import assert_refused, run_module
from helpers import REPO, run_cli

FAKES = REPO / "tests" / "fakes"
CLI = "summit-jobs: error:"
STAGE = "trainer.stage: error:"


def _shard(name: str, data: bytes = b"abc", **over) -> dict:
    entry = {"name": name, "split": "train", "bytes": len(data), "samples": 0,
             "sha256": hashlib.sha256(data).hexdigest(), "index_offset": 0, "index_bytes": 0}
    entry.update(over)
    return entry


def _manifest(*entries, **over) -> dict:
    m = {"format": "summit-jobs-shards/1", "name": "t", "classes": ["a"], "hash": "sha256",
         "shards": list(entries) or [_shard("train-00000.tar"), _shard("train-00001.tar")]}
    m.update(over)
    return m


#: name -> the manifest's text (bytes where it is deliberately not UTF-8).
MANIFESTS = {
    "good": json.dumps(_manifest()),
    "notjson": "{shards: [}",
    "latin1": json.dumps(_manifest(name="caf\u00e9"), ensure_ascii=False).encode("latin-1"),
    "noshards": json.dumps({k: v for k, v in _manifest().items() if k != "shards"}),
    "nosha": json.dumps(_manifest({k: v for k, v in _shard("train-00000.tar").items() if k != "sha256"})),
    "pwned": json.dumps(_manifest(_shard("x;!touch PWNED"))),
    "dotdot": json.dumps(_manifest(_shard(".."))),
    "dash": json.dumps(_manifest(_shard("-rf"))),
    "space": json.dumps(_manifest(_shard("a b.tar"))),
    "slash": json.dumps(_manifest(_shard("sub/x.tar"))),
    "backtick": json.dumps(_manifest(_shard("`id`.tar"))),
    "negbytes": json.dumps(_manifest(_shard("train-00000.tar", bytes=-4))),
    "shortdigest": json.dumps(_manifest(_shard("train-00000.tar", sha256="abc123"))),
    "notlist": json.dumps(_manifest(shards={"train-00000.tar": 1})),
    "format": json.dumps(_manifest(format="webdataset/2")),
    "array": "[1, 2, 3]",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Inputs for every case: a small rawframes set, manifests, odd files."""
    root = tmp_path_factory.mktemp("bad")
    env = dict(os.environ, XDG_CONFIG_HOME=str(root / "xdg"))
    r = run_cli(["synth", str(root / "s"), "--videos-per-class", "2", "--frames", "4", "--size", "32",
                 "--layout", "rawframes", "--quiet"], env)
    assert r.returncode == 0, r.stderr
    for name, text in MANIFESTS.items():
        (root / f"{name}.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    for shard in ("train-00000.tar", "train-00001.tar"):
        (root / shard).write_bytes(b"abc")
    (root / "a_file").write_text("not a folder\n")
    (root / "classes-latin1.txt").write_bytes("caf\u00e9\nthe\n".encode("latin-1"))
    (root / "classes-dup.txt").write_text("a\nb\na\n")
    lists = {"latin1": "d\u00e9j\u00e0 4 0\n".encode("latin-1"), "badline": b"only-two 3\n",
             "label": b"train/x 4 99\n", "neglabel": b"train/x 4 -3\n", "missing": b"train/gone 4 0\n"}
    for name, data in lists.items():
        (root / f"list-{name}").mkdir()
        (root / f"list-{name}" / "train_list.txt").write_bytes(data)
    (root / "full").mkdir()
    (root / "full" / "junk").write_text("x")
    return root, env


# (case id, command: "cli" or "stage", arguments with {r} for the fixture folder, needles, prefix)
CASES = [
    # ---- synth
    ("synth-seed-negative", "cli", ["synth", "{r}/o1", "--seed", "-1"], ["--seed -1"], CLI),
    ("synth-seed-not-int", "cli", ["synth", "{r}/o1", "--seed", "abc"], ["'abc'"], None),
    ("synth-videos-one", "cli", ["synth", "{r}/o1", "--videos-per-class", "1"], ["--videos-per-class 1"], CLI),
    ("synth-videos-huge", "cli", ["synth", "{r}/o1", "--videos-per-class", "100000000"],
     ["--videos-per-class 100000000", "10,000"], CLI),
    ("synth-val-zero", "cli", ["synth", "{r}/o1", "--val-fraction", "0"], ["--val-fraction 0"], CLI),
    ("synth-val-over-one", "cli", ["synth", "{r}/o1", "--val-fraction", "1.5"], ["--val-fraction 1.5"], CLI),
    ("synth-val-nan", "cli", ["synth", "{r}/o1", "--val-fraction", "nan"], ["--val-fraction nan"], CLI),
    ("synth-frames-few", "cli", ["synth", "{r}/o1", "--frames", "2"], ["--frames 2", "between 4 and 300"], CLI),
    ("synth-frames-many", "cli", ["synth", "{r}/o1", "--frames", "100000"], ["--frames 100000"], CLI),
    ("synth-size-odd", "cli", ["synth", "{r}/o1", "--size", "33"], ["--size 33", "even"], CLI),
    ("synth-size-huge", "cli", ["synth", "{r}/o1", "--size", "8192"], ["--size 8192"], CLI),
    ("synth-out-is-file", "cli", ["synth", "{r}/a_file"], ["{r}/a_file", "is a file"], None),
    ("synth-out-not-empty", "cli", ["synth", "{r}/full"], ["{r}/full", "--force"], CLI),
    # ---- pack
    ("pack-workers-huge", "cli", ["pack", "{r}/s/rawframes", "{r}/p1", "--workers", "100000"],
     ["--workers 100000", "between 0"], CLI),
    ("pack-workers-negative", "cli", ["pack", "{r}/s/rawframes", "{r}/p1", "--workers", "-1"], ["--workers -1"], CLI),
    ("pack-quality-zero", "cli", ["pack", "{r}/s/rawframes", "{r}/p1", "--quality", "0"], ["--quality 0"], CLI),
    ("pack-quality-high", "cli", ["pack", "{r}/s/rawframes", "{r}/p1", "--quality", "101"], ["--quality 101"], CLI),
    ("pack-short-side-negative", "cli", ["pack", "{r}/s/rawframes", "{r}/p1", "--short-side", "-5"],
     ["--short-side -5"], CLI),
    ("pack-fps-zero", "cli", ["pack", "{r}/s/rawframes", "{r}/p1", "--fps", "0"], ["--fps 0"], CLI),
    ("pack-fps-nan", "cli", ["pack", "{r}/s/rawframes", "{r}/p1", "--fps", "nan"], ["--fps nan"], CLI),
    ("pack-shard-size-words", "cli", ["pack", "{r}/s/rawframes", "{r}/p1", "--shard-size", "lots"], ["'lots'"], CLI),
    ("pack-shard-size-zero", "cli", ["pack", "{r}/s/rawframes", "{r}/p1", "--shard-size", "0"], ["'0'"], CLI),
    ("pack-src-missing", "cli", ["pack", "{r}/nowhere", "{r}/p1"], ["{r}/nowhere", "does not exist"], CLI),
    ("pack-src-empty", "cli", ["pack", "{r}/xdg-empty", "{r}/p1"], ["{r}/xdg-empty"], CLI),
    ("pack-out-is-file", "cli", ["pack", "{r}/s/rawframes", "{r}/a_file"], ["{r}/a_file", "is a file"], None),
    ("pack-classes-latin1", "cli", ["pack", "{r}/s/rawframes", "{r}/p1", "--classes", "{r}/classes-latin1.txt"],
     ["{r}/classes-latin1.txt", "not UTF-8", "line 1"], CLI),
    ("pack-classes-missing", "cli", ["pack", "{r}/s/rawframes", "{r}/p1", "--classes", "{r}/nope.txt"],
     ["{r}/nope.txt", "does not exist"], CLI),
    ("pack-classes-duplicate", "cli", ["pack", "{r}/s/rawframes", "{r}/p1", "--classes", "{r}/classes-dup.txt"],
     ["{r}/classes-dup.txt", "twice"], CLI),
    ("pack-list-latin1", "cli", ["pack", "{r}/list-latin1", "{r}/p1"],
     ["{r}/list-latin1/train_list.txt", "not UTF-8"], CLI),
    ("pack-list-bad-line", "cli", ["pack", "{r}/list-badline", "{r}/p1"],
     ["train_list.txt:1", "'only-two 3'"], CLI),
    ("pack-list-label-range", "cli", ["pack", "{r}/list-label", "{r}/p1", "--classes", "{r}/classes-dup.txt"],
     ["{r}/classes-dup.txt"], CLI),
    ("pack-list-label-negative", "cli", ["pack", "{r}/list-neglabel", "{r}/p1"], ["label -3"], CLI),
    ("pack-frames-missing", "cli", ["pack", "{r}/list-missing", "{r}/p1"],
     ["none of the 1 samples", "{r}/list-missing/train/gone"], CLI),
    ("pack-hash-unknown", "cli", ["pack", "{r}/s/rawframes", "{r}/p1", "--hash", "md5"], ["'md5'"], None),
    ("pack-layout-unknown", "cli", ["pack", "{r}/s/rawframes", "{r}/p1", "--layout", "frames"], ["'frames'"], None),
    # ---- stage-data
    ("stage-manifest-not-json", "cli", ["stage-data", "-M", "{r}/notjson.json", "--nodes", "1", "--dry-run"],
     ["{r}/notjson.json", "cannot be read as JSON"], CLI),
    ("stage-manifest-latin1", "cli", ["stage-data", "-M", "{r}/latin1.json", "--nodes", "1", "--dry-run"],
     ["{r}/latin1.json", "utf-8"], CLI),
    ("stage-manifest-array", "cli", ["stage-data", "-M", "{r}/array.json", "--nodes", "1", "--dry-run"],
     ["{r}/array.json", "JSON object"], CLI),
    ("stage-manifest-missing-key", "cli", ["stage-data", "-M", "{r}/noshards.json", "--nodes", "1", "--dry-run"],
     ["{r}/noshards.json", "missing key 'shards'"], CLI),
    ("stage-manifest-missing-hash", "cli", ["stage-data", "-M", "{r}/nosha.json", "--nodes", "1", "--dry-run"],
     ["{r}/nosha.json", "missing key 'sha256'"], CLI),
    ("stage-manifest-missing-file", "cli", ["stage-data", "-M", "{r}/gone.json", "--nodes", "1", "--dry-run"],
     ["{r}/gone.json", "does not exist"], CLI),
    ("stage-shard-shell", "cli", ["stage-data", "-M", "{r}/pwned.json", "--nodes", "1", "--transport", "hpss",
                                  "--source", "/k", "--dest", "{r}/d1"], ["{r}/pwned.json", "'x;!touch PWNED'"], CLI),
    ("stage-shard-dotdot", "cli", ["stage-data", "-M", "{r}/dotdot.json", "--nodes", "1", "--dest", "{r}/d1"],
     ["{r}/dotdot.json", "'..'"], CLI),
    ("stage-shard-dash", "cli", ["stage-data", "-M", "{r}/dash.json", "--nodes", "1", "--dest", "{r}/d1"],
     ["{r}/dash.json", "'-rf'"], CLI),
    ("stage-shard-space", "cli", ["stage-data", "-M", "{r}/space.json", "--nodes", "1", "--dest", "{r}/d1"],
     ["{r}/space.json", "'a b.tar'"], CLI),
    ("stage-shard-slash", "cli", ["stage-data", "-M", "{r}/slash.json", "--nodes", "1", "--dest", "{r}/d1"],
     ["{r}/slash.json", "'sub/x.tar'"], CLI),
    ("stage-shard-backtick", "cli", ["stage-data", "-M", "{r}/backtick.json", "--nodes", "1", "--dest", "{r}/d1"],
     ["{r}/backtick.json", "'`id`.tar'"], CLI),
    ("stage-bytes-negative", "cli", ["stage-data", "-M", "{r}/negbytes.json", "--nodes", "1", "--dry-run"],
     ["{r}/negbytes.json", "'bytes'"], CLI),
    ("stage-digest-short", "cli", ["stage-data", "-M", "{r}/shortdigest.json", "--nodes", "1", "--dry-run"],
     ["{r}/shortdigest.json", "'abc123'"], CLI),
    ("stage-shards-not-list", "cli", ["stage-data", "-M", "{r}/notlist.json", "--nodes", "1", "--dry-run"],
     ["{r}/notlist.json", "must be lists"], CLI),
    ("stage-format", "cli", ["stage-data", "-M", "{r}/format.json", "--nodes", "1", "--dry-run"],
     ["{r}/format.json", "'webdataset/2'"], CLI),
    ("stage-dest-is-file", "cli", ["stage-data", "-M", "{r}/good.json", "--nodes", "1", "--dest", "{r}/a_file"],
     ["{r}/a_file", "is a file"], CLI),
    ("stage-nodes-zero", "cli", ["stage-data", "-M", "{r}/good.json", "--nodes", "0", "--dry-run"],
     ["--nodes 0"], CLI),
    ("stage-nodes-huge", "cli", ["stage-data", "-M", "{r}/good.json", "--nodes", "100000", "--dry-run"],
     ["--nodes 100,000"], CLI),
    ("stage-jobs-zero", "cli", ["stage-data", "-M", "{r}/good.json", "--nodes", "1", "--jobs", "0", "--dry-run"],
     ["--jobs 0"], CLI),
    ("stage-jobs-huge", "cli", ["stage-data", "-M", "{r}/good.json", "--nodes", "1", "--jobs", "100000",
                                "--dry-run"], ["--jobs 100000"], CLI),
    ("stage-retries-negative", "cli", ["stage-data", "-M", "{r}/good.json", "--nodes", "1", "--retries", "-1",
                                       "--dry-run"], ["--retries -1"], CLI),
    ("stage-retry-delay-negative", "cli", ["stage-data", "-M", "{r}/good.json", "--nodes", "1", "--retry-delay",
                                           "-1", "--dry-run"], ["--retry-delay -1"], CLI),
    ("stage-hpss-no-dest", "cli", ["stage-data", "-M", "{r}/good.json", "--nodes", "1", "--transport", "hpss",
                                   "--source", "/k"], ["--dest"], CLI),
    ("stage-hpss-source-shell", "cli", ["stage-data", "-M", "{r}/good.json", "--nodes", "1", "--transport", "hpss",
                                        "--source", "/k;!touch PWNED", "--dest", "{r}/d1"], ["'/k;!touch PWNED'"],
     CLI),
    ("stage-hpss-dest-space", "cli", ["stage-data", "-M", "{r}/good.json", "--nodes", "1", "--transport", "hpss",
                                      "--source", "/k", "--dest", "{r}/my data"], ["{r}/my data"], CLI),
    ("stage-hpss-htar-option", "cli", ["stage-data", "-M", "{r}/good.json", "--nodes", "1", "--transport", "hpss",
                                       "--htar", "-rf", "--dest", "{r}/d1"], ["'-rf'"], CLI),
    ("stage-htar-with-posix", "cli", ["stage-data", "-M", "{r}/good.json", "--nodes", "1", "--htar", "/k.tar"],
     ["--htar"], CLI),
    ("stage-source-missing", "cli", ["stage-data", "-M", "{r}/good.json", "--nodes", "1", "--source",
                                     "{r}/nowhere", "--dest", "{r}/d2"], ["{r}/nowhere", "does not exist"], CLI),
    ("stage-policy-unknown", "cli", ["stage-data", "-M", "{r}/good.json", "--nodes", "1", "--policy", "spread"],
     ["'spread'"], None),
    # ---- python -m trainer.stage (hop 2)
    ("hop2-shard-shell", "stage", ["--manifest", "{r}/pwned.json", "--dest", "{r}/n1", "--nodes", "1"],
     ["{r}/pwned.json", "'x;!touch PWNED'"], STAGE),
    ("hop2-shard-dotdot", "stage", ["--manifest", "{r}/dotdot.json", "--dest", "{r}/n1", "--nodes", "1"],
     ["{r}/dotdot.json", "'..'"], STAGE),
    ("hop2-not-json", "stage", ["--manifest", "{r}/notjson.json", "--dest", "{r}/n1", "--nodes", "1"],
     ["{r}/notjson.json"], STAGE),
    ("hop2-latin1", "stage", ["--manifest", "{r}/latin1.json", "--dest", "{r}/n1", "--nodes", "1"],
     ["{r}/latin1.json"], STAGE),
    ("hop2-missing-key", "stage", ["--manifest", "{r}/noshards.json", "--dest", "{r}/n1", "--nodes", "1"],
     ["{r}/noshards.json", "'shards'"], STAGE),
    ("hop2-manifest-missing", "stage", ["--manifest", "{r}/gone.json", "--dest", "{r}/n1", "--nodes", "1"],
     ["{r}/gone.json"], STAGE),
    ("hop2-nodes-zero", "stage", ["--manifest", "{r}/good.json", "--dest", "{r}/n1", "--nodes", "0"],
     ["--nodes 0"], STAGE),
    ("hop2-node-out-of-range", "stage", ["--manifest", "{r}/good.json", "--dest", "{r}/n1", "--nodes", "2",
                                         "--node", "5"], ["'5'"], STAGE),
    ("hop2-threads-negative", "stage", ["--manifest", "{r}/good.json", "--dest", "{r}/n1", "--nodes", "1",
                                        "--threads", "-2"], ["--threads -2"], STAGE),
    ("hop2-threads-huge", "stage", ["--manifest", "{r}/good.json", "--dest", "{r}/n1", "--nodes", "1",
                                    "--threads", "100000"], ["--threads 100000"], STAGE),
    ("hop2-dest-unset-var", "stage", ["--manifest", "{r}/good.json", "--dest", "$NO_SUCH_VARIABLE_X/data",
                                      "--nodes", "1"], ["$NO_SUCH_VARIABLE_X/data"], STAGE),
    ("hop2-dest-is-file", "stage", ["--manifest", "{r}/good.json", "--dest", "{r}/a_file", "--nodes", "1"],
     ["{r}/a_file", "is a file"], STAGE),
    ("hop2-dest-is-source", "stage", ["--manifest", "{r}/good.json", "--dest", "{r}", "--nodes", "1"],
     ["{r}", "own folder"], STAGE),
    ("hop2-policy-unknown", "stage", ["--manifest", "{r}/good.json", "--dest", "{r}/n1", "--nodes", "1",
                                      "--policy", "spread"], ["'spread'"], None),
    ("hop2-nodes-not-int", "stage", ["--manifest", "{r}/good.json", "--dest", "{r}/n1", "--nodes", "two"],
     ["'two'"], None),
]


@pytest.mark.parametrize("command, args, needles, prefix", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused(world, command, args, needles, prefix):
    root, env = world
    (root / "xdg-empty").mkdir(exist_ok=True)
    fill = [a.replace("{r}", str(root)) for a in args]
    env = {k: v for k, v in env.items() if k not in ("JSM_NAMESPACE_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")}
    env.update(PATH=f"{FAKES}{os.pathsep}{env['PATH']}", FAKE_HPSS_ROOT=str(root / "hpss"))
    if command == "cli":
        proc = run_cli(fill, env, cwd=root)
    else:
        proc = run_module("trainer.stage", fill, env, cwd=root)
    ran = list(Path(root).glob("PWNED*"))
    for p in ran:                      # keep the other cases independent of this one
        p.unlink()
    assert not ran, "a shard or path name ran a command"
    assert_refused(proc, [n.replace("{r}", str(root)) for n in needles], prefix=prefix)


def test_the_table_is_large_enough():
    assert len(CASES) >= 35
