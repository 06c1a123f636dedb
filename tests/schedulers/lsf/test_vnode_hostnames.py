"""Virtual nodes with host names: gethostname() in every task is its virtual node's name, which resolves.

Real jobs on the embedded LSF: ranks started by jsrun, tasks by blaunch (every
slot, ``-z``, one host), torchrun's workers through ``blaunch -z``, and the
batch script itself (the first host on the generic form, the launch node on
the CSM form). Each task records gethostname(), what that name resolves to and
where the job's host lists put it; the test checks they all agree, and that a
client which looks gethostname() up in LSB_DJOB_RANKFILE (Lightning's
LSFEnvironment does) finds its node. Which mode ran is printed (``-s``) and
recorded as a test property; only where namespaces are unavailable do these
tests skip, saying why.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, List

import pytest

from lsf_jobs import bjobs_state, job_processes, run, stretched, submitted_id, wait_for, wait_state
from summit_jobs.schedulers.lsf.embedded import state, vnode_ns

PY = sys.executable
#: Records what a task sees: its host name, that name's address, its node and the job's host lists.
RECORD = ("import json, os, socket, sys; h = socket.gethostname(); "
          "f = os.environ.get('LSB_DJOB_RANKFILE') or os.environ['LSB_DJOB_HOSTFILE']; "
          "open(sys.argv[1] + '.' + str(os.getpid()), 'w').write(json.dumps({"
          "'host': h, 'addr': socket.gethostbyname(h), 'vnode': os.environ.get('SUMMIT_JOBS_VNODE', ''), "
          "'lsb_hosts': os.environ['LSB_HOSTS'].split(), 'mcpu': os.environ['LSB_MCPU_HOSTS'].split()[0::2], "
          "'rankfile': open(f).read().split(), 'etc_hosts': open('/etc/hosts').read(), "
          "'rank': os.environ.get('JSM_NAMESPACE_RANK') or os.environ.get('LSF_PM_TASKID') or os.environ.get('RANK'),"
          "'master': os.environ.get('MASTER_ADDR', '')}))")


@pytest.fixture
def mode(record_property) -> str:
    """"names" where tasks get host names (these tests need it), after printing and recording the mode."""
    why = vnode_ns.unavailable()
    mode = "names" if why is None else f"addresses ({why})"
    print(f"virtual node naming mode: {mode}")
    record_property("vnode_naming_mode", mode)
    if why is not None:
        pytest.skip(f"virtual nodes keep their loopback addresses as names here: {why}")
    return mode


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "job.lsf"
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body).lstrip())
    return str(path)


def records(folder: Path, stem: str) -> List[Dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob(f"{stem}.*"))]


def finish(tmp_path: Path, env: Dict[str, str], jid: str, timeout: float = 60) -> str:
    rec = wait_state(jid, env, timeout=timeout)
    out = (tmp_path / f"out.{jid}").read_text()
    assert rec["STAT"] == "DONE", out
    wait_for(lambda: not job_processes(jid, env["SUMMIT_JOBS_LSF_HOME"]), 15, f"job {jid}'s processes to end")
    return out


def check_named(task: Dict, where: str) -> None:
    """The task's host name is its virtual node's name, resolving to that node's own loopback address."""
    index = int(vnode_ns.NAME_RE.match(task["host"]).group(1)) if vnode_ns.NAME_RE.match(task["host"]) else 0
    assert index, f"{where}: gethostname() is {task['host']!r}, not a virtual node's name"
    assert task["host"] == task["vnode"], f"{where}: {task}"
    assert task["addr"] == state.node_address(index), f"{where}: {task}"
    assert task["host"] in task["lsb_hosts"] and task["host"] in task["mcpu"] and task["host"] in task["rankfile"]


