"""Nothing typed or configured runs as shell: hostile text in every field a user controls.

The fields: submit options (job name, project, run and data paths, queue,
walltime, trainer arguments, --env values) and every profile or config value
that reaches a script (machine name, description, modules, variables and
their names, alloc_flags, the interpreter, smpiargs, the NVMe path, queue
names, launch-node prefixes). Each example is either refused with a
``UserError`` (validation) or rendered into a script that ``bash -n`` accepts
and that really runs (bash, with recording stand-ins for jsrun and module)
without creating the canary file, passing trainer arguments byte for byte.
A second test submits hostile values through the real CLI to the embedded LSF.
``environment.setup`` lines are shell by design (a site's activation
commands) and are the one field left out; the profile docs say so.
"""
from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsf_jobs import PROGRAM, cli, lsf_environment, wait_state, write_template
from summit_jobs.profiles import machines
from summit_jobs.planning import render
from summit_jobs.schedulers.lsf import header as lsf_header
from summit_jobs.errors import UserError
from summit_jobs.planning.plan import JobOptions, make_plan

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "templates"

HOSTILE = ["'", '"', "`touch {c}`", "$(touch {c})", "; touch {c}", "\n", "\ntouch {c}\n", " ", "\\",
           "&& touch {c}", "| touch {c}", "$HOME", "${{IFS}}", "*", "#", "\n#BSUB -J evil\n", "-x", "%J",
           "'$(touch {c})'", "\"; touch {c}; \"", "\t", "é", "\r", "\u2028", "\x0b", "a", "b1", "=", "{{{{", "}}}}",
           "{{% raw %}}", "!", "~", ">", "<(touch {c})", "\\n"]


def hostile(canary: str, min_size: int = 1, line_breaks: bool = True):
    """Text made of shell metacharacters, payloads that would create ``canary``, and random characters."""
    fragments = [h.format(c=canary) for h in HOSTILE]
    banned = "\0"
    if not line_breaks:
        fragments = [f for f in fragments if "\n" not in f and "\r" not in f]
        banned += "\n\r"
    pieces = st.sampled_from(fragments) | st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=banned), min_size=1, max_size=3)
    return st.lists(pieces, min_size=min_size, max_size=4).map("".join)


# ---- the shipped templates -----------------------------------------------------------------

def _template_lines():
    for path in sorted(TEMPLATES.rglob("*.j2")):
        for no, line in enumerate(path.read_text().splitlines(), 1):
            yield path.relative_to(REPO), no, re.sub(r"\{#.*?#\}|\{%.*?%\}", "", line)


def test_no_value_is_printed_inside_double_quotes():
    """Inside "..." a quoted value still expands ($(...) runs): values stand outside quotes, or are
    validated LSF tokens (bsub_words) in a #BSUB line."""
    bad = []
    for path, no, line in _template_lines():
        for m in re.finditer(r"\{\{(.*?)\}\}", line):
            inside = line[:m.start()].count('"') % 2 == 1
            if inside and not ("bsub_words" in m.group(1) and line.startswith("#BSUB")):
                bad.append(f"{path}:{no}: {line.strip()}")
    assert not bad, "values inside double quotes:\n" + "\n".join(bad)


