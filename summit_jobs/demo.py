"""`make demo`: the whole workflow, for real, on the embedded LSF of this machine.

synth -> pack -> stage-data (archive -> parallel file system folder -> each of
2 virtual nodes' NVMe) -> submit --nodes 2 --until-complete of a small TSM: a
chain whose jobs are stopped by their walltime warning signal, each queueing
the next, which resumes, until training is complete
-> the same network without the shift, for comparison -> a short real
4-node run and `simulate --virtual-nodes 4` on 2 nodes with the same seed and
options, then `compare` on the pair (the same weights) -> report. Every step is a real `summit-jobs`
command (printed before it runs); the embedded LSF's state lives in the demo
folder, and one LSF minute lasts a few seconds so walltimes and warnings play
out quickly.

    python -m summit_jobs.demo [--out DIR] [--quick]

``--quick`` (used by CI) runs a smaller set for fewer epochs.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple


#: Test top-1 points by which the TSM must beat the same network without the shift (full demo).
MARGIN = 0.2


def step(title: str) -> None:
    print(f"\n== {title}", flush=True)


#: Ranks the demo's jobs start at once (2 virtual nodes x 2 ranks): the start-up measurement runs as many.
RANKS = 4


def startup_seconds(ranks: int = RANKS) -> float:
    """Wall time for ``ranks`` interpreters to import the trainer's model at once, as a job's ranks do.

    Why: a chain link must get past start-up and train before its warning
    signal; on a slow or busy machine (one core, other work) that takes longer,
    so the demo stretches its LSF minute instead of assuming a machine speed.
    """
    code = "import torch, trainer.model, trainer.engines"
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(ranks)]
    for p in procs:
        p.wait()
    return time.perf_counter() - t0


def lsf_minute(quick: bool, startup: float) -> float:
    """Seconds per LSF minute: at least 6 (10 quick), and long enough that a link's 6 minutes before its
    warning hold start-up three times over."""
    return round(max(10.0 if quick else 6.0, startup / 2.0), 1)


class Demo:
    def __init__(self, out: Path, quick: bool):
        self.out, self.quick = out, quick
        self.env = dict(os.environ)
        for k in ("SUMMIT_JOBS_MACHINE", "SUMMIT_JOBS_PROJECT", "SUMMIT_JOBS_CONFIG"):
            self.env.pop(k, None)
        startup = startup_seconds()
        minute = lsf_minute(quick, startup)
        print(f"demo: {RANKS} ranks start in {startup:.1f} s here; one LSF minute lasts {minute:g} s", flush=True)
        self.env.update({
            "SUMMIT_JOBS_LSF_HOME": str(out / "lsf"),
            # One LSF minute lasts this many seconds in the demo: walltimes and warnings come quickly.
            "SUMMIT_JOBS_LSF_MINUTE": str(minute),
            "SUMMIT_JOBS_LSF_KILL_GRACE": "5",
            "PYTHONUNBUFFERED": "1",
        })

    def sj(self, *args: str, capture: bool = False, check: bool = True) -> subprocess.CompletedProcess:
        print("$ summit-jobs " + " ".join(shlex.quote(a) for a in args), flush=True)
        proc = subprocess.run([sys.executable, "-m", "summit_jobs", *args], env=self.env, text=True,
                              stdout=subprocess.PIPE if capture else None)
        if check and proc.returncode != 0:
            sys.exit(f"demo: that step failed (exit {proc.returncode}); see the messages above")
        return proc

    def wait(self, run_dir: Path) -> bool:
        return self.sj("status", str(run_dir), "--watch", "--interval", "3", check=False).returncode == 0

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
        self.sj("synth", str(out / "synth"), "--videos-per-class", "16" if quick else "100", "--frames", "16",
                "--size", "64", "--layout", "rawframes" if quick else "both", "--force", "--quiet")

        step("2/7 Pack it into tar shards with an index (the form HPSS and GPFS want)")
        self.sj("pack", str(out / "synth" / "rawframes"), str(out / "archive"), "--short-side", "64",
                "--shard-size", "2MB")

        step("3/7 Stage: archive -> parallel file system folder -> each virtual node's NVMe")
        self.sj(*common, "stage-data", "--manifest", str(out / "archive" / "manifest.json"), "--nodes", "2",
                "--dest", str(out / "pfs"), "--to-nvme")

        step("4/7 Train a small TSM on 2 nodes as a chain until complete: each job is stopped by its walltime "
             "warning (USR2), saves a checkpoint, exits 0 and queues the next, which resumes")
        tsm = runs / "tsm"
        self.sj(*common, "submit", "--nodes", "2", *job, "--epochs", epochs, "--until-complete", "--max-links", "60",
                "--walltime", "0:08", "--warning-minutes", "2", "--job-name", "tsm", "--run-dir", str(tsm),
                "--force", "--", *self.trainer_args())
        self.wait(tsm)

        step("5/7 The same network without the temporal shift (the TSN 2D baseline), for comparison")
        tsn = runs / "no-shift"
        self.sj(*common, "submit", "--nodes", "2", *job, "--epochs", epochs, "--job-name", "noshift",
                "--run-dir", str(tsn), "--force", "--", *self.trainer_args(), "--no-shift")
        self.wait(tsn)

        step("6/7 simulate: the 4-node optimisation on 2 nodes by exact gradient accumulation (k = 2), "
             "checked against a real 4-node run of the same seed and options")
        real, sim = self.simulate_pair(runs)
        step("7/7 Reports")
        self.sj("report", str(tsm), "--compare", str(tsn), "--force")
        self.sj("report", str(sim), "--force")
        same = self.compare(real, sim)
        self.summary(tsm, tsn, sim, same)

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
        self.sj("--machine", "local", "submit", "--nodes", "4", *self.pair_job(), "--job-name", "real4",
                "--run-dir", str(real), "--force", "--", *self.pair_trainer_args())
        if not self.wait(real):
            sys.exit(f"demo: the real 4-node run failed; see {real}")
        self.sj("--machine", "local", "simulate", "--virtual-nodes", "4", "--quota-nodes", "2", *self.pair_job(),
                "--job-name", "sim", "--run-dir", str(sim), "--force", "--", *self.pair_trainer_args())
        if not self.wait(sim):
            sys.exit(f"demo: the simulated run failed; see {sim}")
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
        if tsm_report.get("verdict"):
            print(tsm_report["verdict"])
        print(same)
        print(f"plots: {tsm / 'report'}/*.png and {sim / 'report'}/*.png (summaries in report.md)")
        a = (tsm_report.get("summary") or {}).get("test_top1_mean")
        b = (tsm_report.get("compare") or {}).get("test_top1_mean")
        if not self.quick and (a is None or b is None or a - b < MARGIN):
            # The demo's claim is checked, not only printed (the quick form trains too briefly to learn).
            sys.exit(f"demo: the TSM did not beat the network without the shift by {100 * MARGIN:.0f} points "
                     f"({'-' if a is None else f'{100 * a:.1f}%'} against {'-' if b is None else f'{100 * b:.1f}%'})"
                     f"; see {tsm / 'report' / 'report.md'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("SUMMIT_JOBS_DEMO_DIR", "demo-out"))
    ap.add_argument("--quick", action="store_true", help="smaller data, fewer epochs (CI)")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    Demo(out, args.quick).run()
    print(f"demo finished in {(time.time() - t0) / 60:.1f} minutes", flush=True)


if __name__ == "__main__":
    main()
