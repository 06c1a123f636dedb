"""LSF output parsers against captured outputs, and against what the embedded LSF prints, so
both sides agree on one grammar.

Each fixture under tests/data/lsf/ that has a ``.source`` file next to it says where it was
captured (repository and path, or issue) and what was changed; the older fixtures without one
were written from IBM's documented formats."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import run_cli

from summit_jobs.schedulers.lsf import client as lsf

DATA = Path(__file__).resolve().parents[2] / "data" / "lsf"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_bsub_default_queue_form():
    assert lsf.parse_bsub_output(read("bsub_default_queue.txt")) == ("779469", "batch")


def test_bsub_explicit_queue_and_long_id():
    assert lsf.parse_bsub_output(read("bsub_explicit_queue_long_id.txt")) == ("12345678", "debug")


def test_bsub_with_banner_line():
    assert lsf.parse_bsub_output(read("bsub_lassen_pbatch.txt")) == ("4120", "pbatch")


def test_bsub_refusal_keeps_raw_output():
    with pytest.raises(lsf.LsfOutputError) as exc:
        lsf.parse_bsub_output(read("bsub_rejected.txt"))
    assert "Project not specified. Job not submitted." in str(exc.value)


def test_bjobs_json_states_codes_and_not_found():
    found, missing = lsf.parse_bjobs_json(read("bjobs_json.txt"))
    assert missing == ["123"]
    assert found["779469"].state == "done" and found["779469"].exit_code == 0
    long = found["12345678"]
    assert long.state == "timed_out" and long.exit_code == 140 and long.reason.startswith("TERM_RUNLIMIT")
    pend = found["12345679"]
    assert pend.state == "pending" and "dependency" in pend.reason and pend.exit_code is None
    assert not pend.finished and long.finished


def test_bjobs_json_garbage_is_an_error_with_the_text():
    with pytest.raises(lsf.LsfOutputError) as exc:
        lsf.parse_bjobs_json("bjobs: command not found")
    assert "command not found" in str(exc.value)


def test_bjobs_plain_pending_row_without_exec_host_and_long_id():
    found, missing = lsf.parse_bjobs_plain(read("bjobs_plain.txt"))
    assert set(found) == {"779469", "12345678", "779470"}
    assert missing == ["123"]
    assert found["12345678"].state == "pending" and found["12345678"].queue == "debug"
    assert found["12345678"].name == "tsm-256" and found["12345678"].exec_host == ""
    assert found["779469"].exec_host == "batch2" and found["779469"].submit_time == "Nov 10 12:01"


def test_bjobs_plain_truncated_id_is_refused():
    with pytest.raises(lsf.LsfOutputError, match="truncated"):
        lsf.parse_bjobs_plain(read("bjobs_plain_truncated.txt"))


def test_bsub_after_busy_banner_lines():
    """bsub on a busy cluster prints 'Cannot connect to LSF. Please wait ...' lines before its answer."""
    assert lsf.parse_bsub_output(read("bsub_banner_busy.txt")) == ("12345678", "normal")


def test_bjobs_json_after_busy_banner_lines():
    """The banner lines before the JSON do not cost the status of any job."""
    found, missing = lsf.parse_bjobs_json(read("bjobs_json_banner.txt"))
    assert missing == []
    assert found["12345678"].state == "cancelled" and found["12345678"].reason.startswith("TERM_OWNER")
    assert found["12345679"].state == "pending" and "waiting for scheduling" in found["12345679"].reason
    owners = lsf.parse_bjobs_owner(read("bjobs_json_banner.txt"))
    assert set(owners) == {"12345678", "12345679"}


def test_bjobs_json_psusp_job_on_summit():
    found, _ = lsf.parse_bjobs_json(read("bjobs_json_psusp_summit.txt"))
    held = found["58652"]
    assert held.state == "held" and held.native_state == "PSUSP" and not held.finished
    assert held.exit_code is None and held.name == "hold_job"


def test_bjobs_json_every_documented_state_is_placed_and_kept():
    found, _ = lsf.parse_bjobs_json(read("bjobs_json_documented_states.txt"))
    assert {j: (s.state, s.native_state) for j, s in found.items()} == {
        "2001": ("pending", "PROV"), "2002": ("pending", "WAIT"), "2003": ("suspended", "USUSP"),
        "2004": ("suspended", "SSUSP"), "2005": ("unknown", "UNKWN"), "2006": ("unknown", "ZOMBI")}
    assert not any(s.finished for s in found.values())


def test_bjobs_json_bad_records_do_not_cost_the_others():
    """An error record without JOBID gives its id from the text; an undocumented state is UNKNOWN
    with LSF's word kept; the good records around them are read as usual."""
    found, missing = lsf.parse_bjobs_json(read("bjobs_json_bad_records.txt"), ["779469", "2", "779471", "779472"])
    assert missing == ["2"]
    assert found["779469"].state == "running" and found["779469"].finish_time == "Nov 10 14:05 E"
    odd = found["779471"]
    assert odd.state == lsf.UNKNOWN and odd.native_state == "SUSP" and "'SUSP'" in odd.reason and not odd.finished
    assert found["779472"].state == "done" and found["779472"].exit_code == 0
    assert set(lsf.parse_bjobs_owner(read("bjobs_json_bad_records.txt"))) == {"779469", "779471", "779472"}


