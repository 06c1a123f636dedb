"""Slurm's command lines and parsers (summit_jobs/schedulers/slurm/client.py) against what Slurm printed.

Every capture under tests/data/slurm/ has a ``.source`` file next to it that says how and when it was made;
the tests name the capture they read. Most come from a real Slurm 22.05.8 cluster (localcluster), one
squeue --json from a production Slurm 23.02.6. The state and file-name rules are Slurm's documented ones
(squeue(1) "JOB STATE CODES", sbatch(1) "filename pattern"); the file names were checked against what
slurmstepd 22.05 wrote (test_slurm_scheduler.py does it again on every run).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from summit_jobs.schedulers import STATES, UNKNOWN, Owner
from summit_jobs.schedulers.slurm import client
from summit_jobs.schedulers.slurm.client import SlurmJob

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm"
#: The job name of the odd-name captures (sacct_p_odd_name.txt.source): slurmdbd stores '"' as '`'.
ODD_NAME = "odd |name\nsecond line %x \"q\" 's 50%"


def read(name: str) -> str:
    assert (DATA / f"{name}.source").is_file(), f"{name} has no .source saying where it came from"
    return (DATA / name).read_text()


@pytest.fixture
def utc(monkeypatch):
    """The captures were made on a machine whose local time is UTC (sacct prints local time)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# -- sbatch ------------------------------------------------------------------------------------------------

def test_sbatch_parsable_answer_gives_the_job_id():
    # sbatch_parsable.txt.source: sbatch --parsable ... two-nodes.sh, job 1's submission.
    assert client.parse_sbatch(read("sbatch_parsable.txt")) == "1"
    # sbatch(1) --parsable: "jobid[;cluster_name]".
    assert client.parse_sbatch("sbatch: warning: something\n4711;summitlocal\n") == "4711"
    # A site's sbatch wrapper that ignores --parsable prints sbatch's plain answer (src/sbatch/sbatch.c:
    # "Submitted batch job %u", " on cluster %s" with -M), e.g. LRZ's:
    assert client.parse_sbatch("Submitted batch job 630114 on cluster mpp2\n") == "630114"
    assert client.parse_sbatch("Submitted batch job 630114\n") == "630114"


def test_the_chain_reads_every_sbatch_answer_parse_sbatch_reads(tmp_path):
    """The job script's own reading of sbatch's answer (the chain's next link) agrees with parse_sbatch."""
    import subprocess
    text = (Path(__file__).resolve().parents[3] / "templates" / "slurm" / "partials" / "chain.j2").read_text()
    line = next(i for i, l in enumerate(text.splitlines()) if l.strip().startswith("id=$(printf"))
    command = "\n".join(text.splitlines()[line:line + 2]).strip()
    for answer, want in (("4711", "4711"), ("4711;mpp2", "4711"), ("Submitted batch job 630114 on cluster mpp2", "630114"),
                         ("Submitted batch job 630114", "630114"), ("sbatch: error: Batch job submission failed", ""),
                         ("Submitted batch job soon", "")):
        got = subprocess.run(["bash", "-c", f'out="$1"\n{command}\nprintf %s "$id"', "sh", answer],
                             capture_output=True, text=True).stdout
        assert got == want, (answer, got)
        if want:
            assert client.parse_sbatch(answer) == want


def test_an_sbatch_answer_without_an_id_is_an_error_with_the_text():
    with pytest.raises(client.SlurmOutputError, match="Submitted batch job soon"):
        client.parse_sbatch("Submitted batch job soon")


def test_sbatch_command_line_and_its_dependency():
    assert client.sbatch_argv("job.sbatch") == ["sbatch", "--parsable", "job.sbatch"]
    assert client.sbatch_argv("job.sbatch", depends_on="77") == ["sbatch", "--parsable", "--dependency=afterany:77",
                                                              "job.sbatch"]
    assert client.sbatch_argv("-x.sh")[-1] == "./-x.sh"
    for bad in ("77; rm -rf ~", "７７", "-1"):
        with pytest.raises(ValueError):
            client.sbatch_argv("job.sbatch", depends_on=bad)


# -- squeue --json -----------------------------------------------------------------------------------------

