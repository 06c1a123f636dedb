"""Progress output of the long commands (synth, pack, stage-data, report), from real `python -m summit_jobs`
processes: on a pseudo-terminal a live bar that redraws with its rate and time left; through a pipe (a job
log, CI) plain lines at least every 10% of the work and every SUMMIT_JOBS_PROGRESS_INTERVAL seconds, never a
carriage return or an escape code; --quiet prints none; NO_COLOR takes the colour away; the bar's library is
imported only when a bar is drawn."""
from __future__ import annotations

import fcntl
import json
import math
import os
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import List, Tuple

import pytest

from helpers import run_cli
from test_staging import FAKES, blob_dataset
from summit_jobs.schedulers.lsf.embedded.state import node_names

#: The virtual nodes' host names on this machine: vnode1... where tasks get host names, else 127.1.0.1...
NODE1, NODE2, NODE3, NODE4 = node_names(4)

#: A plain progress line of synth, pack or report: "pack: 12/40 videos (30%), ...".
COUNT = re.compile(r"^(?P<what>synth|pack|report): (?:stopped at )?(?P<done>\d+)/(?P<total>\d+) (?:videos|plots) "
                   r"\((?P<pct>\d+)%\)")
#: stage-data's hop 1 line: "stage-data: hop 1: 1.2 MB/4.0 MB (30%), ...".
HOP1 = re.compile(r"^stage-data: hop 1: [\d.]+ [KMGT]?B/[\d.]+ [KMGT]?B \((?P<pct>\d+)%\)")
#: A redraw of a terminal bar: a carriage return not followed by the newline the terminal adds to "\n".
REDRAW = re.compile(r"\r(?!\n)")


def on_terminal(args: List[str], env: dict, size: Tuple[int, int] = (24, 100), timeout: float = 180,
                python: Tuple[str, ...] = ()) -> Tuple[int, str]:
    """Run the CLI (``python PYTHON -m summit_jobs ARGS``) with stdin, stdout and stderr on a new
    pseudo-terminal of ``size`` (rows, columns); (exit code, everything it wrote). Size (0, 0) is a terminal
    nobody sized."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    proc = subprocess.Popen([sys.executable, *python, "-m", "summit_jobs", *args], stdin=slave, stdout=slave,
                            stderr=slave, env=env, close_fds=True, start_new_session=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                proc.kill()
                raise AssertionError(f"{args} did not finish within {timeout} s: {b''.join(chunks)[-2000:]!r}")
            try:
                data = os.read(master, 65536)
            except OSError:                  # EIO: the last writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    return proc.wait(timeout=30), b"".join(chunks).decode("utf-8", "replace")


def counts(stderr: str, what: str) -> List[Tuple[int, int, int, str]]:
    """(done, total, percent, line) of every plain progress line of ``what``."""
    out = []
    for line in stderr.splitlines():
        m = COUNT.match(line)
        if m and m["what"] == what:
            out.append((int(m["done"]), int(m["total"]), int(m["pct"]), line))
    return out


def assert_plain(text: str) -> None:
    """What a log must never hold: a carriage return or an escape sequence."""
    assert "\r" not in text and "\x1b" not in text, repr(text[:2000])


def assert_every_tenth(lines: List[Tuple[int, int, int, str]], step: int = 1) -> None:
    """From 0 to the whole, no two consecutive lines further apart than 10% of the work (plus the one
    ``step`` an update moves by); the last one is the final line with the time taken."""
    assert lines, "no progress lines"
    total = lines[0][1]
    assert lines[0][0] == 0 and lines[-1][0] == total and lines[-1][2] == 100, lines
    gaps = [b[0] - a[0] for a, b in zip(lines, lines[1:])]
    assert max(gaps) <= math.ceil(total / 10) + step - 1, [x[3] for x in lines]
    assert min(gaps) >= 0
    assert " in " in lines[-1][3] and "/s" in lines[-1][3], lines[-1][3]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """40 synthetic videos (5 per class, 16 frames of 96x96) in both layouts, written through a pipe; the
    synth run's result is kept for the pipe test."""
    root = tmp_path_factory.mktemp("progress")
    env = dict(os.environ, XDG_CONFIG_HOME=str(root / "xdg"))
    env.pop("NO_COLOR", None)
    env.pop("SUMMIT_JOBS_PROGRESS_INTERVAL", None)
    r = run_cli(["synth", str(root / "d"), "--videos-per-class", "5", "--frames", "16", "--size", "96"], env,
                timeout=180)
    assert r.returncode == 0, r.stderr
    return root, env, r


