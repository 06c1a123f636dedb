"""A third scheduler is its package, one line of the registry and a profile: nothing else on the login side.

Why: docs/architecture.md ("Adding a scheduler") says so, and only a scheduler that no file of the project
knows can show it. Here a made-up PBS-style scheduler is written into a folder outside the project (its class,
its state map, its own profile section's checks, its templates inside the package), its profile into a machines
folder of the user's, and a start-up line adds it to ``schedulers.IMPLEMENTATIONS`` (the one line a real one adds
there). The real command line then lists the machine, plans and renders its job script with the profile's own
section, and refuses a bad value of that section naming the file and the key.
"""
from __future__ import annotations

import subprocess
import sys
from typing import Dict, List

import pytest
import yaml

from summit_jobs import resources

PACKAGE = {
    "__init__.py": '"""A PBS-style scheduler that no file of summit-jobs knows."""\n',
    "scheduler.py": r'''
from dataclasses import dataclass
from pathlib import Path

from summit_jobs import schedulers
from summit_jobs.errors import UserError
from summit_jobs.schedulers.base import CommandScheduler

#: qstat's one-letter states onto the interface's (queued, held, running, suspended, exiting, finished).
STATE_MAP = {"Q": schedulers.PENDING, "H": schedulers.HELD, "R": schedulers.RUNNING, "S": schedulers.SUSPENDED,
             "E": schedulers.RUNNING, "F": schedulers.DONE}
PLACES = ("scatter", "pack", "free")


@dataclass(frozen=True)
class Chunks:
    name: str
    mpiprocs: int


class PbsScheduler(CommandScheduler):
    name, label = "pbs", "PBS"
    submit_command, script_name, status_command, cancel_command = "qsub", "job.pbs", "qstat", "qdel"
    launchers, default_launcher = ("mpiexec",), "mpiexec"
    option_help = {"directive": "A further #PBS line, e.g. '-l filesystems=home'."}
    directive_flag = "--pbs-option"
    job_template, launch_templates, command_group = "pbs/job.sh.j2", ("pbs/job.sh.j2",), None

    def template_folder(self):
        return str(Path(__file__).parent / "templates")

    def template_filters(self):
        return {}

    def submit_words(self, submit_mode):
        return "qsub script"

    def check_profile(self, profile):
        sched = profile.scheduler
        if sched.account_flag != "-A":
            raise ValueError(f"scheduler.account_flag {sched.account_flag!r} is not PBS's: PBS charges with -A")
        own = sched.own or {}
        unknown = sorted(set(own) - {"place"})
        if unknown:
            raise ValueError(f"unknown key 'scheduler.pbs.{unknown[0]}'; valid keys under 'scheduler.pbs': place")
        if own.get("place", "scatter") not in PLACES:
            raise ValueError(f"scheduler.pbs.place = {own['place']!r} must be one of {' | '.join(PLACES)}")

    def request(self, profile, opts, nodes):
        place = (profile.scheduler.own or {}).get("place", "scatter")
        shape = (("-l", f"select={nodes}:ncpus={profile.node.cores}:mpiprocs={profile.node.slots}"),
                 ("-l", f"place={place}"))
        return schedulers.Request(kind="select", launcher="mpiexec", slots_per_host=profile.node.slots,
                                  slots=profile.node.slots * nodes, shape=shape, extra=())

    def limits(self, profile, opts):
        return ()

    def launch_layout(self, profile, opts, nodes, launcher):
        return Chunks("chunks", profile.node.slots)

    def job_variables(self, profile, opts):
        return {}

    def gpus_per_rank(self, plan):
        return None

    def stage_launch_line(self, profile, nodes, program):
        return f"mpiexec -n {nodes} --ppn 1 {program}"

    def seconds_per_minute(self, profile, environ):
        return 60.0

    def submit_argv(self, script_name, submit_mode, depends_on):
        return (["qsub"] + ([f"-W", f"depend=afterany:{depends_on}"] if depends_on else []) + [script_name], False)

    def parse_submitted(self, stdout):
        return stdout.strip()

    def queue_of(self, host, job_id, script):
        return ""

    job_id_words = "a number and its server, e.g. 123.server"

    def job_id(self, value):
        import re
        text = str(value)
        return text if re.fullmatch(r"[0-9]+\.[A-Za-z0-9-]+", text) else None

    def output_files(self, script, job_id):
        return [f"{self.script_name}.o{job_id.split('.')[0]}"]

    def query(self, host, job_ids):
        raise UserError("qstat is not reached in this test")

    owners = cancel = query

    def site_checks(self, probe, profile, project):
        return []
''',
    "templates/pbs/job.sh.j2": (
        "#!/bin/bash\n"
        "#PBS -N {{ plan.job_name }}\n"
        "{% for flag, value in plan.shape_directives %}#PBS {{ flag }} {{ value }}\n{% endfor %}"
        "#PBS {{ plan.account_flag }} {{ plan.account }}\n"
        "mpiexec --ppn {{ plan.launch_layout.mpiprocs }} {{ plan.rank_argv | qjoin }}\n"),
}

