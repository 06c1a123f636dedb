"""SlurmScheduler on the real Slurm test cluster (tests/slurm_cluster.py's session fixture): a two-node job and
its dependent next link submitted as a run submits them, queried while they run and after they end (squeue,
then sacct), their owners, cancels of a running job and of an ended one, and no process left behind.
Each wait is on an event (a state squeue or sacct reports, a process gone) with a bound.

What the test cluster cannot show within a test (squeue forgets a job 300 s after its end; its squeue has
--json) is replayed from captures of the same cluster (tests/data/slurm/, each with its .source): which
command the scheduler asks next, and what it makes of the answers.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple, TypeVar

import pytest

from slurm_cluster import cluster_job_processes, sbatch
from summit_jobs.errors import UserError
from summit_jobs.hosts.host import LocalHost, Result
from summit_jobs.schedulers import SubmitRefused
from summit_jobs.schedulers.slurm import client
from summit_jobs.schedulers.slurm.scheduler import SlurmScheduler

T = TypeVar("T")

#: A chain link: two nodes, a task on each, then it waits for the file "release" and exits 3.
LINK = """#!/bin/bash
#SBATCH -N 2
#SBATCH --ntasks-per-node=1
#SBATCH -J 'chain link'
#SBATCH -o 'out %x-%4j-%A-%%.txt'
srun bash -c 'echo "TASK $(hostname)"'
while [ ! -e release ]; do sleep 0.1; done
exit 3
"""
#: A job to cancel: a task that sleeps on each of two nodes.
SLEEPER = """#!/bin/bash
#SBATCH -N 2
#SBATCH -J sleeper
srun sleep 300
"""


def until(fetch: Callable[[], T], done: Callable[[T], bool], timeout: float, what: str) -> T:
    """Call ``fetch`` until ``done`` holds of its value (returned); fail with the last value after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"{what} not within {timeout} s; last: {value}"
        time.sleep(0.2)


@pytest.fixture
def host(slurm_cluster) -> LocalHost:  # noqa: F811
    """This machine, its Slurm commands pointed at the test cluster."""
    local = LocalHost()
    local.env = slurm_cluster.env()
    return local


def submit(host, folder: Path, text: str, depends_on=None):
    name = SlurmScheduler.script_name
    (folder / name).write_text(text)
    return SlurmScheduler().submit(host, name, cwd=str(folder), script=text, submit_mode="file",
                                   depends_on=depends_on)


def test_a_chain_is_submitted_queried_owned_and_cancelled(slurm_cluster, host, tmp_path):  # noqa: F811
    sched = SlurmScheduler()
    assert isinstance(sched, SlurmScheduler) and sched.name == "slurm"
    first = submit(host, tmp_path, LINK)
    second = submit(host, tmp_path, LINK, depends_on=first.job_id)
    assert first.queue == second.queue == "debug"
    ids, unknown = [first.job_id, second.job_id], str(int(second.job_id) + 1000)
    found, gone = until(lambda: sched.query(host, ids + [unknown]), lambda r: r[0][first.job_id].state == "running",
                        20, "the first link running")
    assert gone == [unknown]
    running, waiting = found[first.job_id], found[second.job_id]
    assert (running.exec_host, running.name, running.native_state, running.exit_code) == \
        ("node[1-2]", "chain link", "RUNNING", None)
    assert (waiting.state, waiting.reason, waiting.native_state) == ("pending", "Dependency", "PENDING")
    owners = sched.owners(host, ids + [unknown])
    assert {j: (o.name, o.work_dir) for j, o in owners.items()} == \
        {j: ("chain link", str(tmp_path)) for j in ids}

    (tmp_path / "release").touch()
    found, _ = until(lambda: sched.query(host, ids), lambda r: all(s.finished for s in r[0].values()), 20,
                     "both links ended")
    for st in found.values():
        assert (st.state, st.exit_code, st.native_state, st.reason) == ("failed", 3, "FAILED", "NonZeroExitCode")
    assert found[second.job_id].start_time >= found[first.job_id].finish_time
    # sacct says the same once slurmdbd has the final record (a moment after the end; before it, sacct may
    # show a placeholder named "allocation": tests/slurm_cluster.py's sacct_job).
    accounted = until(lambda: sched.accounted(host, [first.job_id]),
                      lambda r: first.job_id in r and r[first.job_id].name == "chain link"
                      and r[first.job_id].finished, 20, "sacct's final record")[first.job_id]
    assert (accounted.state, accounted.native_state, accounted.exit_code, accounted.exec_host) == \
        ("failed", "FAILED", 3, "node[1-2]")
    outputs = sched.output_files(LINK, first.job_id)
    assert outputs == [f"out chain link-{int(first.job_id):04d}-{first.job_id}-%.txt"]
    assert sorted((tmp_path / outputs[0]).read_text().split()) == ["TASK", "TASK", "node1", "node2"]
    assert sched.cancel(host, [first.job_id, unknown]) == {first.job_id: "finished", unknown: "not found"}
    for jid in ids:
        until(lambda: cluster_job_processes(slurm_cluster, jid), lambda p: not p, 10, f"the end of job {jid}'s processes")


def test_cancel_of_a_running_job_ends_every_process_of_it(slurm_cluster, host, tmp_path):  # noqa: F811
    sched = SlurmScheduler()
    job = submit(host, tmp_path, SLEEPER).job_id
    until(lambda: cluster_job_processes(slurm_cluster, job), lambda p: sum(" sleep 300" in x for x in p) == 2, 20,
          "a sleep of the job on each node")
    assert sched.cancel(host, [job]) == {job: "terminating"}
    until(lambda: cluster_job_processes(slurm_cluster, job), lambda p: not p, 20, f"the end of job {job}'s processes")
    ended = until(lambda: sched.query(host, [job])[0][job], lambda s: s.finished, 20, "the cancelled job ended")
    assert (ended.state, ended.native_state) == ("cancelled", "CANCELLED")
    assert sched.cancel(host, [job]) == {job: "finished"}


