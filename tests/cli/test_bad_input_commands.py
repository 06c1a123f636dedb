"""Every option and argument of every `summit-jobs` command other than submit and simulate, with a bad value.

tests/planning/test_bad_input_options.py holds submit's, simulate's and the group's
own options; this file holds the rest, one table row (at least) per option,
read against the commands' own click definitions by
test_every_option_of_every_command_has_a_bad_value, so a new option cannot
join without a case. Each row runs the real entry point in a process, in a
folder and user data of its own (no run index, config or LSF of the person
running the tests), and must end within 20 s without a traceback in one of
three ways:

* ``refused``: a non-zero exit and one error line holding the needles;
* ``failed``: a check command (doctor) exits 1 and prints a FAIL line holding them;
* ``works``: the documented behaviour, checked by the row's own function.

Flags take no value, so their bad value is ``--flag=1``; click refuses it.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Callable, List, Tuple

import click
import numpy as np
import pytest

from badinput import assert_refused, option_names, run_module
from lsf_jobs import lsf_environment
from trainer.scores import write_scores

#: No case may take longer than this (a hang is a failure, not a slow pass).
LIMIT_S = 20
#: Commands whose options test_bad_input_options.py covers (with its own completeness test).
ELSEWHERE = ("submit", "simulate")
#: A run name with shell metacharacters: any command that hands it to a shell would create ``pwned``.
HOSTILE = "x;touch pwned;`touch pwned`"


def _shard_entry(name: str) -> dict:
    return {"name": name, "split": "train", "bytes": 3, "samples": 0, "sha256": hashlib.sha256(b"abc").hexdigest(),
            "index_offset": 0, "index_bytes": 0}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Tuple[Path, dict]:
    """One folder for every case: odd paths, a tiny rawframes set, a manifest with its shards, two fusable
    runs, and a run in the (private) run index, so that an empty RUN could reach "the recent runs"."""
    root = tmp_path_factory.mktemp("badcmd")
    env = dict(lsf_environment(root), XDG_CACHE_HOME=str(root / "xdg-cache"))
    (root / "adir").mkdir()
    (root / "afile").write_text("not a folder\n")
    made = run_module("summit_jobs", ["synth", str(root / "s"), "--videos-per-class", "2", "--frames", "4",
                                      "--size", "32", "--layout", "rawframes", "--quiet"], env, cwd=root,
                      timeout=60)
    assert made.returncode == 0, made.stderr
    manifest = {"format": "summit-jobs-shards/1", "name": "t", "classes": ["a"], "hash": "sha256",
                "shards": [_shard_entry("train-00000.tar"), _shard_entry("train-00001.tar")]}
    (root / "good.json").write_text(json.dumps(manifest))
    for shard in ("train-00000.tar", "train-00001.tar"):
        (root / shard).write_bytes(b"abc")
    keys = [f"v{i:03d}" for i in range(6)]
    for stream in ("rgb", "flow"):
        meta = {"checkpoint": "epoch-0000.pt", "step": 3, "epoch": 0, "modality": stream, "num_classes": 4}
        write_scores(root / stream, "scores/epoch-0000.npz", keys, [i % 4 for i in range(6)],
                     np.ones((6, 4), np.float32), meta)
    run_dir = root / "recorded"
    run_dir.mkdir()
    record = {"name": "recorded", "run_dir": str(run_dir), "job_ids": [7], "created": "2026-01-01T00:00:00",
              "lsf_home": str(root / "lsf"), "ssh": None}
    index = root / "xdg-data" / "summit-jobs" / "runs"
    index.mkdir(parents=True)
    (index / "recorded-0000000000.json").write_text(json.dumps(record))
    return root, env


# ---- the table ------------------------------------------------------------------------------------------------

Check = Callable[[subprocess.CompletedProcess, Path], None]


def _manifest_named(name: str, out: str) -> Check:
    def check(proc: subprocess.CompletedProcess, root: Path) -> None:
        assert proc.returncode == 0, proc.stderr
        assert json.loads((root / out / "manifest.json").read_text())["name"] == name
    return check


def _dry_plan_from(folder: str) -> Check:
    def check(proc: subprocess.CompletedProcess, root: Path) -> None:
        assert proc.returncode == 0, proc.stderr
        assert f"the shards are already in {root / folder}" in proc.stdout, proc.stdout
    return check


def _scaling_without_fusion(proc: subprocess.CompletedProcess, root: Path) -> None:
    """--fusion-bytes 0 is Horovod's "no fusion buffer": a projection, every row a time and an efficiency."""
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["rows"] if proc.stdout.lstrip().startswith("{") else json.loads(proc.stdout)
    assert rows and all(r["efficiency"] > 0 for r in rows), rows


