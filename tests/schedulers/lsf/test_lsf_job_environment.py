"""What a job of the embedded LSF sees, compared with real LSF jobs.

The real environments are fixtures under tests/data/lsf/env_*.txt, each with a
``.source`` naming where it was captured: an LSF 7.0 job on a generic cluster
(Open MPI users list, 2009), a jsrun rank on Summit (LSF 10.1.0.9, octotiger
issue 334) and Summit's LSB_DJOB_RANKFILE (Lightning issue 10216). The shape
rules below are checked on the real dump first, so a rule that reality breaks
fails here rather than blessing the embedded LSF. No public blaunch task
environment was found; blaunch is checked against IBM's documented contract
(LSF_PM_TASKID from 1, one task per slot, the script's environment).
"""
from __future__ import annotations

import json
import os
import re
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, List

import pytest

from lsf_jobs import run, submitted_id, wait_state
from trainer_utils import tiny_args
from summit_jobs.schedulers.lsf.embedded.state import node_names

#: The virtual nodes' host names on this machine: vnode1... where tasks get host names, else 127.1.0.1...
NODE1, NODE2, NODE3, NODE4 = node_names(4)

DATA = Path(__file__).resolve().parents[2] / "data" / "lsf"
PY = sys.executable
#: Dumps the process environment as JSON into the file named by its first argument (+ task id).
DUMP = ("import json, os, sys; "
        "open(sys.argv[1] + os.environ.get('LSF_PM_TASKID', os.environ.get('JSM_NAMESPACE_RANK', '')), 'w')"
        ".write(json.dumps(dict(os.environ, PID=str(os.getpid()), PPID=str(os.getppid()))))")
#: The variables that describe a job to its script, present in the real generic dump.
JOB_VARS = ("LSB_JOBID", "LSB_JOBNAME", "LSB_QUEUE", "LS_SUBCWD", "LSB_JOBINDEX", "LSB_SUB_HOST",
            "LSB_JOB_EXECUSER", "LSB_EXEC_CLUSTER", "LS_JOBPID", "LSB_JOBFILENAME", "LSB_DJOB_HOSTFILE",
            "LSB_HOSTS", "LSB_MCPU_HOSTS")


def fixture(name: str) -> Dict[str, str]:
    assert (DATA / f"{name}.source").is_file(), f"{name} must cite its source"
    out = {}
    for line in (DATA / name).read_text().splitlines():
        key, _, value = line.partition("=")
        out[key] = value
    return out


def mcpu(env: Dict[str, str]) -> List[tuple]:
    words = env["LSB_MCPU_HOSTS"].split()
    return [(h, int(n)) for h, n in zip(words[0::2], words[1::2])]


def check_shape(env: Dict[str, str], job_id: str) -> None:
    """Rules a real LSF job's variables follow (checked on a real dump before on ours)."""
    pairs = mcpu(env)
    assert len(env["LSB_MCPU_HOSTS"].split()) == 2 * len(pairs)
    # LSB_HOSTS: each host once per slot (its order need not match LSB_MCPU_HOSTS).
    assert sorted(env["LSB_HOSTS"].split()) == sorted(h for h, n in pairs for _ in range(n))
    assert env["LSB_JOBID"] == job_id and env["LSB_JOBINDEX"] == "0"
    jobfile = env["LSB_JOBFILENAME"]
    assert re.fullmatch(rf"\d+\.{job_id}", os.path.basename(jobfile)), jobfile
    assert env["LSB_DJOB_HOSTFILE"] == jobfile + ".hostfile"
    assert env["LS_JOBPID"].isdecimal() and os.path.isabs(env["LS_SUBCWD"])
    if "LSB_DJOB_NUMPROC" in env:                # LSF 10 sets it; 7.0 did not
        assert int(env["LSB_DJOB_NUMPROC"]) == sum(n for _, n in pairs)


def script(tmp_path: Path, body: str, name: str = "job.lsf") -> str:
    path = tmp_path / name
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body).lstrip())
    return str(path)


def dumped(path: Path) -> Dict[str, str]:
    return json.loads(path.read_text())


def test_the_shape_rules_hold_on_the_real_generic_dump():
    real = fixture("env_lsf7_grid_cluster_ompi2009.txt")
    assert set(JOB_VARS) <= set(real)
    check_shape(real, real["LSB_JOBID"])
    # The job name is the command as typed when there is no -J.
    assert real["LSB_JOBNAME"] == "mpirun.lsf /mnt/ewd/mpi/hello/hello"


