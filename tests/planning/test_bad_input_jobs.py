"""Bad input to submit, simulate, scaling, report, machines and the config/profile files.

Each case is a command line (or a file) a user could really write; each must
end with a non-zero exit, no traceback, nothing printed as if it worked, and a
message that names the value. Run through the real entry point (a process).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from badinput import assert_refused
from helpers import run_cli

SUMMIT = ["--machine", "summit", "submit", "--project", "ABC123", "--dry-run"]
SUMMIT2 = [*SUMMIT, "--nodes", "2"]
SIM = ["--machine", "summit", "simulate", "--project", "ABC123", "--dry-run"]

CASES = [
    # submit: nodes
    ("nodes-zero", [*SUMMIT, "--nodes", "0"], ["node count 0"]),
    ("nodes-negative", [*SUMMIT, "--nodes", "-4"], ["node count -4"]),
    ("nodes-fraction", [*SUMMIT, "--nodes", "2.5"], ["'2.5'"]),
    ("nodes-word", [*SUMMIT, "--nodes", "many"], ["'many'"]),
    ("nodes-empty", [*SUMMIT, "--nodes", ""], ["''"]),
    ("nodes-above-machine", [*SUMMIT, "--nodes", "4609"], ["4,609", "4,608"]),
    ("nodes-unicode-digit", [*SUMMIT, "--nodes", "٣"], ["'٣'"]),
    # walltime
    ("walltime-over-bin", [*SUMMIT, "--nodes", "256", "--walltime", "12:01"], ["12:01"]),
    ("walltime-seconds", [*SUMMIT2, "--walltime", "1:00:00"], ["'1:00:00'"]),
    ("walltime-superscript", [*SUMMIT2, "--walltime", "²"], ["'²'"]),
    ("walltime-negative", [*SUMMIT2, "--walltime", "-5"], ["'-5'"]),
    ("walltime-zero", [*SUMMIT2, "--walltime", "0"], ["'0'"]),
    ("walltime-60-minutes", [*SUMMIT2, "--walltime", "0:60"], ["'0:60'"]),
    ("walltime-one-digit-minutes", [*SUMMIT2, "--walltime", "1:5"], ["'1:5'"]),
    ("walltime-word", [*SUMMIT2, "--walltime", "soon"], ["'soon'"]),
    ("walltime-huge", [*SUMMIT2, "--walltime", "99999999999"], ["'99999999999'"]),
    # queues
    ("queue-unknown", [*SUMMIT2, "--queue", "nope"], ["'nope'"]),
    ("queue-debug-too-long", [*SUMMIT2, "--queue", "debug", "--walltime", "3:00"], ["3:00", "2:00"]),
    ("queue-killable-bin", [*SUMMIT, "--nodes", "92", "--queue", "killable"], ["'killable'", "92"]),
    ("queue-batch-hm-size", [*SUMMIT, "--nodes", "55", "--queue", "batch-hm"], ["'batch-hm'", "55"]),
    ("queue-injection", [*SUMMIT2, "--queue", "batch;touch x"], ["'batch;touch x'"]),
    ("chain-debug", [*SUMMIT2, "--queue", "debug", "--walltime", "0:30", "--chain", "2"], ["'debug'"]),
    ("chain-zero", [*SUMMIT2, "--chain", "0"], ["0"]),
    ("chain-over-queue-cap", [*SUMMIT2, "--chain", "101"], ["--chain 101", "100"]),
    ("until-complete-with-chain", [*SUMMIT2, "--until-complete", "--chain", "3"], ["--chain 3"]),
    ("until-complete-debug", [*SUMMIT2, "--until-complete", "--queue", "debug", "--walltime", "0:30"],
     ["'debug'"]),
    ("max-links-zero", [*SUMMIT2, "--until-complete", "--max-links", "0"], ["0"]),
    # job names and accounts
    ("name-semicolon", [*SUMMIT2, "--job-name", "x;touch pwned"], ["'x;touch pwned'"]),
    ("name-subshell", [*SUMMIT2, "--job-name", "a$(id)"], ["'a$(id)'"]),
    ("name-trailing-newline", [*SUMMIT2, "--job-name", "tsm\n"], ["'tsm\\n'"]),
    ("name-empty", [*SUMMIT2, "--job-name", ""], ["''"]),
    ("name-dash", [*SUMMIT2, "--job-name", "-x"], ["'-x'"]),
    ("name-space", [*SUMMIT2, "--job-name", "a b"], ["'a b'"]),
    ("name-too-long", [*SUMMIT2, "--job-name", "a" * 129], ["'" + "a" * 129 + "'"]),
    ("name-non-ascii", [*SUMMIT2, "--job-name", "tsmé"], ["'tsmé'"]),
    ("project-space", ["--machine", "summit", "submit", "--nodes", "2", "--dry-run", "--project", "a b"], ["'a b'"]),
    ("project-injection", ["--machine", "summit", "submit", "--nodes", "2", "--dry-run", "--project", "x;id"],
     ["'x;id'"]),
    ("project-newline", ["--machine", "summit", "submit", "--nodes", "2", "--dry-run", "--project", "A\nB"],
     ["'A\\nB'"]),
    ("project-missing", ["--machine", "summit", "submit", "--nodes", "2", "--dry-run"], ["--project"]),
    # --env
    ("env-dash-name", [*SUMMIT2, "--env", "BAD-NAME=1"], ["'BAD-NAME=1'"]),
    ("env-non-ascii-name", [*SUMMIT2, "--env", "é=1"], ["'é=1'"]),
    ("env-no-name", [*SUMMIT2, "--env", "=1"], ["'=1'"]),
    ("env-no-equals", [*SUMMIT2, "--env", "NOEQ"], ["'NOEQ'"]),
    ("env-space-name", [*SUMMIT2, "--env", "A B=1"], ["'A B=1'"]),
    ("env-injection-name", [*SUMMIT2, "--env", "A;touch X;B=2"], ["'A;touch X;B=2'"]),
    ("env-newline-value", [*SUMMIT2, "--env", "A=1\ntouch X"], ["'A=1\\ntouch X'"]),
    ("env-digit-name", [*SUMMIT2, "--env", "1A=1"], ["'1A=1'"]),
    # optimisation numbers
    ("lr-nan", [*SUMMIT2, "--lr", "nan"], ["'nan'"]),
    ("lr-inf", [*SUMMIT2, "--lr", "inf"], ["'inf'"]),
    ("lr-negative", [*SUMMIT2, "--lr", "-1"], ["'-1'"]),
    ("lr-zero", [*SUMMIT2, "--lr", "0"], ["'0'"]),
    ("lr-word", [*SUMMIT2, "--lr", "fast"], ["'fast'"]),
    ("warmup-nan", [*SUMMIT2, "--warmup-epochs", "nan"], ["'nan'"]),
    ("warmup-negative", [*SUMMIT2, "--warmup-epochs", "-1"], ["'-1'"]),
    ("warmup-above-epochs", [*SUMMIT2, "--warmup-epochs", "200"], ["200"]),
    ("epochs-zero", [*SUMMIT2, "--epochs", "0"], ["0"]),
    ("epochs-negative", [*SUMMIT2, "--epochs", "-3"], ["-3"]),
    ("epochs-word", [*SUMMIT2, "--epochs", "ten"], ["'ten'"]),
    ("num-classes-negative", [*SUMMIT2, "--num-classes", "-5"], ["-5"]),
    ("clips-zero", [*SUMMIT2, "--clips-per-gpu", "0"], ["0"]),
    ("warning-zero", [*SUMMIT2, "--warning-minutes", "0"], ["0"]),
    ("quota-zero", [*SUMMIT2, "--quota-nodes", "0"], ["0"]),
    ("quota-exceeded", [*SUMMIT, "--nodes", "385", "--quota-nodes", "384"], ["385", "384"]),
    ("fusion-negative", [*SUMMIT2, "--fusion-threshold", "-1"], ["-1"]),
    ("avg-interval-negative", [*SUMMIT2, "--optimizer-sync", "aavg", "--avg-interval", "-2"], ["-2"]),
    ("bf16-horovod", [*SUMMIT2, "--compression", "bf16", "--engine", "horovod"], ["bf16"]),
    ("aavg-compression", [*SUMMIT2, "--optimizer-sync", "aavg", "--compression", "fp16"], ["--compression"]),
    ("engine-unknown", [*SUMMIT2, "--engine", "mpi"], ["'mpi'"]),
    ("optimizer-unknown", [*SUMMIT2, "--optimizer", "lamb"], ["'lamb'"]),
    ("multigrid-short", [*SUMMIT2, "--schedule", "multigrid", "--epochs", "2"], ["2"]),
    # paths
    ("run-dir-dollar", [*SUMMIT2, "--run-dir", "/tmp/r$HOME"], ["'/tmp/r$HOME'"]),
    ("run-dir-subshell", [*SUMMIT2, "--run-dir", "/tmp/$(touch x)"], ["'/tmp/$(touch x)'"]),
    ("run-dir-newline", [*SUMMIT2, "--run-dir", "/tmp/a\nb"], ["'/tmp/a\\nb'"]),
    ("data-dollar", [*SUMMIT2, "--data", "/gpfs/$USER/m.json"], ["$USER/m.json'"]),
    ("data-newline", [*SUMMIT2, "--data", "/gpfs/a\nb.json"], ["a\\nb.json'"]),
    ("output-missing-folder", [*SUMMIT2, "--output", "/nonexistent-dir/x.lsf"], ["/nonexistent-dir"]),
    ("output-under-a-file", [*SUMMIT2, "--output", "/etc/hostname/x.lsf"], ["/etc/hostname"]),
    ("template-dir-missing", [*SUMMIT2, "--template-dir", "/nonexistent-templates"], ["/nonexistent-templates"]),
    # trainer arguments after --
    ("trainer-unknown-option", [*SUMMIT2, "--", "--bogus"], ["--bogus"]),
    ("trainer-bad-choice", [*SUMMIT2, "--", "--sampling", "random"], ["'random'"]),
    ("trainer-bad-int", [*SUMMIT2, "--", "--frame-stride", "two"], ["'two'"]),
    ("trainer-epochs-conflict", [*SUMMIT2, "--epochs", "3", "--", "--epochs", "5"], ["--epochs 3", "5"]),
    ("trainer-lr-conflict", [*SUMMIT2, "--lr", "0.1", "--", "--lr", "0.2"], ["0.1", "0.2"]),
    ("trainer-accum-owned", [*SUMMIT2, "--", "--accum-steps", "2"], ["--accum-steps 2"]),
    ("trainer-batch-owned", [*SUMMIT2, "--", "--batch-per-gpu", "4"], ["--batch-per-gpu 4"]),
    ("trainer-run-dir-owned", [*SUMMIT2, "--", "--run-dir", "/elsewhere"], ["'/elsewhere'"]),
    ("trainer-epochs-owned", [*SUMMIT2, "--", "--epochs", "7"], ["--epochs 7"]),
    ("trainer-data-with-staging", [*SUMMIT2, "--data", "/gpfs/m.json", "--", "--data", "/other"], ["'/other'"]),
    ("trainer-lr-nan", [*SUMMIT2, "--", "--lr", "nan"], ["nan"]),
    ("trainer-engine-conflict", [*SUMMIT2, "--engine", "ddp", "--", "--engine", "horovod"], ["'ddp'", "horovod"]),
    # global options
    ("port-zero", ["--port", "0", "machines"], ["0"]),
    ("port-too-big", ["--port", "99999", "machines"], ["99999"]),
    ("machine-unknown", ["--machine", "nope", "submit", "--nodes", "1", "--dry-run"], ["'nope'"]),
    ("machine-injection", ["--machine", "x;touch y", "submit", "--nodes", "1", "--dry-run"], ["'x;touch y'"]),
    ("config-missing", ["--config", "/nonexistent.yaml", "machines"], ["/nonexistent.yaml"]),
    # simulate
    ("sim-virtual-zero", [*SIM, "--virtual-nodes", "0"], ["0"]),
    ("sim-virtual-huge", [*SIM, "--virtual-nodes", "100000000000"], ["100,000,000,000"]),
    ("sim-virtual-prime", [*SIM, "--virtual-nodes", "1009", "--quota-nodes", "384"], ["1,009", "1,008"]),
    ("sim-quota-zero", [*SIM, "--virtual-nodes", "1024", "--quota-nodes", "0"], ["0"]),
    ("sim-nodes-not-dividing", [*SIM, "--virtual-nodes", "1024", "--nodes", "3"], ["1,024", "3"]),
    ("sim-max-accum-zero", [*SIM, "--virtual-nodes", "1024", "--max-accum-steps", "0"], ["0"]),
    ("sim-throughput-missing", [*SIM, "--virtual-nodes", "8", "--throughput-from", "/nonexistent-run"],
     ["/nonexistent-run"]),
    ("sim-train-clips-zero", [*SIM, "--virtual-nodes", "8", "--train-clips", "0"], ["0"]),
    ("sim-lr-nan", [*SIM, "--virtual-nodes", "8", "--lr", "nan"], ["'nan'"]),
    ("sim-accum-in-args", [*SIM, "--virtual-nodes", "8", "--", "--accum-steps", "3"], ["--accum-steps 3"]),
    # scaling
    ("scaling-hours-zero", ["scaling", "--single-node-hours", "0"], ["'0'"]),
    ("scaling-hours-nan", ["scaling", "--single-node-hours", "nan"], ["'nan'"]),
    ("scaling-hours-inf", ["scaling", "--single-node-hours", "inf"], ["'inf'"]),
    ("scaling-hours-negative", ["scaling", "--single-node-hours", "-1"], ["'-1'"]),
    ("scaling-batch-zero", ["scaling", "--per-node-batch", "0"], ["0"]),
    ("scaling-epochs-zero", ["scaling", "--epochs", "0"], ["0"]),
    ("scaling-nodes-words", ["scaling", "--nodes-list", "a,b"], ["'a,b'"]),
    ("scaling-nodes-zero", ["scaling", "--nodes-list", "0,8"], ["'0,8'"]),
    ("scaling-nodes-too-many", ["scaling", "--nodes-list", "1,99999999"], ["'1,99999999'"]),
    ("scaling-params-zero", ["scaling", "--params", "0"], ["0"]),
    ("scaling-png-missing-folder", ["scaling", "--png", "/nonexistent-dir/s.png"], ["/nonexistent-dir"]),
    ("scaling-png-under-file", ["scaling", "--png", "/etc/hostname/s.png"], ["/etc/hostname"]),
    # report
    ("report-missing-run", ["report", "/nonexistent-run"], ["/nonexistent-run"]),
]


@pytest.mark.parametrize("case,args,needles", CASES, ids=[c[0] for c in CASES])
def test_bad_command_line(cli_env, tmp_path, case, args, needles):
    proc = run_cli(args, cli_env, cwd=tmp_path)
    assert_refused(proc, needles)
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "X").exists()


def _config(tmp_path: Path, text: bytes) -> Path:
    path = tmp_path / "config.yaml"
    path.write_bytes(text)
    return path


FILE_CASES = [
    ("config-not-utf8", b"machine: summit\nproject: \xff\xfe\n", ["not UTF-8", "config.yaml"]),
    ("config-not-yaml", b"machine: [summit\n", ["not valid YAML"]),
    ("config-unknown-key", b"machin: summit\n", ["'machin'"]),
    ("config-quota-zero", b"quota_nodes: 0\n", ["quota_nodes = 0"]),
    ("config-quota-text", b"quota_nodes: many\n", ["'many'"]),
    ("config-variable-name-injection", b"machines:\n  local:\n    environment:\n      variables:\n"
                                       b"        'A=1; touch X; B': v\n", ["'A=1; touch X; B'"]),
    ("config-alloc-flags-injection", b"machines:\n  summit:\n    alloc_flags: ['smt4\" ; touch X']\n",
     ["alloc_flags[0]", "touch X"]),
    ("config-module-injection", b"machines:\n  local:\n    environment:\n      modules: ['cuda; touch X']\n",
     ["'cuda; touch X'"]),
    ("config-variable-newline", b"machines:\n  local:\n    environment:\n      variables:\n        A: \"1\\ntouch X\"\n",
     ["'1\\ntouch X'"]),
    ("config-nvme-injection", b"machines:\n  local:\n    node:\n      nvme_path: '/mnt/$(touch X)'\n",
     ["'/mnt/$(touch X)'"]),
    ("config-queue-name-injection", b"machines:\n  local:\n    queues:\n      'q;touch X': {max_walltime: '1:00'}\n",
     ["'q;touch X'"]),
    ("config-machines-not-mapping", b"machines:\n  local: [1, 2]\n", ["machines.local"]),
    ("config-top-level-list", b"- a\n- b\n", ["mapping"]),
]


@pytest.mark.parametrize("case,text,needles", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_bad_config_file(cli_env, tmp_path, case, text, needles):
    path = _config(tmp_path, text)
    machine = "summit" if b"summit" in text else "local"
    proc = run_cli(["--config", str(path), "--machine", machine, "submit", "--nodes", "1", "--project", "A",
                    "--dry-run"], cli_env, cwd=tmp_path)
    assert_refused(proc, needles)
    assert not (tmp_path / "X").exists()


def test_profile_file_with_a_hostile_name(cli_env, tmp_path):
    folder = tmp_path / "machines"
    folder.mkdir()
    (folder / "evil.yaml").write_text((Path(__file__).resolve().parents[2] / "envs" / "local.yaml").read_text()
                                      .replace("name: local", "name: 'evil;touch X'"))
    env = dict(cli_env, SUMMIT_JOBS_MACHINES_PATH=str(folder))
    assert_refused(run_cli(["--machine", "evil", "submit", "--nodes", "1", "--dry-run"], env, cwd=tmp_path),
                   ["'evil;touch X'"])


TEMPLATE_CASES = [
    ("division-by-zero", "{{ 1 // 0 }}\n".encode(), ["ZeroDivisionError"]),
    ("syntax-error", "{% if %}\n".encode(), ["template error"]),
    ("undefined", "{{ plan.no_such_field }}\n".encode(), ["no_such_field"]),
    ("not-utf8", b"# \xff\xfe\n", ["not UTF-8"]),
    ("line-break-value", "{{ 'a\\nb' }}\n".encode(), ["line break"]),
]


@pytest.mark.parametrize("case,text,needles", TEMPLATE_CASES, ids=[c[0] for c in TEMPLATE_CASES])
def test_bad_user_template(cli_env, tmp_path, case, text, needles):
    part = tmp_path / "tpl" / "lsf" / "partials"
    part.mkdir(parents=True)
    (part / "summary.j2").write_bytes(text)
    proc = run_cli([*SUMMIT2, "--template-dir", str(tmp_path / "tpl")], cli_env, cwd=tmp_path)
    assert_refused(proc, needles)


def test_real_submit_without_data_is_refused(cli_env, tmp_path):
    env = dict(cli_env, SUMMIT_JOBS_LSF_HOME=str(tmp_path / "lsf"))
    proc = run_cli(["submit", "--nodes", "1", "--run-dir", str(tmp_path / "run")], env, cwd=tmp_path)
    assert_refused(proc, ["--data"])
    assert not (tmp_path / "run").exists()


def test_output_existing_without_force(cli_env, tmp_path):
    out = tmp_path / "job.lsf"
    out.write_text("mine\n")
    assert_refused(run_cli([*SUMMIT2, "--output", str(out)], cli_env, cwd=tmp_path), [str(out)])
    assert out.read_text() == "mine\n"


def test_report_metrics_with_foreign_records(cli_env, tmp_path):
    """A metrics file with non-numeric steps is not a traceback: those records are skipped."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"kind": "train", "step": "x", "loss": 1}\n'
                                       '{"kind": "train", "step": 1, "loss": "high"}\n'
                                       '{"kind": "train", "step": [1], "epoch": 0}\nnot json\n')
    proc = run_cli(["report", str(run), "--out", str(tmp_path / "rep")], cli_env, cwd=tmp_path)
    assert "Traceback" not in proc.stderr
    assert proc.returncode in (0, 2), proc.stderr


def test_the_table_is_large():
    """The bad-input suite promises breadth: this file's share of it."""
    assert len(CASES) + len(FILE_CASES) + len(TEMPLATE_CASES) >= 120
