"""CLI start-up cost: `--help` and a full dry-run render against a bare interpreter start, in the same run.

    python bench/cli_startup.py [--repeat 20] [--no-pyc] [--torch] [--floor] [--before DIR]

Prints the median wall time of each case and its ratio to `python -c pass`.
The dry run is measured twice: warm (the user cache folder, XDG_CACHE_HOME,
already holds the profile and template caches of an earlier run) and cold (a
fresh, empty cache folder for every run, so every cache is written anew).

Python's own bytecode is cached as for an installed program (pip compiles it
at install time): the cases run with PYTHONPYCACHEPREFIX in a temporary folder,
filled by one untimed round first, whatever PYTHONDONTWRITEBYTECODE says in
the calling environment. --no-pyc measures without any bytecode cache instead
(every module compiled from source on every start). The CLI never imports
torch, so these should cost a small multiple of `python -c pass`.

--before DIR adds the same CLI cases run from another source tree (an older
revision, e.g. `git archive REV | tar -x -C DIR`), interleaved with the
others, so that a before/after comparison sees the same machine load.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

DRY_RUN = ["--machine", "summit", "submit", "--nodes", "256", "--project", "ABC123", "--dry-run"]


def timed(cmd: List[str], env: Dict[str, str], cwd: str) -> Tuple[float, float]:
    """Wall and CPU (user + system) time of one run; a failing case stops the benchmark (a fast error is no figure).

    Why CPU time too: on a loaded machine the wall time holds the waits for a
    core; the CPU time is the work the command itself did.
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return wall, usage.ru_utime + usage.ru_stime


def base_env(work: str, no_pyc: bool) -> Dict[str, str]:
    """The environment of every case: a private config and a bytecode policy the same for all cases."""
    env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(work, "config"),
               XDG_CACHE_HOME=os.path.join(work, "warm-cache"))
    env.pop("SUMMIT_JOBS_MACHINE", None)
    env.pop("SUMMIT_JOBS_CONFIG", None)
    if no_pyc:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(work, "pycache")
    return env


#: A case: its command, whether it gets an empty cache folder, and the source tree to run (None: this one).
Case = Tuple[List[str], bool, Optional[str]]


def run_case(case: Case, env: Dict[str, str], work: str) -> Tuple[float, float]:
    """One timed run; a cold case gets a cache folder of its own, removed afterwards."""
    cmd, cold, tree = case
    if tree:
        env = dict(env, PYTHONPATH=os.pathsep.join(p for p in (tree, env.get("PYTHONPATH")) if p))
    cold_dir: Optional[str] = None
    if cold:
        cold_dir = tempfile.mkdtemp(prefix="cold-cache-", dir=work)
        env = dict(env, XDG_CACHE_HOME=cold_dir)
    try:
        return timed(cmd, env, work)
    finally:
        if cold_dir:
            shutil.rmtree(cold_dir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--no-pyc", action="store_true", help="No Python bytecode cache at all (compile every start).")
    ap.add_argument("--torch", action="store_true", help="Also time `python -c 'import torch'`, for scale.")
    ap.add_argument("--before", metavar="DIR", help="Also run the CLI cases from this source tree.")
    ap.add_argument("--floor", action="store_true",
                    help="Also time importing the CLI's two required libraries alone (click; click and jinja2): "
                         "what any click CLI, and any Jinja render, costs before its own code runs.")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="cli-startup-")
    env = base_env(work, args.no_pyc)
    cases = make_cases(args)
    try:
        for case in cases.values():  # untimed: fills the bytecode and warm caches
            run_case(case, env, work)
        times: Dict[str, List[Tuple[float, float]]] = {name: [] for name in cases}
        for _ in range(args.repeat):  # interleaved, so machine noise hits every case alike
            for name, case in cases.items():
                times[name].append(run_case(case, env, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(times, args)


def make_cases(args: argparse.Namespace) -> Dict[str, Case]:
    """The cases by name, in the order they run in each round."""
    cli = [sys.executable, "-m", "summit_jobs"]
    cases: Dict[str, Case] = {"python -c pass": ([sys.executable, "-c", "pass"], False, None)}
    trees = [("", None)] + ([("before: ", os.path.abspath(args.before))] if args.before else [])
    for label, tree in trees:
        cases[f"{label}summit-jobs --help"] = (cli + ["--help"], False, tree)
        cases[f"{label}dry-run render, warm cache"] = (cli + DRY_RUN, False, tree)
        cases[f"{label}dry-run render, cold cache"] = (cli + DRY_RUN, True, tree)
    if args.floor:
        for mods in ("click", "click, jinja2"):
            cases[f"python -c 'import {mods}'"] = ([sys.executable, "-c", f"import {mods}"], False, None)
    if args.torch:
        cases["python -c 'import torch'"] = ([sys.executable, "-c", "import torch"], False, None)
    return cases


def report(times: Dict[str, List[Tuple[float, float]]], args: argparse.Namespace) -> None:
    """Median wall and CPU time of each case, each as a ratio to the bare interpreter's."""
    def med(name: str, i: int) -> float:
        return statistics.median(t[i] for t in times[name])
    base_wall, base_cpu = med("python -c pass", 0), med("python -c pass", 1)
    print(f"bytecode cache: {'none (--no-pyc)' if args.no_pyc else 'on'}; {args.repeat} interleaved rounds; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'case':44s} {'wall s':>8s} {'ratio':>6s} {'cpu s':>8s} {'ratio':>6s}")
    for name in times:
        wall, cpu = med(name, 0), med(name, 1)
        print(f"{name:44s} {wall:8.3f} {wall / base_wall:6.2f} {cpu:8.3f} {cpu / base_cpu:6.2f}")


if __name__ == "__main__":
    main()
