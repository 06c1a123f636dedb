"""Embedded ``jsrun``: start ``-n`` resource sets x ``-a`` tasks as real processes.

Resource sets fill the job's virtual nodes ``-r`` at a time, in host order
(LSB_MCPU_HOSTS, launch node skipped); ranks number resource set by resource
set. Each rank gets JSM_NAMESPACE_RANK/SIZE/LOCAL_RANK, OMPI_COMM_WORLD_*,
PMIX_RANK, the ``-E`` variables, ``-h`` as working folder, and:

* SUMMIT_JOBS_VNODE: the virtual host it runs on;
* SUMMIT_JOBS_NVME: that virtual node's NVMe folder,
  ``<LSF home>/nodes/<vnode>/nvme``. Unlike Summit's burst buffer it is NOT
  erased when the job ends: it persists across jobs;
* TMPDIR: that virtual node's own temporary folder for this job
  (state.node_tmp_dir), removed when the job ends, as a real node has its
  own /tmp.

Host names are the virtual nodes' names (``vnode1``...; their loopback
addresses where namespaces are unavailable, vnode_ns), and each rank runs
where gethostname() is its node's name, so a rank finds itself and the
rendezvous host in the job's host list as it would on a cluster. A layout that does not fit the allocation is refused before anything
starts. Ranks run, fail and get signals as tasks.py describes.
"""
from __future__ import annotations

import os
import sys
from typing import Dict, List, Optional, Tuple

from summit_jobs.schedulers.lsf.embedded import state, tasks
from summit_jobs.errors import describe_os_error

VALUE_OPTS = {
    "-n": "nrs", "--nrs": "nrs", "-r": "rs_per_host", "--rs_per_host": "rs_per_host",
    "-a": "tasks_per_rs", "--tasks_per_rs": "tasks_per_rs", "-c": "cpu_per_rs", "--cpu_per_rs": "cpu_per_rs",
    "-g": "gpu_per_rs", "--gpu_per_rs": "gpu_per_rs", "-b": "bind", "--bind": "bind",
    "-d": "launch_distribution", "--launch_distribution": "launch_distribution",
    "-l": "latency_priority", "--latency_priority": "latency_priority",
    "-E": "env", "--env": "env", "-h": "chdir", "--chdir": "chdir", "--smpiargs": "smpiargs",
}


class JsrunError(Exception):
    pass


def parse(args: List[str]) -> Tuple[Dict[str, object], List[str]]:
    opts: Dict[str, object] = {"env": []}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return opts, args[i + 1:]
        if not a.startswith("-"):
            return opts, args[i:]
        name, eq, inline = a.partition("=")
        key = VALUE_OPTS.get(name if eq else a)
        value: Optional[str] = inline if eq else None
        if key is None and not a.startswith("--") and len(a) > 2 and a[:2] in VALUE_OPTS:
            key, value = VALUE_OPTS[a[:2]], a[2:]          # -n4
        if key is None:
            raise JsrunError(f"unknown option {a!r}")
        if value is None:
            if i + 1 >= len(args):
                raise JsrunError(f"option {a} needs a value")
            value = args[i + 1]
            i += 1
        if key == "env":
            opts["env"].append(value)
        else:
            opts[key] = value
        i += 1
    return opts, []


def _int(opts: Dict[str, object], key: str, default: Optional[int]) -> int:
    raw = opts.get(key)
    if raw is None:
        if default is None:
            raise JsrunError(f"-{key[0]} / --{key} is required")
        return default
    if not str(raw).isdecimal():
        raise JsrunError(f"--{key} {raw!r} is not a whole number")
    return int(raw)


def allocation() -> Tuple[List[str], int]:
    """Compute hosts of this job and cores per host (the launch node skipped by the profile's rule)."""
    from trainer import lsf_hosts
    if not os.environ.get("LSB_MCPU_HOSTS", "").split():
        raise JsrunError("not inside a job (LSB_MCPU_HOSTS is not set): run jsrun from a batch script")
    hosts = lsf_hosts.compute_hosts(os.environ)
    if not hosts:
        raise JsrunError("the allocation has no compute nodes")
    return [h for h, _ in hosts], min(c for _, c in hosts)