# ---- through a pipe ----------------------------------------------------------------------------

def test_synth_through_a_pipe_prints_plain_lines_every_tenth(data):
    _root, _env, r = data
    assert_plain(r.stdout + r.stderr)
    lines = counts(r.stderr, "synth")
    assert_every_tenth(lines)
    assert lines[0][1] == 40 and len(lines) <= 12              # the default interval adds none on 2 s of work
    assert "videos/s" in lines[1][3] and " left" in lines[1][3]
    assert r.stdout.startswith("synth: 32 train + 8 val videos, 8 classes")    # the summary is unchanged


def test_pack_through_a_pipe_prints_plain_lines_every_tenth(data, tmp_path):
    root, env, _ = data
    r = run_cli(["pack", str(root / "d" / "videos"), str(tmp_path / "shards"), "--shard-size", "100KB", "-j", "1"],
                env, timeout=180)
    assert r.returncode == 0, r.stderr
    assert_plain(r.stdout + r.stderr)
    lines = counts(r.stderr, "pack")
    assert_every_tenth(lines)
    assert all(line.endswith("; 0 skipped") for *_x, line in lines[1:])
    assert re.fullmatch(r"pack: 40 videos in \d+ shards \(.*\) -> .*manifest\.json; [\d.]+ videos/s on 1 workers\n",
                        r.stdout)


def hpss_env(tmp_path: Path) -> dict:
    """The environment of a login node with HPSS's hsi and htar (tests/fakes), the archive under tmp_path."""
    (tmp_path / "hpss").mkdir()
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "xdg"), PATH=f"{FAKES}{os.pathsep}{os.environ['PATH']}",
               FAKE_HPSS_ROOT=str(tmp_path / "hpss"), FAKE_HPSS_STATE=str(tmp_path / "state"),
               FAKE_HPSS_LOG=str(tmp_path / "hpss.log"))
    env.pop("SUMMIT_JOBS_PROGRESS_INTERVAL", None)
    return env


