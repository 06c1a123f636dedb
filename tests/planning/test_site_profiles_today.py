"""The LSF GPU clusters running today, as profiles: each renders the header its site's guide shows.

Each site test compares the ``#BSUB`` lines of a real ``submit --dry-run`` (the
CLI a user runs, in a subprocess) with the example of the site's own guide,
option by option, and cites the page. Bad values in a user's profile are
refused at load with the key named. ``simulate`` and ``scaling`` take GPUs per
node and interconnect from the new profiles.
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import yaml

from badinput import assert_refused
from helpers import REPO, run_cli

SITES = ("janelia-h100", "minerva-h100")
GENERIC = "lsf-gpu"


def bsub_lines(script: str) -> List[Tuple[str, str]]:
    """``(option, value)`` of every ``#BSUB`` line, the value unquoted as bsub reads it."""
    out = []
    for line in script.splitlines():
        if line.startswith("#BSUB "):
            words = shlex.split(line[len("#BSUB "):])
            out.append((words[0], " ".join(words[1:])))
    return out


def options(script: str) -> Dict[str, List[str]]:
    """Every value given to each option (-R may come more than once, as LSF allows)."""
    found: Dict[str, List[str]] = {}
    for flag, value in bsub_lines(script):
        found.setdefault(flag, []).append(value)
    return found