def test_the_lint_sees_a_value_inside_double_quotes(tmp_path, monkeypatch):
    (tmp_path / "lsf").mkdir()
    (tmp_path / "lsf" / "x.j2").write_text('echo "staging {{ plan.staging.manifest }}"\n')
    monkeypatch.setattr(sys.modules[__name__], "TEMPLATES", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    with pytest.raises(AssertionError, match="inside double quotes"):
        test_no_value_is_printed_inside_double_quotes()


@pytest.mark.parametrize("value,expected", [
    ("tsm", "tsm"), (1536, "1536"), (0.5, "0.5"), ("1,536", "1,536"), ("a b", "'a b'"),
    ("$(touch x)", "'$(touch x)'"), ("it's", "'it'\"'\"'s'"),
])
def test_every_value_is_one_word(value, expected):
    assert render.shell_value(value) == expected


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\0b", "\n#BSUB -J evil"])
def test_a_line_break_never_reaches_a_script_line(value):
    with pytest.raises(UserError, match="line break"):
        render.shell_value(value)


@pytest.mark.parametrize("words", [["smt4", "a b"], ["x\"y"], ["$(id)"], ["nvme;id"]])
def test_bsub_words_refuses_what_would_leave_the_quotes(words):
    with pytest.raises(UserError, match="#BSUB value"):
        lsf_header.bsub_words(words)


def test_a_user_template_cannot_bypass_the_quoting(tmp_path):
    """{{ value }} with no filter in a user's template is quoted all the same."""
    part = tmp_path / "lsf" / "partials"
    part.mkdir(parents=True)
    (part / "summary.j2").write_text("echo {{ plan.run_dir }}\n")
    profile = machines.load("local")
    with pytest.raises(UserError, match=r"contains '\$'"):
        make_plan(profile, JobOptions(nodes=1, run_dir="/r/$(touch x)", python=sys.executable))
    plan = make_plan(profile, JobOptions(nodes=1, run_dir="/r/`touch x`; y", python=sys.executable))
    script = render.render(plan, str(tmp_path))
    assert "echo '/r/`touch x`; y'\n" in script


# ---- hostile values in every field, rendered and run -------------------------------------------

STUB = r'''#!/usr/bin/env python3
import json, os, sys
with open(os.environ["STUB_LOG"], "a") as fh:
    fh.write(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "\n")
'''


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    base = tmp_path_factory.mktemp("render-safety")
    bin_dir = base / "bin"
    bin_dir.mkdir()
    for name in ("jsrun", "module"):
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(0o755)
    return {"base": base, "bin": bin_dir, "canary": base / "CANARY", "n": itertools.count()}


def _profile_overrides(draw, canary):
    """Quoted fields get hostile text; validated fields mostly a valid token (else nothing would render)."""
    def h(label):  # a line break is refused (tested below): mostly draw text that can reach a script
        return draw(hostile(canary, line_breaks=False) | hostile(canary), label=label)

    def t(label, valid):
        return valid if draw(st.integers(0, 15), label=label + " valid?") else h(label)

    queue = t("queue name", "q1")
    return t, queue, {
        "name": t("machine name", "m1"), "description": h("description"),
        "environment": {"modules": [t("module", "cuda/11.0")],
                        "variables": {t("variable name", "SJ_V"): h("variable value")}, "python": h("python")},
        "alloc_flags": [t("alloc flag", "smt4")], "launcher": {"smpiargs": h("smpiargs")},
        "node": {"nvme_path": t("nvme path", "/mnt/bb/$USER")}, "runs_dir": h("runs dir"),
        "scheduler": {"launch_node_prefixes": [t("launch prefix", "batch")]},
        "queues": {queue: {"description": h("queue description"), "max_walltime": "1:00"}},
    }


def _run_script(stage, script: str, run_dir: Path) -> list:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = stage["base"] / f"job{next(stage['n'])}.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, script
    log = stage["base"] / "stub.log"
    log.write_text("")
    env = {"PATH": f"{stage['bin']}:/usr/bin:/bin", "STUB_LOG": str(log), "LSB_JOBID": "7", "HOME": str(run_dir)}
    subprocess.run(["bash", str(path)], env=env, capture_output=True, timeout=30, cwd=stage["base"])
    return [json.loads(line) for line in log.read_text().splitlines()]


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_values_in_every_field_never_run(stage, data):
    canary = str(stage["canary"])
    draw = data.draw
    valid_or_hostile, queue, overrides = _profile_overrides(draw, canary)
    if draw(st.booleans(), label="queue is the default"):
        overrides["queues"][queue]["default"] = False
    part = draw(hostile(canary, line_breaks=False).filter(lambda x: "$" not in x) | hostile(canary), label="run dir")
    run_dir = stage["base"] / "runs" / f"r{next(stage['n'])}{part}"[:150]
    args = tuple(draw(st.lists(hostile(canary), min_size=1, max_size=3), label="trainer args"))
    try:
        profile = machines.load("local", overrides)
        opts = JobOptions(
            nodes=1, run_dir=str(run_dir), job_name=valid_or_hostile("job name", "tsm"),
            project=valid_or_hostile("project", "ABC123"), queue=queue,
            walltime=valid_or_hostile("walltime", "0:30"),
            data=draw(hostile(canary, line_breaks=False).filter(lambda x: "$" not in x) | hostile(canary),
                      label="data"),
            trainer_args=args, check_trainer_args=False)
        plan = make_plan(profile, opts)
        script = render.render(plan)
    except UserError:
        assert not stage["canary"].exists()
        return
    except OSError:  # a path no file system takes (name too long): nothing was rendered
        return
    calls = _run_script(stage, script, Path(plan.run_dir))
    stage["ran"] = stage.get("ran", 0) + 1
    assert not stage["canary"].exists(), script
    launches = [c for c in calls if c[0] == "jsrun" and "trainer" in c]
    if launches:
        assert launches[-1][-len(args):] == list(args)


def test_the_property_test_ran_scripts(stage):
    """The test above is only worth something if hostile values did reach scripts that ran."""
    assert stage.get("ran", 0) >= 10, stage.get("ran")


def test_hostile_values_are_refused_with_the_key_named():
    with pytest.raises(UserError, match=r"environment.variables key 'A=1; touch X; B'"):
        machines.load("local", {"environment": {"variables": {"A=1; touch X; B": "v"}}})
    with pytest.raises(UserError, match=r"alloc_flags\[0\]"):
        machines.load("local", {"alloc_flags": ["smt4; touch X"]})
    with pytest.raises(UserError, match=r"environment.modules\[0\]"):
        machines.load("local", {"environment": {"modules": ["cuda $(touch X)"]}})
    with pytest.raises(UserError, match=r"'name'|name = "):
        machines.load("local", {"name": "local;touch X"})


# ---- the same through the real CLI and the embedded LSF --------------------------------------------

@pytest.fixture(scope="module")
def lsf_world(tmp_path_factory):
    base = tmp_path_factory.mktemp("render-safety-lsf")
    env = lsf_environment(base, minute=60)
    env["PROG_OUT"] = str(base / "argv")
    (base / "argv").mkdir()
    (base / "prog.py").write_text(PROGRAM)
    return {"base": base, "env": env, "templates": write_template(base / "templates", base / "prog.py"),
            "canary": base / "CANARY", "n": itertools.count()}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_config_and_env_values_through_the_embedded_lsf(lsf_world, data):
    canary = str(lsf_world["canary"])
    n = next(lsf_world["n"])
    profiles = lsf_world["base"] / f"profiles{n}"
    profiles.mkdir()
    doc = yaml.safe_load((REPO / "envs" / "local.yaml").read_text())
    doc["name"] = f"hostile{n}"
    value = data.draw(hostile(canary), label="variable value")
    doc["environment"]["variables"]["SJ_HOSTILE"] = value
    doc["description"] = data.draw(hostile(canary), label="description")
    (profiles / f"hostile{n}.yaml").write_text(yaml.safe_dump(doc))
    env_value = data.draw(hostile(canary), label="--env value")
    env = dict(lsf_world["env"], SUMMIT_JOBS_MACHINES_PATH=str(profiles))
    res = cli(["--machine", f"hostile{n}", "submit", "--nodes", "1", "--json", "--template-dir",
               str(lsf_world["templates"]), "--run-dir", str(lsf_world["base"] / f"run{n}"),
               "--env", f"SJ_ENV={env_value}", "--", "--data", "/nowhere"], env, timeout=90)
    assert "Traceback" not in res.stderr
    if res.returncode != 0:
        assert res.returncode == 2 and "line break" in res.stderr, res.stderr
        return
    (jid,) = json.loads(res.stdout)["job_ids"]
    assert wait_state(jid, env, timeout=60)["STAT"] in ("DONE", "EXIT")
    assert not lsf_world["canary"].exists()
