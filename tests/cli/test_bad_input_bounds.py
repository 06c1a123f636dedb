"""Numbers, paths and folders at their bounds: a clean one-line refusal naming the limit and the fix, never a
traceback, and nothing accepted wrong.

The cases are what a slip of the keyboard gives: a count of hundreds of digits (it overflowed the planner's
float arithmetic), a memory or shard size no machine has, a profile's NVMe folder that is relative or reads as
an option, a `--machine` that `machines` did not check, a folder name that is not UTF-8 (doctor's probe could
not read its own answer), a walltime too short for its warning, and a folder that an interrupted `pack
--force` left without a manifest. They run the real command line in this process (click's CliRunner, cheap)
where a Python-level failure would show as the result's exception, and in a real process where the argument
is bytes or the process must be killed.
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, List, Optional

import pytest
from click.testing import CliRunner, Result

from lsf_jobs import lsf_environment

#: A count of 400 digits, and 10**400.
DIGITS_400 = "9" * 400
TEN_TO_400 = "1" + "0" * 400
SUMMIT = ["--machine", "summit", "submit", "--project", "ABC123", "--nodes", "2", "--dry-run"]
SIMULATE = ["--machine", "summit", "simulate", "--project", "ABC123", "--virtual-nodes", "4", "--dry-run"]
LOCAL = ["--machine", "local", "submit", "--nodes", "1", "--dry-run"]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Dict[str, object]:
    """One folder of this module's cases: its own user folders (no config of the person running the tests)."""
    root = tmp_path_factory.mktemp("bounds")
    env = dict(lsf_environment(root), XDG_CACHE_HOME=str(root / "xdg-cache"))
    for key in ("SUMMIT_JOBS_MACHINE", "SUMMIT_JOBS_PROJECT", "SUMMIT_JOBS_CONFIG", "SUMMIT_JOBS_MACHINES_PATH"):
        env.pop(key, None)
    (root / "src").mkdir()
    return {"root": root, "env": env}


def invoke(world: Dict[str, object], args: List[str], extra: Optional[Dict[str, Optional[str]]] = None) -> Result:
    """``summit-jobs ARGS`` in this process, in the module's environment (keys of ``extra`` set, or unset by
    None)."""
    from summit_jobs.cli import main
    env: Dict[str, Optional[str]] = {k: None for k in os.environ if k.startswith("SUMMIT_JOBS_")}
    env.update(world["env"])
    env.update(extra or {})
    cwd = os.getcwd()
    os.chdir(world["root"])
    try:
        return CliRunner().invoke(main.cli.cli, args, env=env, prog_name="summit-jobs")
    finally:
        os.chdir(cwd)


def assert_one_line_refusal(result: Result, needles: List[str]) -> None:
    """Exit non-zero by a clean exit (no exception of Python's), one error line holding every needle."""
    assert isinstance(result.exception, SystemExit), (result.exception, result.output[-2000:])
    assert result.exit_code not in (0, None), result.output[-2000:]
    assert "Traceback" not in result.output
    error = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(error) == 1, result.stderr
    for needle in needles:
        assert needle in error[0], (needle, error[0])


# ---- counts and sizes --------------------------------------------------------------------------------------

