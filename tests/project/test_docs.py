"""The documentation's examples run, so they cannot rot.

Two kinds of fenced blocks are executed, in the order they appear in each file,
in one scratch folder per file (HOME, the embedded LSF's state and the working
directory all point into it, so nothing of the user's is read or written):

- ```` ```console ```` blocks: every line starting with ``$ `` is a command
  (``summit-jobs ...`` runs this checkout's CLI, ``python ...`` this interpreter); the lines after it, up to the
  next command, are its expected output: each must appear, in order, within
  the lines the command printed (stdout and stderr together), and the command
  must exit 0 unless the block's info string says ``console exit=N``.
  With ``console exact`` the lines shown must be the whole output, line for
  line (blank lines aside), with this checkout's folder written as
  ``/path/to/summit-jobs``: for an example that claims to be a command's output.
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

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```\s*$", re.S | re.M)


def blocks(path: Path) -> List[Tuple[str, str, int]]:
    """(info string, body, line number) of every fenced block."""
    text = path.read_text()
    return [(m.group(1).strip(), m.group(2), text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


#: How ``console exact`` blocks write this checkout's folder (a reader's install is elsewhere).
CHECKOUT = "/path/to/summit-jobs"


def commands(body: str, exact: bool = False) -> List[Tuple[str, List[str]]]:
    """(command, its expected output lines) of a console block; ``exact`` keeps each line's indentation."""
    out: List[Tuple[str, List[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out and line.strip():
            out[-1][1].append(line.rstrip() if exact else line.strip())
    return out


def check_output(where: str, output: str, expected: List[str], exact: bool) -> None:
    """The expected lines are in ``output``: in order (each within a line), or with ``exact`` all of it."""
    if exact:
        got = [line.rstrip() for line in output.replace(str(REPO), CHECKOUT).splitlines() if line.strip()]
        assert got == expected, f"{where}: the example is not the command's output; it prints:\n" + "\n".join(got)
        return
    lines, i = output.splitlines(), 0
    for exp in expected:
        while i < len(lines) and exp not in lines[i]:
            i += 1
        assert i < len(lines), f"{where}: expected output line not found (in order): {exp!r}\n" \
                               f"got:\n{output[-3000:]}"
        i += 1


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
        want_code = next((int(w[5:]) for w in words[1:] if w.startswith("exit=")), 0)
        exact = "exact" in words[1:]
        for cmd, expected in commands(body, exact):
            argv = shlex.split(cmd)
            if argv[0] == "summit-jobs":
                argv = [sys.executable, "-m", "summit_jobs", *argv[1:]]
            elif argv[0] == "python":  # the environment's interpreter: the one running these tests
                argv = [sys.executable, *argv[1:]]
            proc = subprocess.run(argv, cwd=str(tmp), env=env, text=True, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=300)
            where = f"{path.name}:{line}: `{cmd}`"
            assert proc.returncode == want_code, f"{where} exited {proc.returncode}:\n{proc.stdout[-3000:]}"
            check_output(where, proc.stdout, expected, exact)
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


def test_an_exact_example_must_be_the_whole_output(tmp_path):
    """``console exact``: a line left out, or one that differs in its indentation, fails the check."""
    printed = f"local (selected): this machine\n\n  profile: {REPO}/envs/local.yaml\n"
    shown = ["local (selected): this machine", f"  profile: {CHECKOUT}/envs/local.yaml"]
    check_output("ok", printed, shown, exact=True)
    for broken in (shown[:-1], [line.strip() for line in shown], shown + ["one more"]):
        with pytest.raises(AssertionError, match="not the command's output"):
            check_output("broken", printed, broken, exact=True)
    doc = tmp_path / "exact.md"
    doc.write_text("```console exact\n$ summit-jobs machines\nlocal (selected): this machine, through the "
                   "embedded LSF (virtual nodes, CPU ranks)\n```\n")
    work = tmp_path / "w"
    work.mkdir()
    with pytest.raises(AssertionError, match="not the command's output"):
        run_doc(doc, work)


#: GB per unit of LSF_UNIT_FOR_LIMITS (a profile's scheduler.memory.unit; LSF's default is MB).
GB_PER_UNIT = {"KB": 1 / 1024 ** 2, "MB": 1 / 1024, "GB": 1.0, "TB": 1024.0}
SELECT_MEM = re.compile(r"select\[[^\]]*\bmem\s*>=?\s*(\d+(?:\.\d+)?)")


def profile_examples() -> List[Tuple[str, dict]]:
    """(where, profile) of every shipped profile and every profile a doc page writes (```yaml file=...)."""
    import yaml
    out = [(path.name, yaml.safe_load(path.read_text())) for path in sorted((REPO / "envs").glob("*.yaml"))]
    for doc in DOCS:
        for info, body, line in blocks(doc):
            words = info.split()
            if words[:1] == ["yaml"] and len(words) > 1 and "/machines/" in words[1]:
                out.append((f"{doc.name}:{line}", yaml.safe_load(body)))
    return out


@pytest.mark.parametrize("where,profile", profile_examples(), ids=[w for w, _ in profile_examples()])
def test_a_memory_selection_is_in_the_profiles_unit(where, profile):
    """`select[mem>N]` counts in LSF_UNIT_FOR_LIMITS like -M and rusage: N in that unit fits the node's memory
    (a GB site asking for 500000 would wait for a 500 TB host forever)."""
    scheduler = profile.get("scheduler") or {}
    unit = ((scheduler.get("memory") or {}).get("unit") or "MB").upper()
    node_gb = float((profile.get("node") or {}).get("memory_gb") or 0)
    for directive in scheduler.get("extra_directives") or []:
        for value in SELECT_MEM.findall(str(directive)):
            asked_gb = float(value) * GB_PER_UNIT[unit]
            assert node_gb <= 0 or asked_gb <= node_gb, \
                f"{where}: {directive!r} asks for {asked_gb:,.0f} GB ({value} {unit}), the node has {node_gb:,.0f} GB"


def test_the_readme_first_screen_leads_to_your_own_script_and_to_the_command():
    """Within the README's first 80 lines: what --command does for a user's own script, with an LSF and a Slurm
    example and the link to docs/user-command.md; and the quickstart says how summit-jobs gets on PATH."""
    text = (REPO / "README.md").read_text()
    first = "\n".join(text.splitlines()[:80])
    assert "**Your own training script**" in first and "](docs/user-command.md)" in first
    assert "--machine lsf-gpu submit" in first and "--machine slurm-gpu submit" in first and "--command" in first
    quickstart = text[text.index("## Quickstart"):text.index("## Job scripts")]
    assert "source .venv/bin/activate" in quickstart and ".venv/bin/summit-jobs" in quickstart
