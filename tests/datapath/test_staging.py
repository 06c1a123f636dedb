"""stage-data, both hops, with real processes: placement, end to end, kills, corruption, HPSS fakes."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO, run_cli
from trainer import shards, stage
from summit_jobs.schedulers.lsf.embedded.state import node_names

#: The virtual nodes' host names on this machine: vnode1... where tasks get host names, else 127.1.0.1...
NODE1, NODE2, NODE3, NODE4 = node_names(4)

FAKES = REPO / "tests" / "fakes"


# ---- helpers ----------------------------------------------------------------------------------

def blob_dataset(root: Path, sizes_mb, val=1, seed=0) -> dict:
    """A manifest over random 'shards' (hop 2 and hop 1 only copy and hash bytes)."""
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    names = [f"train-{i:05d}.tar" for i in range(len(sizes_mb))] + [f"val-{i:05d}.tar" for i in range(val)]
    sizes = list(sizes_mb) + [min(sizes_mb)] * val
    for i, (name, mb) in enumerate(zip(names, sizes)):
        p = root / name
        with open(p, "wb") as f:
            f.write(os.urandom(int(mb * (1 << 20))))
        entries.append({"name": name, "split": name.split("-")[0], "bytes": p.stat().st_size, "samples": 0,
                        "sha256": shards.file_hash(p), "index_offset": 0, "index_bytes": 0})
    m = {"format": shards.FORMAT, "name": "blobs", "classes": ["a"], "hash": "sha256", "shards": entries}
    shards.write_manifest(root / "manifest.json", m)
    return m


def flip_byte(p: Path, offset: int = 1000) -> None:
    with open(p, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x55]))


def run_stage(manifest, dest, node, nodes, policy="partition", env=None, timeout=120, extra=()):
    e = dict(env or os.environ)
    e.update({"JSM_NAMESPACE_RANK": str(node), "SUMMIT_JOBS_NVME": str(dest)})
    return subprocess.run([sys.executable, "-m", "trainer.stage", "--manifest", str(manifest), "--dest",
                           "$SUMMIT_JOBS_NVME/data", "--policy", policy, "--nodes", str(nodes), "--json", *extra],
                          env=e, capture_output=True, text=True, timeout=timeout)


def verified_names(folder: Path, manifest: dict):
    by_name = {s["name"]: s for s in manifest["shards"]}
    out = set()
    for p in folder.iterdir():
        if p.name in by_name:
            s = by_name[p.name]
            assert p.stat().st_size == s["bytes"] and shards.file_hash(p) == s["sha256"], p
            out.add(p.name)
    return out


@pytest.fixture
def hpss_env(cli_env, tmp_path):
    env = dict(cli_env)
    env["PATH"] = f"{FAKES}{os.pathsep}{env['PATH']}"
    env["FAKE_HPSS_ROOT"] = str(tmp_path / "hpss")
    env["FAKE_HPSS_STATE"] = str(tmp_path / "hpss-state")
    env["FAKE_HPSS_LOG"] = str(tmp_path / "hpss.log")
    (tmp_path / "hpss").mkdir()
    return env


def hpss_log(tmp_path):
    p = tmp_path / "hpss.log"
    return p.read_text().splitlines() if p.exists() else []


# ---- placement ----------------------------------------------------------------------------------

def _manifest(sizes, val=2):
    shards_ = [{"name": f"train-{i:05d}.tar", "split": "train", "bytes": b} for i, b in enumerate(sizes)]
    shards_ += [{"name": f"val-{i:05d}.tar", "split": "val", "bytes": 5} for i in range(val)]
    return {"shards": shards_}


def test_partition_balances_and_covers_train_replicates_val():
    sizes = [100, 90, 80, 70, 60, 50, 40, 30, 20, 10]
    per_node = stage.placement(_manifest(sizes), 3, "partition")
    train = [[s["name"] for s in node if s["split"] == "train"] for node in per_node]
    flat = sorted(n for t in train for n in t)
    assert flat == sorted(f"train-{i:05d}.tar" for i in range(10))       # each training shard exactly once
    loads = [sum(s["bytes"] for s in node if s["split"] == "train") for node in per_node]
    assert max(loads) - min(loads) <= max(sizes)
    assert all({"val-00000.tar", "val-00001.tar"} <= {s["name"] for s in node} for node in per_node)
    assert per_node == stage.placement(_manifest(sizes), 3, "partition")  # deterministic
    rep = stage.placement(_manifest(sizes), 4, "replicate")
    assert all(len(node) == 12 for node in rep)
    with pytest.raises(stage.StageError, match="at least 11 training shards"):
        stage.placement(_manifest(sizes), 11, "partition")


def test_dry_run_plan_on_summit(cli_env, tmp_path):
    m = {"format": shards.FORMAT, "name": "k400", "classes": ["a"], "hash": "sha256",
         "shards": [{"name": f"train-{i:05d}.tar", "split": "train", "bytes": 4 * 10**9, "samples": 1000,
                     "sha256": "0" * 64, "index_offset": 0, "index_bytes": 0} for i in range(512)]
         + [{"name": "val-00000.tar", "split": "val", "bytes": 3 * 10**9, "samples": 100,
             "sha256": "0" * 64, "index_offset": 0, "index_bytes": 0}]}
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    r = run_cli(["--machine", "summit", "stage-data", "-M", str(tmp_path / "manifest.json"), "--nodes", "256",
                 "--dry-run"], cli_env)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "513 shards, 2.1 TB, 256 nodes, policy partition" in out
    assert "node 0: 3 shards, 11.0 GB" in out and "node 255: 3 shards" in out and "more nodes" in out
    assert "-m trainer.stage" in out and "--dest /mnt/bb/$USER/summit-jobs/data" in out
    assert "estimate: ~5.2 s" in out and "warning" not in out
    r = run_cli(["--machine", "summit", "stage-data", "-M", str(tmp_path / "manifest.json"), "--nodes", "256",
                 "--policy", "replicate", "--dry-run", "--json"], cli_env)
    plan = json.loads(r.stdout)["plan"]
    assert plan["per_node"][7]["bytes"] == 2051 * 10**9 and len(plan["per_node"]) == 256
    assert "256 of 256 nodes get more than their NVMe holds" in plan["warnings"][0]
    assert "1.4 TB usable" in plan["warnings"][0] and "--policy partition" in plan["warnings"][0]


# ---- end to end: pack -> hop 1 -> hop 2 on two virtual nodes ----------------------------------------

def test_pack_then_both_hops_on_two_virtual_nodes(cli_env, tmp_path):
    env = dict(cli_env, SUMMIT_JOBS_LSF_HOME=str(tmp_path / "lsf"))
    assert run_cli(["synth", str(tmp_path / "s"), "--videos-per-class", "3", "--frames", "8", "--size", "48",
                    "--layout", "rawframes", "--quiet"], env).returncode == 0
    r = run_cli(["pack", str(tmp_path / "s" / "rawframes"), str(tmp_path / "shards"), "--shard-size", "40KB",
                 "--quiet"], env, timeout=120)
    assert r.returncode == 0, r.stderr
    r = run_cli(["stage-data", "-M", str(tmp_path / "shards" / "manifest.json"), "--nodes", "2", "--dest",
                 str(tmp_path / "pfs"), "--to-nvme", "--json"], env, timeout=180)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    manifest = shards.read_manifest(tmp_path / "shards")
    assert result["hop1"]["fetched"] == len(manifest["shards"])
    assert verified_names(tmp_path / "pfs", manifest) == {s["name"] for s in manifest["shards"]}
    expected = stage.placement(manifest, 2, "partition")
    keys = []
    for node, host in enumerate([NODE1, NODE2]):
        d = tmp_path / "lsf" / "nodes" / host / "nvme" / "summit-jobs" / "data"
        assert verified_names(d, manifest) == {s["name"] for s in expected[node]}
        local = shards.read_manifest(d)
        assert [s["name"] for s in local["shards"]] == [s["name"] for s in expected[node]]
        assert local["placement"] == {"policy": "partition", "node": node, "nodes": 2,
                                      "source": str((tmp_path / "pfs").resolve())}
        ds = shards.ShardDataset(d, "train")
        keys += [ds.key(i) for i in range(len(ds))]
        assert len(shards.ShardDataset(d, "val")) == 8                     # validation on every node
        assert not [p for p in d.iterdir() if stage.PARTIAL_TAG in p.name]
    assert sorted(keys) == sorted(shards.ShardDataset(tmp_path / "shards", "train").key(i) for i in range(16))
    # A rerun finds everything present and verified: nothing is copied again.
    r = run_cli(["stage-data", "-M", str(tmp_path / "shards" / "manifest.json"), "--nodes", "2", "--dest",
                 str(tmp_path / "pfs"), "--to-nvme", "--json"], env, timeout=180)
    again = json.loads(r.stdout)
    assert again["hop1"]["fetched"] == 0 and all(n["copied"] == 0 for n in again["hop2"])


# ---- hop 2 faults -------------------------------------------------------------------------------------

def test_hop2_sigkill_midway_then_rerun_copies_only_the_rest(tmp_path):
    m = blob_dataset(tmp_path / "pfs", [24] * 8, val=0)
    nvme = tmp_path / "nvme"
    dest = nvme / "data"
    sizes = {s["name"]: s["bytes"] for s in m["shards"]}
    killed = False
    for _ in range(5):
        shutil.rmtree(nvme, ignore_errors=True)
        env = dict(os.environ, JSM_NAMESPACE_RANK="0", SUMMIT_JOBS_NVME=str(nvme))
        p = subprocess.Popen([sys.executable, "-m", "trainer.stage", "--manifest", str(tmp_path / "pfs"),
                              "--dest", "$SUMMIT_JOBS_NVME/data", "--nodes", "1", "--threads", "1", "--quiet"],
                             env=env)
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None:
            finals = [q for q in dest.glob("*.tar")] if dest.is_dir() else []
            for q in finals:   # a file under its final name is always complete
                try:
                    assert q.stat().st_size == sizes[q.name]
                except FileNotFoundError:
                    pass
            if len(finals) >= 3 and any(stage.PARTIAL_TAG in q.name for q in dest.iterdir()):
                break
            time.sleep(0.002)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        if not (dest / "manifest.json").exists():
            killed = True
            break
    assert killed, "staging finished before it could be killed"
    before = verified_names(dest, m)
    assert 3 <= len(before) < 8
    assert any(stage.PARTIAL_TAG in q.name for q in dest.iterdir())     # the killed copy, hidden
    inodes = {n: (dest / n).stat().st_ino for n in before}
    r = run_stage(tmp_path / "pfs", nvme, 0, 1)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["present"] == len(before) and summary["copied"] == 8 - len(before)
    assert {n: (dest / n).stat().st_ino for n in before} == inodes     # kept, not copied again
    assert verified_names(dest, m) == set(sizes)
    assert not [q for q in dest.iterdir() if stage.PARTIAL_TAG in q.name]


def test_hop2_flipped_byte_is_caught_and_fetched_again(tmp_path):
    m = blob_dataset(tmp_path / "pfs", [1, 1, 1, 1], val=1)
    for node in (0, 1):
        assert run_stage(tmp_path / "pfs", tmp_path / f"n{node}", node, 2).returncode == 0
    victim = sorted((tmp_path / "n1" / "data").glob("train-*.tar"))[0]
    flip_byte(victim)
    r = run_stage(tmp_path / "pfs", tmp_path / "n1", 1, 2)
    assert r.returncode == 0, r.stderr
    assert f"{victim.name}: was corrupt, copied" in r.stderr
    assert json.loads(r.stdout)["copied"] == 1
    assert verified_names(tmp_path / "n1" / "data", m) >= {victim.name}


def test_hop2_missing_or_corrupt_source_fails_naming_the_shard(tmp_path):
    m = blob_dataset(tmp_path / "pfs", [1, 1], val=0)
    (tmp_path / "pfs" / "train-00001.tar").unlink()
    r = run_stage(tmp_path / "pfs", tmp_path / "n", 1, 2)
    assert r.returncode == 1 and "train-00001.tar is missing" in r.stderr and "Traceback" not in r.stderr
    flip_byte(tmp_path / "pfs" / "train-00000.tar")
    r = run_stage(tmp_path / "pfs", tmp_path / "n", 0, 2)
    assert r.returncode == 1 and "train-00000.tar" in r.stderr and "corrupt" in r.stderr
    assert not (tmp_path / "n" / "data" / "train-00000.tar").exists()
    assert not (tmp_path / "n" / "data" / "manifest.json").exists()
    # Wrong hash in the manifest: the same clear failure, nothing under the shard's name.
    blob_dataset(tmp_path / "pfs2", [1], val=0)
    mm = json.loads((tmp_path / "pfs2" / "manifest.json").read_text())
    mm["shards"][0]["sha256"] = "ab" * 32
    (tmp_path / "pfs2" / "manifest.json").write_text(json.dumps(mm))
    r = run_stage(tmp_path / "pfs2", tmp_path / "n2", 0, 1)
    assert r.returncode == 1 and "train-00000.tar" in r.stderr and "corrupt" in r.stderr
    assert not (tmp_path / "n2" / "data" / "train-00000.tar").exists()


def test_hop2_rank_and_destination_errors(tmp_path):
    blob_dataset(tmp_path / "pfs", [1, 1], val=0)
    r = run_stage(tmp_path / "pfs", tmp_path / "n", 5, 2)
    assert r.returncode == 1 and "between 0 and 1" in r.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("SUMMIT_JOBS_NVME", "JSM_NAMESPACE_RANK")}
    r = subprocess.run([sys.executable, "-m", "trainer.stage", "--manifest", str(tmp_path / "pfs"), "--dest",
                        "$SUMMIT_JOBS_NVME/data", "--nodes", "1"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "SUMMIT_JOBS_NVME" in r.stderr
    r = run_stage(tmp_path / "pfs", tmp_path / "n", 0, 3)
    assert r.returncode == 1 and "at least 3 training shards" in r.stderr


def test_collect_copies_node_files_back(tmp_path):
    src = tmp_path / "nvme" / "ckpt"
    (src / "sub").mkdir(parents=True)
    (src / "a.pt").write_bytes(b"1" * 100)
    (src / "sub" / "b.log").write_text("log")
    env = dict(os.environ, SUMMIT_JOBS_NVME=str(tmp_path / "nvme"), SUMMIT_JOBS_VNODE="vnode02")
    r = subprocess.run([sys.executable, "-m", "trainer.stage", "collect", "--src", "$SUMMIT_JOBS_NVME/ckpt",
                        "--dest", str(tmp_path / "run")], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "run" / "vnode02" / "a.pt").read_bytes() == b"1" * 100
    assert (tmp_path / "run" / "vnode02" / "sub" / "b.log").read_text() == "log"


# ---- hop 1 over the HPSS fakes -------------------------------------------------------------------------

def test_hop1_hsi_with_retries_and_a_corrupt_transfer(hpss_env, tmp_path):
    m = blob_dataset(tmp_path / "local", [1, 1, 1], val=1)
    archive = tmp_path / "hpss" / "home" / "me" / "k"
    shutil.copytree(tmp_path / "local", archive)
    env = dict(hpss_env, FAKE_HPSS_FAIL_FIRST="2", FAKE_HPSS_CORRUPT="train-00001.tar")
    r = run_cli(["stage-data", "-M", str(tmp_path / "local" / "manifest.json"), "--nodes", "2", "--transport",
                 "hpss", "--source", "/home/me/k", "--dest", str(tmp_path / "pfs"), "--retry-delay", "0.01",
                 "-j", "2", "--json"], env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "retrying" in r.stderr and "arrived corrupt" in r.stderr
    assert verified_names(tmp_path / "pfs", m) == {s["name"] for s in m["shards"]}
    gets = [line for line in hpss_log(tmp_path) if " get " in line]
    assert len(gets) == 4 + 2 + 1                   # 4 shards, 2 transient failures, 1 corrupt copy
    assert "hsi -q get" in gets[0] and ": /home/me/k/" in gets[0]
    assert shards.read_manifest(tmp_path / "pfs")["shards"] == m["shards"]


def test_hop1_htar_missing_member_is_named(hpss_env, tmp_path):
    m = blob_dataset(tmp_path / "local", [1, 1], val=1)
    cwd = tmp_path / "local"
    r = subprocess.run(["htar", "-cvf", "/home/me/k.tar", "train-00000.tar", "val-00000.tar"], cwd=cwd,
                       env=hpss_env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "hpss" / "home" / "me" / "k.tar.idx").is_file()
    r = run_cli(["stage-data", "-M", str(cwd / "manifest.json"), "--nodes", "1", "--transport", "hpss", "--htar",
                 "/home/me/k.tar", "--dest", str(tmp_path / "pfs"), "--retry-delay", "0.01"], hpss_env,
                timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "archive member train-00001.tar could not be extracted from /home/me/k.tar (not in the archive)" \
        in r.stderr
    assert len([x for x in hpss_log(tmp_path) if "-xvf" in x]) == 1       # not retried: it cannot appear
    assert not (tmp_path / "pfs" / "manifest.json").exists()
    assert not [p for p in (tmp_path / "pfs").iterdir() if p.name.startswith(".")]
    # hsi: a missing file is named too.
    shutil.copytree(cwd, tmp_path / "hpss" / "d")
    (tmp_path / "hpss" / "d" / "val-00000.tar").unlink()
    r = run_cli(["stage-data", "-M", str(cwd / "manifest.json"), "--nodes", "1", "--transport", "hpss",
                 "--source", "/d", "--dest", str(tmp_path / "pfs2"), "--retry-delay", "0.01"], hpss_env,
                timeout=120)
    assert r.returncode == 2 and "shard val-00000.tar could not be fetched from HPSS /d/val-00000.tar" in r.stderr
    assert "HPSS_ENOENT" in r.stderr


def test_hop1_htar_sigkill_then_rerun_fetches_only_missing(hpss_env, tmp_path):
    m = blob_dataset(tmp_path / "local", [2, 2, 2, 2], val=0)
    names = [s["name"] for s in m["shards"]]
    r = subprocess.run(["htar", "-cvf", "/k.tar", *names], cwd=tmp_path / "local", env=hpss_env,
                       capture_output=True, timeout=60)
    assert r.returncode == 0
    # First run: extract two members completely.
    part = dict(m, shards=m["shards"][:2])
    (tmp_path / "part.json").write_text(json.dumps(part))
    r = run_cli(["stage-data", "-M", str(tmp_path / "part.json"), "--nodes", "1", "--transport", "hpss", "--htar",
                 "/k.tar", "--dest", str(tmp_path / "pfs"), "--force"], hpss_env, timeout=120)
    assert r.returncode == 0, r.stderr
    (tmp_path / "pfs" / "manifest.json").unlink()
    # Second run: slow transfers, killed mid-way.
    env = dict(hpss_env, FAKE_HPSS_RATE=str(4 << 20))
    p = subprocess.Popen([sys.executable, "-m", "summit_jobs", "stage-data", "-M", str(tmp_path / "local" /
                          "manifest.json"), "--nodes", "1", "--transport", "hpss", "--htar", "/k.tar", "--dest",
                          str(tmp_path / "pfs"), "--quiet"], env=env, start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline and not list((tmp_path / "pfs").glob(".htar*/train-00002.tar")):
        time.sleep(0.01)
    time.sleep(0.1)
    os.killpg(p.pid, signal.SIGKILL)                 # stage-data and its htar child
    p.wait(timeout=30)
    visible = {q.name for q in (tmp_path / "pfs").iterdir() if not q.name.startswith(".")}
    assert visible == set(names[:2])                 # nothing half-extracted under a shard's name
    # Rerun: asks htar for exactly the missing members, finishes, everything verified.
    before = len(hpss_log(tmp_path))
    r = run_cli(["stage-data", "-M", str(tmp_path / "local" / "manifest.json"), "--nodes", "1", "--transport",
                 "hpss", "--htar", "/k.tar", "--dest", str(tmp_path / "pfs"), "--json"], hpss_env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["hop1"]["fetched"] == 2
    calls = hpss_log(tmp_path)[before:]
    assert calls == ["htar -xvf /k.tar train-00002.tar train-00003.tar"]
    assert verified_names(tmp_path / "pfs", m) == set(names)
    assert not [q for q in (tmp_path / "pfs").iterdir() if q.name.startswith(".htar")]


def test_hop1_posix_flipped_byte_is_fetched_again(cli_env, tmp_path):
    m = blob_dataset(tmp_path / "src", [1, 1], val=0)
    args = ["stage-data", "-M", str(tmp_path / "src" / "manifest.json"), "--nodes", "1", "--dest",
            str(tmp_path / "pfs"), "--json"]
    assert run_cli(args, cli_env).returncode == 0
    flip_byte(tmp_path / "pfs" / "train-00001.tar")
    r = run_cli(args, cli_env)
    assert r.returncode == 0, r.stderr
    hop1 = json.loads(r.stdout)["hop1"]
    assert hop1["fetched"] == 1 and hop1["present"] == 1
    assert verified_names(tmp_path / "pfs", m) == {"train-00000.tar", "train-00001.tar"}


# ---- bad input ------------------------------------------------------------------------------------------

def test_bad_manifests_are_refused_with_the_key_named(cli_env, tmp_path):
    m = blob_dataset(tmp_path / "src", [1], val=0)
    for mutate, text in ((lambda x: x.pop("shards"), "missing key 'shards'"),
                         (lambda x: x.update(owner="me"), "unknown key 'owner'"),
                         (lambda x: x["shards"][0].pop("sha256"), "missing key 'sha256'")):
        bad = json.loads(json.dumps(m))
        mutate(bad)
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        r = run_cli(["stage-data", "-M", str(tmp_path / "bad.json"), "--nodes", "1", "--dry-run"], cli_env)
        assert r.returncode == 2 and text in r.stderr and "Traceback" not in r.stderr
    bad = json.loads(json.dumps(m))
    bad["shards"][0]["sha256"] = "cd" * 32                   # well-formed, wrong
    (tmp_path / "src" / "wrong.json").write_text(json.dumps(bad))
    r = run_cli(["stage-data", "-M", str(tmp_path / "src" / "wrong.json"), "--nodes", "1", "--dest",
                 str(tmp_path / "pfs"), "--retries", "0"], cli_env)
    assert r.returncode == 2 and "train-00000.tar" in r.stderr and "corrupt" in r.stderr
    assert not (tmp_path / "pfs" / "train-00000.tar").exists()


def test_shard_larger_than_nvme(cli_env, tmp_path):
    m = blob_dataset(tmp_path / "src", [2, 1], val=0)
    prof = (REPO / "envs" / "local.yaml").read_text().replace("nvme_capacity_gb: 20", "nvme_capacity_gb: 0.0015")
    (tmp_path / "machines").mkdir()
    (tmp_path / "machines" / "tiny.yaml").write_text(prof.replace("name: local", "name: tiny"))
    env = dict(cli_env, SUMMIT_JOBS_MACHINES_PATH=str(tmp_path / "machines"), SUMMIT_JOBS_LSF_HOME=str(tmp_path / "l"))
    base = ["--machine", "tiny", "stage-data", "-M", str(tmp_path / "src" / "manifest.json"), "--nodes", "2"]
    r = run_cli(base + ["--dry-run"], env)
    assert r.returncode == 0 and "warning: shard train-00000.tar (2.1 MB) is larger than a node's NVMe (1.5 MB" in r.stdout
    r = run_cli(base + ["--to-nvme"], env)
    assert r.returncode == 2 and "train-00000.tar (2.1 MB) is larger than a node's NVMe" in r.stderr
    assert "--shard-size" in r.stderr
    assert not (tmp_path / "l" / "nodes").exists()
    r = run_cli(["--machine", "summit", "stage-data", "-M", str(tmp_path / "src" / "manifest.json"), "--nodes",
                 "1", "--to-nvme"], cli_env)
    assert r.returncode == 2 and "only the embedded machine" in r.stderr


def test_login_side_never_imports_torch():
    code = ("import sys, summit_jobs.cli.submit, summit_jobs.data.staging, summit_jobs.data.pack, summit_jobs.data.synth, trainer.stage;"
            "print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr


def test_blake3_manifest_end_to_end(cli_env, tmp_path):
    pytest.importorskip("blake3")
    env = dict(cli_env, SUMMIT_JOBS_LSF_HOME=str(tmp_path / "lsf"))
    assert run_cli(["synth", str(tmp_path / "s"), "--videos-per-class", "2", "--frames", "4", "--size", "32",
                    "--layout", "rawframes", "--quiet"], env).returncode == 0
    r = run_cli(["pack", str(tmp_path / "s" / "rawframes"), str(tmp_path / "sh"), "--hash", "blake3",
                 "--shard-size", "10KB", "--quiet"], env, timeout=120)
    assert r.returncode == 0, r.stderr
    m = shards.read_manifest(tmp_path / "sh")
    assert m["hash"] == "blake3" and all(len(s["blake3"]) == 64 and "sha256" not in s for s in m["shards"])
    r = run_cli(["stage-data", "-M", str(tmp_path / "sh" / "manifest.json"), "--nodes", "2", "--to-nvme", "--json"],
                env, timeout=120)
    assert r.returncode == 0, r.stderr
    d = tmp_path / "lsf" / "nodes" / NODE2 / "nvme" / "summit-jobs" / "data"
    victim = next(d.glob("train-*.tar"))
    flip_byte(victim, 100)
    r = run_stage(tmp_path / "sh", tmp_path / "lsf" / "nodes" / NODE2 / "nvme" / "summit-jobs", 1, 2)
    assert r.returncode == 0 and f"{victim.name}: was corrupt, copied" in r.stderr
