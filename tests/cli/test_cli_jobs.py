"""The job-script CLI through the real entry point: dry runs, errors, config, profiles."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, run_cli


def assert_clean_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("summit-jobs: error: ") or proc.stderr.startswith("Usage:"), proc.stderr
    # One paragraph: no blank line inside the message.
    assert "\n\n" not in proc.stderr.strip()
    for n in needles:
        assert n in proc.stderr, (n, proc.stderr)
    assert proc.stdout == ""


def test_summit_256_dry_run(cli_env, tmp_path):
    proc = run_cli(["--machine", "summit", "submit", "--nodes", "256", "--project", "ABC123", "--dry-run"],
                   cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "#BSUB -nnodes 256" in text and "#BSUB -P ABC123" in text and "#BSUB -W 12:00" in text
    assert sum(l.startswith("#BSUB -alloc_flags") for l in text.splitlines()) == 1
    assert "jsrun -n 1536 -r 6 -a 1 -g 1 -c 7 -b packed:7" in text
    assert "--lr 1.92 " in text and "--batch-per-gpu 8 " in text
    # The plan summary goes to stderr.
    assert "1,536 ranks" in proc.stderr and "global batch 12,288" in proc.stderr and "LR 1.92" in proc.stderr
    assert "bin 3" in proc.stderr and "node-hours" in proc.stderr
    script = tmp_path / "s.lsf"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    # Dry run writes nothing.
    assert list(tmp_path.iterdir()) == [script]


def test_node_layout_and_json(cli_env, tmp_path):
    proc = run_cli(["--machine", "summit", "submit", "--nodes", "256", "--project", "ABC123", "--layout", "node",
                    "--dry-run", "--json"], cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["plan"]["ranks"] == 1536 and data["plan"]["global_batch"] == 12288
    assert "jsrun -n 256 -r 1 -a 6 -g 6 -c 42 -b packed:7" in data["script"]


def test_project_from_environment(cli_env, tmp_path):
    env = dict(cli_env, SUMMIT_JOBS_PROJECT="XYZ789", SUMMIT_JOBS_MACHINE="summit")
    proc = run_cli(["submit", "--nodes", "2", "--dry-run"], env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "#BSUB -P XYZ789" in proc.stdout


@pytest.mark.parametrize("args,needles", [
    (["--nodes", "0"], ["at least 1 node", "between 1 and 4,608"]),
    (["--nodes", "-4"], ["at least 1 node"]),
    (["--nodes", "2.5"], ["not a whole number"]),
    (["--nodes", "4609"], ["maximum job size of 4,608", "simulate --virtual-nodes 4609"]),
    (["--nodes", "256", "--walltime", "12:01"], ["above the 12:00 limit of bin 3", "--walltime 12:00"]),
    (["--nodes", "256", "--walltime", "1:00:00"], ["[hours:]minutes"]),
    (["--nodes", "2", "--queue", "debug", "--walltime", "3:00"], ["2:00 limit"]),
    (["--nodes", "92", "--queue", "killable"], ["bins 4, 5"]),
    (["--nodes", "55", "--queue", "batch-hm"], ["at most 54 nodes"]),
    (["--nodes", "2", "--queue", "nope"], ["Valid queues"]),
    (["--nodes", "385", "--quota-nodes", "384"], ["quota of 384", "summit-jobs --machine summit simulate"]),
    (["--nodes", "2", "--job-name", "x;touch pwned"], ["job name"]),
    (["--nodes", "2", "--job-name", "a$(id)"], ["job name"]),
    (["--nodes", "2", "--env", "BAD-NAME=1"], ["NAME=VALUE"]),
])
def test_bad_input_gives_one_paragraph(cli_env, tmp_path, args, needles):
    proc = run_cli(["--machine", "summit", "submit", "--project", "ABC123", *args, "--dry-run"], cli_env, cwd=tmp_path)
    assert_clean_error(proc, *needles)
    assert not (tmp_path / "pwned").exists()


def test_missing_project_error(cli_env, tmp_path):
    proc = run_cli(["--machine", "summit", "submit", "--nodes", "2", "--dry-run"], cli_env, cwd=tmp_path)
    assert_clean_error(proc, "--project NAME", "SUMMIT_JOBS_PROJECT")


def test_unknown_machine(cli_env, tmp_path):
    proc = run_cli(["--machine", "nosuchsite", "submit", "--nodes", "2", "--dry-run"], cli_env, cwd=tmp_path)
    assert_clean_error(proc, "unknown machine 'nosuchsite'",
                       "frontier, janelia-h100, lassen, local, local-slurm, lsf-gpu, minerva-h100, perlmutter, slurm-gpu, summit")


def test_output_file_never_overwritten_without_force(cli_env, tmp_path):
    out = tmp_path / "job.lsf"
    out.write_text("precious\n")
    args = ["--machine", "summit", "submit", "--nodes", "2", "--project", "A1", "--dry-run", "--output", str(out)]
    proc = run_cli(args, cli_env, cwd=tmp_path)
    assert_clean_error(proc, "already exists", "--force")
    assert out.read_text() == "precious\n"
    proc = run_cli(args + ["--force"], cli_env, cwd=tmp_path)
    assert proc.returncode == 0 and out.read_text().startswith("#!/bin/bash")


def test_user_profile_dropped_into_config_dir(cli_env, tmp_path):
    mdir = Path(cli_env["XDG_CONFIG_HOME"]) / "summit-jobs" / "machines"
    mdir.mkdir(parents=True)
    site = (REPO / "envs" / "summit.yaml").read_text().replace("name: summit", "name: mysite")
    # The machine's size only (the first walltime bin's own max_nodes: 4608 stays above its min_nodes).
    (mdir / "mysite.yaml").write_text(site.replace("\nmax_nodes: 4608", "\nmax_nodes: 100"))
    proc = run_cli(["machines"], cli_env, cwd=tmp_path)
    assert proc.returncode == 0 and "mysite" in proc.stdout and "up to 100" in proc.stdout
    proc = run_cli(["--machine", "mysite", "submit", "--nodes", "101", "--project", "A", "--dry-run"], cli_env,
                   cwd=tmp_path)
    assert_clean_error(proc, "maximum job size of 100")


def test_user_profile_bad_key_is_named(cli_env, tmp_path):
    mdir = Path(cli_env["XDG_CONFIG_HOME"]) / "summit-jobs" / "machines"
    mdir.mkdir(parents=True)
    site = (REPO / "envs" / "summit.yaml").read_text().replace("  cores: 42", "  coers: 42")
    (mdir / "typo.yaml").write_text(site)
    proc = run_cli(["--machine", "typo", "submit", "--nodes", "1", "--project", "A", "--dry-run"], cli_env, cwd=tmp_path)
    assert_clean_error(proc, "unknown key 'node.coers'", "cores")


def test_config_file_overrides_profile_environment(cli_env, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("machine: summit\nproject: CFG001\nquota_nodes: 16\n"
                   "machines:\n  summit:\n    environment:\n      variables:\n"
                   "        HOROVOD_FUSION_THRESHOLD: '67108864'\n")
    proc = run_cli(["--config", str(cfg), "submit", "--nodes", "16", "--dry-run",
                    "--env", "HOROVOD_CYCLE_TIME=5"], cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "#BSUB -P CFG001" in proc.stdout
    assert "export HOROVOD_FUSION_THRESHOLD=67108864" in proc.stdout
    assert "export HOROVOD_CYCLE_TIME=5" in proc.stdout
    proc = run_cli(["--config", str(cfg), "submit", "--nodes", "17", "--dry-run"], cli_env, cwd=tmp_path)
    assert_clean_error(proc, "quota of 16")


def test_config_file_unknown_key(cli_env, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("machine: summit\nprojcet: X\n")
    proc = run_cli(["--config", str(cfg), "machines"], cli_env, cwd=tmp_path)
    assert_clean_error(proc, "unknown key 'projcet'", "project")


def test_machines_lists_limits(cli_env, tmp_path):
    proc = run_cli(["machines", "--json"], cli_env, cwd=tmp_path)
    data = {m["name"]: m for m in json.loads(proc.stdout)}
    assert data["summit"]["max_nodes"] == 4608 and data["summit"]["gpus_per_node"] == 6
    assert data["lassen"]["account_flag"] == "-G" and data["lassen"]["submit_mode"] == "stdin"
    assert [b["max_walltime"] for b in data["summit"]["walltime_bins"]] == ["24:00", "24:00", "12:00", "6:00", "2:00"]
    assert data["summit"]["nvme_path"] == "/mnt/bb/$USER"


def test_help_explains(cli_env):
    proc = run_cli(["submit", "--help"], cli_env)
    assert proc.returncode == 0
    for word in ("--nodes", "--dry-run", "--walltime", "[hours:]minutes", "--chain", "--layout"):
        assert word in proc.stdout


def test_cli_does_not_import_torch():
    code = ("import sys; import summit_jobs.cli.submit, summit_jobs.planning.plan, summit_jobs.planning.render, summit_jobs.profiles.machines;"
            "from click.testing import CliRunner;"
            "r = CliRunner().invoke(summit_jobs.cli.submit.cli, ['--machine','summit','submit','--nodes','8',"
            "'--project','A','--dry-run']);"
            "assert r.exit_code == 0, r.output;"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_non_editable_install_works_from_any_directory(tmp_path):
    target = tmp_path / "site"
    # From a copy of the sources: setuptools builds in the source folder's build/, whose files it takes over
    # the sources when they look newer (a stale build/lib once installed an old module beside new ones).
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__",
                                                                "tests", "node_modules"))
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--target", str(target), str(source)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (target / "summit_jobs" / "templates" / "lsf" / "job.sh.j2").is_file()
    assert (target / "summit_jobs" / "envs" / "summit.yaml").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(target), "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "summit_jobs", "--machine", "summit", "submit", "--nodes", "4",
                           "--project", "A1", "--dry-run"], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "#BSUB -nnodes 4" in proc.stdout
    proc = subprocess.run([sys.executable, "-c", "import summit_jobs.resources as r; print(r.templates_dir())"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == str(target / "summit_jobs" / "templates")
