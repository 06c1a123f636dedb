"""IBM LSF behind the scheduler interface (summit_jobs.schedulers.Scheduler): bsub, bjobs and bkill through a
host, their command lines and parsers from client.py; the planner's request (request.py) and launch layout
(launch.py); the words the command line shows. Refusals and unreadable answers end in one UserError that
names the command, the host and LSF's own words.

Why client and request are imported where they are used: ``summit-jobs --help`` reads this class's option help
and must not load the profile machinery (request.py imports it), and a dry run plans with it and must not load
the parsers (tests/project/test_cli_startup_imports.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from summit_jobs.errors import UserError
from summit_jobs import schedulers
from summit_jobs.schedulers import JobStatus, Limit, Owner, Request
from summit_jobs.schedulers.base import CommandScheduler
from summit_jobs.schedulers.lsf import launch

if TYPE_CHECKING:
    from summit_jobs.hosts.doctor import Check

#: The help of the submit options whose meaning is LSF's (summit_jobs.schedulers.Scheduler.option_help).
OPTION_HELP = {
    "layout": "jsrun's resource sets: one per GPU (gpu) or one per node with all GPUs (node). Default: the "
              "profile's.",
    "request": "How nodes are asked for: nnodes (CSM: Summit, Lassen) or slots (-n with span[ptile], every other "
               "LSF cluster). Default: the profile's.",
    "launcher": "What starts the ranks: jsrun (CSM), blaunch (one rank per slot), mpirun (Open MPI through blaunch) "
                "or torchrun (one per node through blaunch -z). Default: the profile's.",
    "mem": "Memory per node, e.g. 64GB: written as -M and/or rusage[mem=] in the site's unit and counting (per "
           "slot, host or job: the profile's scheduler.memory).",
    "app": "LSF application profile (-app). Default: the profile's.",
    "container": "Run the job in this container (-a \"docker(IMAGE)\"). Default: the profile's.",
    "directive": "A further #BSUB line, e.g. '-B', '-N', '-U resv', '-R select[mem>64000]', '-sla class' "
                 "(repeatable; options summit-jobs writes itself are refused).",
}


class LsfScheduler(CommandScheduler):
    """IBM LSF 10.1 (Summit's CSM form and the slot form of every other LSF cluster), and the embedded LSF:
    submit runs bsub (CommandScheduler.submit), with the command line and answer reading given here."""

    name = "lsf"
    label = "LSF"
    submit_command = "bsub"
    script_name = "job.lsf"
    status_command = "bjobs"
    cancel_command = "bkill"
    launchers = launch.LAUNCHERS
    default_launcher = launch.DEFAULT_LAUNCHER
    option_help = OPTION_HELP
    directive_flag = "--bsub-option"
    job_template = "lsf/job.sh.j2"
    launch_templates = ("lsf/job.sh.j2", "lsf/partials/launch.j2")
    command_group = ("lsf", "summit_jobs.schedulers.lsf.cli:lsf_group",
                     "Put the embedded LSF's bsub, bjobs and bkill on PATH in one shell, to test your own LSF code.")

    def submit_words(self, submit_mode: str) -> str:
        """``bsub script`` (Summit's ``file`` mode) or ``bsub < script`` (``stdin``, most LSF sites)."""
        return "bsub script" if submit_mode == "file" else "bsub < script"

    def check_profile(self, profile) -> None:
        """Refuses Slurm's account flag and section, #BSUB lines that contradict the plan and values no #BSUB line
        can hold (profile.py)."""
        from summit_jobs.schedulers.lsf import profile as section
        section.check_profile(profile)

    def request(self, profile, opts, nodes: int) -> Request:
        """``-nnodes N`` with jsrun (CSM), or IBM's slot form with blaunch, mpirun or torchrun (request.py)."""
        from summit_jobs.schedulers.lsf import request
        kind, starter = request.request_and_launcher(profile, opts.request, opts.launcher)
        return request.build(profile, kind, starter, nodes, profile.node.slots, opts.mem, opts.app,
                             opts.container, opts.bsub_options)

    def limits(self, profile, opts) -> Tuple[Limit, ...]:
        """None beside the queue's: LSF's queues hold every limit; a QOS is Slurm's."""
        qos = getattr(opts, "qos", None)
        if qos is not None:
            raise UserError(f"--qos {qos} names a Slurm quality of service, and {profile.name} is an LSF "
                            "machine: drop --qos (LSF's queues hold the limits: --queue).")
        return ()

    def launch_layout(self, profile, opts, nodes: int, launcher: str) -> launch.LsfLayout:
        """jsrun's resource sets (launch.py); --layout only where jsrun starts the ranks."""
        return launch.layout(profile, opts, nodes, launcher)

    def job_variables(self, profile, opts) -> Dict[str, str]:
        """Whether the allocation lists a CSM launch node first (only a CSM machine's -nnodes one does), and the
        host-name prefixes that are never compute nodes: trainer/lsf_hosts.py reads both."""
        csm = profile.scheduler.csm and (opts.request or profile.scheduler.request) == "nnodes"
        return {"SUMMIT_JOBS_LSF_CSM": "1" if csm else "0",
                "SUMMIT_JOBS_LAUNCH_NODE_PREFIXES": ",".join(profile.scheduler.launch_node_prefixes)}

    def gpus_per_rank(self, plan: Mapping) -> Optional[int]:
        """The GPUs of each jsrun resource set the plan recorded (launch.py reads old plans too)."""
        return launch.gpus_per_rank(plan)

    def stage_launch_line(self, profile, nodes: int, program: str) -> str:
        """A jsrun line of one rank per node with all its cores."""
        return launch.stage_line(profile, nodes, program)

    def seconds_per_minute(self, profile, environ: Mapping[str, str]) -> float:
        """60; on the embedded LSF, SUMMIT_JOBS_LSF_MINUTE's seconds (the minute its bsub scales a job's
        walltime and warning by, read from the same environment), when it is a positive number."""
        if not profile.scheduler.embedded:
            return 60.0
        try:
            value = float(environ.get("SUMMIT_JOBS_LSF_MINUTE") or 60.0)
        except ValueError:
            return 60.0
        return value if 0 < value < float("inf") else 60.0

    def template_filters(self) -> Mapping[str, Callable[[Any], str]]:
        """``bsub_directive`` and ``bsub_words``, the checks of a #BSUB line (header.py)."""
        from summit_jobs.schedulers.lsf import header
        return header.FILTERS

    # -- job control ------------------------------------------------------------------------------------------

    def submit_argv(self, script_name: str, submit_mode: str,
                    depends_on: Optional[str]) -> Tuple[List[str], bool]:
        """``bsub script`` or ``bsub < script``; a chain's next link waits with ``-w "ended(ID)"``."""
        from summit_jobs.schedulers.lsf import client
        return client.bsub_argv(script_name, submit_mode, depends_on=depends_on)

    def parse_submitted(self, result) -> Tuple[str, Optional[str]]:
        """The id and queue of bsub's answer (``Job <ID> is submitted to queue <Q>.``), read from stdout and
        stderr together."""
        from summit_jobs.schedulers.lsf import client
        return client.parse_bsub_output(result.text)

    def query(self, host, job_ids: Sequence[str]) -> Tuple[Dict[str, JobStatus], List[str]]:
        """``bjobs -a -o FIELDS -json`` in batches (LSF 10.1.0.2 and later)."""
        from summit_jobs.schedulers.lsf import client
        found: Dict[str, JobStatus] = {}
        missing: List[str] = []
        for batch in client.batches(list(job_ids)):
            res = self.checked_run(host, client.bjobs_argv(batch), failed=_no_answer)
            f, m = client.parse_bjobs_json(res.stdout, batch)
            found.update(f)
            missing += m
        return found, missing

    def owners(self, host, job_ids: Sequence[str]) -> Dict[str, Owner]:
        """``bjobs -o "jobid stat job_name sub_cwd submit_time" -json`` in batches."""
        from summit_jobs.schedulers.lsf import client
        found: Dict[str, Owner] = {}
        for batch in client.batches(list(job_ids)):
            res = self.checked_run(host, client.bjobs_argv(batch, client.OWNER_FIELDS), failed=_no_answer)
            for jid, rec in client.parse_bjobs_owner(res.stdout, batch).items():
                found[jid] = Owner(job_id=jid, name=rec.get("JOB_NAME") or "", work_dir=(rec.get("SUB_CWD") or "").strip(),
                                   submit_time=rec.get("SUBMIT_TIME") or "", error=rec.get("ERROR") or "")
        return found

    def cancel(self, host, job_ids: Sequence[str]) -> Dict[str, str]:
        """One ``bkill`` of every id, in the order given."""
        from summit_jobs.schedulers.lsf import client
        order = [str(j) for j in job_ids]
        res = host.run(client.bkill_argv(order))
        outcome = client.bkill_outcome(res.text)
        unknown = [j for j in order if j not in outcome]
        if unknown:
            raise self.unreadable(host, "bkill", f"job(s) {', '.join(unknown)} (exit {res.rc}):\n{res.text}")
        return outcome

    job_id_words = f"a whole number from 1 to {schedulers.MAX_DECIMAL_JOB_ID}"

    def job_id(self, value: object) -> Optional[str]:
        return schedulers.decimal_job_id(value)

    def output_files(self, script: str, job_id: str) -> List[str]:
        """The ``-o``/``-e`` files of the script's ``#BSUB`` lines, ``%J`` replaced."""
        from summit_jobs.schedulers.lsf import client
        return client.output_files(script, job_id)

    def site_checks(self, probe, profile, project: Optional[str]) -> List["Check"]:
        """doctor's LSF checks: bsub, bjobs, bkill and the launcher's command, lsid's version, bqueues' queues,
        the account (-P or -G) (doctor.py)."""
        from summit_jobs.schedulers.lsf import doctor
        return doctor.site_checks(probe, profile, project)


def _no_answer(result) -> bool:
    """bjobs failed when it printed nothing: its exit status is no test, as an answer that names a job it no
    longer knows may come with a non-zero one."""
    return not result.stdout.strip()
