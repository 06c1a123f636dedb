"""Shell completion, driven the way a shell drives it: environment variables and a real process.

The shell sets ``_SUMMIT_JOBS_COMPLETE=bash_complete`` with ``COMP_WORDS`` and
``COMP_CWORD`` and runs the program; it prints ``type,value`` lines. Both ways
of starting the CLI (``python -m summit_jobs`` and the console script) must
answer to the same variable, machine names must include the user's own
profiles, and RUN arguments must offer run directories. bash itself is run on
the script that ``bash_source`` prints, where bash is installed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from helpers import REPO

SHIPPED = sorted(p.stem for p in (REPO / "envs").glob("*.yaml"))
RUN_COMMANDS = [["status"], ["logs"], ["cancel"], ["report"], ["compare"], ["compare", "runs-a"], ["fuse"],
                ["fuse", "runs-a"], ["report", "x", "--compare"]]
HEAVY = ("torch", "numpy", "jinja2", "paramiko", "matplotlib", "PIL", "av", "tqdm")


def complete(words: str, env: dict, cwd: Path, program: List[str] = None) -> List[str]:
    """What completion offers for the last word of ``words`` ("summit-jobs ..."; a trailing space: a new word)."""
    parts = words.split(" ")
    env = dict(env, COMP_WORDS=words, COMP_CWORD=str(len(parts) - 1), _SUMMIT_JOBS_COMPLETE="bash_complete")
    proc = subprocess.run(program or [sys.executable, "-m", "summit_jobs"], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout.splitlines()


def _user_profiles(cli_env: dict, tmp_path: Path) -> dict:
    """One profile in the user's folder, one in a SUMMIT_JOBS_MACHINES_PATH folder."""
    local = (REPO / "envs" / "local.yaml").read_text()
    mine = Path(cli_env["XDG_CONFIG_HOME"]) / "summit-jobs" / "machines"
    extra = tmp_path / "site-profiles"
    for folder, name in ((mine, "mysite"), (extra, "othersite")):
        folder.mkdir(parents=True)
        (folder / f"{name}.yaml").write_text(local.replace("name: local", f"name: {name}"))
    return dict(cli_env, SUMMIT_JOBS_MACHINES_PATH=str(extra))


def test_machine_names_include_user_profiles(cli_env, tmp_path):
    env = _user_profiles(cli_env, tmp_path)
    offered = complete("summit-jobs --machine ", env, tmp_path)
    assert offered == [f"plain,{n}" for n in sorted([*SHIPPED, "mysite", "othersite"])]
    assert complete("summit-jobs -m my", env, tmp_path) == ["plain,mysite"]
    assert complete("summit-jobs --config x.yaml --machine su", env, tmp_path) == ["plain,summit"]


def _runs(root: Path) -> None:
    """Run directories of each kind of marker, and folders that are not runs."""
    for rel, marker in (("tsm-a", "run.json"), ("trained", "run_config.json"), ("metrics-only", "metrics.jsonl"),
                        ("summit-jobs-runs/tsm-20240101", "run.json"), ("elsewhere/deep-run", "metrics.jsonl")):
        (root / rel).mkdir(parents=True)
        (root / rel / marker).write_text("{}\n")
    (root / "plain-folder").mkdir()
    (root / "summit-jobs-runs" / "not-a-run").mkdir()
    (root / "a-file").write_text("x")


@pytest.mark.parametrize("command", RUN_COMMANDS, ids=[" ".join(c) for c in RUN_COMMANDS])
def test_run_arguments_offer_run_directories(cli_env, tmp_path, command):
    _runs(tmp_path)
    offered = complete("summit-jobs " + " ".join(command) + " ", cli_env, tmp_path)
    assert offered == ["plain,metrics-only", "plain,summit-jobs-runs/tsm-20240101", "plain,trained",
                       "plain,tsm-a"]