def test_jsrun_and_blaunch_tasks_are_named_as_their_virtual_nodes(tmp_path, lsf_env, mode):
    machine_hosts = Path("/etc/hosts").read_text()
    (tmp_path / "rec.py").write_text(RECORD)
    jid = submitted_id(run(["bsub", script(tmp_path, f"""
        #BSUB -n 4
        #BSUB -R "span[ptile=2]"
        #BSUB -o out.%J
        {PY} -c "{RECORD}" {tmp_path}/script
        jsrun -n 4 -r 2 -a 1 -c 1 {PY} -c "{RECORD}" {tmp_path}/jsrun
        blaunch -no-shell {PY} -c "{RECORD}" {tmp_path}/blaunch
        blaunch {PY} {tmp_path}/rec.py {tmp_path}/shell
        blaunch -z "$(sed -n 3p $LSB_DJOB_HOSTFILE)" {PY} {tmp_path}/rec.py {tmp_path}/one
        H=$(sed -n 1p $LSB_DJOB_HOSTFILE)
        blaunch -no-shell $H {PY} -c "import socket; print('resolved', socket.gethostbyname('$H'))"
        """)], lsf_env, cwd=tmp_path).stdout)
    out = finish(tmp_path, lsf_env, jid)
    (script_rec,) = records(tmp_path, "script")
    check_named(script_rec, "batch script")
    assert script_rec["host"] == "vnode1" and script_rec["mcpu"] == ["vnode1", "vnode2"]
    for stem, count in (("jsrun", 4), ("blaunch", 4), ("shell", 4), ("one", 1)):
        tasks = records(tmp_path, stem)
        assert len(tasks) == count, (stem, out)
        for task in tasks:
            check_named(task, f"{stem} task {task['rank']}")
    jsrun_hosts = sorted((int(t["rank"]), t["host"]) for t in records(tmp_path, "jsrun"))
    assert jsrun_hosts == [(0, "vnode1"), (1, "vnode1"), (2, "vnode2"), (3, "vnode2")]
    assert [t["host"] for t in records(tmp_path, "one")] == ["vnode2"]
    assert "resolved 127.1.0.1" in out
    assert Path("/etc/hosts").read_text() == machine_hosts, "the machine's own /etc/hosts must stay untouched"
    assert socket.gethostname() not in {"vnode1", "vnode2", "batch1"}


def test_csm_ranks_find_their_node_in_the_rank_file_as_lightning_does(tmp_path, lsf_env, mode):
    """Lightning's LSFEnvironment: the rank file less its first line (the launch node) lists the compute
    hosts; the node rank is the index of gethostname() among them, the main address the first of them."""
    lightning = ("import os, socket; hosts = open(os.environ['LSB_DJOB_RANKFILE']).read().split()[1:]; "
                 "nodes = list(dict.fromkeys(hosts)); "
                 "print('rank', os.environ['JSM_NAMESPACE_RANK'], 'node_rank', nodes.index(socket.gethostname()), "
                 "'main', socket.gethostbyname(hosts[0]), flush=True)")
    jid = submitted_id(run(["bsub", script(tmp_path, f"""
        #BSUB -nnodes 2
        #BSUB -o out.%J
        {PY} -c "{RECORD}" {tmp_path}/script
        jsrun -n 2 -r 1 -a 2 -c 2 {PY} -c "{RECORD}" {tmp_path}/jsrun
        jsrun -n 2 -r 1 -a 1 -c 1 {PY} -c "{lightning}"
        """)], lsf_env, cwd=tmp_path).stdout)
    out = finish(tmp_path, lsf_env, jid)
    (launch,) = records(tmp_path, "script")
    assert launch["host"] == state.LAUNCH_NODE == launch["rankfile"][0], launch
    assert launch["addr"] == vnode_ns.LAUNCH_ADDRESS
    for task in records(tmp_path, "jsrun"):
        check_named(task, f"jsrun rank {task['rank']}")
    assert "rank 0 node_rank 0 main 127.1.0.1" in out and "rank 1 node_rank 1 main 127.1.0.1" in out, out


TORCH_PROG = r'''
import json, os, socket, sys
import torch.distributed as dist
dist.init_process_group("gloo")
t = __import__("torch").tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
h = socket.gethostname()
with open(os.path.join(sys.argv[1], f"torch.{dist.get_rank()}"), "w") as fh:
    json.dump({"host": h, "addr": socket.gethostbyname(h), "vnode": os.environ.get("SUMMIT_JOBS_VNODE"),
               "master": os.environ["MASTER_ADDR"], "sum": t.item(), "rank": dist.get_rank()}, fh)
dist.destroy_process_group()
'''


def test_torchrun_workers_through_blaunch_z_are_named_and_meet_at_a_named_endpoint(tmp_path, lsf_env, mode):
    pytest.importorskip("torch")
    prog = tmp_path / "prog.py"
    prog.write_text(TORCH_PROG)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    jid = submitted_id(run(["bsub", script(tmp_path, f"""
        #BSUB -n 4
        #BSUB -R "span[ptile=2]"
        #BSUB -o out.%J
        export OMP_NUM_THREADS=1
        HOSTS=$(echo $LSB_MCPU_HOSTS | awk '{{print $1, $3}}')
        MASTER=${{HOSTS%% *}}
        echo "endpoint $MASTER:{port}"
        blaunch -no-shell -z "$HOSTS" {PY} -m torch.distributed.run --nnodes 2 --nproc-per-node 1 \\
            --rdzv-backend c10d --rdzv-endpoint "$MASTER:{port}" --rdzv-id "$LSB_JOBID" {prog} {tmp_path}
        """)], lsf_env, cwd=tmp_path, timeout=60).stdout)
    out = finish(tmp_path, lsf_env, jid, timeout=240)
    assert "endpoint vnode1:" in out, out
    workers = sorted((json.loads(p.read_text()) for p in tmp_path.glob("torch.*")), key=lambda w: w["rank"])
    assert [w["sum"] for w in workers] == [3.0, 3.0], out
    assert sorted(w["host"] for w in workers) == ["vnode1", "vnode2"], workers
    for w in workers:
        assert w["host"] == w["vnode"] and w["addr"] == state.node_address(int(w["host"][len("vnode"):])), w