#: (command, option or argument, arguments with {r} for the world folder, kind, needles or check).
#: A needle may hold {r}. Arguments are named as click names them (``target``, ``paths``...).
REFUSE, FAIL, WORKS = "refused", "failed", "works"
CASES: List[Tuple[str, str, List[str], str, object]] = [
    # cancel / logs / status / report: an empty RUN used to mean "the recent runs" (cancel killed them all).
    ("cancel", "target", ["cancel", ""], REFUSE, ["RUN|JOBID '' is empty"]),
    ("cancel", "target", ["cancel", HOSTILE], REFUSE, [f"no run named {HOSTILE!r}"]),
    ("cancel", "target", ["cancel", "0"], REFUSE, ["'0' is not a job id"]),
    ("logs", "target", ["logs", ""], REFUSE, ["RUN|JOBID '' is empty"]),
    ("logs", "target", ["logs", "{r}/adir"], REFUSE, ["no run named '{r}/adir'"]),
    ("logs", "--follow", ["logs", "recorded", "--follow=1"], REFUSE, ["--follow", "does not take a value"]),
    ("logs", "--interval", ["logs", "recorded", "--interval", "0"], REFUSE, ["--interval 0.0"]),
    ("logs", "--interval", ["logs", "recorded", "--interval", "nan"], REFUSE, ["--interval nan"]),
    ("status", "target", ["status", ""], REFUSE, ["RUN|JOBID '' is empty", "leave it out for the recent runs"]),
    ("status", "target", ["status", "2147483647"], REFUSE, ["'2147483647' is not a job id"]),
    ("status", "--json", ["status", "--json=1"], REFUSE, ["--json", "does not take a value"]),
    ("status", "--watch", ["status", "--watch=1"], REFUSE, ["--watch", "does not take a value"]),
    ("status", "--interval", ["status", "--interval", "-1"], REFUSE, ["--interval -1.0"]),
    ("report", "target", ["report", ""], REFUSE, ["RUN '' is empty"]),
    ("report", "target", ["report", "{r}/nope"], REFUSE, ["no run named '{r}/nope'"]),
    ("report", "--out", ["report", "{r}/adir", "--out", "{r}/afile"], REFUSE, ["'{r}/afile' is a file"]),
    ("report", "--compare", ["report", "{r}/adir", "--compare", ""], REFUSE, ["--compare '' is empty"]),
    ("report", "--smooth", ["report", "{r}/adir", "--smooth", "-1"], REFUSE, ["--smooth -1"]),
    ("report", "--smooth", ["report", "{r}/adir", "--smooth", "x"], REFUSE, ["'x' is not a valid integer"]),
    ("report", "--json", ["report", "{r}/adir", "--json=1"], REFUSE, ["--json", "does not take a value"]),
    ("report", "--force", ["report", "{r}/adir", "--force=1"], REFUSE, ["--force", "does not take a value"]),
    ("report", "--quiet", ["report", "{r}/adir", "--quiet=1"], REFUSE, ["--quiet", "does not take a value"]),
    # compare / fuse
    ("compare", "run_a", ["compare", "", "{r}/adir"], REFUSE, ["RUN_A '' is empty"]),
    ("compare", "run_b", ["compare", "{r}/adir", ""], REFUSE, ["RUN_B '' is empty"]),
    ("compare", "run_b", ["compare", "{r}/nope", "{r}/nope"], REFUSE, ["run {r}/nope does not exist"]),
    ("compare", "--tolerance", ["compare", "{r}/adir", "{r}/adir", "--tolerance", "nan"], REFUSE,
     ["--tolerance nan"]),
    ("compare", "--tolerance", ["compare", "{r}/adir", "{r}/adir", "--tolerance", "-1"], REFUSE,
     ["--tolerance -1.0"]),
    ("compare", "--json", ["compare", "{r}/adir", "{r}/adir", "--json=1"], REFUSE, ["does not take a value"]),
    ("fuse", "inputs", ["fuse", "{r}/rgb", ""], REFUSE, ["RUN_OR_SCORES '' is empty"]),
    ("fuse", "inputs", ["fuse", "{r}/rgb"], REFUSE, ["at least 2 inputs, got 1"]),
    ("fuse", "--checkpoint", ["fuse", "{r}/rgb", "{r}/flow", "--checkpoint", "../" + HOSTILE], REFUSE,
     ["--checkpoint"]),
    ("fuse", "--weights", ["fuse", "{r}/rgb", "{r}/flow", "--weights", "1,nan"], REFUSE, ["--weights 1,nan"]),
    ("fuse", "--weights", ["fuse", "{r}/rgb", "{r}/flow", "--weights", "1"], REFUSE, ["--weights 1"]),
    ("fuse", "--average", ["fuse", "{r}/rgb", "{r}/flow", "--average", "median"], REFUSE, ["'median'"]),
    ("fuse", "--common", ["fuse", "{r}/rgb", "{r}/flow", "--common=1"], REFUSE, ["does not take a value"]),
    ("fuse", "--json", ["fuse", "{r}/rgb", "{r}/flow", "--json=1"], REFUSE, ["does not take a value"]),
    # config: shows what submit would use, so it refuses what submit refuses.
    ("config", "--project", ["config", "--project", "a b;id"], REFUSE, ["--project 'a b;id' is not a valid"]),
    ("config", "--quota-nodes", ["config", "--quota-nodes", "0"], REFUSE, ["0 is not in the range"]),
    ("config", "--runs-dir", ["config", "--runs-dir", "/tmp/a\nrunner  b"], REFUSE,
     ["--runs-dir '/tmp/a\\nrunner  b' contains a line break"]),
    ("config", "--template-dir", ["config", "--template-dir", "{r}/afile"], REFUSE, ["'{r}/afile' is a file"]),
    ("config", "--all", ["config", "--all=1"], REFUSE, ["--all", "does not take a value"]),
    ("config", "--json", ["config", "--json=1"], REFUSE, ["--json", "does not take a value"]),
    # doctor: a value it can only judge by checking is a FAIL line and exit 1.
    ("doctor", "--machine", ["doctor", "--machine", "x;touch pwned"], REFUSE, ["unknown machine 'x;touch pwned'"]),
    ("doctor", "--host", ["doctor", "--host", "-oProxyCommand=touch pwned"], REFUSE,
     ["'-oProxyCommand=touch pwned' is not [USER@]HOST[:PORT]"]),
    ("doctor", "--project", ["doctor", "--project", "a b"], FAIL, ["FAIL  account: -P 'a b' is not a valid"]),
    ("doctor", "--runs-dir", ["doctor", "--runs-dir", "{r}/afile"], FAIL,
     ["FAIL  run folder: {r}/afile is a file, not a folder"]),
    ("doctor", "--data", ["doctor", "--data", "{r}/nope"], FAIL, ["FAIL  data folder: {r}/nope does not exist"]),
    ("doctor", "--json", ["doctor", "--json=1"], REFUSE, ["--json", "does not take a value"]),
    ("doctor", "--command", ["doctor", "--command", "python3 'train.py"], REFUSE, ["No closing quotation"]),
    ("resume", "target", ["resume", ""], REFUSE, ["RUN '' is empty"]),
    ("resume", "target", ["resume", HOSTILE], REFUSE, [f"no run named {HOSTILE!r}"]),
    ("resume", "target", ["resume", "0"], REFUSE, ["'0' is not a job id"]),
    ("machines", "--json", ["machines", "--json=1"], REFUSE, ["--json", "does not take a value"]),
    # lsf env / lsf shell: the embedded LSF's commands for one shell of the user's
    ("lsf env", "--home", ["lsf", "env", "--home", "{r}/afile"], REFUSE, ["is a file, not a folder"]),
    ("lsf env", "--home", ["lsf", "env", "--home", ""], REFUSE, ["--home '' is empty"]),
    ("lsf env", "--json", ["lsf", "env", "--json=1"], REFUSE, ["--json", "does not take a value"]),
    ("lsf env", "--generic", ["lsf", "env", "--generic=1"], REFUSE, ["--generic", "does not take a value"]),
    ("lsf shell", "--generic", ["lsf", "shell", "--generic=1", "--", "true"], REFUSE,
     ["--generic", "does not take a value"]),
    ("lsf shell", "--home", ["lsf", "shell", "--home", "{r}/afile", "--", "true"], REFUSE,
     ["is a file, not a folder"]),
    ("lsf shell", "command", ["lsf", "shell", "--home", "{r}/lsf-home", "--", HOSTILE], REFUSE,
     ["was not found on PATH"]),
    # scaling
    ("scaling", "--nodes-list", ["scaling", "--nodes-list", "1;2"], REFUSE, ["--nodes-list '1;2'"]),
    ("scaling", "--nodes-list", ["scaling", "--nodes-list", "0"], REFUSE, ["--nodes-list '0'"]),
    ("scaling", "--single-node-hours", ["scaling", "--single-node-hours", "inf"], REFUSE, ["'inf'"]),
    ("scaling", "--per-node-batch", ["scaling", "--per-node-batch", "0"], REFUSE, ["0 is not in the range"]),
    ("scaling", "--epochs", ["scaling", "--epochs", "0"], REFUSE, ["0 is not in the range"]),
    ("scaling", "--train-clips", ["scaling", "--train-clips", "-5"], REFUSE, ["-5 is not in the range"]),
    ("scaling", "--params", ["scaling", "--params", "1e6"], REFUSE, ["'1e6' is not a valid integer"]),
    ("scaling", "--fusion-bytes", ["scaling", "--fusion-bytes", "-1"], REFUSE, ["-1 is not in the range"]),
    ("scaling", "--fusion-bytes", ["scaling", "--fusion-bytes", "0", "--json"], WORKS, _scaling_without_fusion),
    ("scaling", "--compare-paper", ["scaling", "--compare-paper=1"], REFUSE, ["does not take a value"]),
    ("scaling", "--epoch-start-seconds", ["scaling", "--epoch-start-seconds", "-1"], REFUSE,
     ["'-1' is out of range: give a number >= 0"]),
    ("scaling", "--input-clips-per-core", ["scaling", "--input-clips-per-core", "nan"], REFUSE,
     ["'nan' is not a finite number"]),
    ("scaling", "--png", ["scaling", "--png", "{r}/nope/x.png"], REFUSE, ["its folder {r}/nope does not exist"]),
    ("scaling", "--json", ["scaling", "--json=1"], REFUSE, ["does not take a value"]),
    # synth
    ("synth", "out", ["synth", ""], REFUSE, ["OUT '' is empty"]),
    ("synth", "out", ["synth", "{r}/afile"], REFUSE, ["'{r}/afile' is a file"]),
    ("synth", "--videos-per-class", ["synth", "{r}/new", "--videos-per-class", "1"], REFUSE,
     ["--videos-per-class 1"]),
    ("synth", "--val-fraction", ["synth", "{r}/new", "--val-fraction", "nan"], REFUSE, ["--val-fraction nan"]),
    ("synth", "--frames", ["synth", "{r}/new", "--frames", "0"], REFUSE, ["--frames 0"]),
    ("synth", "--size", ["synth", "{r}/new", "--size", "33"], REFUSE, ["--size 33"]),
    ("synth", "--seed", ["synth", "{r}/new", "--seed", "x"], REFUSE, ["'x' is not a valid integer"]),
    ("synth", "--layout", ["synth", "{r}/new", "--layout", "frames"], REFUSE, ["'frames'"]),
    ("synth", "--force", ["synth", "{r}/new", "--force=1"], REFUSE, ["does not take a value"]),
    ("synth", "--quiet", ["synth", "{r}/new", "--quiet=1"], REFUSE, ["does not take a value"]),
    # pack: SRC is the rawframes set, each case failing before any shard is written unless it says otherwise.
    ("pack", "paths", ["pack", "", "{r}/out"], REFUSE, ["SRC or OUT '' is empty"]),
    ("pack", "paths", ["pack", "{r}/adir", "{r}/out"], REFUSE, ["{r}/adir holds neither"]),
    ("pack", "--layout", ["pack", "{r}/s/rawframes", "{r}/out", "--layout", "videos"], REFUSE,
     ["lists no samples"]),
    ("pack", "--annotations", ["pack", "{r}/out", "--annotations", "{r}/nope.csv", "--videos", "{r}/s"], REFUSE,
     ["annotations {r}/nope.csv does not exist"]),
    ("pack", "--videos", ["pack", "{r}/out", "--annotations", "{r}/afile", "--videos", "{r}/nope"], REFUSE,
     ["--videos {r}/nope does not exist"]),
    ("pack", "--list", ["pack", "{r}/out", "--list", "{r}/afile", "--root", "{r}/s"], REFUSE,
     ["--list '{r}/afile' is not SPLIT=FILE"]),
    ("pack", "--root", ["pack", "{r}/out", "--list", "train={r}/s/rawframes/train_list.txt", "--root", "{r}/nope"],
     REFUSE, ["--root {r}/nope does not exist"]),
    ("pack", "--ucf101-splits", ["pack", "{r}/out", "--videos", "{r}/adir", "--ucf101-splits", "{r}/nope"],
     REFUSE, ["--ucf101-splits {r}/nope does not exist"]),
    ("pack", "--hmdb51-splits", ["pack", "{r}/out", "--videos", "{r}/adir", "--hmdb51-splits", "{r}/nope"],
     REFUSE, ["--hmdb51-splits {r}/nope does not exist"]),
    ("pack", "--split-number", ["pack", "{r}/out", "--videos", "{r}/adir", "--ucf101-splits", "{r}/adir",
                                "--split-number", "4"], REFUSE, ["--split-number 4 must be 1, 2 or 3"]),
    ("pack", "--split-number", ["pack", "{r}/s/rawframes", "{r}/out", "--split-number", "2"], REFUSE,
     ["--split-number 2 applies only to --ucf101-splits or --hmdb51-splits"]),
    ("pack", "--filename-tmpl", ["pack", "{r}/s/rawframes", "{r}/out", "--filename-tmpl", "img.jpg;rm -rf"],
     REFUSE, ["--filename-tmpl 'img.jpg;rm -rf' names every frame the same"]),
    ("pack", "--modality", ["pack", "{r}/s/rawframes", "{r}/out", "--modality", "depth"], REFUSE, ["'depth'"]),
    ("pack", "--flow-algorithm", ["pack", "{r}/s/rawframes", "{r}/out", "--flow-algorithm", "tvl1"], REFUSE,
     ["--flow-algorithm tvl1 applies only to optical flow"]),
    ("pack", "--flow-bound", ["pack", "{r}/s/rawframes", "{r}/out", "--modality", "flow", "--flow-bound", "-1"],
     REFUSE, ["--flow-bound -1.0"]),
    ("pack", "--seed", ["pack", "{r}/s/rawframes", "{r}/out", "--seed", "-1"], REFUSE, ["--seed -1"]),
    ("pack", "--no-shuffle", ["pack", "{r}/s/rawframes", "{r}/out", "--no-shuffle=1"], REFUSE,
     ["does not take a value"]),
    ("pack", "--shard-size", ["pack", "{r}/s/rawframes", "{r}/out", "--shard-size", "1XB"], REFUSE, ["'1XB'"]),
    ("pack", "--shard-size", ["pack", "{r}/s/rawframes", "{r}/out", "--shard-size", "0"], REFUSE, ["'0'"]),
    ("pack", "--short-side", ["pack", "{r}/s/rawframes", "{r}/out", "--short-side", "-1"], REFUSE,
     ["--short-side -1"]),
    ("pack", "--fps", ["pack", "{r}/s/rawframes", "{r}/out", "--fps", "nan"], REFUSE, ["--fps nan"]),
    ("pack", "--quality", ["pack", "{r}/s/rawframes", "{r}/out", "--quality", "101"], REFUSE, ["--quality 101"]),
    ("pack", "--workers", ["pack", "{r}/s/rawframes", "{r}/out", "--workers", "-1"], REFUSE, ["--workers -1"]),
    ("pack", "--classes", ["pack", "{r}/s/rawframes", "{r}/out", "--classes", "{r}/nope.txt"], REFUSE,
     ["class list {r}/nope.txt does not exist"]),
    ("pack", "--classes", ["pack", "{r}/s/rawframes", "{r}/out", "--classes", "{r}/adir"], REFUSE,
     ["'{r}/adir' is a directory"]),
    # The name is a label in the manifest's JSON, never a path or a command: kept verbatim, nothing run.
    ("pack", "--name", ["pack", "{r}/s/rawframes", "{r}/named", "--name", HOSTILE + "\n../x", "--quiet"], WORKS,
     _manifest_named(HOSTILE + "\n../x", "named")),
    ("pack", "--hash", ["pack", "{r}/s/rawframes", "{r}/out", "--hash", "md5"], REFUSE, ["'md5'"]),
    ("pack", "--force", ["pack", "{r}/s/rawframes", "{r}/out", "--force=1"], REFUSE, ["does not take a value"]),
    ("pack", "--quiet", ["pack", "{r}/s/rawframes", "{r}/out", "--quiet=1"], REFUSE, ["does not take a value"]),
    ("pack", "--json", ["pack", "{r}/s/rawframes", "{r}/out", "--json=1"], REFUSE, ["does not take a value"]),
    # stage-data: the manifest is good, so each case is about its own option.
    ("stage-data", "--manifest", ["stage-data", "--manifest", "{r}/nope.json", "--nodes", "1"], REFUSE,
     ["manifest {r}/nope.json does not exist"]),
    ("stage-data", "--manifest", ["stage-data", "--manifest", "{r}/afile", "--nodes", "1"], REFUSE,
     ["manifest {r}/afile cannot be read as JSON"]),
    ("stage-data", "--nodes", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "0", "--dry-run"], REFUSE,
     ["--nodes 0 must be at least 1"]),
    ("stage-data", "--policy", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--policy", "all"],
     REFUSE, ["'all'"]),
    ("stage-data", "--transport", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--transport",
                                   "scp"], REFUSE, ["'scp'"]),
    ("stage-data", "--source", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--source",
                                "{r}/nope", "--dest", "{r}/staged"], REFUSE, ["source folder {r}/nope does not exist"]),
    # A dry run only prints the plan: the folder the shards would be read from, as given.
    ("stage-data", "--source", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--source", "a;b",
                                "--dry-run"], WORKS, _dry_plan_from("a;b")),
    ("stage-data", "--htar", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--transport", "hpss",
                              "--htar", "k400.tar;touch pwned", "--dest", "{r}/staged", "--dry-run"], REFUSE,
     ["--htar 'k400.tar;touch pwned' cannot be passed"]),
    ("stage-data", "--htar", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--htar", "k400.tar",
                              "--dry-run"], REFUSE, ["--htar names an archive in HPSS", "--transport hpss"]),
    ("stage-data", "--dest", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--dest",
                              "{r}/afile"], REFUSE, ["--dest {r}/afile is a file, not a folder"]),
    ("stage-data", "--jobs", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--jobs", "0",
                              "--dry-run"], REFUSE, ["--jobs 0"]),
    ("stage-data", "--retries", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--retries", "-1",
                                 "--dry-run"], REFUSE, ["--retries -1"]),
    ("stage-data", "--retry-delay", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--retry-delay",
                                     "nan", "--dry-run"], REFUSE, ["--retry-delay nan"]),
    ("stage-data", "--to-nvme", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--to-nvme=1"],
     REFUSE, ["--to-nvme", "does not take a value"]),
    ("stage-data", "--dry-run", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--dry-run=1"],
     REFUSE, ["--dry-run", "does not take a value"]),
    ("stage-data", "--json", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--json=1"], REFUSE,
     ["--json", "does not take a value"]),
    ("stage-data", "--force", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--force=1"], REFUSE,
     ["--force", "does not take a value"]),
    ("stage-data", "--quiet", ["stage-data", "--manifest", "{r}/good.json", "--nodes", "1", "--quiet=1"], REFUSE,
     ["--quiet", "does not take a value"]),
]