def test_a_refused_submission_says_slurms_words(host, tmp_path):
    with pytest.raises(SubmitRefused, match="Invalid partition name specified"):
        submit(host, tmp_path, "#!/bin/bash\n#SBATCH -p no-such-partition\ntrue\n")


def test_odd_job_names_come_back_from_squeue_and_sacct(slurm_cluster, host, tmp_path):  # noqa: F811
    """A name with spaces, quotes, '|', '%' and a newline, through squeue --json, squeue --format and sacct
    (which stores each '"' as '`')."""
    sched = SlurmScheduler()
    name = "odd |name\nsecond line %x \"q\" 's 50%"
    job = sbatch(slurm_cluster, "-J", name, f"--output={tmp_path}/odd.out", "--wrap", "true", cwd=tmp_path)
    ended = until(lambda: sched.query(host, [job])[0][job], lambda s: s.finished, 20, "the job ended")
    assert (ended.name, ended.state, ended.exit_code) == (name, "done", 0)
    assert sched.owners(host, [job])[job].name == name
    plain = slurm_cluster.run(client.squeue_plain_argv([job]))
    assert client.parse_squeue_plain(plain.stdout, [job])[job].name == name
    stored = name.replace('"', "`")
    # slurmdbd gets the start record (name and all, state RUNNING) before the end record: wait for the end.
    accounted = until(lambda: sched.accounted(host, [job]),
                      lambda r: job in r and r[job].name == stored and r[job].finished, 20,
                      "sacct's final record, with the name as slurmdbd stores it")
    assert (accounted[job].state, accounted[job].exit_code) == ("done", 0)


# -- replayed answers --------------------------------------------------------------------------------------

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm"
NO_JSON = (1, "", "squeue: unrecognized option '--json'\nTry \"squeue --help\" for more information")


class Replay:
    """A host that answers each command with what Slurm printed once: {"squeue --json" | "squeue" | "sacct" |
    "scancel": (rc, stdout, stderr)}; it keeps the command lines it was given."""
    label = "the replayed login node"

    def __init__(self, answers: Dict[str, Tuple[int, str, str]]):
        self.answers = answers
        self.calls: List[List[str]] = []

    def run(self, argv, *, cwd=None, stdin=None, timeout=None) -> Result:
        self.calls.append(list(argv))
        return Result(*self.answers[argv[0] + (" --json" if "--json" in argv else "")])


def captured(name: str) -> Tuple[int, str, str]:
    assert (DATA / f"{name}.source").is_file()
    return 0, (DATA / name).read_text(), ""


def test_query_asks_sacct_only_for_the_jobs_squeue_no_longer_knows():
    # squeue_json_running.txt knows jobs 1-3; sacct_p_format.txt has 1-4 (both .source: the same cluster).
    host = Replay({"squeue --json": captured("squeue_json_running.txt"), "sacct": captured("sacct_p_format.txt")})
    found, gone = SlurmScheduler().query(host, ["1", "2", "3", "4", "9"])
    assert gone == ["9"]
    assert {j: (s.state, s.exit_code) for j, s in found.items()} == \
        {"1": ("running", None), "2": ("pending", None), "3": ("running", None), "4": ("failed", 3)}
    assert [c[0] for c in host.calls] == ["squeue", "sacct"] and "--jobs=4,9" in host.calls[1]
    owners = SlurmScheduler().owners(host, ["2", "4", "9"])
    assert {j: o.work_dir for j, o in owners.items()} == {"2": "/tmp/summit-slurm-capture",
                                                           "4": "/tmp/summit-slurm-capture"}


def test_without_squeue_json_the_format_answer_is_read_and_sacct_gives_the_exit_code():
    # squeue_format_odd_name.txt: 15 FAILED, 16 RUNNING; sacct_p_odd_name.txt: 15 and 16 ended.
    host = Replay({"squeue --json": NO_JSON, "squeue": captured("squeue_format_odd_name.txt"),
                   "sacct": captured("sacct_p_odd_name.txt")})
    found, gone = SlurmScheduler().query(host, ["15", "16"])
    assert gone == []
    assert (found["15"].state, found["15"].exit_code, found["16"].state) == ("failed", 3, "running")
    assert "--jobs=15" in host.calls[-1]


def test_a_cluster_without_accounting_leaves_forgotten_jobs_gone():
    host = Replay({"squeue --json": captured("squeue_json_running.txt"),
                   "sacct": (1, "", "sacct: error: Slurm accounting storage is disabled")})
    assert SlurmScheduler().query(host, ["1", "9"])[1] == ["9"]


def test_a_squeue_that_cannot_answer_is_one_error_with_slurms_words():
    down = (1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
    host = Replay({"squeue --json": down, "squeue": down})
    with pytest.raises(UserError, match="Unable to contact slurm controller"):
        SlurmScheduler().query(host, ["1"])


def test_a_cancel_scancel_refuses_is_an_error_naming_the_job():
    host = Replay({"scancel": (1, "", "scancel: error: Kill job error on job id 7: Access/permission denied")})
    with pytest.raises(UserError, match="job 7 .*Access/permission denied"):
        SlurmScheduler().cancel(host, ["7"])