BOUNDS = [
    ("epochs-400-digits", [*SUMMIT, "--epochs", DIGITS_400], ["--epochs 999999999999... (400 digits)", "10,000"]),
    ("clips-400-digits", [*SUMMIT, "--clips-per-gpu", DIGITS_400], ["--clips-per-gpu", "(400 digits)", "4,096"]),
    ("simulate-epochs-400-digits", [*SIMULATE, "--epochs", DIGITS_400], ["--epochs", "(400 digits)", "10,000"]),
    ("simulate-clips-400-digits", [*SIMULATE, "--clips-per-gpu", DIGITS_400],
     ["--clips-per-gpu", "(400 digits)", "4,096"]),
    ("epochs-past-bound", [*SUMMIT, "--epochs", "10001"], ["--epochs 10001", "at most 10,000"]),
    ("clips-past-bound", [*SUMMIT, "--clips-per-gpu", "4097"], ["--clips-per-gpu 4097", "at most 4,096"]),
    ("classes-ten-to-400", [*SUMMIT, "--num-classes", TEN_TO_400], ["--num-classes", "(401 digits)", "100,000"]),
    ("classes-400-digits", [*SUMMIT, "--num-classes", DIGITS_400], ["--num-classes", "(400 digits)", "100,000"]),
    ("classes-written-as-power", [*SUMMIT, "--num-classes", "10^400"], ["'10^400'"]),
    ("mem-lsf-20-digits", ["--machine", "lsf-gpu", "submit", "--nodes", "2", "--dry-run", "--mem",
                           "99999999999999999999T"], ["--mem '99999999999999999999T'", "at most 1024TB"]),
    ("mem-lsf-400-digits", ["--machine", "lsf-gpu", "submit", "--nodes", "2", "--dry-run", "--mem",
                            DIGITS_400 + "T"], ["--mem '999999999999...' (401 characters)", "at most 1024TB"]),
    ("mem-slurm-20-digits", ["--machine", "slurm-gpu", "submit", "--nodes", "2", "--dry-run", "--mem",
                             "99999999999999999999T"], ["--mem '99999999999999999999T'", "at most 1024TB"]),
    ("mem-slurm-400-digits", ["--machine", "slurm-gpu", "submit", "--nodes", "2", "--dry-run", "--mem",
                              DIGITS_400 + "G"], ["--mem '999999999999...' (401 characters)", "at most 1024TB"]),
    ("shard-size-400-digits", ["pack", "src", "out", "--shard-size", DIGITS_400],
     ["size '999999999999...' (400 characters)", "at most 1TB"]),
    ("shard-size-past-bound", ["pack", "src", "out", "--shard-size", "2TB"], ["size '2TB'", "at most 1TB"]),
    ("fusion-threshold-400-digits", [*LOCAL, "--engine", "horovod", "--fusion-threshold", DIGITS_400],
     ["'--fusion-threshold'", "0<=x<=1099511627776"]),
    ("avg-interval-400-digits", [*LOCAL, "--avg-interval", DIGITS_400], ["'--avg-interval'", "-1<=x<=10000000"]),
    ("total-steps-400-digits", [*LOCAL, "--command", "true", "--total-steps", DIGITS_400],
     ["'--total-steps'", "1<=x<=1000000000000"]),
    ("lr-1e300", [*LOCAL, "--lr", "1e300"], ["'--lr'", "<= 1000"]),
    ("scaling-epochs-400-digits", ["--machine", "summit", "scaling", "--epochs", DIGITS_400], ["'--epochs'", "x<=10000"]),
    ("scaling-batch-400-digits", ["--machine", "summit", "scaling", "--per-node-batch", DIGITS_400],
     ["'--per-node-batch'", "x<=1000000"]),
    ("scaling-hours-1e308", ["--machine", "summit", "scaling", "--single-node-hours", "1e308"],
     ["'--single-node-hours'", "<= 1e+07"]),
    ("scaling-clips-400-digits", ["--machine", "summit", "scaling", "--train-clips", DIGITS_400], ["'--train-clips'"]),
    ("scaling-params-400-digits", ["--machine", "summit", "scaling", "--params", DIGITS_400], ["'--params'"]),
    ("scaling-fusion-400-digits", ["--machine", "summit", "scaling", "--fusion-bytes", DIGITS_400],
     ["'--fusion-bytes'"]),
]


@pytest.mark.parametrize("case,args,needles", BOUNDS, ids=[c[0] for c in BOUNDS])
def test_a_count_or_size_past_its_bound_is_refused_naming_it(world, case, args, needles):
    result = invoke(world, args)
    assert_one_line_refusal(result, needles)
    assert "#BSUB" not in result.stdout and "#SBATCH" not in result.stdout
    assert not (world["root"] / "out").exists()


