"""Lightning and ipyparallel, unchanged, through the embedded LSF's own commands, as they run on IBM LSF.

Why: both libraries carry LSF code of their own that is normally tested
against mocks. Lightning's LSFEnvironment reads jsrun's JSM_NAMESPACE_*
variables and finds its node by looking ``socket.gethostname()`` up in
LSB_DJOB_RANKFILE; ipyparallel's LSF launchers pipe batch scripts into
``bsub``, ask for their engines as a job array (``-J "ipengine[1-N]"``) with
``#BSUB -env all``, and stop them with ``bkill``. Each client runs in a
subprocess (with a timeout, so that a hang fails) whose environment is the one
``summit-jobs lsf env --home DIR --json`` gives a user's shell, and after every
job no process of it may be left (LSF's process tracking, lsf_jobs).

Every limit (the LSF minute that Lightning's -W 3 counts in, ipyparallel's
waits for its controller, client connection and engines, each wait of the
test) is a quiet machine's figure stretched by the slowdown measured as the
test starts (helpers.slowdown), so that a busy machine meets the same limits
in its own time.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from lsf_jobs import BIN, job_processes, proc_alive, require_client, run, submitted_id, wait_for, wait_state
from summit_jobs.schedulers.lsf.embedded import state, vnode_ns

PY = sys.executable

# Seconds on the quiet reference machine (2 cores, nothing else running), each a few times what the step
# takes there; every test stretches them by the slowdown it measures as it starts (the ``stretch`` fixture).
#: One LSF minute (IBM's): Lightning's job asks -W 3 and takes about 30 s there.
MINUTE = 60.0
#: A command of the embedded LSF (bsub, bjobs, bkill, ``summit-jobs lsf env``; a Python start each).
COMMAND = 15.0
#: A job's end after it was stopped, and its processes' end after that.
JOB_END = 20.0
PROCESSES_END = 10.0
#: Lightning's two-node DDP job, submitted to ended.
LIGHTNING_JOB_SECONDS = 100.0
#: ipyparallel: its controller's connection files, the client's connection, the two engines' registration
#: and the stop of each launcher's job; the whole client program (about 16 s there).
IPP_STEP, IPP_RUN = 40.0, 80.0


#: Variables of another scheduler or launcher that would make Lightning choose another cluster environment
#: (SLURM, torchelastic) or fix its port, and this test's own LSF settings.
DROPPED_PREFIXES = ("SUMMIT_JOBS_", "LSB_", "LS_", "JSM_", "IPP_", "SLURM_", "TORCHELASTIC_", "PMI_", "OMPI_")
DROPPED = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK"}


@pytest.fixture
def user_env(tmp_path, stretch) -> Dict[str, str]:
    """A user's environment without the embedded LSF on PATH and without summit-jobs settings; its own data
    and IPython folders; an LSF minute of MINUTE seconds stretched by the measured slowdown; a kill grace of
    1 s so that bkill's SIGINT-SIGTERM-SIGKILL sequence is quick."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED_PREFIXES) and k not in DROPPED}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", os.defpath).split(os.pathsep)
                                  if p and Path(p).resolve() != BIN.resolve())
    env.update({"XDG_CONFIG_HOME": str(tmp_path / "xdg-config"), "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
                "IPYTHONDIR": str(tmp_path / "ipython"), "SUMMIT_JOBS_LSF_KILL_GRACE": "1",
                "SUMMIT_JOBS_LSF_MINUTE": f"{stretch(MINUTE):.1f}",
                "OMP_NUM_THREADS": "1"})
    return env


@pytest.fixture
def lsf_shell(tmp_path, user_env, stretch):
    """The environment ``summit-jobs lsf env --home DIR --json`` gives a program; every job still live at the
    end of the test is killed, so that a failing test leaves no process behind."""
    home = tmp_path / "lsf"
    res = run([PY, "-m", "summit_jobs", "lsf", "env", "--home", str(home), "--json"], user_env,
              timeout=stretch(COMMAND))
    assert res.returncode == 0, res.stderr
    env = {**user_env, **json.loads(res.stdout)["environment"]}
    assert env["SUMMIT_JOBS_LSF_HOME"] == str(home)
    yield env
    live = run(["bjobs", "-noheader", "-o", "jobid"], env, timeout=stretch(COMMAND)).stdout.split()
    if live:
        run(["bkill", *sorted(set(live))], env, timeout=stretch(COMMAND))
    for jid in job_ids(home):
        wait_for(lambda: not job_processes(jid, str(home)), stretch(JOB_END + PROCESSES_END),
                 f"the processes of job {jid} to end")