def layout(opts: Dict[str, object], hosts: List[str], cores: int) -> List[Tuple[str, int]]:
    """(host, local rank) for each global rank; refuses what the allocation cannot hold."""
    tasks = _int(opts, "tasks_per_rs", 1)
    cpus = _int(opts, "cpu_per_rs", 1)
    gpus = _int(opts, "gpu_per_rs", 0)
    per_host_max = cores // cpus if cpus else 0
    per_host = _int(opts, "rs_per_host", max(1, per_host_max))
    nrs = _int(opts, "nrs", per_host * len(hosts))
    if min(tasks, cpus, per_host, nrs) < 1:
        raise JsrunError("-n, -r, -a and -c must be at least 1")
    if gpus:
        raise JsrunError(f"-g {gpus}: the virtual nodes of the embedded LSF have no GPUs (use -g 0)")
    if per_host * cpus > cores:
        raise JsrunError(f"-r {per_host} resource sets x -c {cpus} cores = {per_host * cpus} cores per node, "
                         f"but a virtual node has {cores}")
    need = -(-nrs // per_host)
    if need > len(hosts):
        raise JsrunError(f"-n {nrs} resource sets at -r {per_host} per node need {need} nodes, but the job "
                         f"has {len(hosts)} ({' '.join(hosts)})")
    placement = []
    for rs in range(nrs):
        host = hosts[rs // per_host]
        for t in range(tasks):
            placement.append((host, (rs % per_host) * tasks + t))
    return placement


def _prepare(args: List[str]):
    """Everything checked before a rank starts: (command, placement, -E variables, folder, NVMe folders)."""
    opts, command = parse(args)
    if not command:
        raise JsrunError("no program to run")
    hosts, cores = allocation()
    placement = layout(opts, hosts, cores)
    extra = {}
    for item in opts["env"]:
        name, eq, value = str(item).partition("=")
        extra[name] = value if eq else os.environ.get(name, "")
    cwd = str(opts.get("chdir") or os.getcwd())
    if not os.path.isdir(cwd):
        raise JsrunError(f"-h {cwd}: no such folder")
    lsf_home = state.home()
    # Each virtual node's own NVMe folder and, inside a job, its own temporary folder (state.node_tmp_dir).
    node_env = {host: {"SUMMIT_JOBS_NVME": str(state.nvme_dir(lsf_home, host))} for host in hosts}
    job_id = os.environ.get("LSB_JOBID", "")
    if job_id.isdecimal():
        for host in hosts:
            node_env[host]["TMPDIR"] = str(state.node_tmp_dir(lsf_home, job_id, host))
    return command, placement, extra, cwd, node_env


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        command, placement, extra, cwd, node_env = _prepare(args)
    except JsrunError as exc:
        print(f"jsrun: error: {exc}", file=sys.stderr)
        return 255
    except OSError as exc:
        print(f"jsrun: error: embedded LSF state: {describe_os_error(exc)}", file=sys.stderr)
        return 255
    size = len(placement)
    local_sizes: Dict[str, int] = {}
    for host, _ in placement:
        local_sizes[host] = local_sizes.get(host, 0) + 1
    envs = []
    for rank, (host, local) in enumerate(placement):
        env = {
            "JSM_NAMESPACE_RANK": str(rank), "JSM_NAMESPACE_SIZE": str(size),
            "JSM_NAMESPACE_LOCAL_RANK": str(local), "JSM_NAMESPACE_LOCAL_SIZE": str(local_sizes[host]),
            "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(size),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(local), "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_sizes[host]),
            "PMIX_RANK": str(rank), "SUMMIT_JOBS_VNODE": host, **node_env[host],
        }
        env.update(extra)
        envs.append(env)
    return tasks.run(command, envs, cwd, "jsrun", "rank")


if __name__ == "__main__":
    sys.exit(main())
