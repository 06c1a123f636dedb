"""The run directory's contract (trainer.rundir): names, event records, and the readers that use them.

Why these tests: status and report used to recover how each job ended with
regular expressions over log lines, and found a job's output files with the
embedded bsub's whitelist of options inside ``except Exception: return []``,
so a user template with an option that whitelist did not know (``#BSUB
-core_isolation 2``) made ``logs`` and ``report`` find nothing, silently.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from summit_jobs.hosts import host as hosts
from summit_jobs.schedulers.lsf import client as lsf
from summit_jobs.runs import report
from trainer import rundir


def test_output_files_of_a_script_with_options_no_whitelist_knows():
    script = ("#!/bin/bash\n#BSUB -core_isolation 2\n#BSUB -csm y\n#BSUB -alloc_flags \"gpumps smt4\"\n"
              "#BSUB -o tsm.%J.out\n#BSUB -eo errors.%J.%I\n#BSUB -step_cgroup y\necho hi\n#BSUB -o late.out\n")
    assert lsf.output_files(script, "42") == ["tsm.42.out", "errors.42.0"]
    from summit_jobs.runs import records as runs
    assert runs.output_files(script, "42") == ["tsm.42.out", "errors.42.0"]     # what logs and report use


def test_output_files_survive_an_unbalanced_quote_and_take_the_last_value():
    script = "#BSUB -J \"unbalanced\n#BSUB -o first.out\n#BSUB -o second.%J.out\n"
    assert lsf.output_files(script, "7") == ["second.7.out"]
    assert lsf.output_files("#!/bin/sh\necho no directives\n", "7") == []


def test_events_are_whole_records_in_one_file(tmp_path):
    env = dict(os.environ, LSB_JOBID="123")
    code = ("import sys; from trainer import rundir; "
            "[rundir.event(sys.argv[1], 'stopped', step=i, reason='SIGUSR2') for i in range(200)]")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=env) for _ in range(4)]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    text = (tmp_path / rundir.EVENTS).read_text()
    events = rundir.parse_events(text)
    # No torn or interleaved line. (A writer that reads the file's end while another's append is still
    # landing may start its record on a fresh line: an empty line, which readers skip.)
    assert len(events) == len([ln for ln in text.splitlines() if ln.strip()]) == 800
    assert {e["job"] for e in events} == {"123"} and {e["reason"] for e in events} == {"SIGUSR2"}
    assert rundir.parse_events('{"event": "bogus", "job": "1"}\nnot json\n{"event": "complete"}\n') == \
        [{"event": "complete"}]


def test_report_reads_how_each_job_ended_from_events_not_logs(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / rundir.SCRIPT).write_text("#!/bin/bash\n#BSUB -core_isolation 2\n#BSUB -o tsm.%J.out\n")
    for jid in ("11", "12", "13", "14"):
        (run / rundir.exitcode_name(jid)).write_text("0\n")
        (run / f"tsm.{jid}.out").write_text("nothing the report could parse\n")
    lines = [{"event": "stopped", "job": "11", "step": 40, "reason": "SIGUSR2", "time": 1.0},
             {"event": "resumed", "job": "12", "step": 40, "checkpoint": "ckpt-000000040.pt", "time": 2.0},
             {"event": "complete", "job": "12", "step": 90, "epochs": 3, "time": 3.0},
             {"event": "already_complete", "job": "13", "by": "script", "time": 4.0}]
    (run / rundir.EVENTS).write_text("".join(json.dumps(e) + "\n" for e in lines))
    # Job 14 has no events: its log is read, as for a run written before events existed.
    (run / "tsm.14.out").write_text("trainer: stopping at step 7 (SIGTERM)\n")
    record = {"name": "run", "run_dir": str(run), "job_ids": ["11", "12", "13", "14"]}
    jobs = {j["job_id"]: j for j in report._jobs(hosts.LocalHost(), str(run), record)}
    assert jobs["11"]["ended"] == "stopped at step 40 (SIGUSR2), checkpoint saved"
    assert (jobs["12"]["resumed_from_step"], jobs["12"]["ended"]) == (40, "training complete")
    assert jobs["13"]["ended"] == "nothing left to do (run already complete)"
    assert jobs["14"]["ended"] == "stopped at step 7 (SIGTERM), checkpoint saved"


def test_names_are_spelled_once():
    """The login side and the templates take the run directory's names from trainer.rundir."""
    repo = Path(__file__).resolve().parents[2]
    from summit_jobs.runs import records as runs
    assert (runs.RECORD, runs.SCRIPT, report.METRICS) == (rundir.RECORD, rundir.SCRIPT, rundir.METRICS)
    prologue = (repo / "templates" / "common" / "partials" / "prologue.j2").read_text()
    assert "{{ rundir.EVENTS }}" in prologue and "events.jsonl" not in prologue