def test_squeue_json_while_running_and_pending():
    # squeue_json_running.txt.source: job 1 and 3 RUNNING, job 2 PENDING (Dependency).
    jobs = client.parse_squeue_json(read("squeue_json_running.txt"), ["1", "2", "3"])
    first, second, third = (client.status(jobs[j]) for j in "123")
    assert (first.state, first.native_state, first.exec_host, first.queue, first.name, first.exit_code) == \
        ("running", "RUNNING", "node[1-2]", "debug", "two-nodes", None)
    assert (second.state, second.reason, second.start_time, second.exec_host) == ("pending", "Dependency", "", "")
    assert not first.finished and not second.finished
    # A running job's end_time is when its time limit would end it, not a finish.
    assert first.start_time and not first.finish_time and third.state == "running"


def test_squeue_json_after_the_end_decodes_wait_statuses():
    # squeue_json_ended.txt.source: exit_code is the raw wait status: 768 for exit 3, 15 for SIGTERM.
    raw = {str(j["job_id"]): j["exit_code"] for j in json.loads(read("squeue_json_ended.txt"))["jobs"]}
    assert raw == {"1": 0, "2": 0, "3": 15, "4": 768}
    jobs = client.parse_squeue_json(read("squeue_json_ended.txt"), ["1", "2", "3", "4"])
    got = {j: (s.state, s.native_state, s.exit_code, s.reason) for j, s in
           ((j, client.status(job)) for j, job in jobs.items())}
    assert got == {"1": ("done", "COMPLETED", 0, ""), "2": ("done", "COMPLETED", 0, ""),
                   "3": ("cancelled", "CANCELLED", 128 + 15, ""), "4": ("failed", "FAILED", 3, "NonZeroExitCode")}
    assert all(client.status(job).finished and client.status(job).finish_time for job in jobs.values())


def test_squeue_json_lists_every_job_so_only_the_asked_ones_are_kept():
    # squeue_json_running.txt.source: 22.05 lists every job whatever -j says.
    assert list(client.parse_squeue_json(read("squeue_json_running.txt"), ["2"])) == ["2"]
    assert client.parse_squeue_json(read("squeue_json_running.txt"), ["99"]) == {}


def test_squeue_json_times_and_folders_agree_with_sacct(utc):
    # squeue_json_ended.txt and sacct_p_format.txt: the same four jobs, both captured once all had ended.
    from_squeue = client.parse_squeue_json(read("squeue_json_ended.txt"), ["1", "2", "3", "4"])
    from_sacct = client.parse_sacct(read("sacct_p_format.txt"), ["1", "2", "3", "4"])
    for jid in "1234":
        a, b = from_squeue[jid], from_sacct[jid]
        assert (a.submit, a.start, a.end, a.name, a.work_dir, a.nodes) == \
            (b.submit, b.start, b.end, b.name, b.work_dir, b.nodes), jid
        assert (client.status(a).state, client.status(a).native_state) == \
            (client.status(b).state, client.status(b).native_state)


def test_squeue_json_of_slurm_23_02_wraps_its_numbers():
    # squeue_json_23.02.6_slurmtui.txt.source: exit_code, times are {"set", "infinite", "number"} objects.
    jobs = client.parse_squeue_json(read("squeue_json_23.02.6_slurmtui.txt"), ["1618871"])
    job = jobs["1618871"]
    st = client.status(job)
    assert (st.state, st.queue, st.name, st.exec_host, st.exit_code) == \
        ("running", "gpu_p2", "model_pretrain", "data-center-ia830", None)
    assert job.exit_code == 0 and job.submit and job.start and st.start_time == job.start
    assert job.work_dir == "/gpfsdswork/projects/rech/dmn/www26kf/repos/model"


def test_squeue_json_exit_codes_of_each_release():
    assert client.json_exit_code(768) == 3                                        # 22.05: a wait status
    assert client.json_exit_code(9) == 128 + 9                                    # killed by SIGKILL
    assert client.json_exit_code({"set": True, "infinite": False, "number": 256}) == 1    # 23.02
    assert client.json_exit_code({"set": False, "infinite": False, "number": 0}) is None
    later = {"status": ["EXITED"], "return_code": {"set": True, "infinite": False, "number": 3},
             "signal": {"id": {"set": False, "infinite": False, "number": 0}, "name": ""}}       # 23.11 and on
    assert client.json_exit_code(later) == 3
    killed = dict(later, status=["SIGNALED"], signal={"id": {"set": True, "infinite": False, "number": 15},
                                                     "name": "TERM"})
    assert client.json_exit_code(killed) == 128 + 15
    assert client.json_exit_code(None) is None