def job_ids(home: Path) -> List[str]:
    """Every job the embedded LSF at ``home`` accepted (array elements have records of their own)."""
    jobs = home / "jobs"
    return sorted(p.name for p in jobs.iterdir()) if jobs.is_dir() else []


def assert_no_processes_left(jid: str, env: Dict[str, str], stretch: Callable[[float], float]) -> None:
    home = env["SUMMIT_JOBS_LSF_HOME"]
    wait_for(lambda: not job_processes(jid, home), stretch(PROCESSES_END), f"the processes of job {jid} to end")


# --------------------------------------------------------------------------------------------------- Lightning

#: One rank: a tiny LightningModule fitted with DDP on the CPU for 3 steps; Lightning chooses its cluster
#: environment itself. Each rank trains on data of its own (seeded by its rank), so equal parameters at the
#: end show that DDP averaged the gradients. The rank writes what it saw to RESULTS/rank.<global rank>.json.
LIGHTNING_RANK = r'''
import json, os, socket, sys, zlib
import torch
import lightning as L


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def checksum(model):
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    return {"crc": zlib.crc32(flat.numpy().tobytes()), "sum": flat.double().sum().item()}


generator = torch.Generator().manual_seed(100 + int(os.environ["JSM_NAMESPACE_RANK"]))
x, y = torch.randn(32, 4, generator=generator), torch.randn(32, 1, generator=generator)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
torch.manual_seed(0)
model = Tiny()
initial = checksum(model)
trainer = L.Trainer(accelerator="cpu", strategy="ddp", num_nodes=2, devices=1, max_steps=3, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, loader)
env = trainer.strategy.cluster_environment
record = {"env_class": f"{type(env).__module__}.{type(env).__qualname__}", "host": socket.gethostname(),
          "jsm_rank": os.environ["JSM_NAMESPACE_RANK"], "global_rank": trainer.global_rank,
          "world_size": trainer.world_size, "node_rank": trainer.node_rank, "local_rank": trainer.local_rank,
          "main_address": env.main_address, "main_port": env.main_port, "steps": trainer.global_step,
          "rankfile": open(os.environ["LSB_DJOB_RANKFILE"]).read().split(), "jobid": os.environ["LSB_JOBID"],
          "initial": initial, "final": checksum(model)}
with open(os.path.join(sys.argv[1], f"rank.{trainer.global_rank}.json"), "w") as fh:
    json.dump(record, fh)
# Work-around, torch 2.13 with Lightning 2.6.6: the Trainer leaves its gloo process group alive after fit, and
# a process that exits so may abort in interpreter finalization ("terminate called without an active
# exception", status 134; gloo's worker threads still hold work objects, as pytorch/pytorch#179291 explains).
torch.distributed.destroy_process_group()
'''

#: Summit's CSM form: 2 compute nodes, one rank on each through jsrun.
LIGHTNING_JOB = """#!/bin/bash
#BSUB -nnodes 2
#BSUB -W 3
#BSUB -J lightning-ddp
#BSUB -o out.%J
jsrun -n 2 -r 1 -a 1 -c 1 {python} rank.py {results}
"""