def test_runs_by_prefix_path_and_configured_runs_dir(cli_env, tmp_path):
    _runs(tmp_path)
    assert complete("summit-jobs status ts", cli_env, tmp_path) == ["plain,summit-jobs-runs/tsm-20240101",
                                                                    "plain,tsm-a"]
    assert complete("summit-jobs logs elsewhere/", cli_env, tmp_path) == ["plain,elsewhere/deep-run"]
    # the runs folder of the config file named on the command line, an absolute path elsewhere
    runs = tmp_path / "scratch" / "runs"
    (runs / "big-run").mkdir(parents=True)
    (runs / "big-run" / "run.json").write_text("{}\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"runs_dir: {runs}\n")
    offered = complete(f"summit-jobs --config {cfg} report b", cli_env, tmp_path)
    assert offered == [f"plain,{runs / 'big-run'}"]
    # ... and through the profile's runs_dir when the config names the machine
    cfg.write_text(f"machine: summit\nmachines:\n  summit:\n    runs_dir: {runs}\n")
    assert f"plain,{runs / 'big-run'}" in complete(f"summit-jobs --config {cfg} cancel ", cli_env, tmp_path)
    assert f"plain,{runs / 'big-run'}" not in complete("summit-jobs cancel ", cli_env, tmp_path)


def test_no_run_matches_leaves_folders_to_the_shell(cli_env, tmp_path):
    assert complete("summit-jobs status zz", cli_env, tmp_path) == ["dir,zz"]


def test_a_broken_config_file_does_not_break_completion(cli_env, tmp_path):
    _runs(tmp_path)
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("runs_dir: [unclosed\n")
    assert complete(f"summit-jobs --config {cfg} status t", cli_env, tmp_path) == ["plain,trained", "plain,tsm-a"]


def test_command_names_complete(cli_env, tmp_path):
    assert complete("summit-jobs con", cli_env, tmp_path) == ["plain,config"]
    assert "plain,status" in complete("summit-jobs ", cli_env, tmp_path)


def test_the_lsf_group_and_its_commands_complete(cli_env, tmp_path):
    """`lsf` is listed with the other commands, and its own commands and options complete inside it."""
    assert complete("summit-jobs ls", cli_env, tmp_path) == ["plain,lsf"]
    assert complete("summit-jobs lsf ", cli_env, tmp_path) == ["plain,env", "plain,shell"]
    assert "plain,--home" in complete("summit-jobs lsf env --", cli_env, tmp_path)


@pytest.mark.parametrize("shell, needle", [("bash", "_summit_jobs_completion"), ("zsh", "#compdef summit-jobs"),
                                           ("fish", "complete --no-files --command summit-jobs")])
def test_source_scripts_use_the_one_variable(cli_env, tmp_path, shell, needle):
    """`python -m summit_jobs` prints scripts that call back with _SUMMIT_JOBS_COMPLETE, as the console script."""
    env = dict(cli_env, _SUMMIT_JOBS_COMPLETE=f"{shell}_source")
    proc = subprocess.run([sys.executable, "-m", "summit_jobs"], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert needle in proc.stdout and "_SUMMIT_JOBS_COMPLETE=" in proc.stdout
    assert "__MAIN___COMPLETE" not in proc.stdout and "_SUMMIT_JOBS_COMPLETE" in proc.stdout


def _console_script() -> Path:
    return Path(sys.executable).parent / "summit-jobs"


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("program", ["module", "console-script"])
def test_bash_runs_the_sourced_script(cli_env, tmp_path, program):
    """The README's bash line, for real: bash evaluates the script and its function fills COMPREPLY."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "summit-jobs"
    if program == "module":
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m summit_jobs "$@"\n')
    else:
        if not _console_script().exists():
            pytest.skip("the console script is not installed next to this interpreter")
        wrapper.write_text(f'#!/bin/sh\nexec "{_console_script()}" "$@"\n')
    wrapper.chmod(0o755)
    env = dict(_user_profiles(cli_env, tmp_path), PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    _runs(tmp_path / "work")
    script = ('eval "$(_SUMMIT_JOBS_COMPLETE=bash_source summit-jobs)"\n'
              'COMP_WORDS=(summit-jobs -m my); COMP_CWORD=2; _summit_jobs_completion summit-jobs\n'
              'printf "machine:%s\\n" "${COMPREPLY[@]}"; COMPREPLY=()\n'
              'COMP_WORDS=(summit-jobs status t); COMP_CWORD=2; _summit_jobs_completion summit-jobs\n'
              'printf "run:%s\\n" "${COMPREPLY[@]}"\n')
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], env=env, cwd=tmp_path / "work",
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["machine:mysite", "run:summit-jobs-runs/tsm-20240101", "run:trained",
                                       "run:tsm-a"], proc.stdout + proc.stderr


def test_completion_imports_nothing_heavy(cli_env, tmp_path):
    """A TAB press starts the CLI: no torch, numpy, Jinja2, paramiko or plotting on the way."""
    _runs(tmp_path)
    for words in ("summit-jobs --machine ", "summit-jobs status ", "summit-jobs report ", "summit-jobs fuse "):
        env = dict(cli_env, COMP_WORDS=words, COMP_CWORD="2", _SUMMIT_JOBS_COMPLETE="bash_complete")
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "summit_jobs"], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and proc.stdout, proc.stderr
        imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
        assert not imported & set(HEAVY), (words, sorted(imported & set(HEAVY)))