def test_bjobs_json_error_naming_no_job_marks_only_the_jobs_left_without_a_record():
    text = ('{"COMMAND":"bjobs","JOBS":3,"RECORDS":[{"JOBID":"7","STAT":"RUN"},'
            '{"ERROR":"Failed in an LSF library call: Slave LIM configuration is not ready yet"},'
            '{"JOBID":"8","ERROR":"Job <8>: Permission denied"}]}')
    found, missing = lsf.parse_bjobs_json(text, ["7", "8", "9"])
    assert missing == [] and found["7"].state == "running"
    assert found["8"].state == lsf.UNKNOWN and "Permission denied" in found["8"].reason
    assert found["9"].state == lsf.UNKNOWN and "LIM configuration" in found["9"].reason
    assert lsf.parse_bjobs_owner(text, ["7", "8", "9"])["9"]["ERROR"].startswith("bjobs printed no record")
    with pytest.raises(lsf.LsfOutputError, match="LIM configuration"):
        lsf.parse_bjobs_json(text)      # no asked ids: the error cannot be placed, and is not dropped


def test_bjobs_plain_wide_table_names_with_spaces_and_all_states():
    found, missing = lsf.parse_bjobs_plain(read("bjobs_plain_wide_whitehead.txt"))
    assert len(found) == 14 and missing == []
    assert found["5085585"].name == "phenix.autobuild autobuild_config.eff"
    assert found["5085585"].exec_host == "it-c05b12" and found["5085585"].submit_time == "Oct 31 14:05"
    assert {found[j].state for j in ("5085611", "5085607", "5085608")} == {"held", "unknown"}
    assert found["5085704"].name == "nf-trinityInchwormChrysalis" and found["5085704"].queue == "normal"
    assert found["5085704"].exec_host.count("it-r16u31") == 10


def test_bjobs_plain_banner_lines_and_truncated_names():
    found, _ = lsf.parse_bjobs_plain(read("bjobs_plain_banner_truncated_names.txt"))
    assert len(found) == 6 and found["5157393"].name == "*l_cmd_bd)" and found["5157393"].exec_host == "it-c05b10"


def test_bjobs_plain_nine_digit_ids_and_blank_exec_host():
    found, _ = lsf.parse_bjobs_plain(read("bjobs_plain_cern_pending.txt"))
    assert len(found) == 10 and all(s.state == "pending" and s.exec_host == "" for s in found.values())
    assert found["811659822"].queue == "grid_1nd_a" and found["811659822"].name == "*223962398"


def test_bjobs_plain_exec_host_continuation_lines():
    found, _ = lsf.parse_bjobs_plain(read("bjobs_plain_issue927.txt"))
    assert list(found) == ["5182892"] and found["5182892"].name == "*Chrysalis"