def test_lightning_ddp_picks_lsf_environment_and_trains_on_two_nodes(tmp_path, lsf_shell, record_property,
                                                                     stretch):
    lightning = require_client("lightning")
    why = vnode_ns.unavailable()
    if why is not None:
        pytest.skip("Lightning's LSFEnvironment finds its node by gethostname() in the rank file, and the "
                    f"virtual nodes cannot be given host names here: {why}")
    record_property("lightning_version", lightning.__version__)
    results = tmp_path / "results"
    results.mkdir()
    (tmp_path / "rank.py").write_text(LIGHTNING_RANK)
    job = LIGHTNING_JOB.format(python=PY, results=results)
    sub = run(["bsub"], lsf_shell, cwd=str(tmp_path), input=job, timeout=stretch(COMMAND))
    assert sub.returncode == 0, sub.stderr
    jid = submitted_id(sub.stdout)
    rec = wait_state(jid, lsf_shell, timeout=stretch(LIGHTNING_JOB_SECONDS))
    out = (tmp_path / f"out.{jid}").read_text()
    assert rec["STAT"] == "DONE", out
    assert_no_processes_left(jid, lsf_shell, stretch)

    ranks = [json.loads((results / f"rank.{r}.json").read_text()) for r in (0, 1)]
    for r, rank in enumerate(ranks):
        assert rank["env_class"] == "lightning.fabric.plugins.environments.lsf.LSFEnvironment", rank
        assert (rank["global_rank"], int(rank["jsm_rank"]), rank["world_size"], rank["local_rank"]) == (r, r, 2, 0)
        # LSFEnvironment: the rank file less its first line (the launch node) lists the compute hosts; the node
        # rank is gethostname()'s place among them, the main address the first of them, the port from the id.
        hosts = list(dict.fromkeys(rank["rankfile"][1:]))
        assert rank["rankfile"][0] == state.LAUNCH_NODE, rank
        assert rank["host"] == f"vnode{r + 1}" and rank["node_rank"] == hosts.index(rank["host"]) == r, rank
        assert rank["main_address"] == hosts[0] == "vnode1", rank
        assert rank["main_port"] == int(jid) % 1000 + 10000 and rank["jobid"] == jid, rank
        assert rank["steps"] == 3, rank
    assert ranks[0]["initial"] == ranks[1]["initial"]
    assert ranks[0]["final"] == ranks[1]["final"], f"DDP left the ranks with different parameters: {ranks}"
    assert ranks[0]["final"] != ranks[0]["initial"], "the fit changed no parameter"
    print(f"lightning {lightning.__version__}: ranks 0 and 1 on vnode1/vnode2, parameters {ranks[0]['final']}")


# ------------------------------------------------------------------------------------------------- ipyparallel

#: The engines' batch template: ipyparallel's own LSF engine template, less its plain ``-J`` line.
#: Work-around, ipyparallel 9.2.0: LSFLauncher.job_array_regexp (r'#BSUB\s+-J+\w+\[\d+-\d+\]') allows no
#: blank after -J, so it never recognises a name and adds ``#BSUB -J ipengine[1-N]`` above the default
#: template's own ``#BSUB -J ipengine-{cluster_id}``. The later -J wins (LSF reads the #BSUB lines as one
#: option list, as bsub's command line), so the default template asks for one plain job: one engine.
ENGINE_TEMPLATE = """#!/bin/sh
#BSUB -J ipengine[1-{n}]
#BSUB -env all
#BSUB -o {output_file}
#BSUB -e {output_file}
{program_and_args}
"""

#: The client: a controller (ipyparallel's default LSF controller template) and 2 engines as a job array,
#: each engine answers with its array index, job id and pid; then the cluster is stopped (bkill).
IPP_CLIENT = r'''
import json, os, sys
import ipyparallel as ipp

profile, cluster_id, template = os.path.abspath("profile"), "lsftest", open("engines.tpl").read()
step = float(sys.argv[1])   # seconds for each wait, from the test's measured slowdown
# Work-around, ipyparallel 9.2.0: LSFLauncher.start runs bsub with env=os.environ, not with the launcher's
# get_env(), so IPP_PROFILE_DIR, IPP_CLUSTER_ID (and the engines' LSB_STDOUT_DIRECT) never reach the jobs:
# the controller then writes its connection files into the default profile and the cluster waits for them
# in vain. Exported here, they reach the jobs the way the launchers mean them to: through bsub's -env all.
os.environ.update(IPP_PROFILE_DIR=profile, IPP_CLUSTER_ID=cluster_id, LSB_STDOUT_DIRECT="Y")
cluster = ipp.Cluster(n=2, controller_launcher_class="lsf", engine_launcher_class="lsf", profile_dir=profile,
                      cluster_id=cluster_id)
cluster.config.LSFEngineSetLauncher.batch_template = template
cluster.config.LSFControllerLauncher.connection_info_timeout = step
for launcher in (cluster.config.LSFControllerLauncher, cluster.config.LSFEngineSetLauncher):
    launcher.stop_timeout = int(step)


def where():
    import os
    return {"index": os.environ.get("LSB_JOBINDEX"), "jobid": os.environ.get("LSB_JOBID"), "pid": os.getpid()}


try:
    cluster.start_cluster_sync()
    client = cluster.connect_client_sync(timeout=step)
    client.wait_for_engines(2, timeout=step)
    answers = client[:].apply_sync(where)
    client.close()
    print("RESULT " + json.dumps({"answers": answers, "controller": cluster.controller.job_id,
                                   "engines": [s.job_id for s in cluster.engines.values()]}), flush=True)
finally:
    cluster.stop_cluster_sync()
print("STOPPED", flush=True)
'''


