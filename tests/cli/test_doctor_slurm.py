"""``summit-jobs doctor`` on a Slurm profile: Slurm's own checks, not LSF's.

The parsers read outputs captured from the test cluster (tests/data/slurm/sbatch_version.txt,
sinfo_partitions.txt, sacctmgr_qos.txt, each with its .source); the checks are fed what they parse. End to end,
doctor runs against the session's real cluster (tests/slurm_cluster.py): the local-slurm profile passes, a
profile naming a partition the cluster lacks fails with the cluster's partitions named, and a PATH without
Slurm fails in one line with its fix."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Dict

import pytest
from helpers import run_cli

from summit_jobs import resources
from summit_jobs.profiles import machines
from summit_jobs.schedulers.slurm import doctor
from summit_jobs.schedulers.slurm.client import SlurmOutputError

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
LOCAL_SLURM = (resources.envs_dir() / "local-slurm.yaml").read_text()
#: The captured cluster's partitions: debug (up, infinite), short (up, 30 min), long (up, 1.5 days), maint
#: (down, 2 h), hold (inactive), closed (drain); its QOS: normal (no MaxWall), debug (30 min), regular (2 days),
#: premium (90 min).
SINFO = doctor.parse_sinfo((DATA / "sinfo_partitions.txt").read_text())
QOS = doctor.parse_qos((DATA / "sacctmgr_qos.txt").read_text())


def write_profile(folder: Path, name: str, queues: str = "", qos: str = "") -> Path:
    """A user profile ``name``: local-slurm's text with ``queues`` (YAML lines) in place of its one partition
    and ``qos`` (YAML lines) under scheduler.slurm. The folder."""
    folder.mkdir(exist_ok=True)
    text = LOCAL_SLURM.replace("name: local-slurm", f"name: {name}")
    if queues:
        head, _, tail = text.partition("queues:\n")
        text = head + "queues:\n" + queues + tail[tail.index("launcher:"):]
    if qos:
        text = text.replace("    cpus_per_task: 1", "    cpus_per_task: 1\n    qos:\n" + qos, 1)
    (folder / f"{name}.yaml").write_text(text)
    return folder


def load(monkeypatch, tmp_path: Path, queues: str = "", qos: str = ""):
    monkeypatch.setenv("SUMMIT_JOBS_MACHINES_PATH", str(write_profile(tmp_path / "profiles", "site", queues, qos)))
    return machines.load("site")


# ---- parsers, on captured outputs -------------------------------------------------------------------------

def test_the_version_of_debians_and_schedmds_sbatch():
    assert doctor.parse_version((DATA / "sbatch_version.txt").read_text()) == (22, 5, 8)
    assert doctor.parse_version("slurm 23.11.10\n") == (23, 11, 10)      # SchedMD's builds name no package
    with pytest.raises(SlurmOutputError, match="(?s)printed no line with Slurm's version.*fatal: Could not"):
        doctor.parse_version("sbatch: fatal: Could not establish a configuration source\n")


def test_sinfo_partitions_with_their_state_and_maxtime():
    assert list(SINFO) == ["debug", "short", "long", "maint", "hold", "closed"]
    assert [(p.availability, p.max_time, p.max_seconds) for p in SINFO.values()] == [
        ("up", "infinite", None), ("up", "30:00", 1800), ("up", "1-12:00:00", 36 * 3600),
        ("down", "2:00:00", 7200), ("inactive", "46:00", 46 * 60), ("drain", "infinite", None)]
    with pytest.raises(SlurmOutputError, match="cannot read this line of sinfo .*'debug up infinite'"):
        doctor.parse_sinfo("debug up infinite\n")


def test_sacctmgr_qos_and_their_maxwall():
    assert QOS == {"normal": None, "debug": 1800, "regular": 2 * 86400, "premium": 5400}


@pytest.mark.parametrize("text,seconds", [("infinite", None), ("UNLIMITED", None), ("", None), ("45", 2700),
                                          ("30:00", 1800), ("2:00:00", 7200), ("1-12", 129600),
                                          ("1-12:30", 131400), ("2-00:00:00", 172800)])
def test_slurm_time_forms(text, seconds):
    """The forms slurm.conf(5) gives for MaxTime, as sinfo and sacctmgr print them back."""
    assert doctor.parse_time(text) == seconds


def test_a_time_slurm_would_not_write_is_an_error():
    with pytest.raises(SlurmOutputError, match="'1 day' is not a time limit"):
        doctor.parse_time("1 day")


# ---- checks, on what the parsers read ---------------------------------------------------------------------

def by_name(checks) -> Dict[str, object]:
    return {c.name: c for c in checks}


def test_partitions_missing_not_up_or_too_short(monkeypatch, tmp_path):
    profile = load(monkeypatch, tmp_path, queues=(
        "  gpu:\n    default: true\n  short:\n    max_walltime: \"1:00\"\n  long: {}\n  maint: {}\n  hold: {}\n"
        "  closed: {}\n"))
    found = by_name(doctor.check_partitions(profile, SINFO, None))
    assert list(found)[0] == "partition gpu (default)"
    gpu = found["partition gpu (default)"]
    assert gpu.status == "FAIL" and "(it lists: debug, short, long, maint, hold, closed)" in gpu.found
    short = found["partition short"]
    assert short.status == "FAIL" and "MaxTime 30:00: shorter than the 1:00 of queues.short.max_walltime" in short.found
    assert "lower queues.short.max_walltime in the profile to 0:30" in short.fix
    assert found["partition long"].status == "ok"                    # 24:00 of the bin within 1-12:00:00
    assert found["partition maint"].status == "warn" and "none starts until it is up" in found["partition maint"].found
    assert [found[n].status for n in ("partition hold", "partition closed")] == ["FAIL", "FAIL"]
    assert "sbatch refuses new jobs" in found["partition closed"].found


def test_a_bin_longer_than_the_partition_and_no_partition_to_check(monkeypatch, tmp_path):
    profile = load(monkeypatch, tmp_path, queues="  short:\n    default: true\n")
    (check,) = doctor.check_partitions(profile, SINFO, None)
    assert check.status == "FAIL" and "than the 24:00 of walltime bin 1" in check.found
    perlmutter = machines.load("perlmutter")                  # its jobs name no partition
    assert not perlmutter.scheduler.slurm.partition
    (check,) = doctor.check_partitions(perlmutter, None, None)
    assert check.status == "ok" and "scheduler.slurm.partition is false" in check.found


def test_qos_listed_or_not_and_their_maxwall(monkeypatch, tmp_path):
    profile = load(monkeypatch, tmp_path, qos=(
        "      normal: {default: true, max_walltime: \"24:00\"}\n      debug: {max_walltime: \"1:00\"}\n"
        "      premium: {max_walltime: \"1:30\"}\n      nosuch: {}\n"))
    found = by_name(doctor.check_qos(profile, QOS, None))
    assert found["qos normal (default)"].status == "ok"
    assert found["qos debug"].status == "FAIL" and "MaxWall 0:30 is shorter than the 1:00" in found["qos debug"].found
    assert found["qos premium"].status == "ok"
    assert found["qos nosuch"].status == "FAIL" and "(it lists: normal, debug, regular, premium)" in \
        found["qos nosuch"].found
    # A site whose job_submit plugin maps the QOS a job names (NERSC: regular) onto its own (gpu_regular).
    mapped = by_name(doctor.check_qos(profile, {"gpu_debug": 1800, "gpu_regular": 172800}, None))
    assert mapped["qos debug"].status == "warn" and "may map --qos debug onto gpu_debug" in mapped["qos debug"].found
    (hidden,) = doctor.check_qos(profile, None, "`sacctmgr -nP show qos format=Name,MaxWall` failed (exit 1)")
    assert hidden.status == "warn" and hidden.found.startswith("not checked: `sacctmgr")


def test_version_and_account_in_slurms_words(monkeypatch, tmp_path):
    assert doctor.check_version((22, 5, 8), None).status == "ok"
    old = doctor.check_version((21, 8, 8), None)
    assert old.status == "FAIL" and "Slurm 21.08.8 is older than 22.05: " in old.found and "squeue --json" in old.found
    profile = load(monkeypatch, tmp_path)
    assert doctor.check_account(profile, None).status == "ok"
    given = doctor.check_account(profile, "lab1")
    assert given.status == "warn" and "sbatch --account=lab1 --partition=debug --time=1" in given.fix
    assert doctor.check_account(profile, "bad name").status == "FAIL"


# ---- end to end, against the session's cluster ------------------------------------------------------------

@pytest.fixture
def env(cli_env, tmp_path, slurm_cluster):
    """The cluster's SLURM_CONF, a scratch HOME, no SSH agent or host of the developer's."""
    (tmp_path / "home").mkdir()
    out = slurm_cluster.env(dict(cli_env, HOME=str(tmp_path / "home")))
    for key in ("SUMMIT_JOBS_HOST", "SSH_AUTH_SOCK"):
        out.pop(key, None)
    return out


def report(proc) -> Dict[str, str]:
    """Each check's line (and its fix line) by the check's name."""
    lines, out = proc.stdout.splitlines(), {}
    for i, text in enumerate(lines):
        if not text.startswith("  fix:"):
            fix = lines[i + 1] if i + 1 < len(lines) and lines[i + 1].startswith("  fix:") else ""
            out[text.split(":", 1)[0].split("  ", 1)[1]] = text + ("\n" + fix if fix else "")
    return out


def test_the_local_slurm_profile_passes_on_the_test_cluster(env, tmp_path):
    proc = run_cli(["--machine", "local-slurm", "doctor"], env, cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    found = report(proc)
    assert found["slurm commands"].startswith("ok  slurm commands: sbatch, squeue, sacct, scancel, srun, scontrol")
    assert found["slurm version"].startswith("ok  slurm version: Slurm 2")
    assert found["partition debug (default)"] == ("ok  partition debug (default): up, MaxTime infinite (the "
                                                  "profile's longest job here: 24:00)")
    assert found["account"].startswith("ok  account:")
    assert not any(name.startswith("lsf") or "queue" in name for name in found)


def test_a_partition_and_a_qos_the_cluster_lacks(env, tmp_path):
    folder = write_profile(tmp_path / "profiles", "elsewhere", queues="  gpu:\n    default: true\n",
                           qos="      normal: {default: true}\n      gpu_long: {}\n")
    proc = run_cli(["--machine", "elsewhere", "doctor"], dict(env, SUMMIT_JOBS_MACHINES_PATH=str(folder)),
                   cwd=tmp_path, timeout=180)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    found = report(proc)
    assert "FAIL  partition gpu (default): not listed by sinfo (it lists: debug)" in found["partition gpu (default)"]
    assert "fix: name a partition the site has" in found["partition gpu (default)"]
    assert found["qos normal (default)"].startswith("ok  qos normal (default): MaxWall no limit")
    assert "FAIL  qos gpu_long: not listed by sacctmgr (it lists: normal)" in found["qos gpu_long"]


def path_without_slurm(tmp_path: Path) -> str:
    """A folder holding links to every program of the system folders but Slurm's: this machine as a login node
    where Slurm's module is not loaded."""
    folder = tmp_path / "no-slurm-bin"
    folder.mkdir()
    slurm = set(doctor.needed_commands()) | set(doctor.PROBE_COMMANDS)
    for system in ("/usr/local/bin", "/usr/bin", "/bin"):
        for entry in sorted(os.listdir(system)) if os.path.isdir(system) else []:
            if entry not in slurm and not (folder / entry).exists():
                (folder / entry).symlink_to(os.path.join(system, entry))
    return str(folder)


def test_no_slurm_on_path_fails_in_one_line_with_the_fix(env, tmp_path):
    path = path_without_slurm(tmp_path)
    assert shutil.which("sbatch", path=path) is None
    proc = run_cli(["--machine", "local-slurm", "doctor"], dict(env, PATH=path), cwd=tmp_path, timeout=180)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    found = report(proc)
    assert found["slurm commands"] == (
        "FAIL  slurm commands: sbatch, squeue, sacct, scancel, srun, scontrol not found on the PATH of this machine\n"
        "  fix: load Slurm's environment in this shell (your site's `module load slurm`), or check a login node "
        "over SSH with --host LOGIN_NODE")
    assert found["slurm version"].startswith("warn  slurm version: not checked")
    assert [n for n, text in found.items() if text.startswith("FAIL")] == ["slurm commands"]