def test_bjobs_plain_cut_name_with_a_space():
    """'*sleep 100': a pending job's name with a space is not taken for its (blank) EXEC_HOST."""
    found, _ = lsf.parse_bjobs_plain(read("bjobs_plain_name_with_spaces.txt"))
    pend, run = found["779471"], found["779472"]
    assert (pend.state, pend.exec_host, pend.name, pend.submit_time) == ("pending", "", "*sleep 100", "Nov 10 12:03")
    assert (run.exec_host, run.name) == ("batch2", "*sleep 100")
    assert (found["779473"].state, found["779473"].native_state) == ("pending", "PROV")


def test_bjobs_plain_columns_read_from_the_header():
    """Summit's LSB_BJOBS_FORMAT: SLOTS, START/FINISH_TIME before JOB_NAME, '-' for no value."""
    found, _ = lsf.parse_bjobs_plain(read("bjobs_plain_summit_format.txt"))
    run = found["779469"]
    assert (run.state, run.queue, run.name) == ("running", "batch", "tsm 256 nodes")
    assert (run.start_time, run.finish_time) == ("Nov 10 12:05", "Nov 10 14:05")
    assert found["779470"].start_time == "" and found["779470"].name == "tsm-chain"
    assert found["779468"].finish_time == "Nov 10 11:40 L" and found["779468"].name == "probe"


def test_bjobs_plain_unknown_state_keeps_lsf_word():
    text = ("JOBID   USER    STAT  QUEUE      FROM_HOST   EXEC_HOST   JOB_NAME   SUBMIT_TIME\n"
            "779471  alice   SUSP  batch      login3      batch2      tsm        Nov 10 12:03\n")
    st = lsf.parse_bjobs_plain(text)[0]["779471"]
    assert st.state == lsf.UNKNOWN and st.native_state == "SUSP" and "'SUSP'" in st.reason


def test_bkill_already_finished_on_stderr_with_exit_255():
    """bkill answers a finished job on stderr with exit status 255: still 'finished', not an error."""
    from summit_jobs.hosts.host import Result
    res = Result(255, "", read("bkill_already_finished_stderr.txt"))
    assert lsf.bkill_outcome(res.text) == {"11": "finished"}
    res = Result(255, "", read("bkill_no_matching_stderr.txt"))
    assert lsf.bkill_outcome(res.text) == {"22": "not found"}


def test_bkill_outcomes():
    assert lsf.bkill_outcome(read("bkill_mixed.txt")) == {
        "779469": "terminating", "779470": "finished", "5": "not found"}


def test_command_builders():
    assert lsf.bsub_argv("job.lsf", "file") == (["bsub", "job.lsf"], False)
    assert lsf.bsub_argv("job.lsf", "stdin", depends_on="12345678") == (["bsub", "-w", "ended(12345678)"], True)
    argv = lsf.bjobs_argv(["1", "22"])
    assert argv[:2] == ["bjobs", "-a"] and argv[-3:] == ["-json", "1", "22"]
    with pytest.raises(ValueError):
        lsf.bjobs_argv(["1; rm -rf /"])
    with pytest.raises(ValueError):
        lsf.bsub_argv("job.lsf", "file", depends_on="$(x)")
    assert lsf.batches([str(i) for i in range(450)], 200)[-1] == [str(i) for i in range(400, 450)]


def test_embedded_bjobs_output_round_trips(tmp_path, monkeypatch, capsys):
    """What the embedded bjobs prints (-json and plain) is read back by the same parsers."""
    import time

    from summit_jobs.schedulers.lsf.embedded.commands import bjobs
    from summit_jobs.schedulers.lsf.embedded import state
    monkeypatch.setenv("SUMMIT_JOBS_LSF_HOME", str(tmp_path))
    home = state.home()
    base = {"queue": "batch", "name": "tsm", "user": "alice", "from_host": "vm", "cores": 2,
            "submit_time": time.time(), "dependency": None, "project": None, "pend_reason": None,
            "supervisor_pid": None}
    jdir = state.job_dir(home, 12345678)
    jdir.mkdir(parents=True)
    state.save_job(home, {**base, "id": 12345678, "state": "PEND", "hosts": [],
                          "pend_reason": "Not enough virtual nodes free", "submit_time": time.time() + 60})
    state.job_dir(home, 7).mkdir(parents=True)
    state.save_job(home, {**base, "id": 7, "state": "EXIT", "hosts": ["vnode01"], "exit_code": 143,
                          "start_time": time.time(), "finish_time": time.time(),
                          "exit_reason": "TERM_RUNLIMIT: job killed after reaching LSF run time limit"})
    assert bjobs.main(["-a", "-o", " ".join(lsf.STATUS_FIELDS), "-json", "12345678", "7", "9"]) == 0
    found, missing = lsf.parse_bjobs_json(capsys.readouterr().out)
    assert missing == ["9"]
    assert found["12345678"].state == "pending" and "virtual nodes" in found["12345678"].reason
    assert found["7"].exit_code == 143 and found["7"].reason.startswith("TERM_RUNLIMIT")
    bjobs.main(["-a"])
    found, _ = lsf.parse_bjobs_plain(capsys.readouterr().out)
    assert found["12345678"].state == "pending" and found["7"].state == "failed"   # the plain table has no reason
    json.dumps(found["7"].to_dict())