def test_launch_events_name_what_ran_and_from_which_step(tmp_path):
    """Each launch of a chain records its options, code and place; the second names the step it resumes."""
    import importlib.metadata
    import socket

    import torch
    from trainer_utils import make_dataset, run_ranks, tiny_args
    repo = Path(__file__).resolve().parents[2]
    data = make_dataset(tmp_path / "data", train=8, val=2)
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=2, test_last=1)
    run_ranks(1, args + ["--max-steps", "3"], tmp_path / "logs1", extra_env={"LSB_JOBID": "111"})
    run_ranks(1, args, tmp_path / "logs2", extra_env={"LSB_JOBID": "112"})
    events = rundir.parse_events((run / rundir.EVENTS).read_text())
    assert [(e["event"], e["job"]) for e in events] == [("launch", "111"), ("stopped", "111"), ("launch", "112"),
                                                         ("resumed", "112"), ("complete", "112")]
    first, second = events[0], events[2]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=str(repo), capture_output=True, text=True).stdout.strip()
    for e in (first, second):
        assert (e["mode"], e["seed"], e["ranks"], e["engine"], e["torch"]) == ("train", 0, 1, "ddp", torch.__version__)
        assert e["code_revision"] == (head or None) and e["host"] == socket.gethostname()
        assert e["summit_jobs"] == importlib.metadata.version("summit-jobs")
        assert e["options"]["run_dir"] == str(run) and e["options"]["data"] == str(data)
    assert (first["step"], first["options"]["max_steps"], "resumed_from" not in first) == (0, 3, True)
    assert (second["step"], second["resumed_from"], second["options"]["max_steps"]) == (3, "ckpt-000000003.pt", 0)
    assert events[4]["step"] == 8 and (run / rundir.COMPLETE).read_text() == "step 8\n"


def test_code_revision_is_none_outside_a_checkout_and_when_git_hangs(tmp_path):
    assert rundir.code_revision(tmp_path) is None
    assert rundir.installed_version("no-such-distribution-here") is None
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "git").write_text("#!/bin/sh\nexec sleep 30\n")
    (fake / "git").chmod(0o755)
    code = ("import time; from trainer import rundir; t = time.time(); "
            "print(rundir.code_revision(rundir.__file__.rsplit('/', 1)[0]), round(time.time() - t))")
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(repo),
                         timeout=60)
    assert out.returncode == 0, out.stderr
    revision, seconds = out.stdout.split()
    assert revision == "None" and int(seconds) <= rundir.GIT_TIMEOUT_S + 2


def test_a_line_cut_short_does_not_swallow_the_next_record(tmp_path):
    """A writer killed mid-line leaves a line without its end; the next record still starts a line."""
    (tmp_path / rundir.EVENTS).write_text('{"event": "stopped", "job": "1", "step": 4}\n{"event": "laun')
    rundir.event(tmp_path, "complete", step=9, epochs=1)
    assert [(e["event"], e["step"]) for e in rundir.parse_events((tmp_path / rundir.EVENTS).read_text())] == \
        [("stopped", 4), ("complete", 9)]


def test_a_resumed_run_after_a_cut_metrics_line_keeps_its_first_record(tmp_path):
    from trainer.loop.metrics import read_metrics
    from trainer_utils import make_dataset, run_ranks, tiny_args
    data = make_dataset(tmp_path / "data", train=8, val=2)
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=2, test_last=1, eval_every=0)
    run_ranks(1, args + ["--max-steps", "3"], tmp_path / "logs1")
    with open(run / rundir.METRICS, "a") as f:          # what a kill in the middle of a write leaves
        f.write('{"kind": "train", "step": 4, "lo')
    run_ranks(1, args, tmp_path / "logs2")
    steps = [r["step"] for r in read_metrics(run) if r["kind"] == "train"]
    assert steps == list(range(1, 9)), steps           # step 4, the resumed launch's first record, is read


def test_the_scores_folder_is_named_once():
    """The trainer writes and `fuse` reads the per-video test scores under the contract's folder name."""
    from summit_jobs.runs import fuse
    from trainer import scores
    assert "``scores/<checkpoint stem>.npz``" in rundir.__doc__
    assert fuse.SCORES is rundir.SCORES == scores.SCORES == "scores"
    assert scores.scores_name("epoch-0003.pt") == "scores/epoch-0003.npz"
    assert scores.scores_name("/x/best.pt", test_only=True) == "scores/test-only-best.npz"