def test_generic_job_environment_matches_a_real_one(tmp_path, lsf_env):
    """-n 4 -R span[ptile=2]: 2 hosts x 2 slots, no launch node, the script on the first host."""
    s = script(tmp_path, f"""
        #BSUB -n 4
        #BSUB -R "span[ptile=2]"
        #BSUB -o gen.%J.out
        {PY} -c "{DUMP}" "$LS_SUBCWD/script.env"
        echo "SHELLPID=$$"
        """)
    res = run(["bsub", s, "first arg"], lsf_env, cwd=tmp_path)
    jid = submitted_id(res.stdout)
    assert wait_state(jid, lsf_env)["STAT"] == "DONE"
    ours = dumped(tmp_path / "script.env")
    real = fixture("env_lsf7_grid_cluster_ompi2009.txt")
    assert {v for v in JOB_VARS if v in real} <= set(ours)
    check_shape(ours, jid)
    assert ours["LSB_MCPU_HOSTS"] == f"{NODE1} 2 {NODE2} 2"
    assert ours["LSB_DJOB_NUMPROC"] == "4"
    assert Path(ours["LSB_DJOB_HOSTFILE"]).read_text().split() == [NODE1] * 2 + [NODE2] * 2
    assert ours["LSB_JOBNAME"] == f"{s} first arg"
    assert ours["LSB_QUEUE"] == "batch" and ours["LS_SUBCWD"] == str(tmp_path)
    out = (tmp_path / f"gen.{jid}.out").read_text()
    assert f"SHELLPID={ours['LS_JOBPID']}" in out           # LS_JOBPID is the job's own process
    assert ours["LSB_OUTPUTFILE"] == str(tmp_path / f"gen.{jid}.out") and "LSB_ERRORFILE" not in ours
    assert ours["SUMMIT_JOBS_VNODE"] == NODE1           # the script runs on the first host
    assert "CSM_ALLOCATION_ID" not in ours and "LSB_DJOB_RANKFILE" not in ours
    listed = run(["bjobs", "-o", "exec_host nexec_host", "-json", jid], lsf_env)
    assert json.loads(listed.stdout)["RECORDS"][0] == {"EXEC_HOST": f"2*{NODE1}:2*{NODE2}", "NEXEC_HOST": "2"}


def test_csm_job_environment_matches_summit_and_satisfies_lightning(tmp_path, lsf_env):
    """-nnodes 2: the launch node first with 1 slot, a rank file, CSM's own allocation id; the ranks carry
    what Lightning's LSFEnvironment reads (LSB_JOBID, LSB_DJOB_RANKFILE, JSM_NAMESPACE_*)."""
    s = script(tmp_path, f"""
        #BSUB -nnodes 2
        #BSUB -J csm
        #BSUB -o csm.%J.out
        #BSUB -e csm.%J.err
        {PY} -c "{DUMP}" "$LS_SUBCWD/script.env"
        jsrun -n 4 -r 2 -a 1 -c 1 {PY} -c "{DUMP}" "$LS_SUBCWD/rank.env"
        """)
    jid = submitted_id(run(["bsub", s], lsf_env, cwd=tmp_path).stdout)
    assert wait_state(jid, lsf_env)["STAT"] == "DONE"
    ours = dumped(tmp_path / "script.env")
    check_shape(ours, jid)
    assert ours["LSB_MCPU_HOSTS"] == f"batch1 1 {NODE1} 2 {NODE2} 2 "   # trailing space, as on Summit
    assert ours["LSB_DJOB_NUMPROC"] == str(2 * 2 + 1) and ours["LSB_JOBNAME"] == "csm"
    assert ours["LSB_ERRORFILE"] == str(tmp_path / f"csm.{jid}.err")
    assert ours["CSM_ALLOCATION_ID"].isdecimal() and ours["CSM_ALLOCATION_ID"] != jid
    # Summit's LSB_DJOB_RANKFILE: <.lsbatch>/<epoch>.<jobid>.hostfile, launch node on the first line.
    real_rankfile = fixture("env_summit_rankfile_lightning10216.txt")["LSB_DJOB_RANKFILE"]
    shape = r"\d+\.(\d+)\.hostfile"
    assert re.fullmatch(shape, os.path.basename(real_rankfile))
    assert re.fullmatch(shape, os.path.basename(ours["LSB_DJOB_RANKFILE"])).group(1) == jid
    lines = Path(ours["LSB_DJOB_RANKFILE"]).read_text().split()
    assert lines == ["batch1"] + [NODE1] * 2 + [NODE2] * 2
    real_rank = fixture("env_summit_jsrun_rank_octotiger334.txt")
    jsm = {k for k in real_rank if k.startswith("JSM_NAMESPACE_")}
    ranks = [dumped(tmp_path / f"rank.env{r}") for r in range(4)]
    for r, env in enumerate(ranks):
        assert jsm <= set(env)
        assert env["LSB_DJOB_RANKFILE"] == ours["LSB_DJOB_RANKFILE"] and env["LSB_JOBID"] == jid
        assert int(env["JSM_NAMESPACE_LOCAL_RANK"]) < int(env["JSM_NAMESPACE_LOCAL_SIZE"])
    # Lightning's LSFEnvironment: detected by these four; hosts = rank file minus its first line;
    # main address = the first of them; node rank = the position of the rank's host among them
    # (Lightning asks socket.gethostname(); a virtual node's name is SUMMIT_JOBS_VNODE).
    for env in ranks:
        assert all(env.get(k) for k in ("LSB_JOBID", "LSB_DJOB_RANKFILE", "JSM_NAMESPACE_LOCAL_RANK",
                                        "JSM_NAMESPACE_SIZE"))
        hosts = [line.strip() for line in open(env["LSB_DJOB_RANKFILE"])][1:]
        unique = list(dict.fromkeys(hosts))
        assert hosts[0] == NODE1 and int(env["JSM_NAMESPACE_SIZE"]) == 4
        assert unique.index(env["SUMMIT_JOBS_VNODE"]) == int(env["JSM_NAMESPACE_RANK"]) // 2
    # Each virtual node its own TMPDIR (ranks of one node share it), gone with the job.
    tmp_of = {env["SUMMIT_JOBS_VNODE"]: env["TMPDIR"] for env in ranks}
    assert len(set(tmp_of.values())) == 2 and all(env["TMPDIR"] == tmp_of[env["SUMMIT_JOBS_VNODE"]] for env in ranks)
    assert not any(Path(t).exists() for t in tmp_of.values())