#: The one line a third scheduler adds to summit_jobs/schedulers/__init__.py, run before the command line.
START = """import sys
from summit_jobs import schedulers
schedulers.IMPLEMENTATIONS["pbs"] = "pbsfake.scheduler:PbsScheduler"
from summit_jobs.cli.main import main
sys.argv[0] = "summit-jobs"
main()
"""


@pytest.fixture
def world(tmp_path) -> Dict[str, object]:
    package = tmp_path / "site" / "pbsfake"
    for name, text in PACKAGE.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    profile = yaml.safe_load((resources.envs_dir() / "slurm-gpu.yaml").read_text())
    profile.update(name="pbs-site", description="a PBS site of the test's own")
    profile["scheduler"] = {"kind": "pbs", "submit_mode": "file", "account_flag": "-A", "account_name": "project",
                            "account_required": True, "pbs": {"place": "pack"}}
    profile["launcher"] = {}
    machines = tmp_path / "machines"
    machines.mkdir()
    (machines / "pbs-site.yaml").write_text(yaml.safe_dump(profile))
    (tmp_path / "start.py").write_text(START)
    import os
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUMMIT_JOBS_")}
    env.update(PYTHONPATH=str(tmp_path / "site"), SUMMIT_JOBS_MACHINES_PATH=str(machines),
               XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    return {"env": env, "start": tmp_path / "start.py", "profile": machines / "pbs-site.yaml", "root": tmp_path}


def summit_jobs(world, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(world["start"]), *args], env=world["env"], capture_output=True,
                          text=True, timeout=120, cwd=str(world["root"]))


def test_a_third_scheduler_plans_and_renders_from_its_package_and_a_profile(world):
    listing = summit_jobs(world, "machines")
    assert listing.returncode == 0, listing.stderr
    assert "pbs-site: a PBS site of the test's own" in listing.stdout
    assert "  submit: qsub script; account flag -A" in listing.stdout
    res = summit_jobs(world, "--machine", "pbs-site", "submit", "--nodes", "2", "--project", "abc123",
                      "--run-dir", str(world["root"] / "run"), "--dry-run")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    lines: List[str] = res.stdout.splitlines()
    # slurm-gpu's node (32 cores, 4 GPUs), the profile's own scheduler.pbs.place, its -A account flag
    assert lines[:5] == ["#!/bin/bash", "#PBS -N tsm", "#PBS -l select=2:ncpus=32:mpiprocs=4", "#PBS -l place=pack",
                         "#PBS -A abc123"], res.stdout
    assert any(line.startswith("mpiexec --ppn 4 ") and " -m trainer " in line for line in lines), res.stdout


def test_its_own_profile_section_is_checked_naming_the_file_and_the_key(world):
    text = world["profile"].read_text()
    world["profile"].write_text(text.replace("place: pack", "place: diagonal"))
    res = summit_jobs(world, "--machine", "pbs-site", "submit", "--nodes", "1", "--project", "a", "--dry-run")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert str(world["profile"]) in res.stderr and "scheduler.pbs.place = 'diagonal'" in res.stderr, res.stderr
    world["profile"].write_text(text.replace("account_flag: -A", "account_flag: -P"))
    res = summit_jobs(world, "--machine", "pbs-site", "submit", "--nodes", "1", "--project", "a", "--dry-run")
    assert res.returncode == 2 and "is not PBS's" in res.stderr, res.stderr
    profile = yaml.safe_load(text)
    profile["scheduler"]["pbs"] = "pack"
    world["profile"].write_text(yaml.safe_dump(profile))
    res = summit_jobs(world, "--machine", "pbs-site", "submit", "--nodes", "1", "--project", "a", "--dry-run")
    assert res.returncode == 2 and "'scheduler.pbs' must be a mapping" in res.stderr, res.stderr


@pytest.mark.parametrize("key,value", [("embedded", True), ("csm", True), ("extra_directives", ["-B"]),
                                       ("slurm", {"partition": False})])
def test_lsfs_and_slurms_keys_are_refused_on_its_profile(world, key, value):
    """Nothing would read them there, and some change how this tool reaches the machine (embedded: true runs
    the embedded LSF's commands)."""
    profile = yaml.safe_load(world["profile"].read_text())
    profile["scheduler"][key] = value
    world["profile"].write_text(yaml.safe_dump(profile))
    res = summit_jobs(world, "--machine", "pbs-site", "submit", "--nodes", "1", "--project", "a", "--dry-run")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"scheduler.{key} is" in res.stderr and "scheduler.kind is pbs" in res.stderr, res.stderr
