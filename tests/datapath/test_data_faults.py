"""Faults on the data path, with real processes: kill -9 at several points of pack and of both
staging hops, full and read-only file systems, two runs into one folder, and shard names that
would run a command in the HPSS client.

After every fault the same checks hold: no file under a final name is corrupt, a manifest
never lists a shard whose bytes differ from what it records, no error is a traceback, and
running the same command again finishes and verifies everything.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from helpers import REPO, kill_marked_group, marked, run_cli
from trainer import shards, stage

FAKES = REPO / "tests" / "fakes"
PY = [sys.executable, "-m"]


# ---- helpers ----------------------------------------------------------------------------------

def blobs(root: Path, n: int, mb: float, seed: int) -> dict:
    """A manifest over ``n`` training shards of random bytes (+1 validation shard); staging only
    copies and hashes bytes. Another ``seed`` gives other bytes under the same shard names."""
    import random
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for name in [f"train-{i:05d}.tar" for i in range(n)] + ["val-00000.tar"]:
        p = root / name
        p.write_bytes(rng.randbytes(int(mb * (1 << 20))))
        entries.append({"name": name, "split": name.split("-")[0], "bytes": p.stat().st_size, "samples": 0,
                        "sha256": shards.file_hash(p), "index_offset": 0, "index_bytes": 0})
    m = {"format": shards.FORMAT, "name": f"blobs{seed}", "classes": ["a"], "hash": "sha256", "shards": entries}
    shards.write_manifest(root / "manifest.json", m)
    return m


def start(argv, env, log: Path, cwd=None) -> subprocess.Popen:
    """A real process in its own group (so a kill reaches its workers and transfer children)."""
    env = marked(env)
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=open(log, "wb"), start_new_session=True)
    proc.marked_env = env
    return proc


def kill_group(p: subprocess.Popen) -> None:
    """What is left of the group ``start`` began (helpers.kill_marked_group: never a group that took its id)."""
    kill_marked_group(p.pid, p.marked_env)
    p.wait(timeout=30)


def wait_for(cond, timeout: float = 60, p: subprocess.Popen = None) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        if p is not None and p.poll() is not None:
            return False
        time.sleep(0.005)
    return False


def state_shards(out: Path) -> int:
    """Shards a pack into ``out`` recorded as finished: in ``out``, or in ``out/.pack-next`` where --force
    builds the replacement of a finished pack."""
    n = 0
    for state in (out / ".pack-state.json", out / ".pack-next" / ".pack-state.json"):
        try:
            n = max(n, len(json.loads(state.read_text())["shards"]))
        except (OSError, ValueError, KeyError):
            pass
    return n


def verifies(path: Path, entry: dict) -> bool:
    """Whether ``path`` holds exactly the shard ``entry`` names; a file the watched process removes or
    renames while this looks is simply not (yet) there."""
    try:
        return path.is_file() and path.stat().st_size == entry["bytes"] and shards.file_hash(path) == entry["sha256"]
    except FileNotFoundError:
        return False


def assert_pack_consistent(out: Path) -> None:
    """A manifest, if any, matches its shards' bytes; every visible shard file is a whole shard."""
    if (out / "manifest.json").exists():
        m = shards.read_manifest(out)
        for e in m["shards"]:
            assert verifies(out / e["name"], e), f"manifest lists {e['name']} with other bytes"
    for f in out.glob("*.tar"):
        with tarfile.open(f) as tf:
            assert tf.getnames()[-1] == shards.INDEX_MEMBER, f"{f.name} is incomplete under its final name"


def assert_dest_consistent(dest: Path, *manifests: dict) -> None:
    """Every visible shard is whole (it verifies against one of ``manifests``: the dataset being
    staged, or the one it replaces); a manifest in ``dest`` lists only shards that are there and verify."""
    for f in dest.iterdir():
        entries = [e for m in manifests for e in m["shards"] if e["name"] == f.name]
        if entries:
            assert any(verifies(f, e) for e in entries), f"{f.name} is corrupt under its final name"
    if (dest / "manifest.json").exists():
        local = shards.read_manifest(dest)
        for e in local["shards"]:
            assert verifies(dest / e["name"], e), f"the manifest in {dest} lists {e['name']} with other bytes"