def dry_run(cli_env, tmp_path, machine: str, *args: str):
    proc = run_cli(["--machine", machine, "submit", "--dry-run", "--run-dir", str(tmp_path / "run"), *args],
                   cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return proc


def gpu_words(value: str) -> Dict[str, str]:
    return dict(word.split("=", 1) for word in value.split(":"))


def test_janelia_header_matches_its_guide(cli_env, tmp_path):
    """Janelia's whole-node H100 request, from its users' public job scripts (platform notes, "LSF GPU
    clusters today"): bsub -n 96*N -app parallel-96 -q gpu_h100_parallel -gpu "num=8:mode=exclusive_process"
    -R "span[ptile=96]", then blaunch -z <hosts> torchrun --rdzv_backend=c10d on each node."""
    proc = dry_run(cli_env, tmp_path, "janelia-h100", "--nodes", "3", "--project", "mylab")
    opts = options(proc.stdout)
    assert opts["-n"] == [str(96 * 3)]
    assert opts["-app"] == ["parallel-96"]
    assert opts["-q"] == ["gpu_h100_parallel"]
    assert gpu_words(opts["-gpu"][0]) == {"num": "8", "mode": "exclusive_process"}
    assert "span[ptile=96]" in opts["-R"]
    assert opts["-P"] == ["mylab"]
    launch = next(line for line in proc.stdout.splitlines() if "trainer.agent --nnodes" in line)
    assert re.search(r"\bblaunch (-no-shell )?-z ", launch)
    for words in ("--nnodes 3", "--nproc-per-node 8", "--rdzv-backend c10d"):
        assert words in launch
    assert "machine janelia-h100: 3 nodes x 8 ranks = 24 ranks" in proc.stderr


def test_janelia_h200_queue_has_the_same_shape(cli_env, tmp_path):
    proc = dry_run(cli_env, tmp_path, "janelia-h100", "--nodes", "2", "--project", "mylab",
                   "--queue", "gpu_h200_parallel")
    opts = options(proc.stdout)
    assert opts["-q"] == ["gpu_h200_parallel"] and opts["-app"] == ["parallel-96"] and opts["-n"] == ["192"]


def test_minerva_header_matches_its_guide(cli_env, tmp_path):
    """Minerva's GPU page (https://labs.icahn.mssm.edu/minervalab/documentation/gpgpu/): `-gpu num=N` per
    node, the model with `-R h100`, exclusive_process by default; queue gpu (lsf-queues page); -P on every
    job; rusage[mem=] counts per slot (gpu-etiquette page)."""
    proc = dry_run(cli_env, tmp_path, "minerva-h100", "--nodes", "2", "--project", "acc_mylab", "--mem", "384GB")
    opts = options(proc.stdout)
    assert gpu_words(opts["-gpu"][0]) == {"num": "4", "mode": "exclusive_process"}
    assert "h100" in opts["-R"]
    assert opts["-q"] == ["gpu"]
    assert opts["-P"] == ["acc_mylab"]
    assert opts["-W"] == ["144:00"]
    assert opts["-n"] == ["192"] and "span[ptile=96]" in opts["-R"]
    # 384 GB per node over 96 slots = 4 GB = 4,096 MB per slot, in the site's MB.
    assert "rusage[mem=4096]" in opts["-R"] and "-M" not in opts
    assert "--nproc-per-node 4" in proc.stdout


@pytest.mark.parametrize("machine,args,needles", [
    # lsf-queues page: "If -P option is not specified, job will be immediately terminated."
    ("minerva-h100", ["--nodes", "1"], ["-P", "--project"]),
    # lsf-queues page: queue gpu, 144 hrs at most.
    ("minerva-h100", ["--nodes", "1", "--project", "a", "--walltime", "145:00"], ["145:00", "144:00"]),
    ("minerva-h100", ["--nodes", "48", "--project", "a"], ["48", "47"]),
    ("janelia-h100", ["--nodes", "9", "--project", "a"], ["9", "8"]),
    ("janelia-h100", ["--nodes", "1", "--project", "a", "--queue", "gpu_a100_parallel"], ["gpu_a100_parallel"]),
])
def test_site_policy_is_checked_before_submission(cli_env, tmp_path, machine, args, needles):
    proc = run_cli(["--machine", machine, "submit", "--dry-run", *args], cli_env, cwd=tmp_path)
    assert_refused(proc, needles, prefix="summit-jobs: error:")


def test_generic_profile_renders_the_slot_form_with_torchrun(cli_env, tmp_path):
    proc = dry_run(cli_env, tmp_path, GENERIC, "--nodes", "2", "--mem", "256GB")
    opts = options(proc.stdout)
    assert opts["-n"] == ["64"] and "span[ptile=32]" in opts["-R"]
    assert gpu_words(opts["-gpu"][0]) == {"num": "4", "mode": "exclusive_process"}
    assert opts["-q"] == ["gpu"] and "-nnodes" not in opts and "-alloc_flags" not in opts
    assert opts["-M"] == ["8192"] and "rusage[mem=8192]" in opts["-R"]
    assert "trainer.agent --nnodes 2 --nproc-per-node 4" in proc.stdout
    assert "jsrun" not in proc.stdout.replace("jsrun_", "")


def test_generic_profile_takes_the_other_launchers(cli_env, tmp_path):
    proc = dry_run(cli_env, tmp_path, GENERIC, "--nodes", "2", "--launcher", "blaunch")
    opts = options(proc.stdout)
    assert opts["-n"] == ["8"] and "span[ptile=4]" in opts["-R"]


def _doc(name: str) -> dict:
    return yaml.safe_load((REPO / "envs" / f"{name}.yaml").read_text())


def test_generic_profile_says_what_to_ask_and_what_is_a_placeholder():
    text = (REPO / "envs" / f"{GENERIC}.yaml").read_text()
    policy = [line for line in text.splitlines()
              if re.match(r"\s*(max_nodes|max_walltime|gpus|cores|memory_gb|unit|per):", line)
              or "max_walltime:" in line]
    assert policy and all("PLACEHOLDER" in line for line in policy), policy
    assert text.count("Guide:") >= 10
    assert "PLACEHOLDER" in _doc(GENERIC)["description"]


@pytest.mark.parametrize("name", SITES)
def test_site_profiles_cite_their_sources_and_date(name):
    text = (REPO / "envs" / f"{name}.yaml").read_text()
    doc = yaml.safe_load(text)
    assert re.search(r"read 20\d\d-\d\d-\d\d", doc["reference"])
    header = text.split("\nname:", 1)[0]
    assert "read 2026-11-23" in header and "unverified" in text
    for url in re.findall(r"https://\S+?(?=;|\s|$)", doc["reference"]):
        assert url in header, url
    perf = text.split("\nperformance:", 1)[1].split("\nrecipe:", 1)[0]
    assert all("estimate" in line for line in perf.splitlines()[1:] if ":" in line and not line.strip().startswith("#"))


def test_minerva_reference_is_the_sites_own_pages():
    assert "labs.icahn.mssm.edu/minervalab/documentation/lsf-queues" in _doc("minerva-h100")["reference"]


def test_retired_machines_are_shown_as_such(cli_env, tmp_path):
    proc = run_cli(["machines"], cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    first = {line.split(":", 1)[0].split(" ", 1)[0]: line for line in proc.stdout.splitlines()
             if line and not line.startswith(" ")}
    assert "(retired 2024-11" in first["summit"] and "(retired 2025-09-30" in first["lassen"]
    for live in (*SITES, GENERIC, "local"):
        assert "retired" not in first[live], first[live]
    data = {m["name"]: m for m in json.loads(run_cli(["machines", "--json"], cli_env, cwd=tmp_path).stdout)}
    assert data["summit"]["retired"] == "2024-11" and data["lassen"]["retired"] == "2025-09-30"
    assert data["janelia-h100"]["retired"] is None
    assert "docs.olcf.ornl.gov" in data["summit"]["reference"]


def _user_profile(tmp_path: Path, cli_env: dict, key: str, value) -> dict:
    """A copy of the generic profile as a user's own, with ``key`` (dotted) set to ``value``."""
    doc = _doc(GENERIC)
    doc["name"] = "mysite"
    *parents, last = key.split(".")
    node = doc
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    folder = tmp_path / "machines"
    folder.mkdir(exist_ok=True)
    (folder / "mysite.yaml").write_text(yaml.safe_dump(doc))
    return dict(cli_env, SUMMIT_JOBS_MACHINES_PATH=str(folder))


BAD_PROFILE_VALUES = [
    ("scheduler.gpu.gmodel", "H100;touch /tmp/x", ["scheduler.gpu.gmodel", "H100;touch /tmp/x"]),
    ("scheduler.gpu.gmodel", "$(reboot)", ["scheduler.gpu.gmodel", "$(reboot)"]),
    ("scheduler.gpu.gmem", "32000 -q other", ["scheduler.gpu.gmem", "32000 -q other"]),
    ("scheduler.extra_directives", ["-R h100;reboot"], ["scheduler.extra_directives[0]", "-R h100;reboot"]),
    ("scheduler.extra_directives", ["-R $HOME"], ["scheduler.extra_directives[0]", "-R $HOME"]),
    ("scheduler.extra_directives", ["-R \"h100\""], ["scheduler.extra_directives[0]", "-R \"h100\""]),
    ("scheduler.extra_directives", ["-q other"], ["scheduler.extra_directives", "-q other"]),
    ("scheduler.memory.forms", ["mem"], ["scheduler.memory.forms[0]", "mem"]),
    ("scheduler.memory.forms", ["-M 64000"], ["scheduler.memory.forms[0]", "-M 64000"]),
    ("scheduler.memory.unit", "GiB", ["scheduler.memory.unit", "GiB"]),
    ("scheduler.app", "parallel 96", ["scheduler.app", "parallel 96"]),
    ("scheduler.container", "img;rm", ["scheduler.container", "img;rm"]),
    ("scheduler.request", "nodes", ["scheduler.request", "nodes"]),
]


@pytest.mark.parametrize("key,value,needles", BAD_PROFILE_VALUES,
                         ids=[f"{k}={v!r}" for k, v, _ in BAD_PROFILE_VALUES])
def test_bad_profile_values_are_refused_with_the_key_named(cli_env, tmp_path, key, value, needles):
    env = _user_profile(tmp_path, cli_env, key, value)
    proc = run_cli(["--machine", "mysite", "submit", "--nodes", "1", "--dry-run"], env, cwd=tmp_path)
    assert_refused(proc, needles, prefix="summit-jobs: error:")
    assert "#BSUB" not in proc.stdout


def test_a_good_user_profile_from_the_generic_one_renders(cli_env, tmp_path):
    """The control for the table above: the same copy with a sound gmodel renders it."""
    env = _user_profile(tmp_path, cli_env, "scheduler.gpu.gmodel", "NVIDIAH100")
    proc = run_cli(["--machine", "mysite", "submit", "--nodes", "1", "--dry-run"], env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert gpu_words(options(proc.stdout)["-gpu"][0])["gmodel"] == "NVIDIAH100"


@pytest.mark.parametrize("machine,gpus", [("janelia-h100", 8), ("minerva-h100", 4), (GENERIC, 4)])
def test_simulate_uses_the_profiles_gpus_per_node(cli_env, tmp_path, machine, gpus):
    proc = run_cli(["--machine", machine, "simulate", "--virtual-nodes", "8", "--quota-nodes", "2",
                    "--project", "P1", "--dry-run", "--run-dir", str(tmp_path / "run")], cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (f"simulate: 8 virtual nodes ({8 * gpus} GPUs) on 2 physical nodes ({2 * gpus} GPUs), "
            "k = 4 accumulation steps") in proc.stderr
    assert f"--nproc-per-node {gpus}" in proc.stdout and "--accum-steps 4" in proc.stdout


def _scaling(cli_env, tmp_path, machine: str) -> Dict[int, dict]:
    proc = run_cli(["--machine", machine, "scaling", "--nodes-list", "1,8,64", "--json"], cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return {int(r["nodes"]): r for r in json.loads(proc.stdout)}


def test_scaling_takes_gpus_and_interconnect_from_the_profile(cli_env, tmp_path):
    janelia, minerva = _scaling(cli_env, tmp_path, "janelia-h100"), _scaling(cli_env, tmp_path, "minerva-h100")
    assert janelia[8]["gpus"] == 64 and minerva[8]["gpus"] == 32
    # Janelia's estimate is 8 NDR rails per node against Minerva's one port: less time lost to allreduce.
    assert 1.0 > janelia[64]["efficiency"] > minerva[64]["efficiency"] > 0.5
