"""torchrun's env:// variables for a rank any launcher started. Torch-free.

``python -m trainer.rankenv PROGRAM [ARGS ...]`` sets RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK,
ROLE_WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the variables the launcher
gave the rank, then runs PROGRAM in its place (exec: same pid, same signals).

Why: ``torch.distributed.init_process_group("env://")`` reads torchrun's
variables and nothing else, but jsrun gives JSM_NAMESPACE_*, Open MPI gives
OMPI_COMM_WORLD_*, IBM's blaunch gives only LSF_PM_TASKID (from 1, one task
per slot, in the allocation's order), and Slurm's srun gives SLURM_PROCID,
SLURM_LOCALID and SLURM_STEP_NUM_TASKS (trainer.slurm_tasks). The job script
puts this module in front of a user's own program under every launcher but
torchrun, so an unmodified DDP script starts the same way everywhere.

Where ranks come from, first match wins (the trainer's engines read them the
same way, through ``launcher_ranks``): JSM_NAMESPACE_*, OMPI_COMM_WORLD_*,
torchrun's own RANK/WORLD_SIZE (torchrun's workers under srun have srun's
variables too, of the agent's task), srun's, LSF_PM_TASKID. MASTER_ADDR and
MASTER_PORT are kept when the job script exported them (it does: the first
compute host and a free port); else the first compute host (of LSF's list, or
of SLURM_JOB_NODELIST) and the port derived from the job id (LSB_JOBID or
SLURM_JOB_ID). A group (node) rank is the index of the rank's host among the
compute hosts: ranks are placed a node's worth at a time by every launch line
the job scripts use.

The one room of the compute side that reads a launcher's variables (with
LSF's host lists, lsf_hosts, and Slurm's tasks, slurm_tasks): the engines,
the rendezvous, staging's node index and the run directory's job id ask it
(tests/project/test_layering.py).
"""
from __future__ import annotations

import os
import sys
from typing import Dict, List, Mapping, Optional, Tuple

from trainer import lsf_hosts, slurm_tasks

#: The ports a job's rendezvous uses, derived from its id (derived_port; trainer.rendezvous tries pairs in it).
PORT_BASE, PORT_SPAN = 20000, 20000