#: A site's bjobs for the CLI tests: prints the answers (fixture files) in turn, the last one again after that.
SITE_BJOBS = """
import os, sys
answers = os.environ["SITE_BJOBS"].split(os.pathsep)
counter = os.environ["SITE_BJOBS_COUNT"]
n = int(open(counter).read()) if os.path.exists(counter) else 0
open(counter, "w").write(str(n + 1))
sys.stdout.write(open(answers[min(n, len(answers) - 1)]).read())
"""
#: A site's bkill for the CLI tests: terminates what it is given, noting the ids in SITE_BKILLED.
SITE_BKILL = """
import os, sys
open(os.environ["SITE_BKILLED"], "a").write(" ".join(sys.argv[1:]) + "\\n")
for j in sys.argv[1:]:
    print(f"Job <{j}> is being terminated")
"""


def site_lsf(tmp_path: Path, cli_env: dict, *answers: str) -> dict:
    """An environment for ``summit-jobs --machine summit --host local`` whose LSF commands print the
    given captures, as a site's LSF would (a real process on PATH, read by the real entry point)."""
    bin_dir = tmp_path / "site-bin"
    bin_dir.mkdir()
    for name, body in (("bjobs", SITE_BJOBS), ("bkill", SITE_BKILL)):
        (bin_dir / name).write_text(f"#!{sys.executable}" + body)
        (bin_dir / name).chmod(0o755)
    return dict(cli_env, PATH=f"{bin_dir}{os.pathsep}{cli_env['PATH']}", XDG_DATA_HOME=str(tmp_path / "data"),
                SITE_BJOBS=os.pathsep.join(str(DATA / a) for a in answers),
                SITE_BJOBS_COUNT=str(tmp_path / "count"), SITE_BKILLED=str(tmp_path / "bkilled"))


def status_json(env: dict, job_id: str) -> dict:
    proc = run_cli(["--machine", "summit", "--host", "local", "status", "--json", job_id], env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)[0]


def test_status_reads_bjobs_behind_a_busy_banner(tmp_path, cli_env):
    row = status_json(site_lsf(tmp_path, cli_env, "bjobs_json_banner.txt"), "12345678")
    assert row["state"] == "cancelled" and row["cancelled"] is True and "TERM_OWNER" in row["reason"]


def test_status_of_a_job_named_only_in_an_error_text(tmp_path, cli_env):
    """{"ERROR": "Job <2> is not found"} without JOBID: job 2 is gone from bjobs, the status goes on."""
    row = status_json(site_lsf(tmp_path, cli_env, "bjobs_json_bad_records.txt"), "2")
    assert row["state"] == "unknown" and "gone from bjobs" in row["reason"] and row["native_state"] is None


def test_status_watch_goes_on_while_lsf_lists_a_job_in_an_unknown_state(tmp_path, cli_env):
    """SUSP (not a documented state) shows as UNKNOWN with LSF's word, and --watch waits for the job's end."""
    env = site_lsf(tmp_path, cli_env, "bjobs_json_bad_records.txt", "bjobs_json_bad_records_later.txt")
    row = status_json(env, "779471")
    assert row["state"] == "unknown" and row["native_state"] == "SUSP" and "'SUSP'" in row["reason"]
    (tmp_path / "count").unlink()            # the site's answers start again from the first
    proc = run_cli(["--machine", "summit", "--host", "local", "status", "--watch", "--interval", "0.2", "779471"],
                   env)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "unknown" in proc.stdout and "done" in proc.stdout


