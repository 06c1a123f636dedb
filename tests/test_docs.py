"""The documentation's examples run, so they cannot rot.

Two kinds of fenced blocks are executed, in the order they appear in each file,
in one scratch folder per file (HOME, the embedded LSF's state and the working
directory all point into it, so nothing of the user's is read or written):

- ```` ```console ```` blocks: every line starting with ``$ `` is a command
  (``summit-jobs ...`` runs this checkout's CLI, ``python ...`` this interpreter); the lines after it, up to the
  next command, are its expected output: each must appear, in order, within
  the lines the command printed (stdout and stderr together), and the command
  must exit 0 unless the block's info string says ``console exit=N``.
- ```` ```yaml file=PATH ```` blocks: written to PATH (``~`` is the scratch
  HOME) before the blocks after them run.

Plain ```` ``` ```` blocks are illustrations (a real Summit, a real HPSS) and are
not run.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```\s*$", re.S | re.M)


def blocks(path: Path) -> List[Tuple[str, str, int]]:
    """(info string, body, line number) of every fenced block."""
    text = path.read_text()
    return [(m.group(1).strip(), m.group(2), text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


def commands(body: str) -> List[Tuple[str, List[str]]]:
    out: List[Tuple[str, List[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out and line.strip():
            out[-1][1].append(line.strip())
    return out


def run_doc(path: Path, tmp: Path) -> int:
    home = tmp / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUMMIT_JOBS_")}
    env.update(HOME=str(home), SUMMIT_JOBS_LSF_HOME=str(tmp / "lsf"), COLUMNS="200", PYTHONUNBUFFERED="1")
    ran = 0
    for info, body, line in blocks(path):
        words = info.split()
        if not words:
            continue
        if words[0] == "yaml" and len(words) > 1 and words[1].startswith("file="):
            target = Path(words[1][5:].replace("~", str(home), 1))
            target = target if target.is_absolute() else tmp / target
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
            continue
        if words[0] != "console":
            continue
        want_code = int(words[1][5:]) if len(words) > 1 and words[1].startswith("exit=") else 0
        for cmd, expected in commands(body):
            argv = shlex.split(cmd)
            if argv[0] == "summit-jobs":
                argv = [sys.executable, "-m", "summit_jobs", *argv[1:]]
            elif argv[0] == "python":  # the environment's interpreter: the one running these tests
                argv = [sys.executable, *argv[1:]]
            proc = subprocess.run(argv, cwd=str(tmp), env=env, text=True, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=300)
            where = f"{path.name}:{line}: `{cmd}`"
            assert proc.returncode == want_code, f"{where} exited {proc.returncode}:\n{proc.stdout[-3000:]}"
            lines, i = proc.stdout.splitlines(), 0
            for exp in expected:
                while i < len(lines) and exp not in lines[i]:
                    i += 1
                assert i < len(lines), f"{where}: expected output line not found (in order): {exp!r}\n" \
                                       f"got:\n{proc.stdout[-3000:]}"
                i += 1
            ran += 1
    return ran


@pytest.mark.parametrize("doc", DOCS, ids=[p.name for p in DOCS])
def test_examples_in_docs_run(doc, tmp_path):
    ran = run_doc(doc, tmp_path)
    assert ran >= 1, f"{doc.name} has no console example; every doc page shows at least one command that runs"


def test_the_harness_catches_a_wrong_expectation(tmp_path):
    """A doc whose expected output is not printed fails the check (the check can fail)."""
    doc = tmp_path / "bad.md"
    doc.write_text("```console\n$ summit-jobs machines\nno such machine line\n```\n")
    work = tmp_path / "w"
    work.mkdir()
    with pytest.raises(AssertionError, match="expected output line not found"):
        run_doc(doc, work)
    doc.write_text("```console\n$ summit-jobs --machine nowhere submit --nodes 1 --dry-run\n```\n")
    work2 = tmp_path / "w2"
    work2.mkdir()
    with pytest.raises(AssertionError, match="exited 2"):
        run_doc(doc, work2)