#: torchrun's own port, when there is neither a job id nor MASTER_PORT.
DEFAULT_PORT = 29500
#: (prefix, rank, size, local rank, local size, launcher) of the launchers' rank variables, in lookup order.
SOURCES = (("JSM_NAMESPACE_", "RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "jsrun"),
           ("OMPI_COMM_WORLD_", "RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "mpi"),
           ("", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun"))


class RankError(ValueError):
    """The launcher's variables do not describe a rank (said in one line)."""


def _int(env: Mapping[str, str], name: str) -> int:
    text = str(env.get(name, "")).strip()
    if not text.isdecimal():
        raise RankError(f"{name}={text!r} is not a whole number")
    return int(text)


def _blaunch_task(env: Mapping[str, str]) -> Tuple[int, int, int, int, str]:
    """(rank, size, local rank, local size, "blaunch") of a task blaunch started, one per slot.

    blaunch sets no rank variables, only LSF_PM_TASKID (from 1, in slot order). The slots are the
    compute hosts' (``trainer.lsf_hosts``); task N runs on the host of slot N.
    """
    slots = lsf_hosts.compute_hosts(env)
    size = sum(n for _, n in slots) or 1
    rank = _int(env, "LSF_PM_TASKID") - 1
    start = 0
    for _host, n in slots:
        if rank < start + n:
            return rank, size, rank - start, n, "blaunch"
        start += n
    return rank, size, 0, 1, "blaunch"


def launcher_ranks(env: Mapping[str, str]) -> Tuple[int, int, int, int, str]:
    """(rank, world size, local rank, local world size, launcher) from the launcher's variables;
    (0, 1, 0, 1, "single") when there are none."""
    for prefix, rank, size, local, local_size, source in SOURCES:
        if prefix + rank in env and prefix + size in env:
            r, s = _int(env, prefix + rank), _int(env, prefix + size)
            lr = _int(env, prefix + local) if prefix + local in env else r
            if prefix + local_size in env:
                ls = _int(env, prefix + local_size)
            else:
                hosts = len(lsf_hosts.compute_hosts(env)) or 1
                ls = s // hosts if s % hosts == 0 else s
            break
    else:
        srun = slurm_tasks.step_task(env)
        if srun is not None:
            (r, s, lr, ls), source = srun, "srun"
        else:
            r, s, lr, ls, source = _blaunch_task(env) if env.get("LSF_PM_TASKID", "").isdecimal() \
                else (0, 1, 0, 1, "single")
    if not 0 <= r < s:
        raise RankError(f"rank {r} is outside a world of size {s} (from {source} variables)")
    return r, s, lr, max(1, ls), source


def job_id(env: Mapping[str, str]) -> str:
    """The scheduler's id of the job this process runs in: LSB_JOBID (LSF), else SLURM_JOB_ID; "" outside one."""
    job = str(env.get("LSB_JOBID", "")).strip()
    return job if job.isdecimal() else slurm_tasks.job_id(env)


def node_index(env: Mapping[str, str]) -> Optional[str]:
    """The text of this task's node index as its launcher gives it, or None where it gives none (a task that
    runs once per node: staging's hop 2). jsrun sets JSM_NAMESPACE_RANK (Spectrum MPI also
    OMPI_COMM_WORLD_RANK, PMIx PMIX_RANK); ``blaunch -z "h1 h2 ..."`` sets LSF_PM_TASKID, counted from 1, one
    task per host named; a task of an srun step (SLURM_STEP_ID set) has its node's index in SLURM_NODEID."""
    for var in ("JSM_NAMESPACE_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if str(env.get(var, "")).strip():
            return str(env[var]).strip()
    task = str(env.get("LSF_PM_TASKID", "")).strip()
    if task.isdigit() and int(task) >= 1:
        return str(int(task) - 1)
    if str(env.get("SLURM_STEP_ID", "")).strip().isdigit():
        return str(env.get("SLURM_NODEID", "")).strip() or None
    return None


def open_mpi(env: Mapping[str, str]) -> bool:
    """Whether Open MPI (Spectrum MPI under jsrun) started this rank: it sets OMPI_COMM_WORLD_*."""
    return any(k.startswith("OMPI_COMM_WORLD_") for k in env)


def agent_store(env: Mapping[str, str]) -> Optional[Tuple[str, int]]:
    """(MASTER_ADDR, MASTER_PORT) where torchrun's agent hosts the job's store for its workers
    (TORCHELASTIC_USE_AGENT_STORE=True), else None."""
    if str(env.get("TORCHELASTIC_USE_AGENT_STORE", "")).lower() == "true" and env.get("MASTER_ADDR") \
            and str(env.get("MASTER_PORT", "")).isdigit():
        return env["MASTER_ADDR"], int(env["MASTER_PORT"])
    return None


def torchrun_run_id(env: Mapping[str, str]) -> str:
    """torchrun's id of this run (TORCHELASTIC_RUN_ID), "run" outside torchrun: what names the keys of the
    job's store."""
    return env.get("TORCHELASTIC_RUN_ID", "run")


def rendezvous_addr(env: Mapping[str, str]) -> str:
    """Where the ranks meet: the job script's SUMMIT_JOBS_RENDEZVOUS_ADDR, else MASTER_ADDR, else the first
    compute host, else this machine."""
    if env.get("SUMMIT_JOBS_RENDEZVOUS_ADDR"):
        return env["SUMMIT_JOBS_RENDEZVOUS_ADDR"]
    if env.get("MASTER_ADDR"):
        return env["MASTER_ADDR"]
    return first_host(env) or "127.0.0.1"


def first_host(env: Mapping[str, str]) -> Optional[str]:
    """The first compute host: of LSF's host list, else of Slurm's node list; None outside a job."""
    hosts = lsf_hosts.compute_hosts(env)
    return hosts[0][0] if hosts else slurm_tasks.first_host(env.get("SLURM_JOB_NODELIST", ""))


def derived_port(env: Mapping[str, str]) -> int:
    """The job's port: from the job id (LSB_JOBID or SLURM_JOB_ID), else SUMMIT_JOBS_RENDEZVOUS_PORT /
    MASTER_PORT, else 29500."""
    job = job_id(env)
    if job:
        return PORT_BASE + (int(job) * 2) % PORT_SPAN
    for var in ("SUMMIT_JOBS_RENDEZVOUS_PORT", "MASTER_PORT"):
        if str(env.get(var, "")).isdigit():
            return int(env[var])
    return DEFAULT_PORT


def torchrun_variables(env: Mapping[str, str]) -> Dict[str, str]:
    """The env:// variables torchrun would give this rank."""
    rank, size, local_rank, local_size, _source = launcher_ranks(env)
    group_size = max(1, -(-size // local_size))
    group = min(rank // local_size, group_size - 1)
    addr = env.get("MASTER_ADDR") or first_host(env) or "127.0.0.1"
    port = env.get("MASTER_PORT") if str(env.get("MASTER_PORT", "")).isdigit() else str(derived_port(env))
    return {"RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(local_size), "GROUP_RANK": str(group), "GROUP_WORLD_SIZE": str(group_size),
            "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(size), "MASTER_ADDR": addr, "MASTER_PORT": port}


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m trainer.rankenv PROGRAM [ARGS ...]\n"
              "Sets torchrun's env:// variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, "
              "MASTER_ADDR, MASTER_PORT) from jsrun's, Open MPI's, blaunch's or srun's, then runs PROGRAM.",
              file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    try:
        os.environ.update(torchrun_variables(os.environ))
    except RankError as exc:
        print(f"trainer.rankenv: {exc}", file=sys.stderr)
        return 2
    try:
        os.execvp(args[0], args)
    except OSError as exc:
        print(f"trainer.rankenv: cannot run {args[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
