"""``summit-jobs doctor`` through the real entry point: a correct set-up passes, and each broken set-up
(no LSF on PATH, a queue the site does not have, an unwritable or node-local run folder, a trainer
environment without torch or with a module that does not load, an unknown SSH host key) fails with its fix.

Every broken set-up is a real condition on this machine: a PATH without LSF, a profile naming a queue the
embedded bqueues does not list, a folder the probe cannot write, an interpreter without torch, an sshd
whose key is not in an empty known_hosts."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Tuple

import pytest
from helpers import REPO, run_cli
from helpers_sshd import remote_lsf_env, ssh_profile, start_sshd

from summit_jobs import resources

LOCAL = (resources.envs_dir() / "local.yaml").read_text()


@pytest.fixture
def env(cli_env, tmp_path):
    """A scratch HOME and embedded-LSF state; no SSH agent or host of the developer's."""
    home = tmp_path / "home"
    home.mkdir()
    out = dict(cli_env, HOME=str(home), XDG_DATA_HOME=str(tmp_path / "data"),
               SUMMIT_JOBS_LSF_HOME=str(tmp_path / "lsf"), SUMMIT_JOBS_MACHINES_PATH=str(tmp_path / "profiles"))
    for key in ("SUMMIT_JOBS_HOST", "SSH_AUTH_SOCK", "SUMMIT_JOBS_LSF_QUEUES"):
        out.pop(key, None)
    return out


def profile(tmp_path: Path, name: str, text: str) -> None:
    """A user profile ``name``: the local profile's text, renamed and edited (profiles are data)."""
    folder = tmp_path / "profiles"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.yaml").write_text(text.replace("name: local", f"name: {name}"))


def doctor(env, *args, cwd=None, timeout=180):
    return run_cli(["doctor", *args], env, cwd=cwd, timeout=timeout)


def line(proc, start: str) -> str:
    """The report line starting with ``start``, and its fix line when there is one."""
    lines = proc.stdout.splitlines()
    for i, text in enumerate(lines):
        if text.startswith(start):
            return text + ("\n" + lines[i + 1] if i + 1 < len(lines) and lines[i + 1].startswith("  fix:") else "")
    raise AssertionError(f"no line starting {start!r} in:\n{proc.stdout}\n{proc.stderr}")


