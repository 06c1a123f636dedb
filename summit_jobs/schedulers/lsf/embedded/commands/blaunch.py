"""Embedded ``blaunch``: start a job's tasks on its hosts, as IBM's blaunch does.

``blaunch [-n] [-z "host ..." | -u hostfile | host] [-no-shell | -use-login-shell] command [args]``

* no host given: one task per slot of the job (LSB_MCPU_HOSTS order, the CSM
  launch node left out), e.g. 4 tasks for ``-n 4 -R "span[ptile=2]"``;
* ``-z "h1 h2"``, ``-u FILE`` (one host per line) or one host name: one task
  per host named, each of which must belong to the job.

Each task gets the batch script's environment plus LSF_PM_TASKID, counted
from 1 in launch order, CUDA_VISIBLE_DEVICES of its host when the job asked
``-gpu`` (jobenv.gpu_list), and, as on the embedded LSF's other launchers,
SUMMIT_JOBS_VNODE (its virtual host, which is also its gethostname(),
vnode_ns), SUMMIT_JOBS_NVME (that node's NVMe folder) and TMPDIR (that node's own temporary folder for the job,
state.node_tmp_dir: a real node has its own /tmp). Like IBM's blaunch it
sets no MPI or torchrun rank variables: a program derives its rank from
LSF_PM_TASKID (trainer.dist.engines does). Tasks run, fail and get signals as
tasks.py describes.

The shell: IBM documents blaunch as a drop-in replacement for ``rsh host
command`` and ``ssh host command``, with ``-no-shell`` to start the command
"without any intermediate shell" and ``-use-login-shell`` for the user's
login shell. So by default, like rsh and ssh, the command words are joined
with spaces and run by ``bash -c`` (``shell_command`` says why bash): a program that launches through
blaunch (Open MPI's ``plm_rsh_agent blaunch`` passes ``orted -mca ess
"env" -mca orte_hnp_uri "...;tcp://..."``, quoted for that remote shell)
needs exactly that. The command line is the caller's own shell code, as it
is for ssh; a caller whose arguments must arrive untouched gives
``-no-shell``.
"""
from __future__ import annotations

import os
import sys
from typing import Dict, List, Optional, Tuple

from summit_jobs.schedulers.lsf.embedded import jobenv, state, tasks
from summit_jobs.errors import describe_os_error
from trainer import lsf_hosts

IGNORED_FLAGS = {"-n"}
SHELL_FLAGS = {"-no-shell": "none", "-use-login-shell": "login"}


class BlaunchError(Exception):
    pass


def job_hosts(env: Dict[str, str]) -> List[Tuple[str, int]]:
    """(host, slots) of the job this blaunch runs in, without the embedded CSM launch node."""
    if not env.get("LSB_JOBID") or not env.get("LSB_MCPU_HOSTS", "").split():
        raise BlaunchError("not inside a job (LSB_JOBID and LSB_MCPU_HOSTS are not set): run blaunch from a "
                           "batch script")
    pairs = [(h, n) for h, n in lsf_hosts.allocation(env) if h != state.LAUNCH_NODE]
    if not pairs:
        raise BlaunchError("the job has no execution hosts")
    return pairs


def parse(args: List[str]) -> Tuple[Optional[List[str]], List[str], str]:
    """(the hosts asked for, or None for every slot; the command; the shell: "sh", "login" or "none")."""
    hosts: Optional[List[str]] = None
    shell = "sh"
    i = 0
    while i < len(args) and args[i].startswith("-"):
        opt = args[i]
        if opt in IGNORED_FLAGS or opt in SHELL_FLAGS:
            shell = SHELL_FLAGS.get(opt, shell)
            i += 1
            continue
        if opt in ("-z", "-u") and i + 1 < len(args):
            hosts = args[i + 1].split() if opt == "-z" else _host_file(args[i + 1])
            i += 2
            continue
        if opt == "--":
            i += 1
            break
        raise BlaunchError(f"unknown option {opt!r} (blaunch takes -n, -z \"host ...\", -u hostfile, "
                           "-no-shell, -use-login-shell)")
    return hosts, args[i:], shell