def test_the_bounds_themselves_are_accepted(world):
    """The largest value of each bound plans: the rule refuses what is past it, not what reaches it (the
    largest --clips-per-gpu is the trainer's own bound, whose memory check refuses it on a small machine)."""
    result = invoke(world, [*SUMMIT, "--epochs", "10000", "--num-classes", "100000"])
    assert result.exit_code == 0, result.output
    assert "--epochs 10000" in result.stdout and "--num-classes 100000" in result.stdout
    lsf = invoke(world, ["--machine", "lsf-gpu", "submit", "--nodes", "2", "--dry-run", "--mem", "1024TB"])
    assert lsf.exit_code == 0, lsf.output
    slurm = invoke(world, ["--machine", "slurm-gpu", "submit", "--nodes", "2", "--dry-run", "--mem", "1024T"])
    assert slurm.exit_code == 0 and "#SBATCH --mem=1024T" in slurm.stdout, slurm.output


# ---- machines, profiles ---------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["option", "environment"])
def test_machines_refuses_an_unknown_machine_naming_the_known_ones(world, how):
    args = ["--machine", "sumit", "machines"] if how == "option" else ["machines"]
    result = invoke(world, args, {"SUMMIT_JOBS_MACHINE": "sumit"} if how == "environment" else None)
    assert_one_line_refusal(result, ["unknown machine 'sumit'", "Known machines:", "summit", "local"])
    assert "(selected)" not in result.stdout
    listed = invoke(world, ["--machine", "summit", "machines"])
    assert listed.exit_code == 0 and "summit (selected)" in listed.stdout, listed.output


@pytest.mark.parametrize("value", ["nvme", "'-1'", "-1", "scratch/$USER"])
def test_a_relative_nvme_path_is_refused_with_its_key(world, tmp_path, value):
    config = tmp_path / "config.yaml"
    config.write_text(f"machines:\n  local:\n    node:\n      nvme_path: {value}\n")
    result = invoke(world, ["--config", str(config), *LOCAL, "--data", "/tmp/manifest.json"])
    assert_one_line_refusal(result, ["node.nvme_path = ", "absolute folder", "config.yaml:2"])
    shown = value.strip("'")
    assert f"node.nvme_path = {shown!r}" in result.stderr
    ok = tmp_path / "ok.yaml"
    ok.write_text("machines:\n  local:\n    node:\n      nvme_path: ${TMPDIR}/nvme\n")
    assert invoke(world, ["--config", str(ok), *LOCAL, "--data", "/tmp/manifest.json"]).exit_code == 0


def test_a_slurm_profiles_memory_past_the_bound_is_refused_with_its_key(world, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("machines:\n  slurm-gpu:\n    scheduler:\n      slurm:\n        memory: '99999999999999999999T'\n")
    result = invoke(world, ["--config", str(config), "--machine", "slurm-gpu", "submit", "--nodes", "2",
                            "--dry-run"])
    assert_one_line_refusal(result, ["scheduler.slurm.memory = '99999999999999999999T'", "at most 1024T"])


# ---- walltime and its warning ----------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["--walltime", "1"], ["--walltime", "0:01"], ["--walltime", "1",
                                                                                "--warning-minutes", "1"]])
def test_a_walltime_with_no_room_for_its_warning_is_refused(world, args):
    """One minute leaves no warning of 1 minute within the second half: the warning came at the job's start."""
    for base in (LOCAL, SUMMIT):
        result = invoke(world, [*base, *args])
        assert_one_line_refusal(result, [f"--walltime {args[1]}", "warning", "--walltime 2 or more"])


def test_the_profiles_warning_shrinks_to_half_a_short_walltime(world):
    """The profile's default (summit: 10 minutes) is held to half the run: 1 minute of 3, 1 of 2."""
    for walltime in ("3", "2"):
        result = invoke(world, [*SUMMIT, "--walltime", walltime])
        assert result.exit_code == 0, result.output
        assert "#BSUB -wt 1\n" in result.stdout
    local = invoke(world, [*LOCAL, "--walltime", "2"])
    assert local.exit_code == 0 and "#BSUB -wt 1\n" in local.stdout, local.output


# ---- doctor: a folder whose name is not UTF-8 ---------------------------------------------------------------