def test_blaunch_runs_one_task_per_slot_with_task_ids_from_1(tmp_path, lsf_env):
    s = script(tmp_path, f"""
        #BSUB -n 3
        #BSUB -R "span[ptile=2]"
        #BSUB -o bl.%J.out
        echo "script-tmp=$TMPDIR mode=$(stat -c %a "$TMPDIR")"
        blaunch -no-shell {PY} -c "{DUMP}" "$LS_SUBCWD/task.env"
        blaunch -no-shell -z "{NODE2}" {PY} -c "{DUMP}" "$LS_SUBCWD/one.env"
        blaunch {NODE4} true; echo "unknown-host-rc=$?"
        blaunch --bogus true; echo "bad-option-rc=$?"
        """)
    jid = submitted_id(run(["bsub", s], lsf_env, cwd=tmp_path).stdout)
    assert wait_state(jid, lsf_env)["STAT"] == "DONE"
    tasks = [dumped(tmp_path / f"task.env{t}") for t in (1, 2, 3)]
    assert [t["SUMMIT_JOBS_VNODE"] for t in tasks] == [NODE1, NODE1, NODE2]
    for t in tasks:
        assert t["LSB_JOBID"] == jid and t["LSB_MCPU_HOSTS"] == f"{NODE1} 2 {NODE2} 1"
        assert not any(k in t for k in ("JSM_NAMESPACE_RANK", "OMPI_COMM_WORLD_RANK", "RANK", "PMIX_RANK"))
        assert t["SUMMIT_JOBS_NVME"].endswith(f"/nodes/{t['SUMMIT_JOBS_VNODE']}/nvme")
    assert len({t["PID"] for t in tasks}) == 3
    # A node's own temporary folder, as a real node has its own /tmp: shared on a node, private, gone
    # with the job; the batch script runs on the first node and has that node's.
    out = (tmp_path / f"bl.{jid}.out").read_text()
    assert tasks[0]["TMPDIR"] == tasks[1]["TMPDIR"] != tasks[2]["TMPDIR"]
    assert f"script-tmp={tasks[0]['TMPDIR']} mode=700" in out, out
    assert len(tasks[2]["TMPDIR"]) < 60 and not any(Path(t["TMPDIR"]).exists() for t in tasks)
    one = dumped(tmp_path / "one.env1")
    assert one["SUMMIT_JOBS_VNODE"] == NODE2 and not (tmp_path / "one.env2").exists()
    out = (tmp_path / f"bl.{jid}.out").read_text()
    assert f"host '{NODE4}' is not allocated to job {jid}" in out and "unknown-host-rc=255" in out
    assert "unknown option '--bogus'" in out and "bad-option-rc=255" in out
    outside = run(["blaunch", "true"], {k: v for k, v in lsf_env.items() if not k.startswith("LSB_")})
    assert outside.returncode == 255 and "not inside a job" in outside.stderr