def leftovers(folder: Path):
    """Temporary files and locks: what a finished or failed run must not leave behind."""
    return sorted(p.name for p in folder.iterdir()
                  if re.fullmatch(r"\..+(\.partial\.|\.tmp)\d+|.+\.partial|\.summit-jobs\.lock", p.name))


def replaced_since(dest: Path, names, t0_ns: int) -> int:
    """How many of ``names`` were written into ``dest`` after ``t0_ns`` (cheap: no hashing)."""
    n = 0
    for name in names:
        try:
            n += (dest / name).stat().st_mtime_ns >= t0_ns
        except FileNotFoundError:
            pass
    return n


def clean_rerun(args, env, timeout=180, cwd=None):
    r = run_cli(args, env, timeout=timeout, cwd=cwd)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    """A rawframes set of about 80 shards (a second of packing here), and its reference pack: the kill
    points below are shard counts, so a fast machine cannot finish the pack between two of them."""
    root = tmp_path_factory.mktemp("faults")
    env = dict(os.environ, XDG_CONFIG_HOME=str(root / "xdg"))
    r = run_cli(["synth", str(root / "s"), "--videos-per-class", "24", "--frames", "16", "--size", "128",
                 "--layout", "rawframes", "--quiet"], env, timeout=180)
    assert r.returncode == 0, r.stderr
    clean_rerun(["pack", str(root / "s" / "rawframes"), str(root / "ref"), *PACK_OPTS], env)
    return root / "s" / "rawframes", root / "ref", env


PACK_OPTS = ["--shard-size", "100KB", "--short-side", "96", "-j", "2", "--quiet"]


def same_as_reference(out: Path, ref: Path) -> None:
    assert shards.read_manifest(out)["shards"] == shards.read_manifest(ref)["shards"]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in ref.iterdir())