def test_cancel_kills_the_checked_jobs_when_bjobs_errs_on_others(tmp_path, cli_env):
    """An error record (with or without a job id) leaves its job alive and unkilled; the others are killed."""
    answer = tmp_path / "owner.json"
    answer.write_text('{"COMMAND":"bjobs","JOBS":3,"RECORDS":[{"JOBID":"7","STAT":"RUN","JOB_NAME":"tsm"},'
                      '{"JOBID":"8","ERROR":"Job <8>: Permission denied"},{"ERROR":"Internal library error"}]}')
    env = site_lsf(tmp_path, cli_env, str(answer))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"name": "tsm-run", "run_dir": str(run_dir), "job_name": "tsm",
                                                  "job_ids": ["7", "8", "9"], "machine": "summit"}))
    proc = run_cli(["--machine", "summit", "--host", "local", "cancel", str(run_dir)], env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "job 8: NOT killed: bjobs: Job <8>: Permission denied" in proc.stderr
    assert "job 9: NOT killed: bjobs printed no record" in proc.stderr and "Internal library error" in proc.stderr
    assert (tmp_path / "bkilled").read_text().split() == ["7"]


# -- lsid and bqueues (summit-jobs doctor) ----------------------------------------------------------------------
from summit_jobs.schedulers.lsf import doctor  # noqa: E402 - kept with the tests that use it


@pytest.mark.parametrize("name, product, version, cluster, master", [
    ("lsid_ibmcloud_standard_10_1_0_13.txt", "IBM Spectrum LSF Standard", (10, 1, 0, 13), "HPCCluster",
     "icgen2host-10-240-0-37"),
    ("lsid_datadog_community_10_1_0_15.txt", "IBM Spectrum LSF Community Edition", (10, 1, 0, 15), "test-cluster",
     "ip-11-21-111-198.ec2.internal"),
    ("lsid_lsf_git_ops_10_1_0_6.txt", "IBM Spectrum LSF Standard", (10, 1, 0, 6), "cluster1", "test.ibm.com"),
    ("lsid_k8s_connector_10_1_0_0.txt", "IBM Spectrum LSF Connetor for Kubernetes", (10, 1, 0, 0), "myCluster",
     "lsfmaster"),
    ("lsid_ibm_doc_10_1_0.txt", "LSF", (10, 1, 0), "lsf10", "hosta.company.com"),
    ("lsid_lsf3_user_guide.txt", "LSF", (3, 0), "test_cluster", "hostA"),
])
def test_lsid_product_version_cluster_and_master(name, product, version, cluster, master):
    info = doctor.parse_lsid(read(name))
    assert (info.product, info.version, info.cluster, info.master) == (product, version, cluster, master)


def test_lsid_of_an_lsf_suite_reads_lsf_s_version_not_the_suite_s():
    info = doctor.parse_lsid(read("lsid_ibmcloud_suite_10_1_0_14.txt"))
    assert info.version == (10, 1, 0, 14) and info.version_text == "10.1.0.14"
    assert info.suite == "IBM Spectrum LSF Suite for Enterprise 10.2.0.14"
    assert info.build == "Jan 14 2025" and info.master == "tue-test14-and-mgmt-1-3271-001.comp.com"


def test_lsid_after_busy_banner_lines_and_garbage_kept_in_the_error():
    banner = read("bsub_banner_busy.txt").split("Job <")[0]
    assert doctor.parse_lsid(banner + read("lsid_lsf_git_ops_10_1_0_6.txt")).version == (10, 1, 0, 6)
    with pytest.raises(lsf.LsfOutputError, match="lsid printed no line") as err:
        doctor.parse_lsid("ls_getclustername(): Cannot locate master LIM now, try later\n")
    assert "Cannot locate master LIM" in str(err.value)


def test_lsf_version_against_what_a_profile_needs():
    """bjobs -json came with LSF 10.1 Fix Pack 2: 10.1.0 (no fix pack) and LSF 3.0 fail, 10.1.0.6 passes."""
    from summit_jobs.profiles import machines
    summit = machines.load("summit")
    ok = doctor.check_lsf_version(doctor.parse_lsid(read("lsid_lsf_git_ops_10_1_0_6.txt")), None, summit)
    assert ok.status == doctor.OK and "10.1.0.6" in ok.found
    for name in ("lsid_ibm_doc_10_1_0.txt", "lsid_lsf3_user_guide.txt"):
        bad = doctor.check_lsf_version(doctor.parse_lsid(read(name)), None, summit)
        assert bad.status == doctor.FAIL and "older than 10.1.0.2" in bad.found and "Fix Pack 2" in bad.fix
    gpu = machines.load("lsf-gpu")
    assert [w for _, w in doctor.lsf_requirements(gpu)][-1].startswith("bsub -gpu")
    assert "bsub -gpu" not in " ".join(w for _, w in doctor.lsf_requirements(summit))


def test_bqueues_default_tables():
    rows = doctor.parse_bqueues(read("bqueues_lsf_kubernetes_inact.txt"))
    assert list(rows) == ["priority", "normal", "idle", "night"]
    assert rows["normal"].open and rows["normal"].active and rows["normal"].columns["PRIO"] == "30"
    assert rows["night"].status == "Open:Inact" and rows["night"].open and not rows["night"].active
    busy = doctor.parse_bqueues(read("bqueues_lsf_kubernetes_running.txt"))
    assert (busy["normal"].columns["PEND"], busy["normal"].columns["RUN"]) == ("153", "570")
    one = doctor.parse_bqueues(read("bqueues_lsf_git_ops_one_queue.txt"))       # PRIO off its column
    assert list(one) == ["common"] and one["common"].columns["PRIO"] == "30" and one["common"].active


def test_bqueues_of_ibm_s_documented_example():
    rows = doctor.parse_bqueues(read("bqueues_ibm_doc_example.txt"))      # a tab, and Open:Inactive spelt out
    assert rows["priority"].columns["SUSP"] == "1" and rows["priority"].active
    assert rows["night"].status == "Open:Inactive" and not rows["night"].active
    assert rows["interactive"].columns["PRIO"] == "400"


def test_bqueues_wide_extra_columns_banner_and_bad_rows():
    text = read("bsub_banner_busy.txt").split("Job <")[0] + read("bqueues_lsf_kubernetes_inact.txt")
    assert "night" in doctor.parse_bqueues(text)
    with pytest.raises(lsf.LsfOutputError, match="fields for 11 columns") as err:
        doctor.parse_bqueues(read("bqueues_lsf_kubernetes_inact.txt") + "broken 30 Open:Active\n")
    assert "broken 30 Open:Active" in str(err.value)
    with pytest.raises(lsf.LsfOutputError, match="no QUEUE_NAME header"):
        doctor.parse_bqueues("")


def test_queue_checks_name_what_is_missing_closed_or_held():
    from summit_jobs.profiles import machines
    rows = doctor.parse_bqueues(read("bqueues_lsf_kubernetes_inact.txt"))
    checks = doctor.check_queues(machines.load("summit"), rows, None)
    assert checks[0].name == "queue batch (default)" and checks[0].status == doctor.FAIL
    assert "priority, normal, idle, night" in checks[0].found and "--queue" in checks[0].fix
    closed = dict(rows, batch=doctor.QueueRow("batch", "Closed:Active", {}))
    assert doctor.check_queues(machines.load("summit"), closed, None)[0].status == doctor.FAIL
    held = dict(rows, batch=doctor.QueueRow("batch", "Open:Inact", {}))
    assert doctor.check_queues(machines.load("summit"), held, None)[0].status == doctor.WARN


def _job_states(lsf_home) -> str:
    """Every job record's state and reason, and its supervisor's log: what a failed count is checked against."""
    out = []
    for rec in sorted(Path(lsf_home).glob("jobs/*/job.json")):
        job = json.loads(rec.read_text())
        log = rec.parent / "supervisor.log"
        out.append(f"job {job.get('id')}: {job.get('state')} {job.get('exit_reason') or job.get('pend_reason') or ''}"
                   f"\n{log.read_text()[-800:] if log.exists() else ''}")
    return "\n".join(out)


def test_embedded_lsid_and_bqueues_round_trip(tmp_path, cli_env):
    """What the embedded lsid and bqueues print (real processes) is read by the same parsers, and running
    jobs' slots show in their queue's RUN column."""
    from summit_jobs.hosts import host as hosts
    from summit_jobs import resources
    env = hosts.embedded_environment(dict(cli_env, SUMMIT_JOBS_LSF_HOME=str(tmp_path / "lsf")), 4, 2)
    lsid = subprocess.run(["lsid"], env=env, capture_output=True, text=True, timeout=60)
    info = doctor.parse_lsid(lsid.stdout)
    assert info.version == (10, 1, 0, 2) and info.cluster == "embedded" and info.product == "IBM Spectrum LSF Standard"
    blocker = tmp_path / "hold.sh"
    blocker.write_text("#!/bin/sh\nsleep 30\n")
    for _ in range(2):                      # two jobs of 2 nodes x 2 cores fill the 4 nodes
        subprocess.run(["bsub", "-nnodes", "2", "-q", "debug", "-o", "/dev/null", str(blocker)], env=env,
                       capture_output=True, text=True, timeout=60, cwd=tmp_path, check=True)
    try:
        deadline, debug = time.monotonic() + 30, {}
        while time.monotonic() < deadline:  # a job's supervisor moves it to RUN after bsub returns
            out = subprocess.run(["bqueues", "-w"], env=env, capture_output=True, text=True, timeout=60)
            rows = doctor.parse_bqueues(out.stdout)
            debug = {k: int(v) for k, v in rows["debug"].columns.items() if k in ("NJOBS", "PEND", "RUN")}
            if debug["RUN"] == 8:
                break
            time.sleep(0.2)
        assert list(rows) == ["batch", "debug"] and all(r.status == "Open:Active" for r in rows.values())
        assert debug["NJOBS"] == debug["PEND"] + debug["RUN"] == 8 and debug["RUN"] == 8, \
            f"{debug}\n{_job_states(tmp_path / 'lsf')}"                                 # 2 jobs x 4 slots
        assert rows["batch"].columns["NJOBS"] == "0"
        missing = subprocess.run(["bqueues", "nosuch"], env=env, capture_output=True, text=True, timeout=60)
        assert missing.returncode == 255 and "nosuch: No such queue" in missing.stderr
    finally:
        ids = subprocess.run(["bjobs", "-o", "jobid", "-noheader"], env=env, capture_output=True, text=True,
                             timeout=60).stdout.split()
        subprocess.run(["bkill", *ids], env=env, capture_output=True, timeout=60)
    assert resources.embedded_bin_dir().joinpath("bqueues").exists()


def test_bqueues_counts_pending_running_and_suspended_slots_per_queue():
    """The embedded bqueues' counts from job records: slots per state, suspended states as SUSP, ended jobs
    and other queues' jobs left out."""
    from summit_jobs.schedulers.lsf.embedded.commands import bqueues
    jobs = [{"queue": "debug", "state": "RUN", "slots": ["2", "2"]},
            {"queue": "debug", "state": "PEND", "slots": None},
            {"queue": "debug", "state": "PEND", "slots": ["4"]},
            {"queue": "debug", "state": "USUSP", "slots": ["3"]},
            {"queue": "debug", "state": "DONE", "slots": ["8"]},
            {"queue": "elsewhere", "state": "RUN", "slots": ["5"]},
            {"queue": "batch", "state": "SSUSP", "slots": ["1"]}]
    counts = bqueues.task_counts(jobs, ["batch", "debug"])
    assert counts == {"batch": {"PEND": 0, "RUN": 0, "SUSP": 1}, "debug": {"PEND": 5, "RUN": 4, "SUSP": 3}}
    line = bqueues.row("debug", counts["debug"])
    assert doctor.parse_bqueues(bqueues.header() + "\n" + line + "\n")["debug"].columns["NJOBS"] == "12"
