"""What a job of the embedded LSF sees: its variables and host files, as IBM LSF sets them.

Pure functions (a job record in, text out), so that tests can compare them
with real jobs' environments (tests/data/lsf/env_*.txt, each citing its
source) without running a job. The facts, from IBM's documentation and real
job dumps:

* the batch script gets LSB_JOBID (an array's id for its elements, with
  LSB_JOBINDEX the element's index and LSB_JOBINDEX_END the largest), LSB_JOBNAME (``-J``, else the command as
  typed), LSB_QUEUE, LS_SUBCWD, LSB_JOBINDEX=0, LSB_SUB_HOST,
  LSB_JOB_EXECUSER, LSB_EXEC_CLUSTER, LS_JOBPID (set by the supervisor's
  starter, see supervisor.py), LSB_JOBFILENAME (the spooled job file) with
  LSB_DJOB_HOSTFILE beside it (``<job file>.hostfile``, one line per slot),
  LSB_DJOB_NUMPROC (the job's slots), LSB_OUTPUTFILE / LSB_ERRORFILE (``-o``
  / ``-e``), LSB_HOSTS (one word per slot) and LSB_MCPU_HOSTS (``host slots
  ...``);
* CSM form (``-nnodes``, Summit): the launch node comes first with one slot
  (so LSB_DJOB_NUMPROC = cores x nodes + 1 and LSB_MCPU_HOSTS ends with a
  space, as captured on Summit), LSB_DJOB_RANKFILE names the hostfile (one
  line per slot, launch node first; Summit's pointed at ``<job file>.hostfile``)
  and CSM_ALLOCATION_ID is CSM's own number;
* generic form (``-n``): no launch node, and the script runs on the first
  host;
* ``-gpu``: CUDA_VISIBLE_DEVICES lists the GPUs of the host allocated to the
  job (gpu_list), in the batch script (its host's) and in every task blaunch
  starts (that task's host's). Numbering: a virtual node's GPUs are 0 to
  SUMMIT_JOBS_LSF_GPUS - 1, as the CUDA runtime numbers a host's devices; as
  nodes are never shared between jobs here, a job asking ``num=N`` always
  gets GPUs 0 to N-1 of each of its hosts (``num=2``: ``0,1``). The CSM
  launch node has no GPUs, so a CSM job's script gets none.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

from summit_jobs.schedulers.lsf.embedded import state

#: The cluster name LSF_EXEC_CLUSTER reports for this machine.
CLUSTER = "embedded"


def host_slots(job: Dict) -> List[Tuple[str, int]]:
    """(host, slots) in the order LSF lists them, launch node first on the CSM form."""
    hosts: List[str] = job["hosts"]
    if job.get("form", "csm") == "csm":
        return [(state.LAUNCH_NODE, 1)] + [(h, job["cores"]) for h in hosts]
    return list(zip(hosts, job["slots"]))




def gpu_list(job: Dict, host: str) -> Optional[str]:
    """CUDA_VISIBLE_DEVICES of ``host`` for the job: its allocated GPUs, comma-separated; None without -gpu."""
    gpu = job.get("gpu")
    if not gpu or host == state.LAUNCH_NODE:
        return None
    return ",".join(str(i) for i in range(int(gpu["num"])))


def slot_lines(job: Dict) -> str:
    """The hostfile (and CSM rankfile): one line per slot."""
    return "".join(f"{host}\n" for host, n in host_slots(job) for _ in range(n))


def job_file(lsf_home: Path, job: Dict) -> Path:
    """The spooled job file (LSB_JOBFILENAME); records of older versions spooled to ``script``."""
    name = job.get("job_file") or "script"
    return state.job_dir(lsf_home, job["id"]) / name


def variables(lsf_home: Path, job: Dict) -> Dict[str, str]:
    """The LSF variables of the job's batch script (and, inherited, of every task it starts)."""
    pairs = host_slots(job)
    jfile = str(job_file(lsf_home, job))
    env = {
        "LSB_JOBID": str(state.lsf_id(job)), "LSB_JOBNAME": job["name"], "LSB_QUEUE": job["queue"],
        "LS_SUBCWD": job["subcwd"], "LSB_JOBINDEX": str(job.get("index") or 0), state.JOB_RECORD: str(job["id"]), "LSB_SUB_HOST": job.get("from_host", "localhost"),
        "LSB_JOB_EXECUSER": job.get("user", ""), "LSB_EXEC_CLUSTER": CLUSTER,
        "LSB_JOBFILENAME": jfile, "LSB_DJOB_HOSTFILE": jfile + ".hostfile",
        "LSB_DJOB_NUMPROC": str(sum(n for _, n in pairs)),
        "LSB_HOSTS": " ".join(h for h, n in pairs for _ in range(n)),
        "LSB_MCPU_HOSTS": " ".join(f"{h} {n}" for h, n in pairs),
        "SUMMIT_JOBS_LSF_HOME": str(lsf_home), "SUMMIT_JOBS_LSF_CORES": str(job["cores"]),
    }
    if job.get("array_id"):
        env["LSB_JOBINDEX_END"] = str(job["array_end"])
    for var, key in (("LSB_OUTPUTFILE", "out"), ("LSB_ERRORFILE", "err")):
        if job.get(key):
            env[var] = job[key]
    if job.get("form", "csm") == "csm":
        env["LSB_MCPU_HOSTS"] += " "
        env["LSB_DJOB_RANKFILE"] = env["LSB_DJOB_HOSTFILE"]      # as captured on Summit: the hostfile
        env["CSM_ALLOCATION_ID"] = str(job.get("allocation_id") or "")
    else:
        first = pairs[0][0]
        env["SUMMIT_JOBS_VNODE"] = first
        env["SUMMIT_JOBS_NVME"] = str(state.nvme_dir(lsf_home, first))
        env["TMPDIR"] = str(state.job_tmp_root(lsf_home, state.lsf_id(job)) / first)     # that node's own /tmp
        gpus = gpu_list(job, first)
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpus
    return env


def write_host_files(env: Dict[str, str], job: Dict) -> None:
    """The hostfile (also the CSM rank file) the variables name, private to the user; the first host's
    NVMe and temporary folders where the script runs on one."""
    if "SUMMIT_JOBS_NVME" in env:
        Path(env["SUMMIT_JOBS_NVME"]).mkdir(parents=True, exist_ok=True)
        state.node_tmp_dir(Path(env["SUMMIT_JOBS_LSF_HOME"]), state.lsf_id(job), env["SUMMIT_JOBS_VNODE"])
    state.write_bytes(Path(env["LSB_DJOB_HOSTFILE"]), slot_lines(job).encode(), 0o600)