def test_a_correct_set_up_on_the_embedded_lsf_passes(env, tmp_path):
    (tmp_path / ".summit-jobs-doctor.2147483646").write_text("")      # left by a probe that was killed
    proc = doctor(env, cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    for start in ("ok  lsf commands: bsub, bjobs, bkill, jsrun found", "ok  lsf version: IBM Spectrum LSF Standard "
                  "10.1.0.2 (cluster embedded", "ok  queue batch (default): Open:Active", "ok  queue debug:",
                  "ok  account:", f"ok  run folder: {tmp_path / 'summit-jobs-runs'} does not exist yet",
                  "ok  torch: torch 2.", "ok  trainer: "):
        line(proc, start)
    assert f"-m trainer` runs (the trainer in {REPO / 'trainer'})" in line(proc, "ok  trainer: ")
    assert not any(text.startswith("FAIL") for text in proc.stdout.splitlines())
    assert not (tmp_path / "summit-jobs-runs").exists()               # checked, not created
    assert not list(tmp_path.glob(".summit-jobs-doctor*"))            # the test file was removed
    listed = json.loads(doctor(env, "--json", "--data", str(tmp_path), cwd=tmp_path).stdout)
    assert {c["check"] for c in listed} >= {"lsf commands", "lsf version", "queue batch (default)", "run folder",
                                            "data folder", "torch", "trainer", "horovod"}
    assert all(set(c) == {"status", "check", "found", "fix"} for c in listed)


def test_no_lsf_on_path(env, tmp_path):
    """A site profile (not the embedded LSF) on a machine whose PATH has no LSF."""
    profile(tmp_path, "sitex", LOCAL.replace("embedded: true", "embedded: false"))
    path = "/usr/bin:/bin"
    if shutil.which("bsub", path=path):
        pytest.skip("this machine has an LSF of its own in /usr/bin")
    proc = doctor(dict(env, PATH=path), "--machine", "sitex", cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    found = line(proc, "FAIL  lsf commands:")
    assert "bsub, bjobs, bkill, jsrun not found on the PATH of this machine" in found
    assert "fix: load LSF's environment" in found and "profile.lsf" in found
    assert line(proc, "warn  lsf version: not checked")


def test_unknown_queue(env, tmp_path):
    """A profile whose default queue the site's bqueues does not list (the embedded LSF lists batch, debug)."""
    profile(tmp_path, "mysite", LOCAL.replace("  batch:\n", "  gpu_h100:\n"))
    proc = doctor(env, "--machine", "mysite", cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    found = line(proc, "FAIL  queue gpu_h100 (default):")
    assert "not listed by bqueues (it lists: batch, debug)" in found and "fix: name a queue" in found
    assert line(proc, "ok  queue debug: Open:Active")


def test_unwritable_run_folder(env, tmp_path):
    """A run folder where no file can be created: a 0500 folder, or (as root, who may write there) procfs."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        runs = locked / "runs"
    else:
        runs = Path("/proc/summit-jobs-doctor-runs")
        if subprocess.run(["sh", "-c", ": > /proc/.summit-jobs-doctor-probe"], capture_output=True).returncode == 0:
            pytest.skip("/proc is writable here")
    proc = doctor(env, "--runs-dir", str(runs), cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    found = line(proc, "FAIL  run folder:")
    assert f"{runs} does not exist and its parent {runs.parent} is not writable" in found
    assert "fix: give --runs-dir a folder you can write" in found


def test_a_file_where_the_run_folder_should_be(env, tmp_path):
    (tmp_path / "runs").write_text("not a folder\n")
    proc = doctor(env, "--runs-dir", str(tmp_path / "runs"), "--data", str(tmp_path / "no-data"), cwd=tmp_path)
    assert proc.returncode == 1
    assert "is a file, not a folder" in line(proc, "FAIL  run folder:")
    assert "does not exist" in line(proc, "FAIL  data folder:") and "stage-data" in line(proc, "FAIL  data folder:")


def test_run_folders_compute_nodes_cannot_use(env, tmp_path):
    """Summit's home NFS (read-only on compute nodes) and /tmp (every node's own) are refused as run folders."""
    for runs, words in (("/ccs/home/u/runs", "which summit's compute nodes cannot write"),
                        ("/tmp/u/runs", "which every node of summit has its own copy of")):
        proc = doctor(env, "--machine", "summit", "--host", "local", "--project", "ABC123", "--runs-dir", runs,
                      cwd=tmp_path)
        assert proc.returncode == 1
        found = line(proc, "FAIL  run folder:")
        assert words in found and "$MEMBERWORK" in found


def test_trainer_environment_without_torch(env, tmp_path):
    """The profile's interpreter cannot import torch (the system Python, without the venv's packages)."""
    python = "/usr/bin/python3"
    if not Path(python).exists() or subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip(f"{python} is missing or has torch")
    profile(tmp_path, "notorch", LOCAL.replace("python: auto", f"python: {python}"))
    proc = doctor(env, "--machine", "notorch", cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    found = line(proc, "FAIL  torch:")
    assert f"{python}, Python 3" in found and "cannot import torch: ModuleNotFoundError" in found
    assert "environment.modules" in found and "environment.python" in found


def _torch_without_the_trainer(tmp_path: Path) -> Tuple[str, str]:
    """(python, PYTHONPATH) of an environment with torch and its packages but not the trainer: this venv's
    interpreter without its site hook (-S: no .pth files, so no editable install of summit-jobs), its
    site-packages on PYTHONPATH, as a site's Python with PyTorch where nobody installed the trainer."""
    import importlib.util
    where = str(Path(importlib.util.find_spec("torch").origin).parent.parent)     # found, not imported
    if (Path(where) / "trainer" / "config.py").exists():
        pytest.skip("the trainer is installed as a plain package next to torch")
    python = tmp_path / "site-python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    python.chmod(0o755)
    return str(python), where


def test_torch_without_the_trainer_fails_with_the_install_fix(env, tmp_path):
    """torch imports, but `python -m trainer` would not run in a job: the trainer is not installed there."""
    python, site = _torch_without_the_trainer(tmp_path)
    profile(tmp_path, "notrainer", LOCAL.replace("python: auto", f"python: {python}")
            .replace('    OMP_NUM_THREADS: "1"', f'    OMP_NUM_THREADS: "1"\n    PYTHONPATH: {site}'))
    proc = doctor(env, "--machine", "notrainer", cwd=REPO)      # a checkout in the current folder does not count
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert line(proc, "ok  torch: torch 2.")
    found = line(proc, "FAIL  trainer:")
    assert f"{python} cannot import the trainer: ModuleNotFoundError: No module named 'trainer'" in found
    assert "pip install --no-deps" in found and "Installing the trainer on the cluster" in found


def test_a_different_package_named_trainer_is_not_taken_for_the_trainer(env, tmp_path):
    """PyPI has an unrelated `trainer` package: found first on the path, it is named, not trusted."""
    other = tmp_path / "other-site" / "trainer"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text('"""A training loop library that happens to share the name."""\n')
    (other / "config.py").write_text("class TrainerConfig:\n    pass\n")
    profile(tmp_path, "othertrainer", LOCAL.replace('    OMP_NUM_THREADS: "1"',
                                                    f'    OMP_NUM_THREADS: "1"\n    PYTHONPATH: {other.parent}'))
    proc = doctor(env, "--machine", "othertrainer", cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    found = line(proc, "FAIL  trainer:")
    assert f"the trainer package in {other} is not the summit-jobs trainer" in found


def test_module_that_does_not_load(env, tmp_path):
    profile(tmp_path, "nomodule", LOCAL.replace("  python: auto", "  python: auto\n  modules: [pytorch/9.9]"))
    proc = doctor(env, "--machine", "nomodule", cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    found = line(proc, "FAIL  trainer environment:")
    assert "module load pytorch/9.9 failed" in found and "fix: check the module's name" in found


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    base = tmp_path_factory.mktemp("doctor-ssh")
    for server in start_sshd(base / "sshd", remote_lsf_env(base)):
        yield server, base


def ssh_env(env, tmp_path, server, known: Path) -> dict:
    remote_runs = tmp_path / "remote runs"
    remote_runs.mkdir()
    folder = ssh_profile(tmp_path / "profiles", server, remote_runs, known)
    return dict(env, SUMMIT_JOBS_MACHINES_PATH=str(folder))


def test_unknown_host_key_over_ssh_is_never_accepted(env, tmp_path, sshd):
    server, _ = sshd
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    proc = run_cli(["--trust-new-host-key", "doctor", "--machine", "viassh"],
                   ssh_env(env, tmp_path, server, empty), cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    found = line(proc, "FAIL  host key:")
    assert f"127.0.0.1:{server.port}: the host key is not in your known_hosts" in found
    assert "ssh-keyscan" in found and "doctor never accepts a new key" in found
    assert line(proc, "warn  --trust-new-host-key: ignored")
    assert line(proc, "warn  other checks: not run")
    assert empty.read_text() == ""                                      # nothing was added


def test_a_correct_set_up_over_ssh_passes(env, tmp_path, sshd):
    server, _ = sshd
    known = tmp_path / "known_hosts"
    known.write_text(server.known_hosts_line())
    proc = doctor(ssh_env(env, tmp_path, server, known), "--machine", "viassh", cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    label = f"{server.user}@127.0.0.1:{server.port}"
    for start in (f"ok  host key: {label}: the host key is in your known_hosts", "ok  lsf commands: bsub, bjobs, "
                  f"bkill, jsrun found on {label}", "ok  lsf version: IBM Spectrum LSF Standard 10.1.0.2",
                  "ok  queue batch (default): Open:Active", f"ok  run folder: {tmp_path / 'remote runs'} exists "
                  "and is writable", "ok  torch: torch 2.", "ok  trainer: "):
        line(proc, start)


def site_bin(tmp_path: Path, answers: dict) -> str:
    """A site's LSF commands on PATH: each prints a captured answer (tests/data/lsf) or the given text and
    exits with the given status; the commands doctor only looks for are there and never run."""
    folder = tmp_path / "site-bin"
    folder.mkdir()
    for name in ("bsub", "bjobs", "bkill", "jsrun", "blaunch", "lsid", "bqueues"):
        text, rc = answers.get(name, ("", 0))
        data = Path(__file__).resolve().parents[1] / "data" / "lsf" / text
        (folder / name).write_text(f"#!/bin/sh\ncat {data}\nexit {rc}\n" if text.endswith(".txt") else
                                   f"#!/bin/sh\nprintf '%s\\n' {json.dumps(text)}\nexit {rc}\n")
        (folder / name).chmod(0o755)
    return f"{folder}:/usr/bin:/bin"


def test_an_lsf_without_fix_pack_2_and_an_inactive_queue(env, tmp_path):
    """Captured answers of real sites: IBM's documented lsid of LSF 10.1.0 (no bjobs -json yet) and the
    bqueues of IBM's LSF on Kubernetes, whose night queue is Open:Inact."""
    text = LOCAL.replace("embedded: true", "embedded: false").replace("  batch:\n", "  normal:\n")
    profile(tmp_path, "sitey", text.replace("  debug:\n", "  night:\n"))
    path = site_bin(tmp_path, {"lsid": ("lsid_ibm_doc_10_1_0.txt", 0),
                               "bqueues": ("bqueues_lsf_kubernetes_inact.txt", 0)})
    proc = doctor(dict(env, PATH=path), "--machine", "sitey", cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    old = line(proc, "FAIL  lsf version:")
    assert "LSF 10.1.0 (cluster lsf10, master hosta.company.com) is older than 10.1.0.2" in old
    assert "Fix Pack 2" in old
    assert line(proc, "ok  queue normal (default): Open:Active")
    assert "Open:Inact: jobs are accepted but held" in line(proc, "warn  queue night:")


def test_lsf_commands_that_fail_or_print_garbage(env, tmp_path):
    """A master that does not answer: lsid exits non-zero, bqueues prints no table. Reported, no traceback."""
    profile(tmp_path, "sitez", LOCAL.replace("embedded: true", "embedded: false"))
    path = site_bin(tmp_path, {"lsid": ("ls_getclustername(): Cannot locate master LIM now, try later", 255),
                               "bqueues": ("LSF is down. Please wait ...", 0)})
    proc = doctor(dict(env, PATH=path), "--machine", "sitez", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout, (proc.stdout, proc.stderr)
    assert "`lsid` failed" in line(proc, "FAIL  lsf version:") and "Cannot locate master LIM" in proc.stdout
    assert "bqueues printed no QUEUE_NAME header; it printed: | LSF is down" in line(proc, "FAIL  queues:")
    assert all(text.startswith(("ok  ", "warn  ", "FAIL  ", "  fix: ")) for text in proc.stdout.splitlines())