def test_switched_off_the_nodes_keep_their_loopback_addresses(tmp_path, lsf_env):
    """SUMMIT_JOBS_LSF_HOSTNAMES=off: today's naming, no namespaces, and no note in the job's output."""
    env = dict(lsf_env, SUMMIT_JOBS_LSF_HOSTNAMES="off")
    jid = submitted_id(run(["bsub", script(tmp_path, f"""
        #BSUB -n 2
        #BSUB -R "span[ptile=1]"
        #BSUB -o out.%J
        echo "MCPU=$LSB_MCPU_HOSTS"
        blaunch -no-shell {PY} -c "import os, socket; os.write(1, ('task %s %s\\n' % (os.environ['SUMMIT_JOBS_VNODE'], socket.gethostname())).encode())"
        """)], env, cwd=tmp_path).stdout)
    out = finish(tmp_path, env, jid)
    assert "MCPU=127.1.0.1 1 127.1.0.2 1" in out, out
    mine = socket.gethostname()
    assert f"task 127.1.0.1 {mine}" in out and f"task 127.1.0.2 {mine}" in out, out
    assert "embedded LSF: virtual nodes are named" not in out


#: Runs a command without CAP_SYS_ADMIN (so tasks need a user namespace for their host names).
NO_SYS_ADMIN = ["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin"]
#: Runs a command where no namespace can be had: in a user namespace that allows no more of them, and
#: without CAP_SYS_ADMIN there.
NO_NAMESPACES = ["unshare", "--user", "--map-root-user", "sh", "-c",
                 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"', "sh"] + NO_SYS_ADMIN


def confined(prefix: List[str]) -> None:
    """Skips, saying why, where the tools that take namespaces away are missing."""
    if not all(shutil.which(p) for p in {prefix[0], "setpriv"}):
        pytest.skip("setpriv and unshare (util-linux) are needed to take namespaces away from a job")


def test_without_cap_sys_admin_tasks_get_their_names_in_a_user_namespace(tmp_path, lsf_env, mode):
    """The path of a user who is not root: unshare(CLONE_NEWUSER) with the own ids mapped, then the rest."""
    confined(NO_SYS_ADMIN)
    (tmp_path / "rec.py").write_text(RECORD)
    jid = submitted_id(run(NO_SYS_ADMIN + ["bsub", script(tmp_path, f"""
        #BSUB -n 4
        #BSUB -R "span[ptile=2]"
        #BSUB -o out.%J
        echo "uid_map $(cat /proc/self/uid_map)"
        jsrun -n 4 -r 2 -a 1 -c 1 {PY} {tmp_path}/rec.py {tmp_path}/jsrun
        blaunch {PY} {tmp_path}/rec.py {tmp_path}/blaunch
        """)], lsf_env, cwd=tmp_path).stdout)
    out = finish(tmp_path, lsf_env, jid)
    uid = os.geteuid()
    assert re.search(rf"^uid_map\s+{uid}\s+{uid}\s+1$", out, re.M), f"the script is not in a user namespace: {out}"
    assert "embedded LSF: virtual nodes are named" not in out, out
    for stem in ("jsrun", "blaunch"):
        tasks = records(tmp_path, stem)
        assert len(tasks) == 4, out
        for task in tasks:
            check_named(task, f"{stem} task {task['rank']} without CAP_SYS_ADMIN")


def test_where_no_namespace_can_be_had_nodes_keep_their_addresses_and_the_job_says_so_once(tmp_path, lsf_env,
                                                                                          record_property):
    confined(NO_NAMESPACES)
    probe = run(NO_NAMESPACES + [PY, "-c", "from summit_jobs.schedulers.lsf.embedded import vnode_ns; print(vnode_ns.unavailable())"],
                lsf_env)
    if probe.returncode != 0:
        pytest.skip(f"cannot build a namespace-less sandbox here: {probe.stderr.strip()}")
    print(f"virtual node naming mode in the sandbox: addresses ({probe.stdout.strip()})")
    record_property("vnode_naming_mode_sandbox", probe.stdout.strip())
    assert "cannot enter UTS and mount namespaces" in probe.stdout
    jid = submitted_id(run(NO_NAMESPACES + ["bsub", script(tmp_path, f"""
        #BSUB -n 2
        #BSUB -R "span[ptile=1]"
        #BSUB -o out.%J
        echo "MCPU=$LSB_MCPU_HOSTS"
        blaunch -no-shell {PY} -c "import os, socket; os.write(1, ('task %s %s\\n' % (os.environ['SUMMIT_JOBS_VNODE'], socket.gethostname())).encode())"
        """)], lsf_env, cwd=tmp_path).stdout)
    out = finish(tmp_path, lsf_env, jid)
    assert "MCPU=127.1.0.1 1 127.1.0.2 1" in out, out
    mine = socket.gethostname()
    assert f"task 127.1.0.1 {mine}" in out and f"task 127.1.0.2 {mine}" in out, out
    assert out.count("embedded LSF: virtual nodes are named by their loopback addresses") == 1, out


def test_a_node_held_under_its_address_is_not_given_out_again_under_its_name(tmp_path, lsf_env, mode):
    """Jobs submitted with and without host names share one home: vnode1 and 127.1.0.1 are one node."""
    release = tmp_path / "release"
    hold = script(tmp_path, f"#BSUB -nnodes 4\n#BSUB -o out.%J\nwhile [ ! -e {release} ]; do sleep 0.1; done\n")
    blocker = submitted_id(run(["bsub", hold], dict(lsf_env, SUMMIT_JOBS_LSF_HOSTNAMES="off"), cwd=tmp_path).stdout)
    wait_for(lambda: bjobs_state(blocker, lsf_env)["STAT"] == "RUN", 20, "the blocker to run")
    second = submitted_id(run(["bsub", "-nnodes", "1", "-o", str(tmp_path / "second.out"), "true"], lsf_env,
                              cwd=tmp_path).stdout)
    time.sleep(stretched(1.5))                 # a scheduling pass, had it given the node out, has run by now
    rec = bjobs_state(second, lsf_env)
    assert rec["STAT"] == "PEND" and rec["PEND_REASON"].startswith("Not enough virtual nodes free"), rec
    release.write_text("")
    assert wait_state(second, lsf_env)["STAT"] == "DONE"
    finish(tmp_path, lsf_env, blocker)


def test_hosts_file_keeps_the_machines_lines_and_replaces_its_own_block():
    """Written from inside a task (where /etc/hosts is already ours) the file is the same, not doubled."""
    first = vnode_ns.hosts_text("127.0.0.1 localhost\n::1 localhost\n", 2)
    assert first.splitlines() == ["127.0.0.1 localhost", "::1 localhost", vnode_ns.MARKER,
                                  "127.1.0.1\tvnode1", "127.1.0.2\tvnode2", f"{vnode_ns.LAUNCH_ADDRESS}\tbatch1"]
    assert vnode_ns.hosts_text(first, 2) == first


def test_nvme_kept_under_a_nodes_other_name_moves_to_the_name_jobs_see(tmp_path, lsf_env, mode):
    """Shards staged while the nodes were named by their addresses are found, not staged again, once the
    nodes have host names; and back again when the names are switched off. Nothing is copied twice."""
    home = Path(lsf_env["SUMMIT_JOBS_LSF_HOME"])
    old = home / "nodes" / "127.1.0.2" / "nvme"
    old.mkdir(parents=True)
    (old / "shard-000000.tar").write_bytes(b"staged before the names")
    body = f"""
        #BSUB -n 2
        #BSUB -R "span[ptile=1]"
        #BSUB -o out.%J
        blaunch -no-shell {PY} -c "import os; d = os.environ['SUMMIT_JOBS_NVME']; os.write(1, ('nvme %s %s %s\\n' % (os.environ['SUMMIT_JOBS_VNODE'], d, sorted(os.listdir(d)))).encode())"
        """
    out = finish(tmp_path, lsf_env, submitted_id(run(["bsub", script(tmp_path, body)], lsf_env, cwd=tmp_path).stdout))
    named = home / "nodes" / "vnode2" / "nvme"
    assert f"nvme vnode2 {named} ['shard-000000.tar']" in out, out
    assert f"nvme vnode1 {home / 'nodes' / 'vnode1' / 'nvme'} []" in out, out
    assert not old.exists() and (named / "shard-000000.tar").read_bytes() == b"staged before the names"
    env = dict(lsf_env, SUMMIT_JOBS_LSF_HOSTNAMES="off")
    out = finish(tmp_path, env, submitted_id(run(["bsub", script(tmp_path, body)], env, cwd=tmp_path).stdout))
    assert f"nvme 127.1.0.2 {old} ['shard-000000.tar']" in out, out
    assert not named.exists()