def test_interval_variable_adds_time_lines_during_a_long_tape_recall(tmp_path):
    """htar extracts every member in one call: no byte is counted until it ends, so only the time-based
    lines show the command is alive."""
    env = hpss_env(tmp_path)
    m = blob_dataset(tmp_path / "local", [1, 1], val=1)
    r = subprocess.run(["htar", "-cvf", "/k.tar", *[s["name"] for s in m["shards"]]], cwd=tmp_path / "local",
                       env=env, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    env.update(FAKE_HPSS_RATE=str(2 << 20), SUMMIT_JOBS_PROGRESS_INTERVAL="0.2")     # 3 MB: 1.5 s
    r = run_cli(["stage-data", "-M", str(tmp_path / "local" / "manifest.json"), "--nodes", "1", "--transport",
                 "hpss", "--htar", "/k.tar", "--dest", str(tmp_path / "pfs")], env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert_plain(r.stdout + r.stderr)
    hop1 = [line for line in r.stderr.splitlines() if HOP1.match(line)]
    waiting = [line for line in hop1 if "(0%)" in line and " so far" in line]
    assert len(waiting) >= 3, hop1
    assert hop1[-1].startswith("stage-data: hop 1: 3.1 MB/3.1 MB (100%) in "), hop1
    assert "hop 1: 3 shards" in r.stdout


def test_a_transfer_that_is_retried_is_counted_once(tmp_path):
    """A failed call and a corrupt copy are fetched again: the count ends at the dataset's size, not above,
    and each retry message is a line of its own."""
    env = dict(hpss_env(tmp_path), FAKE_HPSS_FAIL_FIRST="1", FAKE_HPSS_CORRUPT="train-00001.tar")
    blob_dataset(tmp_path / "local", [1, 1, 1], val=1)
    shutil.copytree(tmp_path / "local", tmp_path / "hpss" / "k")
    r = run_cli(["stage-data", "-M", str(tmp_path / "local" / "manifest.json"), "--nodes", "1", "--transport",
                 "hpss", "--source", "/k", "--dest", str(tmp_path / "pfs"), "--retry-delay", "0.01", "-j", "1"],
                env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert_plain(r.stdout + r.stderr)
    hop1 = [line for line in r.stderr.splitlines() if HOP1.match(line)]
    assert max(int(HOP1.match(line)["pct"]) for line in hop1) == 100, hop1
    assert hop1[-1].startswith("stage-data: hop 1: 4.2 MB/4.2 MB (100%) in "), hop1
    assert re.search(r"^stage-data: shard train-00001.tar arrived corrupt .*; retrying train-00001.tar in ",
                     r.stderr, re.M), r.stderr
    assert len(re.findall(r"^stage-data: .*; retrying ", r.stderr, re.M)) == 2, r.stderr


def test_stage_data_through_a_pipe_prints_plain_lines_for_each_hop(cli_env, tmp_path):
    env = dict(cli_env, SUMMIT_JOBS_LSF_HOME=str(tmp_path / "lsf"))
    env.pop("NO_COLOR", None)
    blob_dataset(tmp_path / "archive", [0.25] * 20, val=0)      # 5% a shard, copied one at a time
    r = run_cli(["stage-data", "-M", str(tmp_path / "archive" / "manifest.json"), "--nodes", "2", "--dest",
                 str(tmp_path / "pfs"), "--to-nvme", "-j", "1"], env, timeout=180)
    assert r.returncode == 0, r.stderr
    assert_plain(r.stdout + r.stderr)
    pcts = [int(HOP1.match(line)["pct"]) for line in r.stderr.splitlines() if HOP1.match(line)]
    assert pcts[0] == 0 and pcts[-1] == 100 and max(b - a for a, b in zip(pcts, pcts[1:])) <= 10, pcts
    for node in (0, 1):
        assert re.search(rf"^stage\[node {node}\]: train-\d+\.tar: copied .* verified$", r.stderr, re.M), r.stderr
        assert re.search(rf"^stage\[node {node}\]: \d+ shards .* all verified$", r.stderr, re.M), r.stderr
    assert "stage-data: hop 1: 20 shards in" in r.stdout and r.stdout.count(f"stage-data: hop 2: {NODE1[:-1]}") == 2


def _run_dir(root: Path) -> Path:
    """A run directory as the trainer leaves it: train and eval records in metrics.jsonl."""
    run = root / "run"
    run.mkdir()
    recs = [{"kind": "train", "step": s, "epoch": s // 5, "time": 1000.0 + s, "loss": 3.0 - 0.1 * s, "top1": 0.1,
             "top5": 0.5, "lr": 0.1, "clips_per_s": 10.0, "data_wait_frac": 0.1, "step_time": 1.0}
            for s in range(1, 11)]
    recs += [{"kind": "eval", "step": s, "epoch": s // 5 - 1, "time": 1000.5 + s, "loss": 2.0, "top1": 0.2,
              "top5": 0.6, "lr": 0.1} for s in (5, 10)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    return run


def test_report_counts_its_plots_in_plain_lines_and_quiet_drops_them(cli_env, tmp_path):
    run = _run_dir(tmp_path)
    r = run_cli(["report", str(run), "--out", str(tmp_path / "rep")], cli_env, timeout=180)
    assert r.returncode == 0, r.stderr
    assert_plain(r.stderr)
    lines = counts(r.stderr, "report")
    plots = sorted(p.name for p in (tmp_path / "rep").glob("*.png"))
    assert lines[0][:2] == (0, len(plots)) and lines[-1][0] == len(plots) and len(lines) == len(plots) + 1
    assert {line.rsplit("; ", 1)[1] for *_x, line in lines[1:]} == set(plots)
    r = run_cli(["report", str(run), "--out", str(tmp_path / "rep"), "--quiet"], cli_env, timeout=180)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "report: " in r.stdout


def test_quiet_prints_no_progress_through_a_pipe(data, tmp_path):
    root, env, _ = data
    r = run_cli(["synth", str(tmp_path / "s"), "--videos-per-class", "2", "--quiet"], env, timeout=120)
    assert r.returncode == 0 and r.stderr == "" and r.stdout.startswith("synth: 8 train + 8 val"), r.stderr
    r = run_cli(["pack", str(root / "d" / "rawframes"), str(tmp_path / "p"), "-j", "1", "--quiet"], env,
                timeout=120)
    assert r.returncode == 0 and r.stderr == "" and r.stdout.startswith("pack: 40 videos"), r.stderr
    r = run_cli(["stage-data", "-M", str(tmp_path / "p" / "manifest.json"), "--nodes", "1", "--dest",
                 str(tmp_path / "pfs"), "--quiet"], env, timeout=120)
    assert r.returncode == 0 and r.stderr == "" and "hop 1: " in r.stdout, r.stderr


# ---- on a terminal ----------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["synth", "pack"])
def test_a_live_bar_redraws_with_rate_and_time_left_on_a_terminal(data, tmp_path, command):
    root, env, _ = data
    args = (["synth", str(tmp_path / "s"), "--videos-per-class", "5", "--frames", "16", "--size", "96"]
            if command == "synth" else
            ["pack", str(root / "d" / "videos"), str(tmp_path / "p"), "--shard-size", "100KB", "-j", "1"])
    code, out = on_terminal(args, env)
    assert code == 0, out
    draws = [d for d in REDRAW.split(out)[1:] if d.startswith(f"{command}:")]
    seen = {m.group(1) for d in draws for m in [re.search(r"\| (\d+)/40 \[", d)] if m}
    assert len(draws) >= 3 and len(seen) >= 3 and "40" in seen, draws
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d, +[\d.]+ videos/s", out), draws     # elapsed<left, rate
    assert "\x1b[32m" in out                                                      # coloured unless NO_COLOR
    assert re.search(rf"^{command}: (32 train|40 videos)", out.replace("\r\n", "\n"), re.M), out
    assert not re.search(rf"^{command}: \d+/40 videos \(", out.replace("\r\n", "\n"), re.M)  # no log lines


def test_no_color_on_a_terminal_redraws_without_escape_codes(data, tmp_path):
    _root, env, _ = data
    code, out = on_terminal(["synth", str(tmp_path / "s"), "--videos-per-class", "4", "--frames", "16", "--size",
                             "96"], dict(env, NO_COLOR=""))
    assert code == 0, out
    assert "\x1b" not in out, repr(out)
    assert len(REDRAW.findall(out)) >= 3 and "32/32 [" in out


def test_quiet_on_a_terminal_draws_nothing(data, tmp_path):
    _root, env, _ = data
    code, out = on_terminal(["synth", str(tmp_path / "s"), "--videos-per-class", "2", "--quiet"], env)
    assert code == 0, out
    assert out == f"synth: 8 train + 8 val videos, 8 classes, 16 frames of 96x96 -> {tmp_path / 's'} " \
                  "(rawframes, videos)\r\n", repr(out)


def test_a_terminal_that_reports_no_size_still_gets_a_bar(data, tmp_path):
    """A pseudo-terminal nobody sized (0 x 0: some CI runners, `docker run -t` before a resize): tqdm alone
    draws an empty bar there."""
    _root, env, _ = data
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    code, out = on_terminal(["synth", str(tmp_path / "s"), "--videos-per-class", "2", "--layout", "rawframes"],
                            env, size=(0, 0))
    assert code == 0, out
    assert re.search(r"\rsynth: 100%\|.*\| 16/16 \[", out), repr(out)


# ---- what is imported --------------------------------------------------------------------------

def _imports(args: List[str], env: dict, terminal: bool = False) -> str:
    """The -X importtime report of a real CLI run (on stderr, or on the terminal)."""
    if terminal:
        code, out = on_terminal(args, env, python=("-X", "importtime"))
    else:
        r = subprocess.run([sys.executable, "-X", "importtime", "-m", "summit_jobs", *args], env=env,
                           capture_output=True, text=True, timeout=120)
        code, out = r.returncode, r.stderr
    assert code == 0, out[-3000:]
    return out


def test_the_bar_library_is_imported_only_to_draw_a_bar(data, tmp_path):
    _root, env, _ = data
    tqdm = re.compile(r"\| +tqdm$", re.M)
    assert not tqdm.search(_imports(["--help"], env))
    assert not tqdm.search(_imports(["--machine", "summit", "submit", "--nodes", "256", "--project", "ABC123",
                                     "--dry-run"], env))
    piped = _imports(["synth", str(tmp_path / "a"), "--videos-per-class", "2", "--layout", "rawframes"], env)
    assert not tqdm.search(piped) and "synth: 8/16 videos (50%)" in piped
    drawn = _imports(["synth", str(tmp_path / "b"), "--videos-per-class", "2", "--layout", "rawframes"], env,
                     terminal=True)
    assert tqdm.search(drawn.replace("\r\n", "\n")), drawn[-2000:]


def test_without_the_bar_library_a_terminal_gets_the_plain_lines(data, tmp_path):
    """summit-jobs installed without its dependencies (no tqdm importable): no traceback, plain lines."""
    _root, env, _ = data
    shadow = tmp_path / "no-tqdm" / "tqdm"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'tqdm'\")\n")
    path = [str(shadow.parent)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    code, out = on_terminal(["synth", str(tmp_path / "s"), "--videos-per-class", "2", "--layout", "rawframes"],
                            dict(env, PYTHONPATH=os.pathsep.join(path)))
    assert code == 0 and "Traceback" not in out, out
    assert "synth: 8/16 videos (50%)" in out and "synth: 16/16 videos (100%) in " in out, out
    assert not REDRAW.search(out)
