"""`make demo`: the whole workflow, for real, on the embedded LSF of this machine.

synth -> pack -> stage-data (archive -> parallel file system folder -> each of
2 virtual nodes' NVMe) -> submit --nodes 2 --until-complete of a small TSM: a
chain whose jobs are stopped by their walltime warning signal, each queueing
the next, which resumes, until training is complete
-> the same network without the shift, for comparison -> a short real
4-node run and `simulate --virtual-nodes 4` on 2 nodes with the same seed and
options, then `compare` on the pair (the same weights) -> report. Every step is a real `summit-jobs`
command, printed before it runs as it can be pasted into a shell (with the
settings below in front where they matter).

The demo's embedded LSF is its own: its state lives in ``<out>/lsf``
(SUMMIT_JOBS_LSF_HOME), not in the default LSF home of ``summit-jobs`` in a
plain shell, and its settings in ``<out>/config.yaml`` (SUMMIT_JOBS_CONFIG; no
other config file is read). One LSF minute lasts a few seconds
(SUMMIT_JOBS_LSF_MINUTE) so walltimes and warnings play out quickly. How many:
10 on a quiet 2-core machine, stretched by how much slower the machine is now,
so that every link gets past its start-up and trains about the same share of
the run on a busy machine as on a quiet one (the chain has about as many links
either way, and no more start-ups to pay). The demo measures the start-up of 4
ranks before the first link, and every link measures its own (its script's
start to the trainer's ``launch`` event) when it queues the next one, whose
minute it sets from that: load that appears during the chain lengthens the
later links' minutes. The local profile's throughput and start-up figures,
measured on a quiet machine, reach the demo's jobs stretched by the same
factor (its config file), so that submit's expected links hold.

Running it again into the same folder rebuilds what it made there (the data
with ``--force``; its four run directories are replaced, never while a job of
theirs is still queued or running). A chain that stops before training is
complete, or a run that fails, ends the demo with that one reason (exit 1).

    python -m summit_jobs.demo [--out DIR] [--quick]

``--quick`` (used by CI) runs a smaller set for fewer epochs.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from summit_jobs.runs.lifecycle import ended
from summit_jobs.schedulers import DONE
from summit_jobs.schedulers.lsf.minute import chain_setup
from trainer import rundir


#: Test top-1 points by which the TSM must beat the same network without the shift (full demo).
MARGIN = 0.2
#: Ranks the demo's jobs start at once (2 virtual nodes x 2 ranks): the start-up measurement runs as many.
RANKS = 4
#: What startup_seconds() measures on the machine the local profile's performance figures were measured on
#: (2 cores, nothing else running): 7.9 s. A longer start-up here and now is that many times slower a machine.
QUIET_STARTUP_S = 8.0
#: Each link of the chain: --walltime 0:08 with the warning 2 minutes before the limit, so 6 LSF
#: minutes before its warning.
LINK_WALLTIME = "0:08"
LINK_WARNING_MINUTES = 2
#: The LSF minute on a quiet machine, in seconds, and the shortest the demo uses: a link of the chain has 60 s
#: before its warning, 10 of which its start-up takes, and the TSM trains in 5 links. A 6-second minute gave
#: links 36 s and the chain twice as many, each paying the start-up again, for nothing more to see.
MINUTE_FLOOR = 10.0
#: In each chain's run directory: one record per link that queued the next (its start-up, the next minute).
MINUTES_FILE = "lsf-minutes.jsonl"
#: First line of the demo's config file (<out>/config.yaml), by which it knows the file is its own.
CONFIG_HEADER = "# Written by `python -m summit_jobs.demo` for its own jobs (SUMMIT_JOBS_CONFIG), on every run.\n"
#: How many times the demo watches a run whose watch ended while one of its jobs still ran.
WATCHES = 5
#: Commands that reach the embedded LSF (its state folder: jobs, virtual nodes' NVMe folders).
LSF_COMMANDS = ("stage-data", "submit", "simulate", "status", "cancel", "logs")
#: Options before the command that take a value.
GLOBAL_OPTIONS = ("--machine", "-m", "--config", "--host", "--port", "--user", "--key-file", "--known-hosts",
                  "--remote-dir")
#: Commands whose jobs' limits the LSF minute and kill grace scale, and which read the demo's config.
SUBMIT_COMMANDS = ("submit", "simulate")


def step(title: str) -> None:
    print(f"\n== {title}", flush=True)


def startup_seconds(ranks: int = RANKS) -> float:
    """Wall time for ``ranks`` interpreters to import the trainer's model at once, as a job's ranks do.

    Why: a chain link must get past start-up and train before its warning
    signal; on a slow or busy machine (one core, other work) that takes longer,
    so the demo stretches its LSF minute instead of assuming a machine speed.
    """
    code = "import torch, trainer.models.model, trainer.dist.engines"
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(ranks)]
    for p in procs:
        p.wait()
    return time.perf_counter() - t0


def lsf_minute(startup: float) -> float:
    """Seconds per LSF minute of the first link: MINUTE_FLOOR stretched by the slowdown that the ranks'
    measured start-up shows (``slowdown``)."""
    return round(MINUTE_FLOOR * slowdown(startup), 1)


def slowdown(startup: float) -> float:
    """How many times slower than the quiet reference machine this one is now, from the start-up measured
    (at least 1: a faster machine is not assumed to train faster than the profile's figures say)."""
    return max(1.0, startup / QUIET_STARTUP_S)


def performance(startup: float) -> Dict[str, float]:
    """The local profile's performance figures for the demo's jobs, which hold for a quiet 2-core machine,
    stretched by this machine's measured slowdown: throughput, the allreduce's bandwidth and latency (the
    ranks' loopback is this machine's cores too) and a link's start-up.

    Why: submit's expected links divide the training time (clips / throughput, plus each step's allreduce) by
    what a link trains (its minutes before the warning less its start-up); on a busy machine all of them are
    worse by about the factor that the ranks' start-up is, and the demo's config hands them to its jobs'
    profile."""
    from summit_jobs.profiles import machines
    perf = machines.load("local").performance
    factor = slowdown(startup)
    return {"clips_per_second_per_gpu": round(perf.clips_per_second_per_gpu / factor, 3),
            "allreduce_bandwidth_gbps": round(perf.allreduce_bandwidth_gbps / factor, 3),
            "allreduce_latency_us": round(perf.allreduce_latency_us * factor, 1),
            "startup_seconds": round(perf.startup_seconds * factor, 1)}


def quiet_link_startup() -> float:
    """A link's start-up on the quiet reference machine: the local profile's performance.startup_seconds."""
    from summit_jobs.profiles import machines
    return machines.load("local").performance.startup_seconds or MINUTE_FLOOR


def link_minute(startup: float, floor: float, quiet: float) -> float:
    """Seconds per LSF minute for the next link, from a link's observed start-up (script start to the
    trainer's launch, staging included): ``floor`` stretched by how many times longer it took than the
    ``quiet`` machine's link start-up, never less than ``floor``.

    Why stretched and not only long enough to hold the start-up: a busy machine trains slower by about the
    factor its start-up shows, and a link of fixed length then trained a smaller share of the run; the chain
    ran 13 links (and 13 start-ups) where a quiet machine runs 5, and no estimate made at submit time held."""
    return round(max(floor, floor * startup / quiet), 1)


def read_jsonl(path: Path) -> List[Dict]:
    """The JSON object lines of ``path`` (a line cut short or damaged is skipped); [] when it is missing."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return rundir.json_records(text, lambda rec: True)


def _is_time(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def launch_time(run_dir: Path, job: str) -> Optional[float]:
    """When the trainer of job ``job`` started training (its newest ``launch`` event), or None."""
    times = [float(e["time"]) for e in read_jsonl(run_dir / "events.jsonl")
             if e.get("event") == "launch" and str(e.get("job", "")) == job
             and e.get("mode", "train") == "train" and _is_time(e.get("time"))]
    return max(times) if times else None


def next_minute(run_dir: Path, job: str, elapsed: float, floor: float, current: float,
                now: Optional[float] = None) -> float:
    """The LSF minute for the link that job ``job`` queues now, ``elapsed`` seconds after its script started.

    Its start-up is the time from its script's start to its trainer's launch event. The minute follows the
    longer of this start-up and the previous link's (MINUTES_FILE): up at once when the machine gets
    busier, down one link later, so that a load that comes and goes leaves the next link its time. Without a
    launch event the current minute stays. The record goes to MINUTES_FILE in the run directory.
    """
    now = time.time() if now is None else now
    launched = launch_time(run_dir, job)
    startup = None if launched is None else max(0.0, launched - (now - elapsed))
    before = [float(r["startup_s"]) for r in read_jsonl(run_dir / MINUTES_FILE)
              if _is_time(r.get("startup_s")) and str(r.get("job", "")) != job]
    minute = current if startup is None else link_minute(max([startup] + before[-1:]), floor, quiet_link_startup())
    rec = {"job": job, "startup_s": None if startup is None else round(startup, 1), "minute_s": current,
           "next_minute_s": minute, "time": round(now, 3)}
    try:
        with open(run_dir / MINUTES_FILE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")
    except OSError:
        pass
    return minute


def next_minute_main(argv: Sequence[str]) -> int:
    """``--next-minute RUN_DIR ELAPSED FLOOR``, called by a link as it queues the next (see chain_setup):
    prints the minute for the next link. In the job: LSB_JOBID, and SUMMIT_JOBS_LSF_MINUTE, the link's own minute."""
    run_dir, elapsed, floor = argv
    try:
        current = float(os.environ.get("SUMMIT_JOBS_LSF_MINUTE") or 60.0)
        minute = next_minute(Path(run_dir), os.environ.get("LSB_JOBID", ""), float(elapsed), float(floor), current)
    except (OSError, ValueError) as exc:
        print(f"demo: cannot measure this link's start-up ({exc}); the next link keeps this one's LSF minute",
              file=sys.stderr)
        return 1
    print(f"{minute:g}")
    return 0


def active(row: Dict) -> bool:
    """Whether a status row's job may still run (status --watch's rule: a final state the scheduler agrees
    with; an unknown job the scheduler still lists may yet run)."""
    return not ended(row)


def chain_stopped(run_dir: Path, since: float) -> Optional[Dict]:
    """The newest ``chain_stopped`` record of the run's events written since ``since``, or None."""
    found = [e for e in read_jsonl(run_dir / "events.jsonl")
             if e.get("event") == "chain_stopped" and _is_time(e.get("time")) and float(e["time"]) >= since - 1]
    return found[-1] if found else None


def failure(run_dir: Path, what: str, since: float, rows: List[Dict]) -> Optional[str]:
    """Why the run did not train to the end, in one sentence; None when it is complete.

    Complete: the trainer's COMPLETE marker. Otherwise the chain's own reason (its chain_stopped record)
    comes first, then the first job that did not end done, then the lack of the marker itself.
    """
    if (run_dir / "COMPLETE").exists():
        return None
    stop = chain_stopped(run_dir, since)
    if stop is not None:
        reason, exit_code = str(stop.get("reason") or "no reason given"), stop.get("exit")
        said = exit_code is None or f"exit {exit_code}" in reason
        return (f"the {what} chain stopped before training was complete: {reason} "
                f"(job {stop.get('job') or '?'}{'' if said else f', exit {exit_code}'})")
    for row in rows:
        if active(row):
            return f"the {what} run's job {row.get('job_id')} is still {row.get('state')} after {WATCHES} watches"
        if row.get("state") != DONE:
            detail = "; ".join(str(x) for x in (row.get("reason"), None if row.get("exit_code") is None
                                                 else f"exit {row['exit_code']}") if x)
            return (f"the {what} run's job {row.get('job_id')} ended {str(row.get('state')).replace('_', ' ')}"
                    f"{f' ({detail})' if detail else ''} before training was complete")
    return f"the {what} run's jobs ended without completing its training (no COMPLETE in {run_dir})"


def unsettled(run_dir: Path, since: float, rows: List[Dict]) -> bool:
    """Whether the run may still go on: a job of it may run, or every job ended done though training is not
    complete and no chain said it stopped (the next link not yet in the rows)."""
    if any(active(r) for r in rows):
        return True
    quiet_end = all(r.get("state") == DONE for r in rows) and chain_stopped(run_dir, since) is None
    return quiet_end and bool(rows) and not (run_dir / "COMPLETE").exists()


def is_run(folder: Path) -> bool:
    """Whether ``folder`` holds a run directory as `summit-jobs submit` makes them."""
    return (folder / "run.json").is_file() or (folder / "job.lsf").is_file()


class Demo:
    def __init__(self, out: Path, quick: bool):
        self.out, self.quick = out, quick
        self.lsf_home = out / "lsf"
        self.config = out / "config.yaml"
        self.submitted: List[Path] = []
        self.exe = self.command_name()
        self.env = dict(os.environ)
        for k in ("SUMMIT_JOBS_MACHINE", "SUMMIT_JOBS_PROJECT", "SUMMIT_JOBS_HOST"):
            self.env.pop(k, None)
        startup = startup_seconds()
        self.minute = lsf_minute(startup)
        self.performance = performance(startup)
        #: The links submit expected of the TSM chain ("expected links: about N"), once it has said.
        self.expected_links: Optional[int] = None
        self.write_config()
        self.env.update({
            "SUMMIT_JOBS_LSF_HOME": str(self.lsf_home),
            "SUMMIT_JOBS_CONFIG": str(self.config),
            # One LSF minute lasts this many seconds in the demo (for its first link; each link sets the next
            # one's): walltimes and warnings come quickly.
            "SUMMIT_JOBS_LSF_MINUTE": f"{self.minute:g}",
            "SUMMIT_JOBS_LSF_KILL_GRACE": "5",
            "PYTHONUNBUFFERED": "1",
        })
        q = shlex.quote
        print(f"demo: {RANKS} ranks start in {startup:.1f} s here; one LSF minute lasts {self.minute:g} s for the "
              "first link of the chain, and each link sets the next one's from its own start-up; the local "
              f"profile's figures for this machine now: {self.performance['clips_per_second_per_gpu']:g} clips/s per "
              f"rank, {self.performance['startup_seconds']:g} s of start-up per link (a quiet machine's, "
              f"{slowdown(startup):.2g} times over)", flush=True)
        print(f"demo: its jobs run on an embedded LSF of their own, SUMMIT_JOBS_LSF_HOME={q(str(self.lsf_home))} "
              f"(not the one `summit-jobs` uses in your shell), with the settings of {q(str(self.config))} "
              "(SUMMIT_JOBS_CONFIG). Commands are printed with these in front where they matter; to look at the "
              f"jobs from another shell: {self.shown(('status', str(out / 'runs' / 'tsm'), '--watch'))}", flush=True)

    @staticmethod
    def command_name() -> str:
        """How a shell names this installation's `summit-jobs`: the bare name when PATH finds this one, else
        its full path (`make demo` runs from the virtual environment without activating it)."""
        mine = Path(sys.executable).parent / "summit-jobs"
        found = shutil.which("summit-jobs")
        try:
            if found and mine.exists() and Path(found).resolve() == mine.resolve():
                return "summit-jobs"
        except OSError:
            pass
        return shlex.quote(str(mine)) if mine.exists() else f"{shlex.quote(sys.executable)} -m summit_jobs"

    def write_config(self) -> None:
        """The demo's config file: the local profile with the chain's per-link minute (chain_setup) and its
        performance figures for this machine now (``performance``). Written on every run; a file of that name
        that the demo did not write is left alone, and the demo stops."""
        try:
            mine = self.config.read_text(encoding="utf-8").startswith(CONFIG_HEADER)
        except FileNotFoundError:
            mine = True
        except (OSError, UnicodeDecodeError):
            mine = False
        if not mine:
            sys.exit(f"demo: {self.config} exists and the demo did not write it; move it away, or give the demo "
                     "another --out")
        data = {"machines": {"local": {"environment": {"setup": chain_setup(sys.executable, MINUTE_FLOOR)},
                                       "performance": self.performance}}}
        self.config.write_text(CONFIG_HEADER + json.dumps(data, indent=2) + "\n", encoding="utf-8")

    def shown(self, args: Sequence[str]) -> str:
        """``args`` as a line to paste into a shell: the demo's settings the command needs, then the command."""
        rest = list(args)
        while rest and rest[0].startswith("-"):   # global options first (--machine local)
            rest = rest[2:] if rest[0] in GLOBAL_OPTIONS else rest[1:]
        command = rest[0] if rest else ""
        names: Tuple[str, ...] = ()
        if command in SUBMIT_COMMANDS:
            names = ("SUMMIT_JOBS_LSF_HOME", "SUMMIT_JOBS_LSF_MINUTE", "SUMMIT_JOBS_LSF_KILL_GRACE",
                     "SUMMIT_JOBS_CONFIG")
        elif command in LSF_COMMANDS:
            names = ("SUMMIT_JOBS_LSF_HOME",)
        prefix = "".join(f"{n}={shlex.quote(self.env[n])} " for n in names if n in self.env)
        return prefix + self.exe + "".join(" " + shlex.quote(a) for a in args)

    def sj(self, *args: str, capture: bool = False, check: bool = True, quiet: bool = False,
           pasteable: bool = False) -> subprocess.CompletedProcess:
        """Run `summit-jobs ARGS` in the demo's environment (printed first unless ``quiet``). ``pasteable``:
        its output passes through a filter that puts the demo's settings in front of the command it suggests."""
        if not quiet:
            print("$ " + self.shown(args), flush=True)
        argv = [sys.executable, "-m", "summit_jobs", *args]
        if not pasteable:
            proc = subprocess.run(argv, env=self.env, text=True, stdout=subprocess.PIPE if capture else None)
        else:
            # stderr too: submit says there how many links it expects (the demo's summary compares them).
            with subprocess.Popen(argv, env=self.env, text=True, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT) as p:
                assert p.stdout is not None
                for line in p.stdout:
                    print(self.pasteable(line), end="", flush=True)
            proc = subprocess.CompletedProcess(argv, p.returncode)
        if check and proc.returncode != 0:
            sys.exit(f"demo: that step failed (exit {proc.returncode}); see the messages above")
        return proc

    def pasteable(self, line: str) -> str:
        """A line of submit's output; the command after ``follow it with:`` gets the demo's settings, and the
        number of an ``expected links: about N`` line is kept for the summary."""
        if line.startswith("expected links: about "):
            self.expected_links = int(line.split()[3])
        head, sep, rest = line.partition("follow it with: summit-jobs ")
        if not sep:
            return line
        try:
            words = shlex.split(rest)
        except ValueError:
            return line
        return head + "follow it with: " + self.shown(words) + "\n"

    def rows(self, run_dir: Path) -> List[Dict]:
        """`summit-jobs status RUN --json`'s rows ([] when it cannot tell)."""
        proc = self.sj("status", str(run_dir), "--json", capture=True, check=False, quiet=True)
        try:
            rows = json.loads(proc.stdout or "[]")
        except ValueError:
            return []
        return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []

    def fresh(self, run_dir: Path) -> None:
        """Make way for a run in ``run_dir``: the demo's own run from an earlier time is replaced (never while
        one of its jobs may still run); a folder that is not a run is left alone, and the demo stops."""
        if not run_dir.exists():
            return
        if not run_dir.is_dir() or (not is_run(run_dir) and any(run_dir.iterdir())):
            sys.exit(f"demo: {run_dir} exists and is not a run directory the demo made; move it away, or give "
                     "the demo another --out")
        busy = [r for r in self.rows(run_dir) if active(r)]
        if busy:
            ids = ", ".join(str(r.get("job_id")) for r in busy)
            sys.exit(f"demo: job(s) {ids} of an earlier demo's run in {run_dir} are still queued or running; let "
                     f"them end, or cancel them with: {self.shown(('cancel', str(run_dir)))}")
        print(f"demo: replacing its earlier run in {run_dir}", flush=True)
        shutil.rmtree(run_dir)

    def submit(self, run_dir: Path, *args: str) -> float:
        """`summit-jobs ARGS` that submits into ``run_dir`` (made fresh first); the time before it."""
        self.fresh(run_dir)
        since = time.time()
        self.submitted.append(run_dir)
        self.sj(*args, pasteable=True)
        return since

    def wait(self, run_dir: Path) -> bool:
        return self.sj("status", str(run_dir), "--watch", "--interval", "3", check=False).returncode == 0

    def trained(self, run_dir: Path, what: str, since: float) -> None:
        """Wait for the run's jobs; stop the demo with one reason unless its training is complete.

        A watch that ends before the run has (a job of it still queued or running, or every job done with
        neither COMPLETE nor a chain's reason to stop: a link queued between two of its looks) is started
        again, up to WATCHES times."""
        for _ in range(WATCHES):
            self.wait(run_dir)
            rows = self.rows(run_dir)
            if not unsettled(run_dir, since, rows):
                break
            print("demo: the run still has jobs queued or running; watching again", flush=True)
        why = failure(run_dir, what, since, rows)
        if why is not None:
            self.cancel_active([run_dir])
            logs = sorted(p.name for p in run_dir.glob("*.err"))
            sys.exit(f"demo: {why}; see {run_dir}" + (f" ({', '.join(logs[-2:])})" if logs else ""))

    def trainer_args(self) -> List[str]:
        # A small TSM that trains in minutes on 2 CPU cores; --no-flip because left/right are classes.
        return ["--width", "0.25", "--num-segments", "8", "--frame-stride", "2", "--input-size", "48",
                "--workers", "0", "--num-classes", "0", "--no-flip", "--threads", "1", "--test-clips", "2",
                "--test-last", "1", "--log-every", "5", "--ckpt-every-minutes", "0.5"]

    def run(self) -> None:
        out, quick = self.out, self.quick
        runs = out / "runs"
        epochs = "4" if quick else "30"
        common = ["--machine", "local"]
        # 2 nodes x 2 ranks x 8 clips: global batch 32; lr 0.1 (bench/tsm_learning.py: 0.05 for 16, scaled).
        job = ["--clips-per-gpu", "8", "--lr", "0.1", "--engine", "ddp", "--arch", "resnet18",
               "--data", str(out / "pfs" / "manifest.json")]

        step("1/7 A synthetic Kinetics: 8 classes that only the order of frames tells apart")
        # Frame folders only: the demo packs those (MP4s of the same videos took as long again to write).
        self.sj("synth", str(out / "synth"), "--videos-per-class", "16" if quick else "100", "--frames", "16",
                "--size", "64", "--layout", "rawframes", "--force", "--quiet")

        step("2/7 Pack it into tar shards with an index (the form HPSS and GPFS want)")
        # --force: a second demo packs its own archive again (the same bytes: pack is deterministic).
        self.sj("pack", str(out / "synth" / "rawframes"), str(out / "archive"), "--short-side", "64",
                "--shard-size", "2MB", "--force")

        step("3/7 Stage: archive -> parallel file system folder -> each virtual node's NVMe")
        # --force: the demo's own folder may hold the manifest of the other form (--quick or not) of its data.
        self.sj(*common, "stage-data", "--manifest", str(out / "archive" / "manifest.json"), "--nodes", "2",
                "--dest", str(out / "pfs"), "--to-nvme", "--force")

        step("4/7 Train a small TSM on 2 nodes as a chain until complete: each job is stopped by its walltime "
             "warning (USR2), saves a checkpoint, exits 0 and queues the next, which resumes")
        tsm = runs / "tsm"
        since = self.submit(tsm, *common, "submit", "--nodes", "2", *job, "--epochs", epochs, "--until-complete",
                            "--max-links", "60", "--walltime", LINK_WALLTIME, "--warning-minutes",
                            str(LINK_WARNING_MINUTES), "--job-name", "tsm", "--run-dir", str(tsm), "--force", "--",
                            *self.trainer_args())
        self.trained(tsm, "TSM", since)
        self.show_minutes(tsm)

        step("5/7 The same network without the temporal shift (the TSN 2D baseline), for comparison")
        tsn = runs / "no-shift"
        since = self.submit(tsn, *common, "submit", "--nodes", "2", *job, "--epochs", epochs, "--job-name",
                            "noshift", "--run-dir", str(tsn), "--force", "--", *self.trainer_args(), "--no-shift")
        self.trained(tsn, "no-shift", since)

        step("6/7 simulate: the 4-node optimisation on 2 nodes by exact gradient accumulation (k = 2), "
             "checked against a real 4-node run of the same seed and options")
        real, sim = self.simulate_pair(runs)
        step("7/7 Reports")
        self.sj("report", str(tsm), "--compare", str(tsn), "--force")
        self.sj("report", str(sim), "--force")
        same = self.compare(real, sim)
        self.summary(tsm, tsn, sim, same)

    def show_minutes(self, run_dir: Path) -> None:
        """How many links the chain ran against the links submit expected, and how each link's start-up set
        the next link's LSF minute (nothing more for a single link)."""
        links = len(self.rows(run_dir))
        if self.expected_links is not None:
            print(f"demo: the chain ran {links} link{'s' if links != 1 else ''}; submit expected about "
                  f"{self.expected_links} from the figures of the machine at that time", flush=True)
        recs = [r for r in read_jsonl(run_dir / MINUTES_FILE) if _is_time(r.get("next_minute_s"))]
        if not recs:
            return
        startups = ", ".join("?" if not _is_time(r.get("startup_s")) else f"{r['startup_s']:g}" for r in recs)
        minutes = ", ".join(f"{r['next_minute_s']:g}" for r in recs)
        print(f"demo: start-up of the links that queued another (s): {startups}; the LSF minute that gave the "
              f"next link (s): {minutes} (the first link's: {self.minute:g})", flush=True)

    def pair_job(self) -> List[str]:
        """Options of the real 4-node run and its simulated twin: short (one epoch, no evaluation), since
        the pair shows that the weights are the same, not what they learn. 4 nodes x 2 ranks x 2 clips:
        global batch 16, LR 0.025 (0.1 for 64, scaled). Every node holds every shard (replicate): with
        the default partition each node trains on its own share, and 4 nodes' shares are not 2 nodes'."""
        return ["--clips-per-gpu", "2", "--lr", "0.025", "--engine", "ddp", "--arch", "resnet18",
                "--data", str(self.out / "pfs" / "manifest.json"), "--stage-policy", "replicate", "--epochs", "1"]

    def pair_trainer_args(self) -> List[str]:
        # Every step logged (compare checks each one's LR, batch and loss); the last of a repeated option wins.
        return [*self.trainer_args(), "--log-every", "1", "--eval-every", "0", "--no-test"]

    def simulate_pair(self, runs: Path) -> Tuple[Path, Path]:
        """A real 4-node job and `simulate --virtual-nodes 4` on 2 nodes, same seed and options."""
        real, sim = runs / "real-4-nodes", runs / "simulated"
        since = self.submit(real, "--machine", "local", "submit", "--nodes", "4", *self.pair_job(), "--job-name",
                            "real4", "--run-dir", str(real), "--force", "--", *self.pair_trainer_args())
        self.trained(real, "real 4-node", since)
        since = self.submit(sim, "--machine", "local", "simulate", "--virtual-nodes", "4", "--quota-nodes", "2",
                            *self.pair_job(), "--job-name", "sim", "--run-dir", str(sim), "--force", "--",
                            *self.pair_trainer_args())
        self.trained(sim, "simulated", since)
        return real, sim

    def compare(self, real: Path, sim: Path) -> str:
        """`summit-jobs compare` on the pair: its table, then the demo's one-line verdict.

        The full demo stops when the weights differ beyond the tolerance (that is its claim); the quick
        one prints the difference only. Runs that cannot be compared (exit 2) stop both.
        """
        shown = self.sj("compare", str(real), str(sim), check=False)
        proc = self.sj("compare", str(real), str(sim), "--json", capture=True, check=False)
        try:
            result = json.loads(proc.stdout)
        except ValueError:
            sys.exit(f"demo: compare could not compare {real} and {sim} (exit {shown.returncode}); "
                     "see the messages above")
        worst = (result.get("worst") or {}).get("abs")
        dw = "-" if worst is None else f"{worst:.1g}"
        how = "the same weights as" if result.get("agree") else "DIFFERENT weights from"
        line = (f"simulate: 4 virtual nodes on 2 (k = 2) ended with {how} a real 4-node run "
                f"(max |dw| {dw} after {result.get('step')} steps, tolerance {result.get('tolerance'):g})")
        if not result.get("agree") and not self.quick:
            sys.exit(f"demo: {line}: {result.get('reason')}")
        return line

    def summary(self, tsm: Path, tsn: Path, sim: Path, same: str) -> None:
        def load(run: Path) -> dict:
            try:
                return json.loads((run / "report" / "report.json").read_text())
            except (OSError, ValueError):
                return {}
        print("\n== Done", flush=True)
        tsm_report = load(tsm)
        for name, run in (("TSM", tsm), ("same network, no shift", tsn)):
            summ = (tsm_report.get("compare") if run == tsn else load(run).get("summary")) or {}
            if not summ:
                continue
            pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
            print(f"{name:>24}: best val top-1 {pct(summ.get('best_eval_top1'))}, test top-1 "
                  f"{pct(summ.get('test_top1_mean'))}, {summ.get('clips_per_s_median') or 0:.1f} clips/s, "
                  f"{len(summ.get('jobs') or [])} job(s), run directory {summ.get('location', run)}")
        for j in (tsm_report.get("summary") or {}).get("jobs") or []:
            resumed = f", resumed at step {j['resumed_from_step']}" if j.get("resumed_from_step") else ""
            print(f"{'TSM chain job ' + str(j['job_id']):>24}: {j['state']}{resumed}"
                  + (f"; {j['ended']}" if j.get("ended") else ""))
        a = (tsm_report.get("summary") or {}).get("test_top1_mean")
        b = (tsm_report.get("compare") or {}).get("test_top1_mean")
        why = None
        if a is None or b is None:
            missing = " and ".join(n for n, v in (("the TSM", a), ("the network without the shift", b)) if v is None)
            why = f"no multi-clip test top-1 for {missing} in the report"
        elif not self.quick and a - b < MARGIN:
            # The demo's claim is checked, not only printed (the quick form trains too briefly to learn).
            why = (f"the TSM did not beat the network without the shift by {100 * MARGIN:.0f} points "
                   f"({100 * a:.1f}% against {100 * b:.1f}%)")
        if why is not None:
            # One reason, and no verdict beside it that could read as the opposite.
            sys.exit(f"demo: {why}; see {tsm / 'report' / 'report.md'}")
        if tsm_report.get("verdict"):
            print(tsm_report["verdict"])
        print(same)
        print(f"plots: {tsm / 'report'}/*.png and {sim / 'report'}/*.png (summaries in report.md)")
        print(f"to look at these runs from your shell: {self.shown(('status', str(tsm)))}", flush=True)

    def cancel_active(self, run_dirs: Sequence[Path]) -> None:
        """Cancel the jobs of these runs of the demo that may still run (its own, in its own LSF home), so
        that none keeps running for nobody or holds the virtual nodes of the next demo."""
        for run_dir in run_dirs:
            if any(active(r) for r in self.rows(run_dir)):
                self.sj("cancel", str(run_dir), check=False)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["--next-minute"]:
        if len(args_in) != 4:
            sys.exit("usage: python -m summit_jobs.demo --next-minute RUN_DIR ELAPSED_SECONDS FLOOR_SECONDS")
        sys.exit(next_minute_main(args_in[1:]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("SUMMIT_JOBS_DEMO_DIR", "demo-out"))
    ap.add_argument("--quick", action="store_true", help="smaller data, fewer epochs (CI)")
    args = ap.parse_args(args_in)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    demo = Demo(out, args.quick)
    try:
        demo.run()
    except KeyboardInterrupt:
        print("\ndemo: interrupted; cancelling the jobs it queued that may still run", file=sys.stderr, flush=True)
        try:
            demo.cancel_active(demo.submitted)
        except KeyboardInterrupt:
            pass
        sys.exit(130)
    print(f"demo finished in {(time.time() - t0) / 60:.1f} minutes", flush=True)


if __name__ == "__main__":
    main()
