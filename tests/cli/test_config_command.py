"""`summit-jobs config`: every setting, its value and its origin, through the real command line.

Each layer is checked where it really is: the config file's line is the line
of the key in the file the test wrote, an environment variable overrides it,
an option overrides both, a profile supplies a default with its own file and
line. What `config` says must be what `submit` uses: both ask summit_jobs.profiles.settings.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import REPO, run_cli

NAMES = ["config", "machine", "profile", "project", "quota_nodes", "runs_dir", "template_dir"]

CONFIG = """\
# settings for the tests: comments and blank lines move the keys down

machine: lassen
project: CFGPROJ

quota_nodes: 16
machines:
  summit:
    quota_nodes: 8
"""


def _write(tmp_path: Path, text: str = CONFIG, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _line_of(path: Path, key: str) -> int:
    """The real (1-based) line of ``key:`` in the file, found by reading it."""
    lines = path.read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))


def _config_json(args, env, cwd) -> dict:
    proc = run_cli([*args, "config", "--json", "--all"] if "config" not in args else [*args, "--json", "--all"],
                   env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return {row["name"]: row for row in json.loads(proc.stdout)}


def test_config_file_values_name_their_real_line(cli_env, tmp_path):
    cfg = _write(tmp_path)
    rows = _config_json(["--config", str(cfg)], cli_env, tmp_path)
    assert rows["config"]["value"] == str(cfg) and rows["config"]["origin"] == "option --config"
    for name, key in (("machine", "machine"), ("project", "project"), ("quota_nodes", "quota_nodes")):
        line = _line_of(cfg, key)
        assert rows[name]["origin"] == f"config file {cfg}:{line}", rows[name]
        assert rows[name]["detail"] == {"kind": "config", "file": str(cfg), "line": line, "key": key}
    assert (rows["machine"]["value"], rows["project"]["value"], rows["quota_nodes"]["value"]) == \
        ("lassen", "CFGPROJ", 16)
    assert _line_of(cfg, "project") == 4


def test_environment_overrides_the_config_file(cli_env, tmp_path):
    cfg = _write(tmp_path)
    env = dict(cli_env, SUMMIT_JOBS_PROJECT="ENVPROJ", SUMMIT_JOBS_MACHINE="summit")
    rows = _config_json(["--config", str(cfg)], env, tmp_path)
    assert rows["project"]["value"] == "ENVPROJ"
    assert rows["project"]["origin"] == "environment SUMMIT_JOBS_PROJECT"
    assert [(o["value"], o["origin"]) for o in rows["project"]["overridden"]] == \
        [("CFGPROJ", f"config file {cfg}:4")]
    assert rows["machine"]["value"] == "summit" and rows["machine"]["detail"]["variable"] == "SUMMIT_JOBS_MACHINE"


def test_option_overrides_environment_and_config_file(cli_env, tmp_path):
    cfg = _write(tmp_path)
    env = dict(cli_env, SUMMIT_JOBS_PROJECT="ENVPROJ", SUMMIT_JOBS_MACHINE="lassen")
    rows = _config_json(["--config", str(cfg), "--machine", "summit", "config", "--project", "OPTPROJ",
                         "--quota-nodes", "32"], env, tmp_path)
    assert (rows["project"]["value"], rows["project"]["origin"]) == ("OPTPROJ", "option --project")
    assert [o["origin"] for o in rows["project"]["overridden"]] == \
        ["environment SUMMIT_JOBS_PROJECT", f"config file {cfg}:4"]
    assert (rows["machine"]["value"], rows["machine"]["origin"]) == ("summit", "option --machine")
    assert [o["value"] for o in rows["machine"]["overridden"]] == ["lassen", "lassen"]
    # --quota-nodes beats the config's 16, which beats the config's override of the summit profile (8)
    assert rows["quota_nodes"]["value"] == 32
    assert [(o["value"], o["origin"]) for o in rows["quota_nodes"]["overridden"]] == [
        (16, f"config file {cfg}:6"), (8, f"config file {cfg}:9 (machines.summit.quota_nodes)")]


def test_config_agrees_with_what_submit_uses(cli_env, tmp_path):
    """The values `config` reports are the ones a dry run of submit plans with."""
    cfg = _write(tmp_path, "machine: summit\nproject: CFGPROJ\nmachines:\n  summit:\n    quota_nodes: 8\n")
    env = dict(cli_env, SUMMIT_JOBS_PROJECT="ENVPROJ")
    rows = _config_json(["--config", str(cfg)], env, tmp_path)
    proc = run_cli(["--config", str(cfg), "submit", "--nodes", "8", "--dry-run", "--json"], env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["plan"]["machine"] == rows["machine"]["value"] == "summit"
    assert f"#BSUB -P {rows['project']['value']}\n" in plan["script"]
    assert rows["quota_nodes"]["value"] == 8
    over = run_cli(["--config", str(cfg), "submit", "--nodes", "9", "--dry-run"], env, cwd=tmp_path)
    assert over.returncode == 2 and "quota of 8" in over.stderr, over.stderr
    assert Path(plan["plan"]["run_dir"]).parent == tmp_path / rows["runs_dir"]["value"]


def _user_profile(cli_env: dict, extra: str) -> Path:
    """A profile of the user's own (copied from the local one) with ``extra`` keys at its end."""
    folder = Path(cli_env["XDG_CONFIG_HOME"]) / "summit-jobs" / "machines"
    folder.mkdir(parents=True)
    path = folder / "mysite.yaml"
    path.write_text((REPO / "envs" / "local.yaml").read_text().replace("name: local", "name: mysite") + extra)
    return path