def _ids() -> List[str]:
    seen: dict = {}
    out = []
    for command, option, *_ in CASES:
        key = f"{command}:{option.lstrip('-')}"
        seen[key] = seen.get(key, 0) + 1
        out.append(key if seen[key] == 1 else f"{key}-{seen[key]}")
    return out


def _fill(text: str, root: Path) -> str:
    return text.replace("{r}", str(root))


@pytest.mark.parametrize("command,option,args,kind,expect", CASES, ids=_ids())
def test_a_bad_value(world, command, option, args, kind, expect):
    root, env = world
    proc = run_module("summit_jobs", [_fill(a, root) for a in args], env, cwd=root, timeout=LIMIT_S)
    assert "Traceback (most recent call last)" not in proc.stderr + proc.stdout, proc.stderr[-4000:]
    assert not (root / "pwned").exists()
    if kind == REFUSE:
        assert_refused(proc, [_fill(n, root) for n in expect])
        errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
        assert len(errors) == 1, proc.stderr
    elif kind == FAIL:
        assert proc.returncode == 1, (proc.returncode, proc.stderr)
        for needle in expect:
            assert _fill(needle, root) in proc.stdout, proc.stdout
    else:
        expect(proc, root)


def test_an_empty_run_does_not_reach_the_recorded_run(world):
    """The run index holds a run: before, `status ''` listed it and `cancel ''` would have killed its jobs."""
    root, env = world
    listed = run_module("summit_jobs", ["status", "--json"], env, cwd=root, timeout=LIMIT_S)
    assert "recorded" in listed.stdout + listed.stderr, (listed.stdout, listed.stderr)
    record = root / "xdg-data" / "summit-jobs" / "runs" / "recorded-0000000000.json"
    before = record.read_text()
    for command in ("status", "cancel", "logs", "report"):
        proc = run_module("summit_jobs", [command, ""], env, cwd=root, timeout=LIMIT_S)
        assert_refused(proc, ["'' is empty"])
        assert "recorded" not in proc.stdout + proc.stderr, (command, proc.stdout, proc.stderr)
    assert record.read_text() == before


