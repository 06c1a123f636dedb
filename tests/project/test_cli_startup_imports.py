"""Start-up of the CLI: what `--help` and a dry run import, the lazy command list, the profile cache.

Why as tests: start-up cost comes back one innocent top-level import at a time
(a command module imported for its help line, PyYAML or paramiko at the top of
a module on every path). These run the real entry point in a subprocess and
read its ``sys.modules``, so such a change fails here instead of in
bench/cli_startup.py weeks later. The profile cache must never serve data
parsed from another text: the tests edit a profile in ways a time stamp
cannot see.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from summit_jobs.cli import lazygroup
from summit_jobs.profiles import machines, usercache

REPO = Path(__file__).resolve().parents[2]
#: Third-party and standard modules a listing or a warm dry run must not pay for.
HEAVY = ("jinja2", "yaml", "paramiko", "torch", "numpy", "matplotlib", "tqdm", "PIL", "cryptography")
#: summit_jobs modules `--help` must not import: the profile, planner, SSH and command machinery.
NOT_FOR_HELP = ("summit_jobs.profiles.machines", "summit_jobs.planning.plan", "summit_jobs.planning.render", "summit_jobs.runs.submission",
                "summit_jobs.hosts.host", "summit_jobs.hosts.sshlogin", "summit_jobs.schedulers.lsf.client", "summit_jobs.runs.records",
                "summit_jobs.profiles.config", "summit_jobs.runs.report", "summit_jobs.runs.plots", "summit_jobs.planning.simulate",
                "summit_jobs.runs.lifecycle", "summit_jobs.data.staging", "summit_jobs.data.pack", "summit_jobs.hosts.doctor")
DRY_RUN = ["--machine", "summit", "submit", "--nodes", "256", "--project", "ABC123", "--dry-run"]

#: Runs the real entry point (python -m summit_jobs) and writes the imported module names to stderr's last line.
_PROBE = ("import json, runpy, sys\n"
          "sys.argv = ['summit-jobs'] + sys.argv[1:]\n"
          "try:\n"
          "    runpy.run_module('summit_jobs', run_name='__main__', alter_sys=True)\n"
          "except SystemExit as exc:\n"
          "    code = exc.code\n"
          "else:\n"
          "    code = 0\n"
          "sys.stderr.write('\\nMODULES ' + json.dumps(sorted(sys.modules)) + '\\n')\n"
          "sys.exit(code)\n")


def probe(args, env):
    """(completed process, imported module names) of ``summit-jobs ARGS``."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stderr.rstrip("\n").rsplit("\n", 1)[-1]
    assert last.startswith("MODULES "), proc.stderr[-3000:]
    return proc, set(json.loads(last[len("MODULES "):]))


def _heavy(mods):
    return sorted(m for m in mods if m.split(".")[0] in HEAVY)


def _command_modules(mods):
    """The command modules of summit_jobs.cli (and the lsf group's); the group itself (cli/submit.py, which also
    holds submit and machines), its lazy loader, the shared option types, choice lists and progress output are
    cheap by design."""
    shared = {"summit_jobs.cli", "summit_jobs.cli.main", "summit_jobs.cli.submit", "summit_jobs.cli.lazygroup",
              "summit_jobs.cli.types", "summit_jobs.profiles.choices", "summit_jobs.progress"}
    return sorted(m for m in mods if (m.startswith("summit_jobs.cli.") or m == "summit_jobs.schedulers.lsf.cli")
                  and m not in shared)


@pytest.fixture
def env(cli_env, tmp_path):
    """The CLI's environment with a cache folder of this test's own."""
    return dict(cli_env, XDG_CACHE_HOME=str(tmp_path / "cache"))


# ---- what is imported ---------------------------------------------------------------------------------

def test_help_imports_no_command_module_and_nothing_heavy(env):
    proc, mods = probe(["--help"], env)
    assert "Commands:" in proc.stdout and "submit" in proc.stdout
    assert _heavy(mods) == []
    assert _command_modules(mods) == []
    assert sorted(set(NOT_FOR_HELP) & mods) == []
    # the trainer's option schema and the declarations of the options submit shares with it: plain data
    assert sorted(m for m in mods if m.startswith("trainer.") and m not in ("trainer.config",
                                                                           "trainer.submit_options")) == []


def test_a_command_imports_its_own_module_only(env):
    proc, mods = probe(["scaling", "--help"], env)
    assert "node counts" in proc.stdout
    assert _command_modules(mods) == ["summit_jobs.cli.simulate"]