def test_squeue_json_that_is_not_json_is_an_error_with_the_text():
    with pytest.raises(client.SlurmOutputError, match="unable to load openapi plugin"):
        client.parse_squeue_json("squeue: error: unable to load openapi plugin", ["1"])


def test_squeue_json_errors_without_jobs_are_raised_unless_the_id_is_unknown():
    answer = {"meta": {}, "jobs": [], "errors": [{"error": "Unable to contact slurm controller"}]}
    with pytest.raises(client.SlurmOutputError, match="Unable to contact slurm controller"):
        client.parse_squeue_json(json.dumps(answer), ["1"])
    answer["errors"] = [{"error": "Invalid job id specified", "error_number": 2017}]
    assert client.parse_squeue_json(json.dumps(answer), ["1"]) == {}


# -- sacct -P and squeue --format --------------------------------------------------------------------------

def test_sacct_p_allocation_lines():
    # sacct_p_format.txt.source: four ended jobs, exit 3 as 3:0, a cancelled one as "CANCELLED by 0".
    jobs = client.parse_sacct(read("sacct_p_format.txt"), ["1", "2", "3", "4"])
    got = {j: (s.state, s.native_state, s.exit_code, s.reason, s.exec_host) for j, s in
           ((j, client.status(job)) for j, job in jobs.items())}
    assert got == {"1": ("done", "COMPLETED", 0, "", "node[1-2]"), "2": ("done", "COMPLETED", 0, "", "node1"),
                   "3": ("cancelled", "CANCELLED", 0, "cancelled by uid 0", "node1"),
                   "4": ("failed", "FAILED", 3, "", "node1")}
    assert client.owner(jobs["1"]) == Owner(job_id="1", name="two-nodes", work_dir="/tmp/summit-slurm-capture",
                                            submit_time="2026-11-27T21:07:11")


def test_sacct_with_header_and_step_lines_reads_the_same():
    # sacct_p.txt.source: plain "sacct -P": a header and the steps (1.batch, 1.0) of the same four jobs.
    text = read("sacct_p.txt")
    fields = text.splitlines()[0].split("|")
    steps = client.parse_sacct(text, ["1", "2", "3", "4"], fields=fields)
    allocations = client.parse_sacct(read("sacct_p_format.txt"), ["1", "2", "3", "4"])
    assert {j: (s.state, s.exit_code, s.reason) for j, s in steps.items()} == \
        {j: (s.state, s.exit_code, s.reason) for j, s in allocations.items()}


def test_sacct_json_of_22_05_loses_the_exit_code_so_the_client_reads_sacct_p():
    # sacct_json.txt.source: every exit_code is {"status": "SUCCESS", "return_code": 0}, the FAILED job's too.
    failed = next(j for j in json.loads(read("sacct_json.txt"))["jobs"] if j["job_id"] == 4)
    assert (failed["state"]["current"], failed["exit_code"]["return_code"]) == ("FAILED", 0)
    assert client.parse_sacct(read("sacct_p_format.txt"), ["4"])["4"].exit_code == 3
    assert client.sacct_argv(["4"])[:4] == ["sacct", "-P", "-n", "-X"]


def test_a_job_name_with_bars_quotes_percent_and_a_newline_in_sacct():
    # sacct_p_odd_name.txt.source: the name spans two lines and holds '|'; slurmdbd turned '"' into '`'.
    jobs = client.parse_sacct(read("sacct_p_odd_name.txt"), ["15", "16"])
    stored = ODD_NAME.replace('"', "`")
    assert {j: (job.name, job.state, job.exit_code, job.work_dir) for j, job in jobs.items()} == \
        {"15": (stored, "FAILED", 3, "/tmp/exp/cap"), "16": (stored, "CANCELLED", 0, "/tmp/exp/cap")}
    assert client.status(jobs["16"]).reason == "cancelled by uid 0"


