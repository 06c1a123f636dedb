"""Today's LSF form for real: -n/span[ptile] jobs whose ranks start by blaunch on the embedded LSF's virtual
nodes: a rank 0 claimed on two nodes fails fast, and a user's own command chains until its COMPLETE marker.

That each launcher (blaunch, Open MPI's mpirun through blaunch, one torchrun per node) trains the tiny TSM to
the very weights of the CSM/jsrun path is checked on their chains in test_launcher_chains.py, which imports
_trainer_args from here.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from user_chain_checks import check_user_chain
from lsf_jobs import cli, newest_step, recorded_state, run, submitted_id, wait_for, wait_state, warn_job
from trainer_utils import REPO, tiny_args
from summit_jobs.schedulers.lsf.embedded.state import node_names
from summit_jobs.schedulers import FINISHED

#: The virtual nodes' host names on this machine: vnode1... where tasks get host names, else 127.1.0.1...
NODE1, NODE2, NODE3, NODE4 = node_names(4)




#: tiny_args options that submit sets itself (the run directory, the optimisation, the submit options).
SET_BY_SUBMIT = {"--run-dir", "--engine", "--arch", "--num-classes", "--epochs", "--batch-per-gpu", "--accum-steps",
                 "--lr", "--warmup-epochs"}


def _trainer_args(data: Path, **over) -> list:
    """tiny_args without what submit sets itself; ``over``: tiny_args overrides (default: 2 steps)."""
    args = tiny_args(Path("unused"), data, **{"max_steps": 2, "eval_every": 0, **over}) + ["--no-test"]
    out, i = [], 0
    while i < len(args):
        if args[i] in SET_BY_SUBMIT:
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out


def test_rank_0_claimed_on_two_nodes_fails_fast_with_both_hosts_named(tmp_path, lsf_env, data):
    """A script that exports RANK=0 to both nodes' tasks: the rank 0 that is not on the rendezvous host
    stops at once, and blaunch ends the other; nothing waits for the rendezvous timeout."""
    args = " ".join(tiny_args(tmp_path / "run", data, max_steps=2, eval_every=0) + ["--no-test"])
    script = tmp_path / "twice.lsf"
    script.write_text(f"""#!/bin/bash
#BSUB -n 2
#BSUB -R "span[ptile=1]"
#BSUB -o twice.%J.out
export RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR={NODE1} OMP_NUM_THREADS=1 SUMMIT_JOBS_RENDEZVOUS_TIMEOUT=600
blaunch -no-shell -z "{NODE1} {NODE2}" {sys.executable} -m trainer {args}
""")
    started = time.time()
    jid = submitted_id(run(["bsub", str(script)], lsf_env, cwd=tmp_path).stdout)
    rec = wait_state(jid, lsf_env, timeout=120)
    out = (tmp_path / f"twice.{jid}.out").read_text()
    assert rec["STAT"] == "EXIT" and time.time() - started < 90, out
    assert f"rank 0 runs on virtual node {NODE2}, but the rendezvous host is {NODE1}" in out
    assert "Traceback" not in out


#: Steps of the user command's run: the first two links are warned a step past where they started and stop
#: within 5 steps (user_train.py's Chain decides every 5 steps), so the third link always has steps left.
USER_STEPS = 40


def test_a_user_command_chains_until_its_complete_marker(tmp_path, lsf_env):
    """docs/examples/user_train.py (a plain PyTorch script keeping the chain contract) through --command:
    each link stops on the warning signal with a checkpoint, the next resumes, the last writes COMPLETE.

    The first two links are warned once they have trained a step past where they started, as LSF's -wa
    action warns (lsf_jobs.warn_job), and the third trains to the end: 3 links however fast this
    machine is. With the scaled -wa timing a loaded machine spent most of each link starting the ranks, and
    the chain ran out of links and time."""
    program = REPO / "docs" / "examples" / "user_train.py"
    run_dir = tmp_path / "mine"
    env = dict(lsf_env, OMP_NUM_THREADS="1", SUMMIT_JOBS_LSF_MINUTE="60")
    res = cli(["submit", "--nodes", "1", "--request", "slots", "--launcher", "blaunch", "--run-dir", str(run_dir),
               "--walltime", "30", "--warning-minutes", "1", "--until-complete", "--max-links", "12", "--json",
               "--command", f"{sys.executable} {program} --steps {USER_STEPS} --step-seconds 0.1"],
              env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["plan"]["command"][1] == str(program)
    jobs = [str(json.loads(res.stdout)["job_ids"][0])]
    while True:
        jid = jobs[-1]
        wait_for(lambda: recorded_state(jid, env) not in (None, "PEND"), 120, f"job {jid} to start")
        if len(jobs) <= 2:
            start = newest_step(run_dir)
            wait_for(lambda: newest_step(run_dir) > start or recorded_state(jid, env) in ("DONE", "EXIT"), 120,
                     f"job {jid} to train a step")
            warn_job(jid, env)
        wait_state(jid, env, timeout=120)
        queued = (run_dir / "chain.jobs").read_text().split() if (run_dir / "chain.jobs").exists() else []
        if (run_dir / "COMPLETE").exists() or len(queued) < len(jobs):
            break
        jobs.append(queued[-1])
    outputs = "".join(p.read_text(errors="replace") for p in sorted(run_dir.glob("user_train.*")))
    assert (run_dir / "COMPLETE").exists(), f"links {jobs} ended without COMPLETE:\n{outputs[-3000:]}"

    def settled():
        rows = json.loads(cli(["status", str(run_dir), "--json"], env, timeout=60).stdout)
        queued = (run_dir / "chain.jobs").read_text().split() if (run_dir / "chain.jobs").exists() else []
        done = rows and all(r["state"] in FINISHED for r in rows) and len(rows) == 1 + len(queued)
        return rows if done and (run_dir / "COMPLETE").exists() else None

    rows = wait_for(settled, timeout=30, what="status to show the user command's chain complete")
    assert len(rows) == 3 and all(r["state"] == "done" for r in rows), rows
    assert (run_dir / "COMPLETE").read_text().startswith(f"step {USER_STEPS} ")
    logs = cli(["logs", str(run_dir)], env, timeout=60)
    assert logs.stdout.count("rank 0: warned at step") == len(rows) - 1, logs.stdout
    assert logs.stdout.count("rank 0: resumed at step") == len(rows) - 1
    assert f"rank 0: done at step {USER_STEPS}" in logs.stdout
    assert logs.stdout.count("summit-jobs: chain: queued link") == len(rows) - 1
    check_user_chain(env, run_dir, jobs, total=USER_STEPS)