def test_dry_run_with_a_warm_cache_imports_neither_yaml_nor_ssh_nor_submission(env):
    cold, cold_mods = probe(DRY_RUN + ["--run-dir", "/tmp/r"], env)
    assert "yaml" in cold_mods          # the probe sees what is imported: the cold run parses the profile
    warm, mods = probe(DRY_RUN + ["--run-dir", "/tmp/r"], env)
    assert warm.stdout == cold.stdout and warm.stdout.startswith("#!/bin/bash")
    assert {m.split(".")[0] for m in _heavy(mods)} == {"jinja2"}    # rendering is Jinja's
    assert _command_modules(mods) == []
    assert sorted({"summit_jobs.schedulers.lsf.client", "summit_jobs.runs.records", "subprocess", "socket"} & mods) == []


# ---- the lazy command list ----------------------------------------------------------------------------

def _group():
    from summit_jobs.cli import main
    return main.cli.cli


def test_every_registered_line_is_its_commands_own_help():
    """The line main.py registers is shortened by click exactly as the command's docstring would be."""
    group = _group()
    assert group.lazy_subcommands, "no command is registered lazily"
    for name, (target, line) in group.lazy_subcommands.items():
        cmd = group.load(name)
        assert cmd.name == name, f"{target} is the command {cmd.name!r}, registered as {name!r}"
        assert not cmd.hidden
        placeholder = click.Command(name, help=line)
        for limit in range(1, 160):
            assert placeholder.get_short_help_str(limit) == cmd.get_short_help_str(limit), (name, limit)


@pytest.mark.parametrize("columns", ["60", "200"])
def test_group_help_is_the_same_as_with_every_command_imported(env, columns):
    env = dict(env, COLUMNS=columns)
    lazy = subprocess.run([sys.executable, "-m", "summit_jobs", "--help"], env=env, capture_output=True,
                          text=True, timeout=60)
    code = ("import sys\nfrom summit_jobs.cli import main\ng = main.cli.cli\n"
            "for n in list(g.lazy_subcommands): g.load(n)\n"
            "sys.argv = ['summit-jobs', '--help']\nmain.main()\n")
    eager = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert lazy.returncode == 0 and eager.returncode == 0, lazy.stderr + eager.stderr
    assert lazy.stdout == eager.stdout