def test_split_number_applies_with_split_files(world):
    """The refusal above is about the missing split files: with them, --split-number picks the files read
    (here split 3, whose files this folder lacks, so the refusal names them)."""
    root, env = world
    splits = root / "ucf-splits"
    splits.mkdir(exist_ok=True)
    (splits / "classInd.txt").write_text("1 ApplyEyeMakeup\n")
    (splits / "trainlist01.txt").write_text("ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi 1\n")
    (splits / "testlist01.txt").write_text("ApplyEyeMakeup/v_ApplyEyeMakeup_g01_c01.avi\n")
    proc = run_module("summit_jobs", ["pack", str(root / "ucf-out"), "--videos", str(root / "adir"),
                                      "--ucf101-splits", str(splits), "--split-number", "3"], env, cwd=root,
                      timeout=LIMIT_S)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "applies only to" not in proc.stderr and "list03.txt" in proc.stderr, proc.stderr


def test_a_good_project_is_shown_by_config(world):
    root, env = world
    proc = run_module("summit_jobs", ["config", "--project", "ABC-1.x", "--json"], env, cwd=root, timeout=LIMIT_S)
    assert proc.returncode == 0, proc.stderr
    assert {"name": "project", "value": "ABC-1.x"}.items() <= next(
        s for s in json.loads(proc.stdout) if s["name"] == "project").items()


