"""Bad input to the config file and to `summit-jobs config`: one line naming the file, the line and the value.

The config file is read once for every command, so each case is tried through
`config` (which only reports) and through a dry run of `submit` (which plans):
both must refuse the same way, without a traceback.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from badinput import assert_refused, run_module
from slurm_cluster import stretched   # a quiet machine's seconds -> here, now

FILE_CASES = [
    # (case, file text, needles: each must be in the one error line; "{cfg}" is the file's path)
    ("machines-a-list", b"machines: [summit]\n", ["{cfg}:1", "'machines' must be a mapping", "['summit']"]),
    ("yaml-unclosed-list", b"machine: summit\nproject: [ABC\nquota_nodes: 3\n",
     ["{cfg}:3", "not valid YAML", "flow sequence started at line 2"]),
    ("yaml-bad-indent", b"machine: summit\n\n  project: X\n", ["{cfg}:3", "not valid YAML"]),
    ("yaml-tab", b"machine: summit\n\tproject: X\n", ["{cfg}:2", "not valid YAML"]),
    ("internal-key-source", b"source: /etc/passwd\n", ["{cfg}:1", "unknown key 'source'"]),
    ("internal-key-lines", b"machine: local\nlines: {}\n", ["{cfg}:2", "unknown key 'lines'"]),
    ("quota-text-with-line", b"# quota\n\nquota_nodes: many\n", ["{cfg}:3", "'many'"]),
    ("quota-zero-with-line", b"project: A\nquota_nodes: 0\n", ["{cfg}:2", "quota_nodes = 0"]),
    ("unknown-key-with-line", b"machine: local\nprojetc: A\n", ["{cfg}:2", "'projetc'"]),
    ("project-a-list", b"project: [A, B]\n", ["{cfg}:1", "['A', 'B']"]),
    ("override-breaks-profile", b"machines:\n  local:\n    alloc_flags: ['a b']\n",
     ["'a b'", "machines.local in config file {cfg}:2"]),
    ("override-not-mapping", b"machines:\n  local: 3\n", ["{cfg}:2", "'machines.local'"]),
    # An empty value used to mean the default (machine: '' was local, project: '' none): refused.
    ("machine-empty", b"machine: ''\n", ["{cfg}:1", "'machine' is empty"]),
    ("machine-a-list", b"machine: [local]\n", ["{cfg}:1", "'machine' must be text"]),
    ("project-empty", b"project: ''\n", ["{cfg}:1", "'project' is empty"]),
    ("project-blank", b"machine: local\nproject: '  '\n", ["{cfg}:2", "project = '  ' is empty",
                                                            "leave the key out"]),
    ("quota-negative", b"quota_nodes: -3\n", ["{cfg}:1", "quota_nodes = -3"]),
    ("quota-boolean", b"quota_nodes: true\n", ["{cfg}:1", "'quota_nodes' must be a whole number"]),
    ("runs-dir-empty", b"runs_dir: ''\n", ["{cfg}:1", "'runs_dir' is empty"]),
    ("runs-dir-a-mapping", b"runs_dir: {a: 1}\n", ["{cfg}:1", "'runs_dir' must be text"]),
    ("template-dir-empty", b"template_dir: ''\n", ["{cfg}:1", "'template_dir' is empty"]),
    ("template-dir-a-list", b"template_dir: [a]\n", ["{cfg}:1", "'template_dir' must be text"]),
    # Overrides of a machine no profile names never applied, without a word.
    ("machines-unknown-name", b"machine: local\nmachines:\n  sumit:\n    quota_nodes: 3\n",
     ["{cfg}:3", "'machines.sumit' overrides no known machine", "summit"]),
    ("override-out-of-range", b"machines:\n  local:\n    node:\n      cpu_slots: -2\n",
     ["'node.cpu_slots' = -2 is out of range: give a number >= 0", "machines.local in config file {cfg}:2"]),
    ("override-negative-throughput", b"machines:\n  local:\n    performance: {clips_per_second_per_gpu: -5}\n",
     ["'performance.clips_per_second_per_gpu' = -5.0 is out of range", "machines.local in config file {cfg}:2"]),
]


def _env(cli_env: dict) -> dict:
    return dict(cli_env)


@pytest.mark.parametrize("command", [["config"], ["submit", "--nodes", "1", "--project", "A", "--dry-run"]],
                         ids=["config", "submit"])
@pytest.mark.parametrize("case,text,needles", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_bad_config_file(cli_env, tmp_path, case, text, needles, command):
    cfg = tmp_path / "config.yaml"
    cfg.write_bytes(text)
    proc = run_module("summit_jobs", ["--config", str(cfg), "--machine", "local", *command], _env(cli_env),
                      cwd=tmp_path)
    assert_refused(proc, [n.replace("{cfg}", str(cfg)) for n in needles], prefix="summit-jobs: error: ")
    assert len(proc.stderr.splitlines()) == 1, proc.stderr


COMMAND_CASES = [
    ("quota-zero", ["config", "--quota-nodes", "0"], ["--quota-nodes", "0 is not in the range"]),
    ("quota-text", ["config", "--quota-nodes", "lots"], ["'lots'"]),
    ("unknown-machine", ["--machine", "nosuch", "config"], ["'nosuch'"]),
    ("missing-config-file", ["--config", "/nonexistent/cfg.yaml", "config"], ["/nonexistent/cfg.yaml"]),
    ("config-is-a-folder", ["--config", "{tmp}", "config"], ["{tmp}"]),
]


@pytest.mark.parametrize("case,args,needles", COMMAND_CASES, ids=[c[0] for c in COMMAND_CASES])
def test_bad_config_command_line(cli_env, tmp_path, case, args, needles):
    fill = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = run_module("summit_jobs", fill, _env(cli_env), cwd=tmp_path)
    assert_refused(proc, [n.replace("{tmp}", str(tmp_path)) for n in needles])


def test_environment_names_a_missing_config_file(cli_env, tmp_path):
    env = dict(cli_env, SUMMIT_JOBS_CONFIG=str(tmp_path / "gone.yaml"))
    proc = run_module("summit_jobs", ["config"], env, cwd=tmp_path)
    assert_refused(proc, [str(tmp_path / "gone.yaml"), "SUMMIT_JOBS_CONFIG"])
    assert not Path(tmp_path / "gone.yaml").exists()


def test_every_config_key_has_a_bad_value():
    """Each key a config file may set (UserConfig's fields) is spoiled by at least one case above."""
    import dataclasses

    import yaml

    from summit_jobs.profiles.config import _INTERNAL, UserConfig
    keys = {f.name for f in dataclasses.fields(UserConfig)} - set(_INTERNAL)
    spoiled = set()
    for _, text, _ in FILE_CASES:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        spoiled |= set(data) if isinstance(data, dict) else set()
    assert keys - spoiled == set()


#: The environment layer of summit_jobs.profiles.settings: (variable, bad value, words of the refusal).
ENV_CASES = [
    ("SUMMIT_JOBS_MACHINE", "x;touch X", ["'x;touch X'", "Known machines"]),
    ("SUMMIT_JOBS_PROJECT", "a b", ["'a b' is not a valid project name"]),
    ("SUMMIT_JOBS_CONFIG", "/nonexistent/cfg.yaml", ["/nonexistent/cfg.yaml"]),
    ("SUMMIT_JOBS_HOST", "a b", ["'a b'"]),
]


@pytest.mark.parametrize("variable,value,needles", ENV_CASES, ids=[c[0] for c in ENV_CASES])
def test_bad_setting_in_the_environment(cli_env, tmp_path, variable, value, needles):
    env = dict(cli_env, **{variable: value})
    machine = [] if variable == "SUMMIT_JOBS_MACHINE" else ["--machine", "summit"]
    project = [] if variable == "SUMMIT_JOBS_PROJECT" else ["--project", "A"]
    proc = run_module("summit_jobs", [*machine, "submit", "--nodes", "1", *project, "--dry-run"], env, cwd=tmp_path,
                      timeout=stretched(20))
    assert_refused(proc, needles)
    assert not (tmp_path / "X").exists()