def test_unknown_command_is_refused_as_before(env):
    proc = subprocess.run([sys.executable, "-m", "summit_jobs", "no-such-command"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "No such command 'no-such-command'" in proc.stderr


def test_completion_of_command_names_lists_the_registered_lines(env):
    env = dict(env, _SUMMIT_JOBS_COMPLETE="bash_complete", COMP_WORDS="summit-jobs sta", COMP_CWORD="1")
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert "plain,stage-data" in proc.stdout and "plain,status" in proc.stdout
    mods = set(json.loads(proc.stderr.rstrip("\n").rsplit("\n", 1)[-1][len("MODULES "):]))
    assert _command_modules(mods) == []


@pytest.mark.parametrize("target", ["summit_jobs.cli.fuse", "summit_jobs.cli.fuse:", ":fuse_cmd"])
def test_a_registration_must_name_module_and_attribute(target):
    group = lazygroup.LazyGroup("g")
    with pytest.raises(ValueError, match="module:attribute"):
        group.register_lazy("fuse", target, "Late fusion.")


def test_a_name_registered_twice_is_refused():
    group = lazygroup.LazyGroup("g")
    group.register_lazy("fuse", "summit_jobs.cli.fuse:fuse_cmd", "Late fusion.")
    with pytest.raises(ValueError, match="registered twice"):
        group.register_lazy("fuse", "summit_jobs.cli.fuse:fuse_cmd", "Late fusion.")


def test_a_target_that_is_no_command_is_refused():
    group = lazygroup.LazyGroup("g")
    group.register_lazy("x", "summit_jobs.profiles.choices:LAYOUTS", "Not a command.")
    with pytest.raises(TypeError, match="not a click command"):
        group.get_command(None, "x")


# ---- the profile cache: exact, atomic, never stale ----------------------------------------------------

class Counting:
    """A parser that counts its calls: a cache hit is a call not made."""

    def __init__(self, result=None):
        self.calls = 0
        self.result = result

    def __call__(self, text):
        self.calls += 1
        return self.result if self.result is not None else json.loads(text)


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "summit-jobs"


def test_same_text_is_parsed_once_and_any_other_text_anew(tmp_path, cache_home):
    parse = Counting()
    src = str(tmp_path / "p.yaml")
    assert usercache.parsed("t", src, '{"a": [1, 2.5, true, null]}', "id", parse) == {"a": [1, 2.5, True, None]}
    assert usercache.parsed("t", src, '{"a": [1, 2.5, true, null]}', "id", parse) == {"a": [1, 2.5, True, None]}
    assert parse.calls == 1
    assert usercache.parsed("t", src, '{"a": [1, 2.5, true, nul\x6c]} ', "id", parse) == {"a": [1, 2.5, True, None]}
    assert parse.calls == 2             # one more byte: parsed again
    assert usercache.parsed("t", src, '{"a": 2}', "id", parse) == {"a": 2}
    assert usercache.parsed("t", src, '{"a": 2}', "another parser", parse) == {"a": 2}
    assert parse.calls == 4
    assert usercache.parsed("t", src + "x", '{"a": 2}', "another parser", parse) == {"a": 2}
    assert parse.calls == 5             # another file with the same text has an entry of its own


@pytest.mark.parametrize("value", [{1: "int key"}, {"d": __import__("datetime").date(2024, 11, 1)},
                                   {"t": (1, 2)}, {"f": float("inf")}, {"s": {1, 2}}, {"b": b"x"}])
def test_data_json_cannot_give_back_exactly_is_never_cached(tmp_path, cache_home, value):
    parse = Counting(result=value)
    for _ in range(2):
        assert usercache.parsed("t", str(tmp_path / "p.yaml"), "x: 1", "id", parse) == value
    assert parse.calls == 2
    assert not (cache_home / "t").exists() or not any((cache_home / "t").iterdir())


@pytest.mark.parametrize("garbage", [b"", b"{", b"\xff\xfe", b"[1, 2]", b'{"format": 1}', b"null"])
def test_a_corrupt_entry_is_ignored_and_rewritten(tmp_path, cache_home, garbage):
    src = str(tmp_path / "p.yaml")
    parse = Counting()
    usercache.parsed("t", src, '{"a": 1}', "id", parse)
    entry = Path(usercache.entry_path("t", os.path.abspath(src)))
    entry.write_bytes(garbage)
    assert usercache.parsed("t", src, '{"a": 1}', "id", parse) == {"a": 1}
    assert parse.calls == 2
    assert json.loads(entry.read_text())["data"] == {"a": 1}
    assert usercache.parsed("t", src, '{"a": 1}', "id", parse) == {"a": 1}
    assert parse.calls == 2


def test_an_entry_with_other_data_for_the_same_key_fields_is_only_trusted_whole(tmp_path, cache_home):
    """An entry written for another text is not served, even when it sits under this file's name."""
    src = str(tmp_path / "p.yaml")
    parse = Counting()
    usercache.parsed("t", src, '{"a": 1}', "id", parse)
    entry = Path(usercache.entry_path("t", os.path.abspath(src)))
    doc = json.loads(entry.read_text())
    entry.write_text(json.dumps(dict(doc, text='{"a": 2}', data={"a": 2})))
    assert usercache.parsed("t", src, '{"a": 1}', "id", parse) == {"a": 1}
    assert parse.calls == 2


def test_no_cache_folder_means_no_cache_and_no_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    parse = Counting()
    for _ in range(2):
        assert usercache.parsed("t", str(tmp_path / "p.yaml"), '{"a": 1}', "id", parse) == {"a": 1}
    assert parse.calls == 2


def test_writes_leave_no_temporary_file_and_remove_a_killed_writers_leftovers(tmp_path, cache_home):
    folder = cache_home / "t"
    folder.mkdir(parents=True)
    old = folder / ".p.yaml.0.json.tmp-99999"
    old.write_text("half an entry")
    os.utime(old, (1, 1))
    fresh = folder / ".q.yaml.0.json.tmp-99998"      # a writer that may still be running: left alone
    fresh.write_text("being written")
    src = str(tmp_path / "p.yaml")
    usercache.parsed("t", src, '{"a": 1}', "id", Counting())
    assert not old.exists() and fresh.exists()
    entry = Path(usercache.entry_path("t", src))
    assert sorted(p.name for p in folder.iterdir()) == sorted([entry.name, fresh.name])
    assert json.loads(entry.read_text())["data"] == {"a": 1}


def test_entries_not_rewritten_for_a_month_are_removed_at_the_next_write(tmp_path, cache_home):
    src = str(tmp_path / "p.yaml")
    usercache.parsed("t", src, '{"a": 1}', "id", Counting())
    entry = Path(usercache.entry_path("t", os.path.abspath(src)))
    gone = entry.with_name("gone.yaml.00000000.json")
    gone.write_text("{}")
    os.utime(gone, (1, 1))
    usercache.parsed("t", str(tmp_path / "q.yaml"), '{"a": 1}', "id", Counting())
    assert entry.exists() and not gone.exists()


def test_yaml_identity_names_the_installed_files_without_importing_yaml():
    code = ("import sys; from summit_jobs.profiles import usercache; i = usercache.yaml_identity(); "
            "print(i is not None and 'yaml' not in sys.modules and '__init__.py' in i)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "True", proc.stderr


def test_profile_loads_alike_from_yaml_and_from_the_cache(cache_home):
    first = machines.load("summit")
    assert any((cache_home / "yaml").iterdir())
    assert machines.load("summit") == first


def _user_profile(tmp_path) -> Path:
    """A user profile (a copy of summit's) in a folder named by SUMMIT_JOBS_MACHINES_PATH."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    text = (REPO / "envs" / "summit.yaml").read_text()
    assert "max_nodes: 4608" in text
    (folder / "mysite.yaml").write_text(text.replace("name: summit", "name: mysite"))
    return folder / "mysite.yaml"


def test_an_edit_that_keeps_size_and_time_stamp_is_never_served_stale(tmp_path, env):
    """The cache is keyed on the whole text: an edit a time stamp cannot show is still seen."""
    profile = _user_profile(tmp_path)
    env = dict(env, SUMMIT_JOBS_MACHINES_PATH=str(profile.parent))
    args = ["--machine", "mysite", "machines", "--json"]

    def max_nodes():
        proc = subprocess.run([sys.executable, "-m", "summit_jobs", *args], env=env, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return {r["name"]: r["max_nodes"] for r in json.loads(proc.stdout)}["mysite"]

    assert max_nodes() == 4608
    assert max_nodes() == 4608          # served from the cache now
    st = profile.stat()
    profile.write_text(profile.read_text().replace("max_nodes: 4608", "max_nodes: 4600"))
    os.utime(profile, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert profile.stat().st_size == st.st_size and profile.stat().st_mtime_ns == st.st_mtime_ns
    assert max_nodes() == 4600


def test_a_bad_profile_is_refused_the_same_with_a_cache_of_its_good_version(tmp_path, env):
    profile = _user_profile(tmp_path)
    env = dict(env, SUMMIT_JOBS_MACHINES_PATH=str(profile.parent))
    args = ["--machine", "mysite", "submit", "--nodes", "2", "--project", "A", "--dry-run"]
    ok = subprocess.run([sys.executable, "-m", "summit_jobs", *args], env=env, capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0, ok.stderr
    profile.write_text(profile.read_text() + "\nqueues: [unclosed\n")
    bad = subprocess.run([sys.executable, "-m", "summit_jobs", *args], env=env, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "is not valid YAML" in bad.stderr and str(profile) in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_corrupt_cache_entry_does_not_change_a_dry_run(env):
    args = DRY_RUN + ["--run-dir", "/tmp/r"]
    first = subprocess.run([sys.executable, "-m", "summit_jobs", *args], env=env, capture_output=True, text=True,
                           timeout=60)
    assert first.returncode == 0, first.stderr
    entries = list((Path(env["XDG_CACHE_HOME"]) / "summit-jobs" / "yaml").iterdir())
    assert entries
    for e in entries:
        e.write_bytes(b'{"format": 1, "data": {"name": "x"')
    again = subprocess.run([sys.executable, "-m", "summit_jobs", *args], env=env, capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    assert all(json.loads(e.read_text())["data"]["name"] == "summit" for e in entries)


def test_an_edited_template_is_never_served_from_the_compiled_template_cache(tmp_path, env):
    """Jinja's bytecode cache is keyed on the template's text too: a same-size, same-time edit is seen."""
    part = tmp_path / "templates" / "lsf" / "partials" / "epilogue.j2"
    part.parent.mkdir(parents=True)
    part.write_text((REPO / "templates" / "common" / "partials" / "epilogue.j2").read_text() + "# mark AAAA\n")
    args = DRY_RUN + ["--run-dir", "/tmp/r", "--template-dir", str(tmp_path / "templates")]

    def script():
        proc = subprocess.run([sys.executable, "-m", "summit_jobs", *args], env=env, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert "# mark AAAA" in script()
    assert "# mark AAAA" in script()    # compiled once, read back from the cache
    st = part.stat()
    part.write_text(part.read_text().replace("# mark AAAA", "# mark BBBB"))
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns))
    out = script()
    assert "# mark BBBB" in out and "# mark AAAA" not in out
