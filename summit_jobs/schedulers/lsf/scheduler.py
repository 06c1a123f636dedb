"""IBM LSF behind the scheduler interface (summit_jobs.schedulers.Scheduler): bsub, bjobs and bkill through a
host, their command lines and parsers from client.py. Refusals and unreadable answers end in one UserError
that names the command, the host and LSF's own words."""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from summit_jobs.errors import UserError
from summit_jobs.schedulers import JobStatus, Submitted, SubmitRefused
from summit_jobs.schedulers.lsf import client


class LsfScheduler:
    """IBM LSF 10.1 (Summit's CSM form and the slot form of every other LSF cluster), and the embedded LSF."""

    name = "lsf"

    def submit(self, host, script_name: str, *, cwd: str, script: str, submit_mode: str,
               depends_on: Optional[str] = None) -> Submitted:
        """``bsub script`` or ``bsub < script``; a chain's next link waits with ``-w "ended(ID)"``."""
        argv, via_stdin = client.bsub_argv(script_name, submit_mode, depends_on=depends_on)
        result = host.run(argv, cwd=cwd, stdin=script if via_stdin else None)
        if result.rc != 0:
            raise SubmitRefused(f"bsub on {host.label} refused the job (exit {result.rc}):\n{result.text}")
        job_id, queue = client.parse_bsub_output(result.text)
        return Submitted(job_id, queue)

    def query(self, host, job_ids: Sequence[str]) -> Tuple[Dict[str, JobStatus], List[str]]:
        """``bjobs -a -o FIELDS -json`` in batches (LSF 10.1.0.2 and later)."""
        found: Dict[str, JobStatus] = {}
        missing: List[str] = []
        for batch in client.batches(list(job_ids)):
            res = host.run(client.bjobs_argv(batch))
            if not res.stdout.strip():
                raise UserError(f"bjobs on {host.label} failed (exit {res.rc}):\n{res.text}")
            f, m = client.parse_bjobs_json(res.stdout, batch)
            found.update(f)
            missing += m
        return found, missing

    def owners(self, host, job_ids: Sequence[str]) -> Dict[str, Mapping[str, str]]:
        found: Dict[str, Mapping[str, str]] = {}
        for batch in client.batches(list(job_ids)):
            res = host.run(client.bjobs_argv(batch, client.OWNER_FIELDS))
            if not res.stdout.strip():
                raise UserError(f"bjobs on {host.label} failed (exit {res.rc}):\n{res.text}")
            found.update(client.parse_bjobs_owner(res.stdout, batch))
        return found

    def cancel(self, host, job_ids: Sequence[str]) -> Dict[str, str]:
        """One ``bkill`` of every id, in the order given."""
        order = [str(j) for j in job_ids]
        res = host.run(client.bkill_argv(order))
        outcome = client.bkill_outcome(res.text)
        unknown = [j for j in order if j not in outcome]
        if unknown:
            raise UserError(f"bkill on {host.label} gave an answer this tool cannot read for job(s) "
                            f"{', '.join(unknown)} (exit {res.rc}):\n{res.text}")
        return outcome

    def output_files(self, script: str, job_id: str) -> List[str]:
        """The ``-o``/``-e`` files of the script's ``#BSUB`` lines, ``%J`` replaced."""
        return client.output_files(script, job_id)