def test_doctor_fails_a_folder_whose_name_is_not_utf8(world, tmp_path):
    """The name reaches the process as bytes (a real argv): a FAIL line naming it, not a UnicodeDecodeError."""
    folder = os.fsencode(tmp_path) + b"/runs\xff"
    os.mkdir(folder)
    config = tmp_path / "fast.yaml"      # the trainer's environment check is not this test's: it fails at once
    config.write_text("machines:\n  local:\n    environment:\n      python: /bin/true\n")
    argv = [sys.executable, "-m", "summit_jobs", "--config", str(config), "--machine", "local", "doctor",
            "--runs-dir", folder, "--data", folder + b"/data"]
    proc = subprocess.run(argv, env=world["env"], cwd=tmp_path, capture_output=True, timeout=60)
    out, err = proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 1, (out, err)
    assert "Traceback" not in out + err, err
    fails = [line for line in out.splitlines() if line.startswith("FAIL") and "not UTF-8" in line]
    assert [f.split(":")[0] for f in fails] == ["FAIL  run folder", "FAIL  data folder"], out
    assert "runs\\xff" in fails[0] and "rename the folder" in out


# ---- a pack --force killed while it swaps its replacement in ---------------------------------------------

#: `summit-jobs ARGS` in a process killed (SIGKILL) by its first rename out of OUT/.pack-next: the swap's first
#: step after the old manifest is gone.
KILLED_IN_SWAP = """
import os, signal, sys
real = os.replace
def replace(src, dst, *a, **k):
    real(src, dst, *a, **k)
    if ".pack-next" in os.fspath(src) and ".pack-next" not in os.fspath(dst):
        os.kill(os.getpid(), signal.SIGKILL)
os.replace = replace
sys.argv[0] = "summit-jobs"
from summit_jobs.cli.main import main
main()
"""


def test_stage_data_says_a_folder_an_interrupted_pack_left_has_no_manifest(world, tmp_path):
    env = world["env"]
    common = ["--shard-size", "30KB", "--short-side", "24", "-j", "1", "--quiet"]
    made = invoke(world, ["synth", str(tmp_path / "s"), "--videos-per-class", "2", "--frames", "4", "--size", "32",
                          "--layout", "rawframes", "--quiet"])
    assert made.exit_code == 0, made.output
    src, out = str(tmp_path / "s" / "rawframes"), tmp_path / "shards"
    packed = subprocess.run([sys.executable, "-m", "summit_jobs", "pack", src, str(out), *common], env=env,
                            capture_output=True, text=True, timeout=120)
    assert packed.returncode == 0, packed.stderr
    killed = subprocess.run([sys.executable, "-c", KILLED_IN_SWAP, "pack", src, str(out), *common, "--force",
                             "--seed", "3"], env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    assert not (out / "manifest.json").exists() and (out / ".pack-next" / "manifest.json").exists()
    for manifest in (str(out / "manifest.json"), str(out)):
        result = invoke(world, ["stage-data", "-M", manifest, "--nodes", "2", "--dry-run"])
        assert_one_line_refusal(result, ["has no manifest", "interrupted", f"Run `summit-jobs pack` into {out} "
                                         "again", "completes the swap"])
    submitted = invoke(world, [*LOCAL, "--data", str(out / "manifest.json")])
    assert_one_line_refusal(submitted, ["--data", "has no manifest", "Nothing was submitted"])
    again = invoke(world, ["pack", src, str(out), *common])
    assert_one_line_refusal(again, ["holds a finished pack again", "swapped in", "Stage it"])
    staged = invoke(world, ["stage-data", "-M", str(out / "manifest.json"), "--nodes", "2", "--dry-run"])
    assert staged.exit_code == 0, staged.output
    assert not (out / ".pack-next").exists()


def test_an_interrupted_first_pack_says_to_run_it_again(world, tmp_path):
    """Shards and a resume state, no manifest (a pack killed before its last step): run the same pack again."""
    out = tmp_path / "half"
    out.mkdir()
    (out / "train-00000.tar").write_bytes(b"")
    (out / ".pack-state.json").write_text("{}")
    result = invoke(world, ["stage-data", "-M", str(out), "--nodes", "1", "--dry-run"])
    assert_one_line_refusal(result, [f"{out} has no manifest", "before it wrote the manifest",
                                     "Run the same pack command again"])
    plain = invoke(world, ["stage-data", "-M", str(tmp_path / "nothing" / "manifest.json"), "--nodes", "1"])
    assert_one_line_refusal(plain, ["does not exist", "written by `summit-jobs pack`"])
    assert "has no manifest" not in plain.stderr
