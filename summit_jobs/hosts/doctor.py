"""``summit-jobs doctor``: what a site must offer before a job is worth submitting, as pure checks.

Why: a first submission to a new site used to fail one missing piece at a
time (no submit command on the SSH session's PATH, a queue the profile invented, a
run folder the compute nodes cannot write, a module without PyTorch, an
unknown host key), each found only after a wait in the queue. Each check here
turns what a probe found into one line, ``ok``, ``warn`` or ``FAIL``, with the
way out for anything not ok.

Everything here is pure: functions from what was found to a Check. The
scheduler's own checks (its commands, version, queues and account) are the
scheduler's ``site_checks``: summit_jobs/schedulers/lsf/doctor.py and
summit_jobs/schedulers/slurm/doctor.py. The probes themselves (commands run locally
or over SSH through summit_jobs.hosts.host, the one place commands run) are in
summit_jobs/cli/doctor.py.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from trainer.config import TORCH_RANGE

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass(frozen=True)
class Check:
    """One line of the report: the status, what was checked, what was found and, when not ok, the fix."""
    status: str
    name: str
    found: str
    fix: str = ""

    def lines(self) -> List[str]:
        """The report's line and fix line; a multi-line finding (a command's raw output) is joined with ' | '
        so that each check stays one line."""
        out = [f"{self.status}  {self.name}: {_one_line(self.found)}"]
        if self.status != OK and self.fix:
            out.append(f"  fix: {_one_line(self.fix)}")
        return out

    def to_dict(self) -> Dict[str, Optional[str]]:
        return {"status": self.status, "check": self.name, "found": self.found, "fix": self.fix or None}


def _one_line(text: str) -> str:
    return " | ".join(part.strip() for part in text.splitlines() if part.strip())


def failed(checks: Sequence[Check]) -> bool:
    return any(c.status == FAIL for c in checks)


# -- 3. run and data folders ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class FolderProbe:
    """What the folder probe found for one path on the target: its nearest existing ancestor (the path
    itself when it exists), whether that is a folder, and whether a file could be created and removed there."""
    path: str
    exists: bool
    ancestor: str
    is_dir: bool
    writable: bool


def _fixed_prefix(path: str) -> str:
    """The part of a profile path before its first ``$VARIABLE`` component (``/mnt/bb/$USER`` -> ``/mnt/bb``)."""
    parts = []
    for part in path.split("/"):
        if "$" in part:
            break
        parts.append(part)
    return "/".join(parts).rstrip("/")


def _under(path: str, root: str) -> bool:
    root = root.rstrip("/")
    return bool(root) and (path == root or path.startswith(root + "/"))


def placement(path: str, profile) -> Optional[str]:
    """Why compute nodes could not use ``path`` (a read-only or a node-local file system), or None."""
    for root in profile.compute_read_only_prefixes:
        if _under(path, root):
            return f"under {root.rstrip('/')}, which {profile.name}'s compute nodes cannot write"
    local = list(profile.node_local_prefixes)
    if profile.node.nvme_path and _fixed_prefix(profile.node.nvme_path):
        local.append(_fixed_prefix(profile.node.nvme_path))
    for root in local:
        if _under(path, root):
            return (f"under {root.rstrip('/')}, which every node of {profile.name} has its own copy of: the "
                    "compute nodes would not see what is written there from here")
    return None


def check_path_text(kind: str, path: str, remote: bool) -> Optional[Check]:
    """A folder path that cannot be probed as given: a ``$`` (left unexpanded by the job script) or, over SSH,
    a relative path (it would be resolved on this machine), or a name that is not UTF-8 text."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        # Bytes of another encoding reach Python as lone surrogates: the path cannot be written into a job
        # script or a JSON record, and the probe's answer naming it cannot be read back as text.
        shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        return Check(FAIL, kind, f"{shown} is not UTF-8 text (its name holds bytes of another encoding)",
                     "rename the folder to a UTF-8 name, or give another folder (run directories' paths are "
                     "written into job scripts and JSON records)")
    if "$" in path:
        return Check(FAIL, kind, f"{path} holds a '$'", "expand the variable in your shell and give the real path "
                     "(the job script would not expand it, the trainer would)")
    if remote and not path.startswith("/"):
        return Check(FAIL, kind, f"{path} is not an absolute path on the login node",
                     "give an absolute path (no '~' or relative paths: they would be resolved on this machine)")
    return None