# ---- the suite covers every option ---------------------------------------------------------------------------

def _tree() -> List[Tuple[str, click.Command]]:
    """Every command that runs, a group's commands as ``group command`` (``lsf env``)."""
    from summit_jobs.cli import main  # noqa: F401 - registers the commands
    from summit_jobs.cli.submit import cli
    ctx = click.Context(cli)
    out = []
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        if isinstance(command, click.Group):
            out += [(f"{name} {sub}", command.get_command(ctx, sub)) for sub in command.list_commands(ctx)]
        else:
            out.append((name, command))
    return out


def test_every_option_of_every_command_has_a_bad_value():
    """Read from the commands themselves: a new option (or command) without a row here fails this test."""
    from test_bad_input_options import GLOBAL, SHARED, SIMULATE_ONLY, SUBMIT_ONLY
    from summit_jobs.cli.submit import cli
    covered = {(c, o) for c, o, *_ in CASES}
    covered |= {("submit", o) for o, _, _ in SHARED + SUBMIT_ONLY}
    covered |= {("simulate", o) for o, _, _ in SHARED + SIMULATE_ONLY}
    missing = sorted((name, opt) for name, command in _tree() for opt in option_names(command)
                     if (name, opt) not in covered)
    assert missing == []
    assert option_names(cli) - {"--version"} - {o for o, _, _ in GLOBAL} == set()
    # Every command of the tree is here or in the submit/simulate tables (none forgotten as a whole).
    assert {name for name, _ in _tree()} == {c for c, *_ in CASES} | set(ELSEWHERE)


def test_the_cases_are_counted():
    """The breadth this file adds to the bad-input suite."""
    assert len(CASES) >= 115, len(CASES)