def test_a_job_name_with_bars_quotes_percent_and_a_newline_in_squeue_format():
    # squeue_format_odd_name.txt.source: job 15 FAILED, 16 RUNNING with End "NONE"; 99999 unknown.
    jobs = client.parse_squeue_plain(read("squeue_format_odd_name.txt"), ["15", "16", "99999"])
    assert sorted(jobs) == ["15", "16"]
    assert {job.name for job in jobs.values()} == {ODD_NAME}
    running = client.status(jobs["16"])
    assert (running.state, running.finish_time, running.reason, running.exit_code) == ("running", "", "", None)
    failed = client.status(jobs["15"])
    # squeue --format has no exit code: the scheduler asks sacct for it.
    assert (failed.state, failed.reason, jobs["15"].exit_code) == ("failed", "NonZeroExitCode", None)


def test_records_survive_banners_headers_and_names_full_of_bars():
    fields = client.SACCT_FIELDS
    name = "a|b|c|d|e|f|g|h|i|j|k\r\x1c\u2028l"
    row = ["7", name, "debug", "RUNNING", "0:0", "2026-01-02T03:04:05", "Unknown", "Unknown", "n1", "/w"]
    text = "Cannot connect now, retrying\n" + "|".join(fields) + "\n\n" + "|".join(row) + "\n7.batch|batch|x\n"
    job = client.parse_sacct(text, ["7"])["7"]
    assert (job.name, job.state, job.submit, job.start, job.nodes, job.work_dir) == \
        (name, "RUNNING", "2026-01-02T03:04:05", "", "n1", "/w")


def test_a_job_that_never_started_has_no_nodes():
    row = "8|never|debug|CANCELLED by 1000|0:0|2026-01-02T03:04:05|None|2026-01-02T03:05:00|None assigned|/w"
    job = client.parse_sacct(row + "\n", ["8"])["8"]
    assert (job.nodes, job.start, client.status(job).reason) == ("", "", "cancelled by uid 1000")


# -- states ------------------------------------------------------------------------------------------------

#: squeue(1) "JOB STATE CODES" of Slurm 22.05, every one of them.
SQUEUE_STATES = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "CONFIGURING", "COMPLETING", "DEADLINE", "FAILED",
                 "NODE_FAIL", "OUT_OF_MEMORY", "PENDING", "PREEMPTED", "RUNNING", "RESV_DEL_HOLD", "REQUEUE_FED",
                 "REQUEUE_HOLD", "REQUEUED", "RESIZING", "REVOKED", "SIGNALING", "SPECIAL_EXIT", "STAGE_OUT",
                 "STOPPED", "SUSPENDED", "TIMEOUT")


@pytest.mark.parametrize("word", SQUEUE_STATES)
def test_every_documented_slurm_state_has_an_interface_word(word):
    assert client.interface_state(word) in STATES


@pytest.mark.parametrize("word,expected", [
    ("PENDING", "pending"), ("CONFIGURING", "pending"), ("RUNNING", "running"), ("COMPLETING", "running"),
    ("COMPLETED", "done"), ("FAILED", "failed"), ("CANCELLED", "cancelled"), ("TIMEOUT", "timed_out"),
    ("NODE_FAIL", "node_failure"), ("PREEMPTED", "preempted"), ("OUT_OF_MEMORY", "failed"), ("BOOT_FAIL", "failed"),
    ("DEADLINE", "timed_out"), ("SUSPENDED", "suspended"), ("STOPPED", "suspended"), ("REQUEUED", "pending"),
    ("REQUEUE_HOLD", "held"), ("SPECIAL_EXIT", "held"), ("REVOKED", "unknown")])
def test_slurm_states_map_onto_the_interface(word, expected):
    assert client.interface_state(word) == expected


def test_a_held_pending_job_is_suspended_while_pending():
    for reason in client.HELD_REASONS:
        assert client.interface_state("PENDING", reason) == "held"
    assert client.interface_state("PENDING", "Priority") == "pending"


def test_an_unknown_state_is_unknown_with_slurms_word_kept():
    st = client.status(SlurmJob(job_id="5", state="LEVITATING", reason="Magic"))
    assert (st.state, st.native_state) == (UNKNOWN, "LEVITATING")
    assert "LEVITATING" in st.reason and "Magic" in st.reason and not st.finished


def test_state_words_from_text_and_from_a_rest_list():
    assert client.state_word("CANCELLED by 1000") == "CANCELLED"
    assert client.state_word(["COMPLETED", "COMPLETING"]) == "COMPLETING"     # a known flag wins
    assert client.state_word(["PENDING", "REQUEUED"]) == "REQUEUED"
    assert client.state_word(["RUNNING", "UPDATE_DB"]) == "RUNNING"
    assert client.state_word([]) == "" and client.state_word(None) == ""


