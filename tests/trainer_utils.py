"""Helpers for the trainer tests and benchmarks: tiny temporal shard sets and
real multi-process launches with the variables jsrun would set.

The synthetic clips: a bright square moving on a wrapping (toroidal) path,
one class per direction. Because the path wraps and the start is uniform,
every single frame has the same distribution in every class; with the
"forward"/"backward" classes (axis drawn per clip) even the set of frames of a
clip does, so only the order of frames tells classes apart, which is what the
temporal shift must learn.
"""
from __future__ import annotations

import io
import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from trainer.shards import ShardWriter, write_manifest  # noqa: E402

import rank_zygote  # noqa: E402

DIRECTIONS = {"right": (1, 0), "left": (-1, 0), "down": (0, 1), "up": (0, -1)}
#: Direction-only classes: the axis is drawn per clip, so the SET of frames of a
#: "forward" clip has the same distribution as a "backward" one; only their order
#: differs. (With fixed-axis classes a per-frame network can still tell the axis
#: from which positions a clip visits, and beats chance without seeing time.)
AXES = {"forward": ("right", "down"), "backward": ("left", "up")}


def moving_square_clip(direction: str, frames: int, size: int, rng: np.random.Generator,
                       square: int = 0, speed: int = 0) -> List[bytes]:
    if direction in AXES:
        direction = AXES[direction][int(rng.integers(2))]
    dx, dy = DIRECTIONS[direction]
    square = square or max(3, size // 4)
    speed = speed or max(1, size // 8)
    x0, y0 = rng.integers(0, size, 2)
    bg = rng.integers(0, 60)
    out = []
    for t in range(frames):
        img = np.full((size, size, 3), bg, np.uint8)
        x, y = (x0 + dx * speed * t) % size, (y0 + dy * speed * t) % size
        ys = (np.arange(square) + y) % size
        xs = (np.arange(square) + x) % size
        img[np.ix_(ys, xs)] = (230, 200, 40)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def make_dataset(root: Path, train: int = 32, val: int = 16, frames: int = 8, size: int = 32,
                 classes: Sequence[str] = ("right", "left", "down", "up"), seed: int = 0,
                 shards: int = 2, speed: int = 0) -> Path:
    """A shard folder with 'train' and 'val' splits of moving-square clips
    (``speed``: pixels per frame, 0 = size // 8)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    entries = []
    for split, count in (("train", train), ("val", val)):
        per = -(-count // shards)
        for s in range(shards):
            idx = range(s * per, min(count, (s + 1) * per))
            if not idx:
                continue
            w = ShardWriter(root / f"{split}-{s:03d}.tar", split)
            for i in idx:
                label = i % len(classes)
                w.add(f"{split}{i:05d}", label, moving_square_clip(classes[label], frames, size, rng, speed=speed))
            entries.append(w.close())
    write_manifest(root / "manifest.json", {"format": "summit-jobs-shards/1", "name": "moving-squares",
                                            "classes": list(classes), "shards": entries})
    return root


def free_jobid() -> str:
    """An LSB_JOBID whose derived ports (p, p+1) are free on this machine now, on every address (the virtual
    nodes' 127.1.x.x addresses included: a port bound there is not free for a server on all of them)."""
    from trainer.dist.engines import rendezvous_port
    for _ in range(200):
        job = str(random.randint(10000, 9999999))
        port = rendezvous_port({"LSB_JOBID": job})
        ok = True
        for p in (port, port + 1):
            with socket.socket() as s:
                try:
                    s.bind(("", p))
                except OSError:
                    ok = False
        if ok:
            return job
    raise RuntimeError("no free port pair found")


def rank_env(rank: int, size: int, job: str, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JSM_NAMESPACE_", "OMPI_", "HOROVOD_", "LSB_", "PMIX_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update({"JSM_NAMESPACE_RANK": str(rank), "JSM_NAMESPACE_SIZE": str(size),
                "JSM_NAMESPACE_LOCAL_RANK": str(rank), "LSB_JOBID": job,
                "SUMMIT_JOBS_RENDEZVOUS_ADDR": "127.0.0.1", "OMP_NUM_THREADS": "1",
                "PYTHONPATH": str(REPO)})
    env.update(extra or {})
    return env


_ZYGOTE: Optional[rank_zygote.Zygote] = None


def _zygote() -> rank_zygote.Zygote:
    """This test process's rank zygote (tests/rank_zygote.py), started on first use, and again where this
    process's environment has since changed in what the imports read (a test that set a TORCH* variable for
    good), so that the ranks after it are still forked and see that environment."""
    global _ZYGOTE
    base = rank_env(0, 1, "0")
    if _ZYGOTE is not None and not _ZYGOTE.accepts(base):
        ended = _ZYGOTE.proc.poll()
        print(f"rank zygote: {'ended with status %s' % ended if ended is not None else 'environment changed'}; "
              "starting another", file=sys.stderr)
        _ZYGOTE.close()
        _ZYGOTE = None
    if _ZYGOTE is None:
        import tempfile
        folder = Path(tempfile.mkdtemp(prefix="rank-zygote-"))
        _ZYGOTE = rank_zygote.Zygote(base, str(REPO), folder)
    return _ZYGOTE


def start_rank(args: Sequence[str], env: Dict[str, str], log: Path, process_group: Optional[int] = None,
               fresh: bool = False, script: Optional[str] = None):
    """``python -m trainer ARGS`` (or ``python SCRIPT ARGS``, a rank program of the tests such as
    tests/protocol_worker.py) with ``env``, stdout and stderr to ``log``, in the repository: forked by the rank
    zygote (tests/rank_zygote.py says why and what differs), or exec'd where ``fresh``, where the environment
    differs from the zygote's in what the imports read, or where SUMMIT_JOBS_TEST_EXEC_RANKS=1.
    ``process_group``: the group to join (0: a group of its own), as os.setpgid takes it."""
    with open(log, "w") as out:
        if not fresh and os.environ.get("SUMMIT_JOBS_TEST_EXEC_RANKS") != "1":
            zygote = _zygote()
            if zygote.accepts(env):
                return zygote.start(args, env, str(REPO), out.fileno(), out.fileno(), process_group, script=script)
        preexec = None if process_group is None else (lambda: os.setpgid(0, process_group))
        command = [script] if script is not None else ["-m", "trainer"]
        return subprocess.Popen([sys.executable, *command, *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT, cwd=str(REPO), preexec_fn=preexec)


def run_trainer(args: Sequence[str], env: Dict[str, str], cwd: Optional[Path] = None,
                timeout: float = 120, fresh: bool = False, module: str = "trainer") -> subprocess.CompletedProcess:
    """``subprocess.run([python, -m, module, *args], capture_output=True, text=True)`` for one rank (or another
    of the trainer's modules, such as the checkpoint converter ``trainer.models.interop``), forked by the rank
    zygote where it accepts ``env`` (start_rank's rule), else (and where ``fresh``) exec'd: stdout and stderr
    apart. Only an exec'd process counts in this process's RUSAGE_CHILDREN."""
    import tempfile
    cwd = str(cwd or REPO)
    exec_all = fresh or os.environ.get("SUMMIT_JOBS_TEST_EXEC_RANKS") == "1"
    zygote = None if exec_all else _zygote()
    if zygote is None or not zygote.accepts(env):
        return subprocess.run([sys.executable, "-m", module, *args], env=env, cwd=cwd, capture_output=True,
                              text=True, timeout=timeout)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = zygote.start(args, env, cwd, out.fileno(), err.fileno(), module=module)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(proc.args, code, out.read().decode(errors="replace"),
                                           err.read().decode(errors="replace"))


def start_ranks(size: int, args: Sequence[str], log_dir: Path, extra_env: Optional[Dict[str, str]] = None,
                module: Sequence[str] = ("-m", "trainer"), fresh: bool = False) -> List[subprocess.Popen]:
    """``size`` ranks of one job (rank_env), each logging to ``log_dir/rankN.log``. The trainer's ranks, and
    those of a rank program of the tests (``module=(SCRIPT,)``, tests/*_worker.py), come from start_rank
    (forked by the rank zygote unless ``fresh``); any other ``module`` is exec'd."""
    job = free_jobid()
    log_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    for r in range(size):
        env = rank_env(r, size, job, extra_env)
        if tuple(module) == ("-m", "trainer"):
            procs.append(start_rank(args, env, log_dir / f"rank{r}.log", fresh=fresh))
            continue
        if len(module) == 1 and rank_zygote.forks_script(module[0]):
            procs.append(start_rank(args, env, log_dir / f"rank{r}.log", fresh=fresh, script=module[0]))
            continue
        out = open(log_dir / f"rank{r}.log", "w")
        procs.append(subprocess.Popen([sys.executable, *module, *args], env=env,
                                      stdout=out, stderr=subprocess.STDOUT, cwd=str(REPO)))
        out.close()
    return procs


def wait_ranks(procs: List[subprocess.Popen], log_dir: Path, timeout: float) -> List[int]:
    """Wait for all ranks; on timeout kill them (each by its own handle) and fail with the logs."""
    codes = []
    try:
        for p in procs:
            codes.append(p.wait(timeout=timeout))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
            p.wait()
        raise AssertionError("ranks timed out:\n" + logs(log_dir))
    return codes


def logs(log_dir: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(Path(log_dir).glob("rank*.log")))


def run_ranks(size: int, args: Sequence[str], log_dir: Path, timeout: float = 240,
              extra_env: Optional[Dict[str, str]] = None, module: Sequence[str] = ("-m", "trainer"),
              fresh: bool = False) -> None:
    codes = wait_ranks(start_ranks(size, args, log_dir, extra_env, module, fresh), log_dir, timeout)
    assert codes == [0] * size, f"exit codes {codes}\n" + logs(log_dir)


def tiny_args(run_dir: Path, data: Path, **over) -> List[str]:
    """Arguments for a tiny, fast CPU model (resnet18 at 1/8 width, 4 frames, 32x32)."""
    opts = {"--run-dir": run_dir, "--data": data, "--engine": "ddp", "--arch": "resnet18", "--width": 0.125,
            "--num-segments": 4, "--frame-stride": 2, "--input-size": 32, "--batch-per-gpu": 2,
            "--accum-steps": 1, "--lr": 0.1, "--warmup-epochs": 0, "--epochs": 1, "--workers": 0,
            "--num-classes": 0, "--test-clips": 2, "--test-last": 2, "--log-every": 1,
            "--ckpt-every-minutes": 0, "--threads": 1}
    opts.update({k if k.startswith("--") else "--" + k.replace("_", "-"): v for k, v in over.items()})
    out = []
    for k, v in opts.items():
        if v is None:
            continue
        if v is True:
            out.append(k)
        else:
            out += [k, str(v)]
    return out


def module_dataset(request, tmp_path_factory, shape: Dict[str, int]) -> Path:
    """make_dataset for a folder's module-scoped ``data`` fixture: of the module's own DATA_SHAPE where it
    sets one (its steps per epoch depend on it), else of ``shape``, the folder's."""
    return make_dataset(tmp_path_factory.mktemp("data") / "data", **getattr(request.module, "DATA_SHAPE", shape))


def wait_job_ended(job: str, env: Dict[str, str], run_dir: Path, timeout: float = 300,
                   ask_every: float = 5.0) -> Dict[str, str]:
    """The final bjobs record (DONE or EXIT) of embedded-LSF job ``job``, whose script runs in ``run_dir``.

    Why not bjobs ten times a second (``lsf_jobs.wait_state``) for a whole training job: each bjobs
    is a Python process (about 0.2 s of CPU), so a minute of such polling costs about as much CPU as
    the job's ranks. The job script's last act is writing ``exitcode.<job>`` into the run directory,
    which costs nothing to look for; bjobs is asked every ``ask_every`` seconds as well, for a job that
    ends without getting that far.
    """
    import time
    from lsf_jobs import bjobs_state, wait_state
    done = Path(run_dir) / f"exitcode.{job}"
    deadline = time.time() + timeout
    next_ask = time.time() + ask_every
    while time.time() < deadline and not done.exists():
        if time.time() >= next_ask:
            if bjobs_state(job, env).get("STAT") in ("DONE", "EXIT"):
                break
            next_ask = time.time() + ask_every
        time.sleep(0.1)
    return wait_state(job, env, timeout=max(deadline - time.time(), 30))