#: The intermediate shell: bash where there is one, as sshd's remote shell usually is.
SHELLS = ("/bin/bash", "/usr/bin/bash", "/bin/sh")


def shell_command(command: List[str], shell: str) -> List[str]:
    """What each task runs: the words joined for ``bash -c`` (rsh and ssh's way), the user's login
    shell with ``-use-login-shell``, the words as they are with ``-no-shell``.

    Why bash before /bin/sh: bash runs a lone command by exec, as the remote bash of ssh does, so the
    task is the program itself. Debian's dash keeps itself as the program's parent instead, and LSF
    signals every process of a job: the warning's SIGUSR2 then ended that shell (status 140), and
    blaunch took the task (Open MPI's orted) for failed and ended the job's other tasks.
    """
    if shell == "none":
        return command
    line = " ".join(command)
    if shell == "login":
        return [os.environ.get("SHELL") or "/bin/sh", "-l", "-c", line]
    return [next((s for s in SHELLS if os.access(s, os.X_OK)), "/bin/sh"), "-c", line]


def task_envs(on: List[str]) -> List[Dict[str, str]]:
    """Each task's own variables: LSF_PM_TASKID from 1, its host, that host's NVMe and GPUs."""
    lsf_home = state.home()
    job_id = os.environ.get("LSB_JOBID", "")
    job = state.load_job(lsf_home, int(job_id)) if job_id.isdecimal() else None
    envs = []
    for i, host in enumerate(on):
        env = {"LSF_PM_TASKID": str(i + 1), "SUMMIT_JOBS_VNODE": host,
               "SUMMIT_JOBS_NVME": str(state.nvme_dir(lsf_home, host))}
        if job_id.isdecimal():
            env["TMPDIR"] = str(state.node_tmp_dir(lsf_home, job_id, host))
        gpus = jobenv.gpu_list(job, host) if job else None
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpus
        envs.append(env)
    return envs


def _host_file(path: str) -> List[str]:
    try:
        with open(path, encoding="utf-8") as fh:
            return [w for line in fh for w in line.split()[:1]]
    except (OSError, UnicodeDecodeError) as exc:
        raise BlaunchError(f"-u {path}: cannot read the host file: {exc}") from None


def placement(hosts: Optional[List[str]], command: List[str], allocated: List[Tuple[str, int]]
              ) -> Tuple[List[str], List[str]]:
    """(one host per task, the command): every slot, or the hosts named, each checked."""
    names = [h for h, _ in allocated]
    known = set(names) | set(state.node_names(state.virtual_nodes())) | {state.LAUNCH_NODE}
    if hosts is None and len(command) > 1 and command[0] in known:
        hosts, command = [command[0]], command[1:]          # blaunch host command ...
    if not command:
        raise BlaunchError("no command to run")
    if hosts is None:
        return [h for h, n in allocated for _ in range(n)], command
    if not hosts:
        raise BlaunchError("no host given to -z / -u")
    for host in hosts:
        if host not in names:
            raise BlaunchError(f"host {host!r} is not allocated to job {os.environ.get('LSB_JOBID', '')} "
                               f"(its hosts: {' '.join(names)})")
    return hosts, command


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        asked, command, shell = parse(args)
        on, command = placement(asked, command, job_hosts(dict(os.environ)))
        envs = task_envs(on)
    except BlaunchError as exc:
        print(f"blaunch: error: {exc}", file=sys.stderr)
        return 255
    except (OSError, state.LsfError) as exc:
        text = describe_os_error(exc) if isinstance(exc, OSError) else str(exc)
        print(f"blaunch: error: embedded LSF state: {text}", file=sys.stderr)
        return 255
    return tasks.run(shell_command(command, shell), envs, os.getcwd(), "blaunch", "task")


if __name__ == "__main__":
    sys.exit(main())