def test_exit_codes_from_sacct_and_wait_statuses():
    assert [client.exit_from_sacct(t) for t in ("0:0", "3:0", "0:15", "garbage", "")] == [0, 3, 143, None, None]
    assert [client.exit_from_wait_status(s) for s in (0, 768, 15, 0x8B, None)] == [0, 3, 143, 139, None]


# -- scancel -----------------------------------------------------------------------------------------------

def test_scancel_outcomes_from_its_verbose_words():
    # scancel_running.txt, scancel_ended.txt, scancel_unknown.txt (.source: scancel --verbose, jobs 16, 15, 99999).
    assert client.scancel_outcome(read("scancel_running.txt"), "16") == "terminating"
    assert client.scancel_outcome(read("scancel_ended.txt"), "15") == "finished"
    assert client.scancel_outcome(read("scancel_unknown.txt"), "99999") == "not found"
    # Words about another job, or an error this tool cannot place, are no outcome.
    assert client.scancel_outcome(read("scancel_ended.txt"), "1") is None
    assert client.scancel_outcome("scancel: error: Kill job error on job id 7: Access/permission denied", "7") is None
    assert client.scancel_outcome("", "7") is None
    assert client.scancel_argv("16") == ["scancel", "--verbose", "16"]


# -- output files ------------------------------------------------------------------------------------------

def script(*directives: str, body: str = "srun hostname\n") -> str:
    return "#!/bin/bash\n" + "".join(f"{d}\n" for d in directives) + body


def test_the_default_output_file_is_slurm_jobid_out():
    assert client.output_files(script("#SBATCH -N 2"), "42") == ["slurm-42.out"]


def test_output_and_error_patterns_are_expanded_as_slurmstepd_does():
    text = script("#SBATCH -J 'my job'", "#SBATCH -o o-%j-%J-%s-%n-%t-%A-%a-%x-%%-%4j-%12j-%q.out",
                  "#SBATCH --error=e-%x.err")
    assert client.output_files(text, "6") == [
        "o-6-6-batch-0-0-6-4294967294-my job-%-0006-0000000006-%q.out", "e-my job.err"]


def test_user_and_node_are_expanded_only_when_known():
    text = script("#SBATCH --output=%u-%N-%3N.out")
    assert client.output_files(text, "6") == ["%u-%N-%3N.out"]
    assert client.output_files(text, "6", user="root", node="node1") == ["root-node1-node1.out"]


def test_the_job_name_defaults_to_the_script_file():
    assert client.output_files(script("#SBATCH -o %x-%j.out"), "9") == ["job.sbatch-9.out"]
    assert client.output_files(script("#SBATCH -o %x-%j.out"), "9", script_name="/a/b/t2.sh") == ["t2.sh-9.out"]


def test_directives_are_read_as_sbatch_reads_them():
    text = script(" #SBATCH -J indented-is-ignored",
                  "#SBATCH --output a#b-%j.out # a comment ends the line, even inside a word",
                  "# another comment",
                  "",
                  '#SBATCH -e"q u"%j.err',
                  '#SBATCH --job-name="it\'s \\"quoted\\" # not a comment"',
                  body="echo hi\n#SBATCH -o after-the-first-command.out\n")
    assert client.directive_values(text)["job_name"] == 'it\'s "quoted" # not a comment'
    assert client.output_files(text, "7") == ["a", "q u7.err"]


def test_the_last_value_wins_and_chdir_moves_relative_names():
    text = script("#SBATCH -oX%j.out", "#SBATCH --error=/abs/e-%j.err", "#SBATCH -D sub", "#SBATCH -o Y%j.out")
    assert client.output_files(text, "8") == ["sub/Y8.out", "/abs/e-8.err"]


def test_a_backslash_turns_the_pattern_off_and_one_file_is_named_once():
    assert client.output_files(script("#SBATCH --error=e\\\\-%j.err"), "6") == ["slurm-6.out", "e-%j.err"]
    assert client.output_files(script("#SBATCH -o o-%j.out", "#SBATCH -e o-%j.out"), "11") == ["o-11.out"]


def test_a_percent_in_the_job_name_is_not_expanded_again():
    assert client.output_files(script("#SBATCH -J '50%j'", "#SBATCH -o %x.out"), "3") == ["50%j.out"]