def check_folder(kind: str, probe: FolderProbe, profile, must_exist: bool, option: str) -> Check:
    """Step 3: a run or data folder exists (or can be created), is writable and is one compute nodes share."""
    why = placement(probe.path, profile)
    if why:
        hint = f" ({profile.writable_hint})" if profile.writable_hint else ""
        return Check(FAIL, kind, f"{probe.path} is {why}", f"give {option} a folder on the parallel file system{hint}")
    if not probe.is_dir:
        return Check(FAIL, kind, f"{probe.ancestor} is a file, not a folder",
                     f"move that file away, or give {option} another folder")
    if not probe.exists and must_exist:
        return Check(FAIL, kind, f"{probe.path} does not exist",
                     f"stage or copy the data there first (summit-jobs stage-data), or fix {option}")
    if not probe.writable:
        what = probe.path if probe.exists else f"{probe.path} does not exist and its parent {probe.ancestor}"
        status = WARN if must_exist else FAIL
        return Check(status, kind, f"{what} is not writable (a test file could not be created there)",
                     f"give {option} a folder you can write, or fix its permissions (chmod u+w)")
    if not probe.exists:
        return Check(OK, kind, f"{probe.path} does not exist yet; {probe.ancestor} is writable (submit creates it)")
    return Check(OK, kind, f"{probe.path} exists and is writable")


# -- 4. the trainer's environment -----------------------------------------------------------------------------
#: The line the environment probe prints its JSON after (a login shell may print banners before it).
PROBE_MARKER = "summit-jobs-doctor:"
#: Exit status of the probe script when a ``module load`` failed.
MODULE_FAILED = 3


