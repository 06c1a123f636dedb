"""Slurm behind the scheduler interface (summit_jobs.schedulers.Scheduler): sbatch, squeue, sacct and scancel
through a host, their command lines and parsers from client.py; the planner's request and QOS (request.py) and
launch layout (launch.py); the words the command line shows. Refusals and unreadable answers end in one
UserError that names the command, the host and Slurm's own words.

Where a job's state comes from: squeue while the controller keeps the job (until MinJobAge, 300 s by
default, after its end), then sacct, which reads slurmdbd's records; a job neither knows is gone. A cluster
without accounting answers sacct with "accounting storage is disabled": its ended jobs are gone once squeue
forgets them, as LSF's are once bjobs does.

Why client and request are imported where they are used: ``summit-jobs --help`` reads this class's option
help and must load neither the profile machinery nor the trainer's run-directory module (client.py imports
it), and a dry run must not load the parsers (tests/project/test_cli_startup_imports.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from summit_jobs.errors import UserError
from summit_jobs import schedulers
from summit_jobs.schedulers import FINISHED, JobStatus, Limit, Owner, Request
from summit_jobs.schedulers.base import CommandScheduler
from summit_jobs.schedulers.slurm import launch

if TYPE_CHECKING:
    from summit_jobs.hosts.doctor import Check
    from summit_jobs.schedulers.slurm.client import SlurmJob

#: The help of the submit options whose meaning is Slurm's (summit_jobs.schedulers.Scheduler.option_help).
OPTION_HELP = {
    "launcher": "What starts the ranks: srun (one rank per GPU or CPU slot, its rank from Slurm's task variables) "
                "or torchrun (one per node through srun, c10d rendezvous on the first node). Default: the "
                "profile's.",
    "mem": "Memory per node, e.g. 64GB, or 0 for all of it: written as --mem. Default: the profile's "
           "scheduler.slurm.memory.",
    "qos": "Slurm's quality of service (--qos): one the profile lists, held to its run limit and largest job. Default: "
           "the profile's default QOS.",
    "directive": "A further #SBATCH line, e.g. '--exclusive', '--reservation=myresv', '--gpu-bind=closest' "
                 "(repeatable; long options only; options summit-jobs writes itself are refused).",
}


class SlurmScheduler(CommandScheduler):
    """Slurm 22.05 and later (squeue --json; a squeue without it answers through --format): submit runs
    sbatch (CommandScheduler.submit), with the command line, answer reading and partition given here."""

    name = "slurm"
    label = "Slurm"
    submit_command = "sbatch"
    script_name = "job.sbatch"
    status_command = "squeue"
    cancel_command = "scancel"
    launchers = launch.LAUNCHERS
    default_launcher = launch.DEFAULT_LAUNCHER
    option_help = OPTION_HELP
    directive_flag = "--sbatch-option"
    job_template = "slurm/job.sh.j2"
    launch_templates = ("slurm/job.sh.j2", "slurm/partials/launch.j2")
    command_group = None

    # -- planning ---------------------------------------------------------------------------------------------

    def submit_words(self, submit_mode: str) -> str:
        """sbatch is always given the script's file (it reads the #SBATCH lines from it)."""
        return "sbatch script"

    def check_profile(self, profile) -> None:
        """Refuses LSF's keys, values no #SBATCH line can hold, QOS and CPUs that do not add up (profile.py)."""
        from summit_jobs.schedulers.slurm import profile as section
        section.check_profile(profile)

    def request(self, profile, opts, nodes: int) -> Request:
        """``--nodes``, one task per GPU (or CPU slot), CPUs and GPUs per node, then partition, QOS, constraint,
        memory and the site's and user's own lines (request.py)."""
        from summit_jobs.schedulers.slurm import request
        return request.build(profile, opts, nodes)

    def limits(self, profile, opts) -> Tuple[Limit, ...]:
        """The job's QOS (--qos, else the profile's default), held to its own walltime and node caps."""
        from summit_jobs.schedulers.slurm import request
        return request.qos_limits(profile, opts.qos)

    def launch_layout(self, profile, opts, nodes: int, launcher: str) -> launch.SlurmLayout:
        """Tasks per node and CPUs per task (launch.py); --layout is jsrun's and refused."""
        return launch.layout(profile, opts, nodes, launcher)

    def job_variables(self, profile, opts) -> Dict[str, str]:
        """None: the ranks read Slurm's own variables (trainer.rankenv), and the job script exports MASTER_ADDR."""
        return {}

    def gpus_per_rank(self, plan: Mapping) -> Optional[int]:
        """The GPUs each task drove, from the plan's launch layout."""
        return launch.gpus_per_rank(plan)

    def stage_launch_line(self, profile, nodes: int, program: str) -> str:
        """An srun line of one task per node with all the job's CPUs there."""
        return launch.stage_line(profile, nodes, program)

    def seconds_per_minute(self, profile, environ: Mapping[str, str]) -> float:
        """60: Slurm's minutes are the clock's, the test cluster's too."""
        return 60.0

    def template_filters(self) -> Mapping[str, Callable[[Any], str]]:
        """``sbatch_directive`` and ``srun_option``, the checks of an #SBATCH line and an srun option
        (header.py)."""
        from summit_jobs.schedulers.slurm import header
        return header.FILTERS

    # -- job control ------------------------------------------------------------------------------------------

    def submit_argv(self, script_name: str, submit_mode: str,
                    depends_on: Optional[str]) -> Tuple[List[str], bool]:
        """``sbatch --parsable SCRIPT``; a chain's next link waits with ``--dependency=afterany:ID``.

        Both submit modes give sbatch the script's file: ``stdin`` is LSF's (``bsub < script``, so that bsub
        reads the #BSUB lines); sbatch reads #SBATCH lines from a file as well, and a job submitted from its
        file is named after it (what ``output_files`` expects of %x) and shows it as its command.
        """
        from summit_jobs.schedulers.slurm import client
        if submit_mode not in ("file", "stdin"):
            raise ValueError(f"submit mode {submit_mode!r}")
        return client.sbatch_argv(script_name, depends_on), False

    def parse_submitted(self, result) -> Tuple[str, Optional[str]]:
        """The id of sbatch's answer on stdout; the answer names no partition (``queue_of`` asks)."""
        from summit_jobs.schedulers.slurm import client
        return client.parse_sbatch(result.stdout), None

    def queue_of(self, host, job_id: str, script: str) -> str:
        """The partition the job went to (squeue knows it just after sbatch); the script's ``--partition``, or
        "" for the cluster's default, when squeue does not answer."""
        from summit_jobs.schedulers.slurm import client
        res = host.run(client.squeue_partition_argv(job_id))
        words = res.stdout.split() if res.rc == 0 else []
        return words[0] if words else client.directive_values(script).get("partition", "")

    def query(self, host, job_ids: Sequence[str]) -> Tuple[Dict[str, JobStatus], List[str]]:
        """squeue for every id, sacct for the ids squeue no longer knows; the ids neither knows are gone."""
        from summit_jobs.schedulers.slurm import client
        ids = client.check_ids(job_ids)
        jobs = self._known(host, ids)
        return {j: client.status(jobs[j]) for j in ids if j in jobs}, [j for j in ids if j not in jobs]

    def owners(self, host, job_ids: Sequence[str]) -> Dict[str, Owner]:
        """Each known job's name and working folder, from squeue or else sacct (client.owner)."""
        from summit_jobs.schedulers.slurm import client
        ids = client.check_ids(job_ids)
        jobs = self._known(host, ids)
        return {j: client.owner(jobs[j]) for j in ids if j in jobs}

    def accounted(self, host, job_ids: Sequence[str]) -> Dict[str, JobStatus]:
        """What sacct alone says of the jobs it has records of (query asks it for the jobs squeue forgot)."""
        from summit_jobs.schedulers.slurm import client
        return {j: client.status(job) for j, job in self._sacct(host, client.check_ids(job_ids)).items()}

    def cancel(self, host, job_ids: Sequence[str]) -> Dict[str, str]:
        """One ``scancel --verbose ID`` per job, in the order given: scancel cancels the ids of one call from
        parallel threads, and a chain's link cancelled before the next would release it. A job the controller
        no longer knows is ``finished`` when sacct has its record, else ``not found``."""
        from summit_jobs.schedulers.slurm import client
        outcome: Dict[str, str] = {}
        unread: List[str] = []
        for jid in client.check_ids(job_ids):
            res = host.run(client.scancel_argv(jid))
            word = client.scancel_outcome(res.text, jid)
            if word is None:
                unread.append(f"job {jid} (exit {res.rc}): {res.text or '(nothing)'}")
            else:
                outcome[jid] = word
        for jid in self._ended_in_accounting(host, [j for j, w in outcome.items() if w == "not found"]):
            outcome[jid] = "finished"
        if unread:
            raise self.unreadable(host, "scancel", "; ".join(unread))
        return outcome

    job_id_words = f"a whole number from 1 to {schedulers.MAX_DECIMAL_JOB_ID}"

    def job_id(self, value: object) -> Optional[str]:
        return schedulers.decimal_job_id(value)

    def output_files(self, script: str, job_id: str) -> List[str]:
        """The ``--output``/``--error`` files of the script's #SBATCH lines (default ``slurm-%j.out``), patterns
        expanded (client.output_files). %u and %N (the user and the batch host) are not known from the script
        and stay as written."""
        from summit_jobs.schedulers.slurm import client
        return client.output_files(script, job_id, script_name=self.script_name)

    def site_checks(self, probe, profile, project: Optional[str]) -> List["Check"]:
        """doctor's Slurm checks: sbatch, squeue, sacct, scancel, srun and scontrol on PATH, sbatch's version,
        the partitions (sinfo) and QOS (sacctmgr) of the profile, the account (--account) (doctor.py)."""
        from summit_jobs.schedulers.slurm import doctor
        return doctor.site_checks(probe, profile, project)

    # -- the commands -----------------------------------------------------------------------------------------

    def _known(self, host, ids: List[str]) -> Dict[str, "SlurmJob"]:
        """The jobs squeue knows, and those only sacct knows; sacct also gives the exit code of an ended job
        that squeue showed without one (squeue --format has none)."""
        from summit_jobs.schedulers.slurm import client
        jobs: Dict[str, "SlurmJob"] = {}
        for batch in client.batches(ids):
            jobs.update(self._squeue(host, batch))
        ask = [j for j in ids if j not in jobs or (jobs[j].exit_code is None and _ended(jobs[j]))]
        if ask:
            jobs.update(self._sacct(host, ask))
        return jobs

    def _squeue(self, host, ids: List[str]) -> Dict[str, "SlurmJob"]:
        """``squeue --json``; if it fails for another reason than an unknown id (no --json before 21.08, or no
        openapi plugin), ``squeue --format``. An unknown id alone is an answer: the controller forgot it."""
        from summit_jobs.schedulers.slurm import client
        res = host.run(client.squeue_json_argv(ids))
        if res.rc == 0 and res.stdout.strip():
            return client.parse_squeue_json(res.stdout, ids)
        if client.says_invalid_job_id(res.text):
            return {}
        plain = host.run(client.squeue_plain_argv(ids))
        if plain.rc == 0:
            return client.parse_squeue_plain(plain.stdout, ids)
        if client.says_invalid_job_id(plain.text):
            return {}
        raise self.command_failed(host, "squeue", plain,
                                  f"\n(squeue --json: exit {res.rc}: {res.text or 'no output'})")

    def _sacct(self, host, ids: List[str]) -> Dict[str, "SlurmJob"]:
        """``sacct -P -n -X``; nothing when the cluster keeps no accounting."""
        from summit_jobs.schedulers.slurm import client
        jobs: Dict[str, "SlurmJob"] = {}
        for batch in client.batches(ids):
            res = self.checked_run(host, client.sacct_argv(batch), failed=_failed_with_accounting)
            if res.rc != 0:             # accounting storage is disabled: no records to read
                return {}
            jobs.update(client.parse_sacct(res.stdout, batch))
        return jobs

    def _ended_in_accounting(self, host, ids: List[str]) -> List[str]:
        """The ids sacct shows as ended. Cancel has done its work by then: when sacct fails, the jobs stay
        "not found", which is still true of the controller."""
        if not ids:
            return []
        try:
            jobs = self._sacct(host, ids)
        except UserError:
            return []
        return [j for j, job in jobs.items() if _ended(job)]


def _failed_with_accounting(result) -> bool:
    """sacct failed, but for a cluster that keeps no accounting (its ended jobs are then simply gone)."""
    from summit_jobs.schedulers.slurm import client
    return result.rc != 0 and client.ACCOUNTING_DISABLED not in result.text.lower()


def _ended(job: "SlurmJob") -> bool:
    from summit_jobs.schedulers.slurm import client
    return client.interface_state(job.state, job.reason) in FINISHED
