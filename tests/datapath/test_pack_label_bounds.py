"""A numeric label far beyond any class count is refused in one line, in bounded time and memory.

Without a class list pack names the classes class_000 up to the largest label;
a label of 99999999999 (a typo, another column) would make it build that many
names. Each case runs the real CLI in a process whose address space is capped,
so a regression fails here instead of filling the machine's memory.
"""
import resource
import subprocess
import sys

import pytest

from badinput import assert_refused

CLI = "summit-jobs: error:"
HUGE = "99999999999"
#: Address space of the pack process: the CLI and its imports fit easily, a list of 1e11 names does not.
MEMORY_LIMIT = 2 << 30


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def pack(args, env, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "summit_jobs", "pack", *args, "--quiet"], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, preexec_fn=_capped)


# (case id, files written into the test folder, pack arguments, needles)
CASES = [
    ("video-list", {"l.txt": f"train/a.mp4 0\ntrain/b.mp4 {HUGE}\n"}, ["o", "--list", "train=l.txt"],
     ["l.txt:2", f"label {HUGE}", "99999"]),
    ("rawframe-list", {"l.txt": f"train/a 4 {HUGE}\n"}, ["o", "--list", "val=l.txt"], ["l.txt:1", f"label {HUGE}"]),
    ("rawframes-folder", {"src/train_list.txt": f"train/a 4 1\ntrain/b 4 {HUGE}\n"}, ["src", "o"],
     ["train_list.txt:2", f"label {HUGE}"]),
]


@pytest.mark.parametrize("files, args, needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_huge_label_is_refused_in_one_line(tmp_path, cli_env, files, args, needles):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    proc = pack(args, cli_env, tmp_path)
    assert_refused(proc, needles, prefix=CLI)
    assert proc.stderr.count(CLI) == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "o").exists()


def test_the_largest_label_allowed_still_lists(tmp_path, cli_env):
    """The bound is 100,000 classes: label 99999 is listed (and its clip, absent, reported as missing)."""
    (tmp_path / "l.txt").write_text("train/a.mp4 99999\n")
    proc = pack(["o", "--list", "train=l.txt"], cli_env, tmp_path)
    assert_refused(proc, ["1 listed clips are not on disk"], prefix=CLI)
    assert "label" not in proc.stderr