class Mounts:
    """Small tmpfs mounts (we are root in the test environment); skipped where mount is refused."""

    def __init__(self, base: Path):
        self.base, self.points = base, []

    def mount(self, name: str, options: str) -> Path:
        point = self.base / name
        point.mkdir(parents=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or 'mount failed'}); this test needs a "
                        "small file system to fill")
        self.points.append(point)
        return point

    def remount(self, point: Path, options: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{options}", str(point)], check=True)

    def close(self) -> None:
        for p in reversed(self.points):
            subprocess.run(["umount", "-l", str(p)], capture_output=True)


@pytest.fixture
def mounts(tmp_path):
    m = Mounts(tmp_path / "mnt")
    yield m
    m.close()


@pytest.fixture
def read_only(tmp_path, mounts):
    """A read-only folder: a read-only tmpfs where mounting works, else a chmod 0555 folder (not root)."""
    if shutil.which("mount") and os.geteuid() == 0:
        return mounts.mount("ro", "ro,size=1m")
    if os.geteuid() == 0:
        pytest.skip("root ignores folder permissions and mount is not available: no read-only folder to test")
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    return d


@pytest.fixture
def hpss(cli_env, tmp_path):
    env = dict(cli_env, PATH=f"{FAKES}{os.pathsep}{cli_env['PATH']}", FAKE_HPSS_ROOT=str(tmp_path / "hpss"),
               FAKE_HPSS_LOG=str(tmp_path / "hpss.log"))
    (tmp_path / "hpss").mkdir()
    return env


def no_traceback(r) -> None:
    assert "Traceback" not in (r.stderr or "") + (r.stdout or ""), r.stderr[-3000:]


# ---- kill -9 ----------------------------------------------------------------------------------------

def test_pack_killed_at_several_points_then_finishes_identically(frames, tmp_path):
    src, ref, env = frames
    out = tmp_path / "out"
    argv = PY + ["summit_jobs", "pack", str(src), str(out), *PACK_OPTS]
    kills, committed, seen = 0, False, []
    # Early (start-up, listing), then after 2, 10, 30 and 60 finished shards.
    for when in (0.15, 2, 10, 30, 60):
        p = start(argv, env, tmp_path / "pack.log")
        if isinstance(when, float):
            time.sleep(when)
        else:
            wait_for(lambda: state_shards(out) >= when, p=p)
        kills += p.poll() is None
        kill_group(p)
        seen.append((when, p.returncode, state_shards(out), (tmp_path / "pack.log").read_text()[-300:]))
        if out.exists():
            assert_pack_consistent(out)
            committed = (out / "manifest.json").exists()
            if committed:
                # The kill landed after the manifest's rename (the commit point) but before the
                # process exited: the pack is finished, and must be the reference's.
                assert shards.read_manifest(out)["shards"] == shards.read_manifest(ref)["shards"]
                break
    assert kills >= 4, f"pack finished before most kills landed: {seen}"
    if committed:                  # finished by a killed run: the reference's shards, its lock at most
        assert sorted(p.name for p in out.glob("*.tar")) == sorted(p.name for p in ref.glob("*.tar"))
        assert set(leftovers(out)) <= {".summit-jobs.lock"}
    else:
        clean_rerun(["pack", str(src), str(out), *PACK_OPTS], env)
        same_as_reference(out, ref)
        assert not leftovers(out)


def test_pack_force_over_a_finished_pack_killed_never_leaves_a_lying_manifest(frames, tmp_path):
    """The old pack has more, smaller shards of other bytes under the names the new one writes."""
    src, ref, env = frames
    out = tmp_path / "out"
    clean_rerun(["pack", str(src), str(out), "--shard-size", "40KB", "--short-side", "64", "--quiet"], env)
    old_count = len(shards.read_manifest(out)["shards"])
    argv = PY + ["summit_jobs", "pack", str(src), str(out), "--force", *PACK_OPTS]
    for when in (0.2, 3, 12, 40):
        p = start(argv, env, tmp_path / "pack.log")
        if isinstance(when, float):
            time.sleep(when)
        else:
            wait_for(lambda: state_shards(out) >= when, p=p)
        kill_group(p)
        assert_pack_consistent(out)
    clean_rerun(["pack", str(src), str(out), "--force", *PACK_OPTS], env)
    same_as_reference(out, ref)                    # and the old pack's extra shards are gone
    assert old_count > len(shards.read_manifest(out)["shards"])
    assert not leftovers(out)


def assert_reads_completely(out: Path, manifest: dict) -> None:
    """``out`` holds exactly the pack ``manifest`` describes: every shard verifies, every frame of every
    sample reads back as a JPEG."""
    assert shards.read_manifest(out) == manifest
    for e in manifest["shards"]:
        assert verifies(out / e["name"], e), f"{e['name']} does not verify"
    for split in {e["split"] for e in manifest["shards"]}:
        ds = shards.ShardDataset(out, split)
        assert len(ds) == sum(e["samples"] for e in manifest["shards"] if e["split"] == split)
        for i in range(len(ds)):
            assert all(f[:2] == b"\xff\xd8" for f in ds.frames(i, range(ds.num_frames(i))))
        ds.close()


def test_pack_force_killed_part_way_keeps_the_old_pack_whole(frames, tmp_path):
    """--force builds the new pack beside the old one: killed part-way (twice), the old pack still reads and
    verifies completely; a rerun resumes the replacement, swaps it in and leaves nothing behind."""
    src, ref, env = frames
    out = tmp_path / "out"
    clean_rerun(["pack", str(src), str(out), "--shard-size", "40KB", "--short-side", "64", "--quiet"], env)
    old = shards.read_manifest(out)
    argv = PY + ["summit_jobs", "pack", str(src), str(out), "--force", *PACK_OPTS]
    for when in (3, 20):
        p = start(argv, env, tmp_path / "pack.log")
        assert wait_for(lambda: state_shards(out) >= when, p=p), (tmp_path / "pack.log").read_text()[-2000:]
        kill_group(p)
        assert_reads_completely(out, old)
    r = run_cli(["pack", str(src), str(out), *PACK_OPTS], env)
    assert r.returncode == 2 and "unfinished replacement" in r.stderr and "--force" in r.stderr, r.stderr
    assert_reads_completely(out, old)
    summary = json.loads(clean_rerun(argv[3:] + ["--json"], env).stdout)
    assert summary["resumed_shards"] >= 20
    same_as_reference(out, ref)
    assert_reads_completely(out, shards.read_manifest(ref))
    assert not leftovers(out) and not (out / ".pack-next").exists()


def test_pack_force_killed_during_the_swap_is_completed_by_the_next_run(frames, tmp_path):
    """The few renames of the swap, cut short: the old manifest gone, some new shards moved. The finished
    replacement's manifest is still in .pack-next, and the next pack into OUT completes the swap first."""
    src, ref, env = frames
    out = tmp_path / "out"
    clean_rerun(["pack", str(src), str(out), "--shard-size", "40KB", "--short-side", "64", "--quiet"], env)
    shutil.copytree(ref, out / ".pack-next")           # a finished replacement, as --force builds it
    new = shards.read_manifest(out / ".pack-next")
    (out / "manifest.json").unlink()
    for e in new["shards"][: len(new["shards"]) // 2]:
        os.replace(out / ".pack-next" / e["name"], out / e["name"])
    r = run_cli(["pack", str(src), str(out), *PACK_OPTS], env)
    # finished, and not packed again: the message says the interrupted replacement was swapped in
    assert r.returncode == 2 and "holds a finished pack again" in r.stderr and "--force" in r.stderr, r.stderr
    same_as_reference(out, ref)
    assert_reads_completely(out, new)
    assert not leftovers(out)


def _children(pid: int):
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return ""


def test_pack_main_process_killed_alone_its_workers_exit_quietly(frames, tmp_path):
    src, _, env = frames
    out = tmp_path / "out"
    log = tmp_path / "pack.log"
    p = start(PY + ["summit_jobs", "pack", str(src), str(out), *PACK_OPTS], env, log)
    assert wait_for(lambda: state_shards(out) >= 1 and _children(p.pid), p=p)
    workers = [k for k in _children(p.pid) if "spawn_main" in _cmdline(k)]
    assert workers
    p.send_signal(signal.SIGKILL)                  # the main process only, as the OOM killer would
    p.wait(timeout=30)
    assert wait_for(lambda: not any("spawn_main" in _cmdline(w) for w in workers), 10), "workers outlived pack"
    time.sleep(0.2)
    kill_group(p)                                  # the rest of the group (multiprocessing's tracker)
    assert "Traceback" not in log.read_text(errors="replace")
    assert_pack_consistent(out)


def test_stage_data_hop1_killed_at_several_points_then_finishes(hpss, tmp_path):
    m = blobs(tmp_path / "hpss" / "k", 6, 1, seed=1)
    dest = tmp_path / "pfs"
    env = dict(hpss, FAKE_HPSS_RATE=str(3 << 20))
    args = ["stage-data", "-M", str(tmp_path / "hpss" / "k" / "manifest.json"), "--nodes", "1", "--transport",
            "hpss", "--source", "/k", "--dest", str(dest), "-j", "2", "--quiet"]
    landed = 0
    # During start-up, then once 1 and 3 shards have landed (a transfer is under way each time).
    for k in (0, 1, 3):
        p = start(PY + ["summit_jobs", *args], env, tmp_path / "stage.log")
        if k:
            wait_for(lambda: sum(verifies(dest / e["name"], e) for e in m["shards"]) >= k, p=p)
        else:
            time.sleep(0.3)
        landed += p.poll() is None
        kill_group(p)
        if dest.exists():
            assert_dest_consistent(dest, m)
    assert landed == 3, "stage-data finished before the kills"
    r = clean_rerun(args + ["--json"], hpss)
    assert_dest_consistent(dest, m)
    assert all(verifies(dest / e["name"], e) for e in m["shards"])
    assert shards.read_manifest(dest)["shards"] == m["shards"] and not leftovers(dest)
    assert json.loads(r.stdout)["hop1"]["present"] >= 3     # what the killed runs verified was kept


def test_stage_data_force_over_another_dataset_killed_never_leaves_a_lying_manifest(hpss, cli_env, tmp_path):
    a = blobs(tmp_path / "a", 5, 0.5, seed=2)
    b = blobs(tmp_path / "hpss" / "b", 5, 0.5, seed=3)        # same shard names, other bytes
    dest = tmp_path / "pfs"
    clean_rerun(["stage-data", "-M", str(tmp_path / "a" / "manifest.json"), "--nodes", "1", "--dest", str(dest),
                 "--quiet"], cli_env)
    assert shards.read_manifest(dest) == a
    env = dict(hpss, FAKE_HPSS_RATE=str(4 << 20))
    args = ["stage-data", "-M", str(tmp_path / "hpss" / "b" / "manifest.json"), "--nodes", "1", "--transport",
            "hpss", "--source", "/b", "--dest", str(dest), "-j", "1", "--force", "--quiet"]
    for k in (1, 3):
        p = start(PY + ["summit_jobs", *args], env, tmp_path / "stage.log")
        assert wait_for(lambda: sum(verifies(dest / e["name"], e) for e in b["shards"]) >= k, p=p)
        kill_group(p)
        assert_dest_consistent(dest, a, b)
    clean_rerun(args, hpss)
    assert shards.read_manifest(dest) == b and all(verifies(dest / e["name"], e) for e in b["shards"])


def _hop2(manifest: Path, nvme: Path, extra=()):
    env = dict(os.environ, JSM_NAMESPACE_RANK="0", SUMMIT_JOBS_NVME=str(nvme))
    return PY + ["trainer.stage", "--manifest", str(manifest), "--dest", "$SUMMIT_JOBS_NVME/data", "--nodes", "1",
                 "--threads", "1", "--quiet", *extra], env


def test_hop2_killed_at_several_points_over_another_dataset_then_finishes(tmp_path):
    a = blobs(tmp_path / "a", 6, 12, seed=4)
    b = blobs(tmp_path / "b", 6, 12, seed=5)                  # same shard names, other bytes
    nvme = tmp_path / "nvme"
    dest = nvme / "data"
    argv, env = _hop2(tmp_path / "a", nvme)
    assert subprocess.run(argv, env=env, timeout=120).returncode == 0
    argv, env = _hop2(tmp_path / "b", nvme)
    names = [e["name"] for e in b["shards"]]
    t0 = time.time_ns()
    for k in (0, 1, 3, 5):
        p = start(argv, env, tmp_path / "hop2.log")
        if k:
            wait_for(lambda: replaced_since(dest, names, t0) >= k, p=p)
        else:
            time.sleep(0.15)
        kill_group(p)
        assert_dest_consistent(dest, a, b)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    local = shards.read_manifest(dest)
    assert local["shards"] == b["shards"] and all(verifies(dest / e["name"], e) for e in b["shards"])
    assert not leftovers(dest)


# ---- full file systems ------------------------------------------------------------------------------

def test_full_file_system_pack_and_synth(frames, mounts, tmp_path):
    src, ref, env = frames
    disk = mounts.mount("full", "size=1m")
    out = disk / "out"
    r = run_cli(["pack", str(src), str(out), *PACK_OPTS], env, timeout=180)
    assert r.returncode == 1 and "No space left on device" in r.stderr and str(out) in r.stderr, r.stderr
    no_traceback(r)
    assert not (out / "manifest.json").exists() and not leftovers(out)
    assert_pack_consistent(out)
    mounts.remount(disk, "size=20m")
    clean_rerun(["pack", str(src), str(out), *PACK_OPTS], env)
    same_as_reference(out, ref)
    shutil.rmtree(out)
    mounts.remount(disk, "size=1m")
    r = run_cli(["synth", str(disk / "syn"), "--videos-per-class", "4", "--frames", "16", "--size", "128",
                 "--quiet"], env, timeout=180)
    assert r.returncode == 1 and "No space left on device" in r.stderr and str(disk / "syn") in r.stderr
    no_traceback(r)
    assert not [p for p in (disk / "syn").rglob(".*")]     # no temporary file left behind
    mounts.remount(disk, "size=20m")
    clean_rerun(["synth", str(disk / "syn"), "--videos-per-class", "4", "--frames", "16", "--size", "128",
                 "--quiet", "--force"], env)


def test_full_file_system_stage_data_both_hops(hpss, cli_env, mounts, tmp_path):
    m = blobs(tmp_path / "hpss" / "k", 4, 0.5, seed=6)
    disk = mounts.mount("pfs", "size=1m")
    manifest = str(tmp_path / "hpss" / "k" / "manifest.json")
    posix = ["stage-data", "-M", manifest, "--nodes", "1", "--dest", str(disk / "posix"), "--quiet"]
    r = run_cli(posix, cli_env)
    assert r.returncode == 1 and "No space left on device" in r.stderr and str(disk / "posix") in r.stderr
    no_traceback(r)
    assert not (disk / "posix" / "manifest.json").exists() and not leftovers(disk / "posix")
    assert_dest_consistent(disk / "posix", m)
    shutil.rmtree(disk / "posix")
    hsi = ["stage-data", "-M", manifest, "--nodes", "1", "--transport", "hpss", "--source", "/k", "--dest",
           str(disk / "hsi"), "-j", "1", "--retry-delay", "0.01", "--quiet"]
    r = run_cli(hsi, hpss)
    assert r.returncode == 2 and "cannot be written into" in r.stderr and "retrying" not in r.stderr, r.stderr
    no_traceback(r)
    assert not (disk / "hsi" / "manifest.json").exists() and not leftovers(disk / "hsi")
    assert_dest_consistent(disk / "hsi", m)
    mounts.remount(disk, "size=10m")
    clean_rerun(hsi, hpss)
    assert shards.read_manifest(disk / "hsi") == m
    # Hop 2: a share larger than the folder is refused before copying; running out of inodes
    # half-way (the byte count fits) fails naming the shard, and a rerun with room finishes.
    nvme = mounts.mount("nvme", "size=1m")
    argv, env = _hop2(disk / "hsi", nvme)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "node 0's share is" in r.stderr and str(nvme / "data") in r.stderr, r.stderr
    no_traceback(r)
    mounts.remount(nvme, "size=10m,nr_inodes=5")
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "No space left on device" in r.stderr and ".tar" in r.stderr, r.stderr
    assert r.stderr.startswith("trainer.stage: error: ") and r.stderr.count("\n") == 1
    assert_dest_consistent(nvme / "data", m)
    assert not (nvme / "data" / "manifest.json").exists() and not leftovers(nvme / "data")
    mounts.remount(nvme, "nr_inodes=1000")
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert shards.read_manifest(nvme / "data")["shards"] == m["shards"]


def test_read_only_destinations(frames, hpss, read_only, tmp_path):
    src, _, env = frames
    m = blobs(tmp_path / "hpss" / "k", 2, 0.1, seed=7)
    manifest = str(tmp_path / "hpss" / "k" / "manifest.json")
    runs = []
    for where in (read_only, read_only / "sub"):
        runs.append(run_cli(["pack", str(src), str(where), "--quiet"], env))
        runs.append(run_cli(["synth", str(where), "--videos-per-class", "2", "--quiet"], env))
        runs.append(run_cli(["stage-data", "-M", manifest, "--nodes", "1", "--dest", str(where), "--quiet"], env))
        runs.append(run_cli(["stage-data", "-M", manifest, "--nodes", "1", "--transport", "hpss", "--source", "/k",
                             "--dest", str(where), "--quiet"], hpss))
        argv, hop2_env = _hop2(Path(manifest), where)
        runs.append(subprocess.run(argv, env=hop2_env, capture_output=True, text=True, timeout=60))
    for r in runs:
        assert r.returncode != 0 and str(read_only) in r.stderr, (r.args, r.stderr)
        assert "Read-only file system" in r.stderr or "Permission denied" in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1, r.stderr     # one line
        no_traceback(r)
    assert m and not list(read_only.iterdir())


# ---- two runs, one folder ---------------------------------------------------------------------------

def test_two_stage_data_runs_into_one_folder(hpss, tmp_path):
    m = blobs(tmp_path / "hpss" / "k", 3, 1, seed=8)
    dest = tmp_path / "pfs"
    args = ["stage-data", "-M", str(tmp_path / "hpss" / "k" / "manifest.json"), "--nodes", "1", "--transport",
            "hpss", "--source", "/k", "--dest", str(dest), "-j", "2", "--quiet"]
    first = start(PY + ["summit_jobs", *args], dict(hpss, FAKE_HPSS_RATE=str(1 << 18)), tmp_path / "first.log")
    assert wait_for(lambda: dest.is_dir() and any(stage.PARTIAL_TAG in p.name for p in dest.iterdir()), p=first)
    procs = [subprocess.Popen(argv, env=hpss, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for argv in (PY + ["summit_jobs", *args],
                          PY + ["trainer.stage", "--manifest", str(tmp_path / "hpss" / "k"), "--dest", str(dest),
                                "--nodes", "1", "--node", "0"])]    # hop 2 pointed at the same folder by mistake
    second, hop2 = (subprocess.CompletedProcess(p.args, 0, *p.communicate(timeout=60)) for p in procs)
    second.returncode, hop2.returncode = (p.returncode for p in procs)
    assert first.poll() is None, "the first run ended before the others started: too fast to test"
    assert first.wait(timeout=120) == 0, (tmp_path / "first.log").read_text()
    assert second.returncode == 2 and "in use by another run" in second.stderr, second.stderr
    assert f"pid {first.pid}" in second.stderr and "summit-jobs stage-data" in second.stderr
    assert hop2.returncode == 1 and f"pid {first.pid}" in hop2.stderr, hop2.stderr
    for r in (second, hop2):
        no_traceback(r)
    assert shards.read_manifest(dest) == m and all(verifies(dest / e["name"], e) for e in m["shards"])
    assert not leftovers(dest)


# ---- a shard name that is a command ------------------------------------------------------------------

def test_shard_name_that_would_run_a_command_in_hsi(hpss, tmp_path):
    m = blobs(tmp_path / "hpss" / "k", 1, 0.01, seed=9)
    m["shards"][0]["name"] = "x;!touch PWNED"
    bad = tmp_path / "hpss" / "k" / "evil.json"
    bad.write_text(json.dumps(m))
    (tmp_path / "hpss" / "k" / "train-00000.tar").rename(tmp_path / "hpss" / "k" / "x;!touch PWNED")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    r = run_cli(["stage-data", "-M", str(bad), "--nodes", "1", "--transport", "hpss", "--source", "/k", "--dest",
                 str(tmp_path / "pfs"), "--retries", "0"], hpss, cwd=cwd)
    argv, env = _hop2(bad, tmp_path / "nvme")
    hop2 = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert not list(cwd.iterdir()) and not list(tmp_path.glob("**/PWNED*")), "the shard name ran a command"
    assert not (tmp_path / "hpss.log").exists()                 # hsi was never called
    for proc in (r, hop2):
        assert proc.returncode != 0 and str(bad) in proc.stderr and "'x;!touch PWNED'" in proc.stderr
        no_traceback(proc)
    with pytest.raises(shards.ShardError, match="not a plain file name"):
        shards.read_manifest(bad)


def test_without_a_lock_only_the_partial_files_of_dead_processes_are_removed(tmp_path):
    """Where the file system cannot lock, a run in progress keeps its files: only those of
    processes that are gone are cleaned up."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        names = [f".train-00000.tar{stage.PARTIAL_TAG}{gone.pid}", f".train-00001.tar{stage.PARTIAL_TAG}{alive.pid}",
                 f".manifest.json.tmp{gone.pid}", f".manifest.json.tmp{alive.pid}", ".notes.partial.x",
                 ".notes.tmp"]
        for n in names:
            (tmp_path / n).write_bytes(b"x")
        (tmp_path / f".htar{stage.PARTIAL_TAG}{gone.pid}").mkdir()
        stage.remove_partials(tmp_path, locked=False)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[1:4:2] + names[4:])  # live, not ours
        stage.remove_partials(tmp_path, locked=True)        # under the lock every one is a leftover
        assert sorted(p.name for p in tmp_path.iterdir()) == [".notes.partial.x", ".notes.tmp"]
    finally:
        alive.kill()
        alive.wait()