def test_profile_default_names_the_profile_its_key_file_and_line(cli_env, tmp_path):
    profile = _user_profile(cli_env, "runs_dir: /scratch/me/runs\nquota_nodes: 3\n")
    rows = _config_json(["--machine", "mysite"], cli_env, tmp_path)
    for name, value in (("runs_dir", "/scratch/me/runs"), ("quota_nodes", 3)):
        line = _line_of(profile, name)
        assert rows[name]["value"] == value
        assert rows[name]["origin"] == f"profile mysite (key {name}) {profile}:{line}"
        assert rows[name]["detail"] == {"kind": "profile", "profile": "mysite", "key": name, "file": str(profile),
                                        "line": line}
    assert rows["profile"]["value"] == str(profile) and "your profiles folder" in rows["profile"]["origin"]


def test_summit_profile_values_in_the_table(cli_env, tmp_path):
    """`summit-jobs --machine summit config`: the Summit profile, its size as the quota default, in columns."""
    proc = run_cli(["--machine", "summit", "config"], cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["SETTING", "VALUE", "ORIGIN"]
    by_name = {line.split()[0]: line for line in lines[1:] if not line.startswith(" ")}
    assert sorted(by_name) == sorted(NAMES)
    assert by_name["machine"].split()[1:] == ["summit", "option", "--machine"]
    assert by_name["profile"].split()[1] == str(REPO / "envs" / "summit.yaml")
    assert "up to the machine's 4,608 nodes" in by_name["quota_nodes"]
    assert by_name["runs_dir"].split()[1:3] == ["summit-jobs-runs", "default"]
    value_column = lines[0].index("VALUE")
    assert all(by_name[n][value_column - 2:value_column] == "  " for n in ("machine", "project", "runs_dir"))


def test_json_shape(cli_env, tmp_path):
    cfg = _write(tmp_path)
    for extra, keys in (([], {"name", "value", "origin", "detail"}),
                        (["--all"], {"name", "value", "origin", "detail", "overridden"})):
        proc = run_cli(["--config", str(cfg), "config", "--json", *extra], cli_env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        rows = json.loads(proc.stdout)
        assert isinstance(rows, list) and [r["name"] for r in rows] == NAMES
        for row in rows:
            assert set(row) == keys, row
            assert isinstance(row["origin"], str) and row["detail"]["kind"] in (
                "option", "environment", "config", "profile", "default")


def test_default_config_file_is_reported(cli_env, tmp_path):
    """Without --config: the default file, when it exists, with its lines; its absence is said."""
    rows = _config_json([], cli_env, tmp_path)
    default = Path(cli_env["XDG_CONFIG_HOME"]) / "summit-jobs" / "config.yaml"
    assert rows["config"]["value"] is None and f"{default} does not exist" in rows["config"]["origin"]
    assert rows["machine"]["value"] == "local" and rows["machine"]["origin"] == "default (the embedded LSF)"
    default.parent.mkdir(parents=True)
    default.write_text("\n\nproject: HOMEPROJ\n")
    rows = _config_json([], cli_env, tmp_path)
    assert rows["config"]["value"] == str(default) and rows["config"]["origin"] == "default"
    assert rows["project"]["origin"] == f"config file {default}:3"


@pytest.mark.parametrize("text, line, needle", [
    ("machine: summit\nproject: [ABC\nquota_nodes: 3\n", 3, "is not valid YAML"),
    ("machine: summit\n\n  project: X\n", 3, "is not valid YAML"),
    ("# quota\nquota_nodes: many\n", 2, "'quota_nodes' must be a whole number, got 'many'"),
    ("machine: summit\nmachin: lassen\n", 2, "unknown key 'machin'"),
])
def test_malformed_config_file_is_one_line_naming_file_and_line(cli_env, tmp_path, text, line, needle):
    cfg = _write(tmp_path, text)
    proc = run_cli(["--config", str(cfg), "config"], cli_env, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"summit-jobs: error: config file {cfg}:{line}"), proc.stderr
    assert needle in lines[0] and "Traceback" not in proc.stderr


def test_secret_values_are_never_printed():
    """A credential-like setting shows `<set>`, never its value (none of today's settings is one)."""
    from summit_jobs.cli import config as cli_config
    for name in ("password", "ssh_passphrase", "api_token", "client_secret", "WANDB_API_KEY"):
        assert cli_config.shown(name, "hunter2") == "<set>"
        assert cli_config.shown(name, None) is None
    for name in NAMES:
        assert not cli_config.is_secret(name) and cli_config.shown(name, "v") == "v"


def test_every_origin_starts_in_the_origin_column_whatever_the_paths(cli_env, tmp_path):
    """A profile in a deep folder, a long runs_dir overriding another: the table stays in columns, each origin
    (as --json gives it) starting under ORIGIN, each value under VALUE."""
    deep = tmp_path / "a-rather-long-folder-name" / "holding" / "the-site-profiles-of-this-team"
    deep.mkdir(parents=True)
    profile = deep / "mysite.yaml"
    profile.write_text((REPO / "envs" / "local.yaml").read_text().replace("name: local", "name: mysite")
                       + f"runs_dir: {deep / 'runs'}\n")
    env = dict(cli_env, SUMMIT_JOBS_MACHINES_PATH=str(deep))
    args = ["--machine", "mysite", "config", "--all", "--runs-dir", str(deep / "other-runs")]
    proc = run_cli(args, env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    value_column, origin_column = lines[0].index("VALUE"), lines[0].index("ORIGIN")
    rows = json.loads(run_cli([*args, "--json"], env, cwd=tmp_path).stdout)
    layers = [(r["value"], r["origin"]) for r in rows] + [(o["value"], o["origin"]) for r in rows
                                                            for o in r["overridden"]]
    assert any(len(str(value)) > origin_column - value_column for value, _ in layers)   # the case at hand
    for value, origin in layers:
        at = [line.find(origin) for line in lines if origin in line]
        assert at and all(col == origin_column for col in at), (origin, proc.stdout)
        shown = "(none)" if value is None else str(value)
        assert any(line[value_column:].startswith(shown) for line in lines), (shown, proc.stdout)
    for line in lines[1:]:
        if line.startswith(" ") and not line.lstrip().startswith("overrode"):
            assert len(line) - len(line.lstrip()) == origin_column, proc.stdout    # an origin on its own line