def test_ipyparallel_lsf_launchers_start_two_engines_as_an_array_and_bkill_stops_them(
        tmp_path, lsf_shell, record_property, stretch):
    ipp = require_client("ipyparallel")
    record_property("ipyparallel_version", ipp.__version__)
    (tmp_path / "client.py").write_text(IPP_CLIENT)
    (tmp_path / "engines.tpl").write_text(ENGINE_TEMPLATE)
    try:
        res = run([PY, "client.py", str(stretch(IPP_STEP))], lsf_shell, cwd=str(tmp_path), timeout=stretch(IPP_RUN))
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the ipyparallel client hung: {exc.stdout!r} {exc.stderr!r}")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines and res.stdout.splitlines()[-1] == "STOPPED", res.stdout + res.stderr[-3000:]
    result = json.loads(lines[0][len("RESULT "):])

    # What ipyparallel asked LSF for: the controller through its default template (indented #BSUB lines,
    # -env all), the engines as one job array.
    controller_script = (tmp_path / "lsf_controller").read_text()
    engine_script = (tmp_path / "lsf_engines").read_text()
    assert re.search(r"^\s*#BSUB -env all$", controller_script, re.M), controller_script
    assert "#BSUB -J ipengine[1-2]\n#BSUB -env all\n" in engine_script, engine_script

    controller, (engines,) = result["controller"], result["engines"]
    answers = result["answers"]
    assert len(answers) == 2 and len({a["pid"] for a in answers}) == 2, answers
    assert sorted(a["index"] for a in answers) == ["1", "2"], answers
    assert {a["jobid"] for a in answers} == {engines}, answers

    # Stopped with bkill: every job ends EXIT, killed by its owner, each array element shown on its own.
    def records() -> List[Dict[str, str]]:
        return json.loads(run(["bjobs", "-a", "-o", "jobid jobindex stat exit_reason job_name", "-json",
                               controller, engines], lsf_shell, timeout=stretch(COMMAND)).stdout)["RECORDS"]

    shown = wait_for(lambda: (lambda rs: rs if all(r["STAT"] in ("DONE", "EXIT") for r in rs) else None)(
        records()), stretch(JOB_END), "the controller and both engines to end")
    rows = sorted((r["JOBID"], r["JOBINDEX"], r["JOB_NAME"], r["STAT"], r["EXIT_REASON"]) for r in shown)
    killed = "TERM_OWNER: job killed by owner"
    assert rows == sorted([(controller, "0", "ipcontroller-lsftest", "EXIT", killed),
                           (engines, "1", "ipengine[1]", "EXIT", killed),
                           (engines, "2", "ipengine[2]", "EXIT", killed)]), shown
    for jid in {controller, engines, *job_ids(Path(lsf_shell["SUMMIT_JOBS_LSF_HOME"]))}:
        assert_no_processes_left(jid, lsf_shell, stretch)
    assert not [a for a in answers if proc_alive(a["pid"])], "an engine outlived its job"
    print(f"ipyparallel {ipp.__version__}: engines {answers} of array job {engines}, controller job {controller}")