def torch_version(text: str) -> Optional[Tuple[int, int]]:
    """(major, minor) of a torch version string (``2.0.1+cu117``, ``2.4.0a0+git...``); None if unreadable."""
    m = re.match(r"\s*(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _range_text() -> str:
    (a, b), (c, d) = TORCH_RANGE
    return f"{a}.{b} to {c}.{d}"


def check_torch(found: Mapping[str, object], python: str) -> Check:
    """Step 4: torch imports in the trainer's environment, within the trainer's supported range."""
    exe = found.get("executable")
    where = f"{python}" + (f" ({exe})" if exe and exe != python else "") + f", Python {found.get('python')},"
    fix = ("load the module or activate the environment that provides PyTorch (the profile's environment.modules "
           "or environment.setup), or point environment.python at the interpreter that has it")
    if "torch" not in found:
        return Check(FAIL, "torch", f"{where} cannot import torch: {found.get('torch_error')}", fix)
    text = str(found["torch"])
    version = torch_version(text)
    if version is None or version < TORCH_RANGE[0]:
        return Check(FAIL, "torch", f"torch {text} under {where} is older than the trainer supports "
                     f"({_range_text()})", fix + f" with torch {_range_text()}")
    if version > TORCH_RANGE[1]:
        return Check(WARN, "torch", f"torch {text} under {where} is newer than the trainer is tested on "
                     f"({_range_text()})", "run a short job first (submit --epochs 1), or use a tested torch")
    return Check(OK, "torch", f"torch {text} under {where} supported ({_range_text()})")


def check_trainer(found: Mapping[str, object], python: str) -> Check:
    """Step 4: the trainer itself runs under the profile's Python, as a rank starts it (``python -m trainer``).

    torch importing is not enough: the job runs ``python -m trainer`` in its run directory, so the trainer
    must be installed into that environment (or on its PYTHONPATH), not merely present in the folder doctor
    happens to run in. A missing install otherwise shows only once the job has waited in the queue.
    """
    fix = ("install summit-jobs into that environment without touching its torch: `python -m pip install "
           "--no-deps /path/to/summit-jobs` with that python (docs/cluster.md, 'Installing the trainer on the "
           "cluster')")
    if "trainer_error" in found:
        return Check(FAIL, "trainer", f"{python} cannot import the trainer: {found['trainer_error']}", fix)
    if found.get("trainer_help"):
        return Check(FAIL, "trainer", f"`{python} -m trainer --help` failed ({found['trainer_help']})", fix)
    if "trainer" not in found:
        return Check(WARN, "trainer", "the probe did not say whether the trainer imports", fix)
    return Check(OK, "trainer", f"`{python} -m trainer` runs (the trainer in {found['trainer']})")


def check_horovod(found: Mapping[str, object], engine: str) -> Check:
    """Step 4: Horovod imports; without it the trainer falls back to torch.distributed (DDP)."""
    if "horovod" in found:
        return Check(OK, "horovod", f"horovod {found['horovod']}")
    if engine != "horovod":
        return Check(OK, "horovod", f"not importable ({found.get('horovod_error')}); the profile's engine is {engine}")
    return Check(WARN, "horovod", f"not importable ({found.get('horovod_error')}): the trainer falls back to "
                 "torch.distributed (DDP)", "load the site's Horovod module in environment.modules (built against "
                 "this torch), or build it (`make horovod`); or set recipe.engine: ddp in the profile")


#: What every rank runs; its --help is printed by trainer.config's parser, before torch is imported.
TRAINER_HELP_WORDS = "usage: python -m trainer"
#: The trainer as a rank finds it: not from the probe's folder (a rank runs in its run directory), importing
#: what a rank imports (trainer.loop.train, with torch; only the torch-free trainer.config without), then
#: ``python -m trainer --help`` from an empty folder. An unrelated package named ``trainer`` has no TORCH_RANGE.
TRAINER_PROBE = (
    "import importlib, os, subprocess, tempfile\n"
    "sys.path[:] = [p for p in sys.path if p not in ('', '.', os.getcwd())]\n"
    "try:\n"
    "    config = importlib.import_module('trainer.config')\n"
    "    out['trainer'] = os.path.dirname(os.path.abspath(getattr(config, '__file__', None) or '.'))\n"
    "    if not hasattr(config, 'TORCH_RANGE'):\n"
    "        raise ImportError('the trainer package in %s is not the summit-jobs trainer' % out['trainer'])\n"
    "    if 'torch' in out:\n"
    "        importlib.import_module('trainer.loop.train')\n"
    "except Exception as exc:\n"
    "    out['trainer_error'] = ('%s: %s' % (type(exc).__name__, exc)).splitlines()[0][:300]\n"
    "with tempfile.TemporaryDirectory() as empty:\n"
    "    try:\n"
    "        run = subprocess.run([sys.executable, '-m', 'trainer', '--help'], cwd=empty, capture_output=True,\n"
    "                             text=True, timeout=120)\n"
    "        said = (run.stderr.strip() or run.stdout.strip() or 'no output').splitlines()[-1][:300]\n"
    f"        out['trainer_help'] = None if run.returncode == 0 and {TRAINER_HELP_WORDS!r} in run.stdout else \\\n"
    "            'exit %d: %s' % (run.returncode, said)\n"
    "    except Exception as exc:\n"
    "        out['trainer_help'] = ('%s: %s' % (type(exc).__name__, exc))[:300]\n")
#: Run by the trainer's interpreter after the profile's environment set-up: what a rank would import.
PROBE_CODE = (
    "import json, shutil, sys\n"
    "out = {'python': sys.version.split()[0], 'executable': sys.executable, 'mpirun': shutil.which('mpirun')}\n"
    "for key, name in (('torch', 'torch'), ('horovod', 'horovod.torch')):\n"
    "    try:\n"
    "        __import__(name)\n"
    "        out[key] = str(sys.modules[key].__version__)\n"
    "    except Exception as exc:\n"
    "        out[key + '_error'] = ('%s: %s' % (type(exc).__name__, exc)).splitlines()[0][:300]\n"
    f"{TRAINER_PROBE}"
    f"print({PROBE_MARKER!r}, json.dumps(out), flush=True)\n")
#: Where ``module`` comes from when the shell has no such function yet (environment modules, Lmod).
MODULE_INITS = ("/etc/profile.d/lmod.sh", "/etc/profile.d/modules.sh", "/usr/share/lmod/lmod/init/bash",
                "/usr/share/Modules/init/bash")


def environment_script(profile, python: str) -> str:
    """The bash script of the environment probe: the profile's set-up as the job script runs it (each
    ``module load`` must succeed, then ``set -u``, the setup lines as written, the variables), then the probe.

    Module names and variables are plain tokens and quoted values (checked when the profile loads); the
    setup lines are shell by design, as in the job script.
    """
    import shlex
    lines = setup_lines(profile)
    lines.append(f"exec {shlex.quote(python)} -c {shlex.quote(PROBE_CODE)}")
    return "\n".join(lines) + "\n"


def setup_lines(profile) -> List[str]:
    """The profile's set-up as the job script runs it, one shell line each: module loads (each must
    succeed), ``set -u``, the setup lines as written, the variables."""
    import shlex
    env = profile.environment
    lines = []
    if env.modules:
        inits = " ".join(shlex.quote(p) for p in MODULE_INITS)
        lines.append(f"command -v module >/dev/null 2>&1 || for f in {inits}; do "
                     '[ -r "$f" ] && . "$f" && break; done')
    for module in env.modules:
        lines.append(f"module load {shlex.quote(module)} || {{ echo {shlex.quote(PROBE_MARKER)} module load "
                     f"{shlex.quote(module)} failed >&2; exit {MODULE_FAILED}; }}")
    lines.append("set -u")
    lines += list(env.setup)
    lines += [f"export {name}={shlex.quote(str(value))}" for name, value in sorted(env.variables.items())]
    return lines


def parse_probe(stdout: str) -> Optional[Dict[str, object]]:
    """The probe's JSON (the last marker line of stdout), or None when the probe never got to print it."""
    import json
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(PROBE_MARKER + " "):
            try:
                data = json.loads(line[len(PROBE_MARKER) + 1:])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def _tail(text: str, lines: int = 4) -> str:
    return " | ".join(line.strip() for line in (text or "").strip().splitlines()[-lines:]) or "no output"


def check_environment(rc: int, stdout: str, stderr: str, profile, python: str) -> List[Check]:
    """Step 4: the set-up ran and the interpreter answered; then torch, horovod and (for mpirun) mpirun."""
    found = parse_probe(stdout)
    if found is None:
        if rc == MODULE_FAILED and "module load" in (stderr or ""):
            return [Check(FAIL, "trainer environment", _tail(stderr),
                          "check the module's name and version in the profile's environment.modules (`module avail "
                          "NAME` on the login node), and that `module` works in a non-interactive shell there")]
        return [Check(FAIL, "trainer environment", f"the profile's set-up and {python} failed (exit {rc}): "
                      f"{_tail(stderr or stdout)}",
                      "fix environment.setup, or point environment.python at an interpreter that exists after the "
                      "set-up (a bare name is looked up on PATH)")]
    checks = [check_torch(found, python), check_trainer(found, python), check_horovod(found, profile.recipe.engine)]
    if profile.launcher.kind == "mpirun":
        if found.get("mpirun"):
            checks.append(Check(OK, "mpirun", str(found["mpirun"])))
        else:
            checks.append(Check(FAIL, "mpirun", "not on PATH after the profile's set-up (the launcher is mpirun)",
                                "load the site's Open MPI module in environment.modules, or pick another launcher"))
    return checks


# -- 5. SSH: host key and login -------------------------------------------------------------------------------
def check_ssh(label: str, error: Optional[str]) -> Check:
    """Step 5 (over SSH only): the host key is one of the user's known keys and the login worked.

    The connection never accepts a new key (doctor ignores --trust-new-host-key): the fix is to check the
    fingerprint with the site and add it by hand.
    """
    if error is None:
        return Check(OK, "host key", f"{label}: the host key is in your known_hosts; login worked")
    if "not in your known_hosts" in error:
        return Check(FAIL, "host key", f"{label}: the host key is not in your known_hosts (nothing was sent)",
                     "check the key's fingerprint with the site's published ones (`ssh-keyscan -p PORT HOST | "
                     "ssh-keygen -lf -`), then add it to ~/.ssh/known_hosts or the profile's ssh.known_hosts "
                     "(or ssh there once by hand); doctor never accepts a new key")
    if "HOST KEY" in error:
        return Check(FAIL, "host key", error, "do not connect until the site confirms the new key; then replace "
                     "the old entry (ssh-keygen -R HOST) with the confirmed one")
    return Check(FAIL, "ssh login", error, "check --host, --port, --user and --key-file, and the host's block in "
                 "your ssh config (`ssh -G HOST`)")


# -- 4b. --command: the interpreter the ranks run, and what the program imports ---------------------------
#: Run by the command's interpreter after the profile's set-up, with what the command runs as its arguments
#: (``script PATH`` or ``module NAME``, from planning.plan.python_target; none for ``-c``): which interpreter
#: answers, and which top-level modules the script (or module) imports that it cannot find. Nothing of the
#: user's program runs: the script is parsed (ast), modules are looked up (importlib.util.find_spec of a
#: top-level name imports nothing). Imports inside ``try`` are optional ones (``try: import apex``) and are not
#: counted; a module next to the script is found as Python would find it.
COMMAND_PROBE_CODE = (
    "import ast, importlib.util, json, os, sys\n"
    "out = {'python': sys.version.split()[0], 'executable': sys.executable}\n"
    "kind, names = sys.argv[1:2], set()\n"
    "if kind == ['module']:\n"
    "    out['module'] = sys.argv[2]\n"
    "    names.add(sys.argv[2].split('.')[0])\n"
    "elif kind == ['script']:\n"
    "    out['script'] = os.path.abspath(sys.argv[2])\n"
    "    try:\n"
    "        with open(sys.argv[2], 'rb') as fh:\n"
    "            tree = ast.parse(fh.read(), sys.argv[2])\n"
    "    except (OSError, SyntaxError, ValueError) as exc:\n"
    "        out['script_error'] = ('%s: %s' % (type(exc).__name__, exc)).splitlines()[0][:300]\n"
    "        tree = ast.Module(body=[], type_ignores=[])\n"
    "    guarded = set()\n"
    "    for node in ast.walk(tree):\n"
    "        if isinstance(node, ast.Try):\n"
    "            for part in node.body:\n"
    "                guarded.update(id(n) for n in ast.walk(part))\n"
    "    for node in ast.walk(tree):\n"
    "        if id(node) in guarded:\n"
    "            continue\n"
    "        if isinstance(node, ast.Import):\n"
    "            names.update(alias.name.split('.')[0] for alias in node.names)\n"
    "        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:\n"
    "            names.add(node.module.split('.')[0])\n"
    "    sys.path.insert(0, os.path.dirname(out['script']))\n"
    "out['imports'] = sorted(names)\n"
    "out['missing'] = sorted(n for n in names if importlib.util.find_spec(n) is None)\n"
    f"print({PROBE_MARKER!r}, json.dumps(out), flush=True)\n")


def command_script(profile, python: str, target: Sequence[str]) -> str:
    """The probe of ``--command``: the profile's set-up as in :func:`environment_script`, then the command's
    interpreter runs :data:`COMMAND_PROBE_CODE` with ``target`` (quoted: the path or module is the user's)."""
    import shlex
    words = " ".join(shlex.quote(a) for a in target)
    return "\n".join(setup_lines(profile) + [f"exec {shlex.quote(python)} -c {shlex.quote(COMMAND_PROBE_CODE)} {words}"]) + "\n"


def check_command(rc: int, stdout: str, stderr: str, given: str, python: str, profile_python: str) -> List[Check]:
    """What ``doctor --command`` found: the interpreter the ranks run for the command, then whether the
    script exists and what it imports is there."""
    found = parse_probe(stdout)
    same = python == profile_python
    named = given if given == python else f"{given} (run as {python})"
    if found is None:
        return [Check(FAIL, "command interpreter", f"{named} did not run after the profile's set-up (exit {rc}): "
                      f"{_tail(stderr or stdout)}",
                      "give the interpreter's full path in --command, or point environment.python at it")]
    exe = found.get("executable")
    whose = "the profile's interpreter (environment.python)" if same else "not the profile's interpreter"
    checks = [Check(OK, "command interpreter", f"{named} is {exe}, Python {found.get('python')}: {whose}")]
    if found.get("script_error"):
        checks.append(Check(FAIL, "command script", f"{found.get('script')} cannot be read: {found['script_error']}",
                            "give the script's absolute path in --command: the ranks run in the run directory"))
        return checks
    missing = list(found.get("missing") or ())
    fix = (f"install {'them' if len(missing) > 1 else 'it'} into {exe} ({python} -m pip install ...), or give the "
           "path of the interpreter that has " + ("them" if len(missing) > 1 else "it") + " in --command"
           + ("" if same else " (and keep the trainer installed in the profile's, which starts the ranks)"))
    if found.get("module"):
        module = found["module"]
        checks.append(Check(FAIL, "command imports", f"-m {module}: {exe} cannot find {missing[0]}", fix)
                      if missing else Check(OK, "command imports", f"-m {module}: {exe} finds it"))
    elif found.get("script"):
        what = os.path.basename(str(found["script"]))
        imports = list(found.get("imports") or ())
        shown = ", ".join(imports[:8]) + (", ..." if len(imports) > 8 else "")
        checks.append(Check(FAIL, "command imports", f"{what} imports {', '.join(missing)}, which {exe} cannot "
                            "find", fix) if missing else
                      Check(OK, "command imports", f"{what}: {exe} finds all {len(imports)} of its top-level "
                            f"imports ({shown})" if imports else f"{what} imports nothing"))
    return checks
    missing = list(found.get("missing") or ())
    if missing:
        fix = (f"install them into {exe} ({python} -m pip install ...), or give the path of the interpreter that "
               "has them in --command" + ("" if same else " (and keep the trainer installed in the profile's, "
                                                       "which starts the ranks)"))
        checks.append(Check(FAIL, "command imports", f"{what} imports {', '.join(missing)}, which {exe} cannot "
                            f"find", fix))
    elif what:
        imports = list(found.get("imports") or ())
        checks.append(Check(OK, "command imports", f"{what}: " + (f"{len(imports)} top-level imports found "
                            f"({', '.join(imports[:8])}{', ...' if len(imports) > 8 else ''})" if imports
                            else "imports nothing")))
    return checks