DATA_SHAPE = dict(train=8, val=0, frames=4, size=32)  # the ``data`` fixture's set (conftest.py)


def trainer_job(tmp_path: Path, data: Path, before: str = "", slots: int = 4, ptile: int = 2) -> str:
    args = " ".join(tiny_args(tmp_path / "run", data, max_steps=2, eval_every=0) + ["--no-test"])
    return script(tmp_path, f"""
        #BSUB -n {slots}
        #BSUB -R "span[ptile={ptile}]"
        #BSUB -o train.%J.out
        export OMP_NUM_THREADS=1 SUMMIT_JOBS_RENDEZVOUS_TIMEOUT=600
        {before}
        blaunch {PY} -m trainer {args}
        """)


def test_a_two_host_generic_job_trains_with_rank_0_and_the_rendezvous_on_the_first_host(tmp_path, lsf_env, data):
    jid = submitted_id(run(["bsub", trainer_job(tmp_path, data)], lsf_env, cwd=tmp_path).stdout)
    rec = wait_state(jid, lsf_env, timeout=240)
    out = (tmp_path / f"train.{jid}.out").read_text()
    assert rec["STAT"] == "DONE", out
    assert f"ranks started by blaunch; rank 0 on {NODE1}, rendezvous host {NODE1}" in out
    assert "ddp engine, 4 ranks" in out


def test_a_rendezvous_on_the_wrong_host_fails_fast_with_both_hosts_named(tmp_path, lsf_env, data):
    """A MASTER_ADDR naming the second host: rank 0 (on the first) stops at once; nothing waits for the
    600 s rendezvous timeout. One rank per host is enough to put rank 0 and the named host apart (every
    rank is a trainer start-up)."""
    started = time.time()
    job = trainer_job(tmp_path, data, f"export MASTER_ADDR={NODE2}", slots=2, ptile=1)
    jid = submitted_id(run(["bsub", job], lsf_env, cwd=tmp_path).stdout)
    rec = wait_state(jid, lsf_env, timeout=120)
    out = (tmp_path / f"train.{jid}.out").read_text()
    assert rec["STAT"] == "EXIT", out
    assert time.time() - started < 90
    assert (f"trainer: rank 0 runs on virtual node {NODE1}, but the rendezvous host is {NODE2} "
            "(a different virtual node)") in out
    assert "Traceback" not in out


def test_a_script_from_stdin_is_named_by_its_lines_joined_with_semicolons(tmp_path, lsf_env):
    """LSF names a job read from stdin (no -J) by its command text, the script's lines joined with ';'
    (WashU RIS compute1 docs, "Useful b-commands": bjobs shows such a job as ``*#zsh;bash`` and bjobs -l
    its command as ``#!/bin/bash;#BSUB -Is;#BSUB -n 24;...``)."""
    body = "#!/bin/bash\n#BSUB -o in.%J.out\n\necho \"name=$LSB_JOBNAME\"\n"
    jid = submitted_id(run(["bsub"], lsf_env, cwd=tmp_path, input=body).stdout)
    assert wait_state(jid, lsf_env)["STAT"] == "DONE"
    out = (tmp_path / f"in.{jid}.out").read_text()
    assert out == 'name=#!/bin/bash;#BSUB -o in.%J.out;echo "name=$LSB_JOBNAME"\n'


def test_a_node_tmp_folder_in_the_way_that_is_not_private_is_refused(tmp_path, monkeypatch):
    """The per-node TMPDIR's parent lives in a shared /tmp: one made by someone else (open to others, or a
    link to elsewhere) is refused, naming it and the setting that moves it, rather than used."""
    from summit_jobs.schedulers.lsf.embedded import state
    monkeypatch.setenv("SUMMIT_JOBS_LSF_TMP", str(tmp_path / "tmp"))
    home = tmp_path / "lsf"
    made = state.node_tmp_dir(home, "77", NODE2)
    assert made == state.job_tmp_root(home, "77") / NODE2 and made.is_dir()
    top = tmp_path / "tmp" / f"summit-jobs-{os.getuid()}"
    assert (top.stat().st_mode & 0o777, made.stat().st_mode & 0o777) == (0o700, 0o700)
    assert state.job_tmp_root(tmp_path / "other-lsf", "77") != state.job_tmp_root(home, "77")
    top.chmod(0o777)
    with pytest.raises(OSError, match="not a private folder.*SUMMIT_JOBS_LSF_TMP"):
        state.node_tmp_dir(home, "78", NODE1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    top.chmod(0o700)
    top.rename(tmp_path / "moved")
    top.symlink_to(elsewhere)
    with pytest.raises(OSError, match=str(top)):
        state.node_tmp_dir(home, "79", NODE1)
