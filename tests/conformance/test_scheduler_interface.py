"""The scheduler interface's planning and command-line half: what the planner, the renderer, status, report and
the command line ask the scheduler, instead of naming its commands.

Why as tests: the planner used to build jsrun's resource sets itself, and status, help texts and the machines
listing spelt out bsub and bjobs. These pin that LSF still gives exactly what it gave before (the same
resource sets, help, words and readings of old records), and that a second scheduler slots in by
implementing the interface: a made-up one here plans, renders and is checked against with no planner edit.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from helpers import run_cli
from summit_jobs import resources, schedulers
from summit_jobs.errors import UserError
from summit_jobs.planning import render
from summit_jobs.planning.plan import JobOptions, make_plan
from summit_jobs.profiles import machines
from summit_jobs.runs import lifecycle, report
from summit_jobs.schedulers.lsf.scheduler import LsfScheduler
from summit_jobs.schedulers.slurm.scheduler import SlurmScheduler


def opts(**kw) -> JobOptions:
    base = dict(nodes=1, run_dir="/gpfs/run", project="ABC123")
    base.update(kw)
    return JobOptions(**base)


# ---- LSF gives the planner what the planner used to compute itself ------------------------------------------

def test_summit_resource_sets_are_the_ones_the_planner_used_to_build(cli_env):
    summit = machines.load("summit")
    plan = make_plan(summit, opts(nodes=256))
    sets = plan.launch_layout
    assert (plan.scheduler, plan.launcher, plan.layout, sets.name) == ("lsf", "jsrun", "gpu", "gpu")
    assert sets.jsrun.flags() == ["-n", "1536", "-r", "6", "-a", "1", "-g", "1", "-c", "7", "-b", "packed:7"]
    assert sets.stage_jsrun.flags() == ["-n", "256", "-r", "1", "-a", "1", "-c", "42", "-b", "packed:42"]
    node = make_plan(summit, opts(nodes=256, layout="node")).launch_layout
    assert node.jsrun.flags() == ["-n", "256", "-r", "1", "-a", "6", "-g", "6", "-c", "42", "-b", "packed:7"]
    assert node.stage_jsrun == sets.stage_jsrun


def test_slot_form_profile_gets_its_sets_and_refuses_a_layout_its_launcher_ignores(cli_env):
    generic = machines.load("lsf-gpu")
    plan = make_plan(generic, opts(nodes=4))
    assert (plan.request_kind, plan.launcher, plan.layout) == ("slots", "torchrun", "gpu")
    assert plan.launch_layout.jsrun.flags() == ["-n", "16", "-r", "4", "-a", "1", "-g", "1", "-c", "8", "-b",
                                                "packed:8"]
    assert plan.launch_layout.stage_jsrun.flags() == ["-n", "4", "-r", "1", "-a", "1", "-c", "32", "-b", "packed:32"]
    with pytest.raises(UserError, match=r"--layout node arranges jsrun's resource sets, and this job's ranks are "
                                        r"started by torchrun: drop --layout\."):
        make_plan(generic, opts(nodes=4, layout="node"))


def test_a_template_written_for_the_old_plan_fields_still_reads_them(cli_env):
    """plan.jsrun and plan.stage_jsrun (a user's --template-dir from before the launch layout) are the
    layout's; names the layout does not have are still unknown to the plan."""
    plan = make_plan(machines.load("summit"), opts(nodes=2))
    assert plan.jsrun is plan.launch_layout.jsrun and plan.stage_jsrun is plan.launch_layout.stage_jsrun
    for missing in ("name", "no_such_field", "_private"):
        with pytest.raises(AttributeError):
            getattr(plan, missing)


def test_profile_launcher_is_checked_against_its_schedulers_list(cli_env, tmp_path, monkeypatch):
    assert machines.load("summit").launcher.kind == LsfScheduler.default_launcher == "jsrun"
    folder = tmp_path / "machines"
    folder.mkdir()
    text = (resources.envs_dir() / "lsf-gpu.yaml").read_text()
    (folder / "srunner.yaml").write_text(text.replace("kind: torchrun", "kind: srun"))
    monkeypatch.setenv("SUMMIT_JOBS_MACHINES_PATH", str(folder))
    with pytest.raises(UserError) as err:
        machines.load("srunner")
    assert str(err.value).endswith("'launcher.kind' must be one of 'jsrun' | 'blaunch' | 'mpirun' | 'torchrun', "
                                   "got 'srun'.")


# ---- what a recorded plan says, old and new -----------------------------------------------------------------

@pytest.mark.parametrize("machine, device", [("summit", "gpu"), ("local", "cpu")])
def test_gpus_per_rank_from_a_plan_written_now_and_one_written_before(cli_env, machine, device):
    plan = json.loads(json.dumps(make_plan(machines.load(machine), opts(nodes=1, run_dir="/tmp/r")).to_dict()))
    assert "jsrun" not in plan and plan["launch_layout"]["name"] == "gpu"
    gpus = 1 if device == "gpu" else 0
    old = {"nodes": 1, "ranks": 2, "jsrun": {"g": gpus}}
    for record in (None, {"scheduler": "lsf"}):
        assert schedulers.for_record(record).gpus_per_rank(plan) == gpus
        assert schedulers.for_record(record).gpus_per_rank(old) == gpus
        assert report.run_device(plan, [], record) == report.run_device(old, [], record) == device


@pytest.mark.parametrize("plan", [{}, {"jsrun": {"g": True}}, {"jsrun": "6"}, {"launch_layout": "gpu"},
                                  {"launch_layout": {"jsrun": {"g": -1}}}])
def test_a_plan_that_does_not_say_gives_no_gpu_count(plan):
    assert LsfScheduler().gpus_per_rank(plan) is None
    assert report.run_device(plan, []) is None


def test_status_rows_name_the_records_scheduler_command():
    words = LsfScheduler().status_command
    gone = lifecycle.job_row({"name": "r", "run_dir": "/r"}, "7", "here", None, 0, None, words)
    assert (gone["state"], gone["reason"], gone["source"]) == ("done", "gone from bjobs; exit-code file says 0",
                                                               "exit-code file")
    lost = lifecycle.job_row(None, "8", "here", None, None, None, words)
    assert lost["state"] == "unknown" and lost["reason"].startswith("gone from bjobs and no exit-code file")
    listed = lifecycle.job_row(None, "9", "here", schedulers.JobStatus("9", "running"), None, None, words)
    assert (listed["state"], listed["source"]) == ("running", "bjobs")


# ---- the command line's words are LSF's, from the scheduler ------------------------------------------------

def test_submit_help_says_what_each_scheduler_option_does_on_lsf(cli_env):
    res = run_cli(["submit", "--help"], cli_env)
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    for option, help_ in LsfScheduler.option_help.items():
        assert " ".join(help_.split()) in text, option
    assert "--bsub-option, --sbatch-option '-OPT VALUE'" in text
    assert "--launcher [jsrun|blaunch|mpirun|torchrun|srun]" in text


def test_machines_listing_and_group_help_use_the_schedulers_words(cli_env):
    res = run_cli(["machines"], cli_env)
    assert res.returncode == 0, res.stderr
    assert "  submit: bsub script; account flag -P" in res.stdout          # summit
    assert "  submit: bsub < script; account flag -P" in res.stdout        # lsf-gpu
    res = run_cli(["--help"], cli_env)
    assert "lsf " in res.stdout and "Put the embedded LSF's bsub, bjobs and bkill on PATH" in res.stdout


def test_stage_data_dry_run_shows_the_schedulers_one_per_node_line(cli_env, tmp_path):
    from trainer import shards
    manifest = {"format": shards.FORMAT, "name": "k", "classes": ["a"], "hash": "sha256",
                "shards": [{"name": f"train-{i:05d}.tar", "split": "train", "bytes": 10**6, "samples": 10,
                            "sha256": "0" * 64, "index_offset": 0, "index_bytes": 0} for i in range(4)]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    res = run_cli(["--machine", "summit", "stage-data", "-M", str(tmp_path / "manifest.json"), "--nodes", "2",
                   "--dry-run", "--json"], cli_env)
    assert res.returncode == 0, res.stderr
    python = machines.load("summit").environment.python
    assert json.loads(res.stdout)["hop2"] == (
        f"jsrun -n 2 -r 1 -a 1 -c 42 {python} -m trainer.stage --manifest {tmp_path / 'manifest.json'} "
        "--dest /mnt/bb/$USER/summit-jobs/data --policy partition --nodes 2")


# ---- a second scheduler slots in by implementing the interface --------------------------------------------

@dataclass(frozen=True)
class Spread:
    """A made-up scheduler's launch layout: tasks per node."""
    name: str
    tasks_per_node: int


class FakeScheduler(LsfScheduler):
    """A scheduler with launchers, a layout, variables, templates and words of its own (its job commands are
    LSF's: this checks the planning and command-line half)."""
    name = "fake"
    label = "Fake"
    status_command = "fakeq"
    launchers = ("srun", "torchrun")
    default_launcher = "srun"
    option_help = {"launcher": "srun or torchrun."}
    directive_flag = "--fake-option"
    job_template = "fake/job.sh.j2"
    launch_templates = ("fake/job.sh.j2",)
    command_group = None

    def request(self, profile, opts, nodes):
        starter = opts.launcher or profile.launcher.kind
        if starter not in self.launchers:
            raise UserError(f"--launcher {starter!r} is not known: use one of {', '.join(self.launchers)}.")
        return schedulers.Request(kind="nodes", launcher=starter, slots_per_host=profile.node.slots,
                                  slots=profile.node.slots * nodes, shape=(("--nodes", str(nodes)),), extra=())

    def launch_layout(self, profile, opts, nodes, launcher):
        return Spread(name="per-gpu", tasks_per_node=profile.node.slots)

    def job_variables(self, profile, opts):
        return {"FAKE_TASKS": str(profile.node.slots)}


@pytest.fixture
def fake(cli_env, monkeypatch):
    """Every profile run by FakeScheduler, and FakeScheduler known beside LSF."""
    monkeypatch.setitem(schedulers.IMPLEMENTATIONS, "fake", f"{__name__}:FakeScheduler")
    monkeypatch.setattr(schedulers, "for_profile", lambda profile: schedulers.by_name("fake"))
    return schedulers.by_name("fake")


def test_a_second_scheduler_plans_and_renders_without_a_planner_edit(fake, tmp_path):
    summit = machines.load("summit")
    assert summit.launcher.kind == "srun"                                   # its default, filled in at load
    plan = make_plan(summit, opts(nodes=3))
    assert (plan.scheduler, plan.launcher, plan.layout) == ("fake", "srun", "per-gpu")
    assert plan.launch_layout == Spread("per-gpu", 6) and plan.tasks_per_node == 6
    assert plan.variables["FAKE_TASKS"] == "6" and "SUMMIT_JOBS_LSF_CSM" not in plan.variables
    assert plan.shape_directives == (("--nodes", "3"),) and plan.alloc_flags == ()
    assert json.loads(json.dumps(plan.to_dict()))["launch_layout"] == {"name": "per-gpu", "tasks_per_node": 6}
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "job.sh.j2").write_text(
        "#FAKE {{ plan.shape_directives[0] | qjoin }}\n"
        "{{ plan.launcher }} --ntasks-per-node {{ plan.launch_layout.tasks_per_node }} {{ plan.rank_argv | qjoin }}\n")
    text = render.render(plan, str(tmp_path))
    assert text.startswith("#FAKE --nodes 3\nsrun --ntasks-per-node 6 python3 -m trainer ")
    with pytest.raises(UserError, match="--launcher 'jsrun' is not known: use one of srun, torchrun"):
        make_plan(summit, opts(nodes=3, launcher="jsrun"))


def test_a_second_schedulers_words_join_the_command_lines(fake):
    assert schedulers.launcher_names() == ("jsrun", "blaunch", "mpirun", "torchrun", "srun")
    assert schedulers.directive_flags() == ("--bsub-option", "--sbatch-option", "--fake-option")
    assert schedulers.option_help("launcher") == (f"LSF: {LsfScheduler.option_help['launcher']} "
                                                  f"Slurm: {SlurmScheduler.option_help['launcher']} "
                                                  "Fake: srun or torchrun.")
    assert schedulers.option_help("layout") == LsfScheduler.option_help["layout"]
    assert schedulers.command_groups() == [LsfScheduler.command_group]
    row = lifecycle.job_row(None, "5", "here", None, 1, None, fake.status_command)
    assert row["reason"] == "gone from fakeq; exit-code file says 1"
