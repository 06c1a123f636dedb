"""The code's shape: small functions, one direction of imports, the torch-free modules torch-free.

Why as tests: each of these once drifted (a 270-line planning function, the CLI
modules importing each other's private helpers in a cycle, production code
reading job scripts with the embedded LSF's option whitelist), and a review
only catches drift after the fact.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("summit_jobs", "trainer")
MAX_LINES = 60


def sources():
    for pkg in PACKAGES:
        yield from sorted((REPO / pkg).rglob("*.py"))


def test_no_function_is_longer_than_60_lines():
    long = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "functions over 60 lines:\n" + "\n".join(long)


def imports(path: Path):
    """(module, names) of every import statement, at any depth."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []


def test_no_module_imports_another_modules_private_names():
    found = []
    for path in sources():
        for module, names in imports(path):
            if module.startswith(PACKAGES):
                found += [f"{path.relative_to(REPO)}: from {module} import {n}" for n in names
                          if n.startswith("_") and not n.startswith("__")]
    assert not found, "\n".join(found)


def test_the_login_side_does_not_use_the_embedded_lsf_outside_its_own_machine():
    """Only the embedded machine's own NVMe hop (staging.py, --to-nvme on the local profile) may reach into
    the embedded LSF; everything else talks to whatever LSF the profile names, through lsf.py."""
    allowed = {"summit_jobs/data/staging.py"}
    users = set()
    lsf = REPO / "summit_jobs" / "schedulers" / "lsf"
    for path in (REPO / "summit_jobs").rglob("*.py"):
        if lsf in path.parents:
            continue
        if any(m.startswith("summit_jobs.schedulers.lsf.embedded") for m, _ in imports(path)):
            users.add(str(path.relative_to(REPO)))
    assert users <= allowed, users - allowed


def test_the_trainer_needs_no_scheduler_code():
    users = [str(p.relative_to(REPO)) for p in (REPO / "trainer").rglob("*.py")
             if any(m.startswith("summit_jobs") for m, _ in imports(p))]
    assert not users


#: The variables a launcher gives a rank: its rank and world (jsrun's JSM_*, Open MPI's OMPI_*, PMIx's, blaunch's
#: LSF_PM_TASKID, srun's SLURM_*, torchrun's own), its job and hosts (LSB_*, SLURM_*), where the ranks meet
#: (MASTER_ADDR/PORT, torchrun's agent store and run id).
LAUNCHER_VARIABLE = re.compile(r"(OMPI_|PMIX_|PMI_|SLURM_|LSB_|LSF_|JSM_|CSM_)[A-Z0-9_]*|LOCAL_SIZE|MASTER_(ADDR|PORT)"
                               r"|TORCHELASTIC_(RUN_ID|USE_AGENT_STORE|RESTART_COUNT|MAX_RESTARTS)"
                               r"|(LOCAL_|GROUP_|ROLE_)?(RANK|WORLD_SIZE)")
#: The compute side's one room for them: rankenv, and LSF's host lists and Slurm's tasks that it reads them with.
LAUNCHER_ROOM = {"trainer/rankenv.py", "trainer/lsf_hosts.py", "trainer/slurm_tasks.py"}


def test_only_rankenv_reads_a_launchers_variables():
    """Each launcher names a rank's place its own way (JSM_NAMESPACE_RANK, OMPI_COMM_WORLD_RANK, LSF_PM_TASKID,
    SLURM_PROCID, RANK): read in one room, a launcher added or changed is one module's edit, and the engines, the
    rendezvous, staging and the run directory cannot disagree about which variable wins."""
    found = []
    for path in sorted((REPO / "trainer").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel in LAUNCHER_ROOM:
            continue
        found += [f"{rel}:{node.lineno}: {node.value}" for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and LAUNCHER_VARIABLE.fullmatch(node.value)]
    assert not found, "trainer modules that name a launcher's variables (read them through trainer.rankenv):\n" + \
        "\n".join(found)


def test_the_launcher_variable_pattern_knows_them():
    names = ["JSM_NAMESPACE_RANK", "OMPI_COMM_WORLD_", "PMIX_RANK", "LSF_PM_TASKID", "SLURM_NODEID", "LSB_JOBID",
             "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "TORCHELASTIC_RUN_ID"]
    assert all(LAUNCHER_VARIABLE.fullmatch(n) for n in names)
    assert not any(LAUNCHER_VARIABLE.fullmatch(n) for n in ("SUMMIT_JOBS_VNODE", "HOROVOD_FUSION_THRESHOLD",
                                                            "TORCHELASTIC_SIGNALS_TO_HANDLE", "rank"))


def shared_modules():
    """The trainer modules the login side imports: they must import neither torch nor summit_jobs."""
    names = set()
    for path in (REPO / "summit_jobs").rglob("*.py"):
        for module, names_ in imports(path):
            if module == "trainer" or module.startswith("trainer."):
                for n in names_:       # ``from trainer.methods import multigrid`` imports the module multigrid
                    sub = REPO / Path(*module.split(".")) / f"{n}.py"
                    names.add(f"{module}.{n}" if sub.is_file() else module)
    return sorted(names)


def contract_modules():
    """trainer/*.py: the torch-free contract. Job scripts run these with ``python -m``; the login side imports
    them; the compute side's rooms (data, models, methods, loop, dist) build on them."""
    return sorted(f"trainer.{p.stem}" for p in (REPO / "trainer").glob("*.py")
                  if p.stem not in ("__init__", "__main__"))


@pytest.mark.parametrize("module", sorted(set(shared_modules()) | set(contract_modules())))
def test_contract_modules_and_those_the_login_side_imports_are_torch_free(module):
    code = f"import sys, {module}; bad = [m for m in ('torch', 'numpy.testing') if m in sys.modules]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(REPO), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"{module} imports {out.stdout.strip()}"


def package_folders():
    """Every folder of the two packages that holds Python modules."""
    return sorted({p.parent for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")})


def test_no_folder_holds_more_than_15_modules_and_each_is_a_room_of_the_architecture():
    """A folder is one role: a newcomer finds a module among a handful, and docs/architecture.md names it."""
    doc = (REPO / "docs" / "architecture.md").read_text()
    crowded, unnamed = [], []
    for folder in package_folders():
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        rel = folder.relative_to(REPO).as_posix() + "/"
        if len(modules) > 15:
            crowded.append(f"{rel}: {len(modules)} modules")
        if f"`{rel}`" not in doc:
            unnamed.append(rel)
        init = folder / "__init__.py"
        assert init.is_file() and ast.get_docstring(ast.parse(init.read_text())), \
            f"{rel}__init__.py must say what the room holds and what it may import"
    assert not crowded, crowded
    assert not unnamed, f"folders docs/architecture.md does not name (as `path/`): {unnamed}"


def test_the_contract_imports_none_of_the_compute_rooms_at_module_level():
    """The contract is the bottom layer: a module of trainer/ that imported trainer.loop (say) at its top would
    drag torch into the login side the day that room's first module is imported by its __init__."""
    rooms = ("trainer.data", "trainer.models", "trainer.loop", "trainer.dist")
    found = []
    for module in contract_modules():
        tree = ast.parse((REPO / "trainer" / f"{module.split('.')[1]}.py").read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(rooms):
                found.append(f"{module}: from {node.module}")
    assert not found, found


def test_nothing_below_the_command_line_imports_it():
    """The CLI parses and prints; the rooms below it (planning, runs, hosts, data, profiles, schedulers) are
    used by it, never the other way round. The one exception is a scheduler's own command group
    (schedulers/lsf/cli.py, `summit-jobs lsf`), a command module that lives with the scheduler it drives."""
    allowed = {"summit_jobs/__main__.py", "summit_jobs/schedulers/lsf/cli.py"}
    cli = REPO / "summit_jobs" / "cli"
    users = sorted(str(p.relative_to(REPO)) for p in (REPO / "summit_jobs").rglob("*.py")
                   if cli not in p.parents and str(p.relative_to(REPO)) not in allowed
                   and any(m == "summit_jobs.cli" or m.startswith("summit_jobs.cli.") for m, _ in imports(p)))
    assert not users, users


def test_the_login_side_reaches_a_scheduler_through_the_interface():
    """Outside schedulers/, no module imports an LSF command line or parser: submit, status, cancel and the
    output files go through summit_jobs.schedulers (for_profile, for_record)."""
    users = sorted(str(p.relative_to(REPO)) for p in (REPO / "summit_jobs").rglob("*.py")
                   if (REPO / "summit_jobs" / "schedulers") not in p.parents
                   and any(m == "summit_jobs.schedulers.lsf.client" or
                           (m == "summit_jobs.schedulers.lsf" and "client" in names) for m, names in imports(p)))
    assert not users, users


def test_scheduler_commands_are_named_only_under_schedulers():
    """bsub, bjobs, jsrun and blaunch belong to schedulers/ (and the templates', profiles' and docs' words): the
    rest asks the scheduler (summit_jobs.schedulers.Scheduler) or says it neutrally, so a second scheduler has one
    package to implement, not a search through the tree."""
    word = re.compile(r"\b(bsub|bjobs|jsrun|blaunch)\b")
    found = []
    for path in sorted((REPO / "summit_jobs").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("summit_jobs/schedulers/"):
            continue
        found += [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
                  if word.search(line)]
    assert not found, "modules outside schedulers/ that name bsub/bjobs/jsrun/blaunch:\n" + "\n".join(found)


def test_the_planner_and_the_command_line_reach_a_scheduler_only_through_the_interface():
    """planning/ asks the profile's scheduler (summit_jobs.schedulers.for_profile) for its request, launchers,
    launch layout, variables and templates, and cli/ for its words and doctor's site checks; neither imports an
    implementation: a second scheduler is a package that implements the interface, not an edit of either."""
    found = []
    rooms = ((REPO / "summit_jobs" / "planning"), (REPO / "summit_jobs" / "cli"))
    for path in sorted(p for room in rooms for p in room.rglob("*.py")):
        for module, names in imports(path):
            implementation = module.startswith("summit_jobs.schedulers.") or (
                module == "summit_jobs.schedulers" and any(n in schedulers_packages() for n in names))
            if implementation:
                found.append(f"{path.relative_to(REPO)}: {module} {names}")
    assert not found, found


def schedulers_packages():
    """The implementation packages under summit_jobs/schedulers/."""
    return {p.parent.name for p in (REPO / "summit_jobs" / "schedulers").glob("*/__init__.py")}


# -- one direction of imports between the rooms, and no circles -------------------------------------------
#: The login side's rooms, top to bottom (docs/architecture.md): a module may import its own room and the rooms
#: below it, lazily inside a function too, never one above. The package's front (errors, wording, resources,
#: progress) and the trainer's torch-free contract are below them all.
LOGIN_ROOMS = ("summit_jobs.cli", "summit_jobs.runs", "summit_jobs.planning", "summit_jobs.data",
               "summit_jobs.schedulers", "summit_jobs.hosts", "summit_jobs.profiles", "summit_jobs", "trainer")
#: Modules that sit in a higher room than their folder: a scheduler's command group (`summit-jobs lsf`) is a
#: command module that lives with the scheduler it drives; the demo runs the whole tool.
ROOM_OF = {"summit_jobs.schedulers.lsf.cli": "summit_jobs.cli", "summit_jobs.demo": "summit_jobs.cli",
           "summit_jobs.__main__": "summit_jobs.cli"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph():
    """Module -> the project's modules it imports, at any depth (a lazy import is a dependency too)."""
    mods = {module_name(p): p for p in sources()}
    graph = {m: set() for m in mods}
    for m, path in mods.items():
        for module, names in imports(path):
            for candidate in [f"{module}.{n}" for n in names] + [module]:
                if candidate in mods and candidate != m:
                    graph[m].add(candidate)
                    break
    return graph


def room(module: str) -> str:
    if module in ROOM_OF:
        return ROOM_OF[module]
    return next(r for r in LOGIN_ROOMS if module == r or module.startswith(r + "."))


def test_no_import_climbs_to_a_room_above():
    climbs = set()
    for module, targets in import_graph().items():
        if module.startswith("summit_jobs.schedulers.lsf.embedded"):
            continue   # the embedded LSF is a program of its own, run by its commands, not a room of the tool
        for target in targets:
            if LOGIN_ROOMS.index(room(target)) < LOGIN_ROOMS.index(room(module)):
                climbs.add((module, room(target)))
    assert not climbs, "imports that climb to a room above:\n" + "\n".join(f"{m} -> {r}" for m, r in sorted(climbs))


def circles(graph):
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    group = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        group.append(w)
                        if w == v:
                            break
                    if len(group) > 1:
                        out.append(tuple(sorted(group)))
    return set(out)


def test_no_circle_of_imports():
    found = circles(import_graph())
    assert not found, "circles of imports (a lazy import inside a function closes one too):\n" + "\n".join(
        map(str, sorted(found)))


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {("a", "b", "c")}
    assert circles({"a": {"b"}, "b": set()}) == set()


def test_tests_are_grouped_by_role_in_folders_of_at_most_26_modules():
    """tests/ by role (docs/architecture.md, Tests): no test module at the top, and no folder that grew past
    the size a reader can take in (the suite was 144 files in one folder)."""
    tests = REPO / "tests"
    assert not sorted(p.name for p in tests.glob("test_*.py")), "test modules at the top of tests/"
    sizes = {}
    for path in tests.rglob("test_*.py"):
        if "data" not in path.relative_to(tests).parts:
            sizes[str(path.parent.relative_to(tests))] = sizes.get(str(path.parent.relative_to(tests)), 0) + 1
    assert len(sizes) >= 10 and max(sizes.values()) <= 26, sizes


def _fixtures_by_module(tests: Path) -> dict:
    """{module name: {fixture name: (folder, the fixture's code)}} of tests/, temporary folders unnamed."""
    found = {}
    for path in tests.rglob("*.py"):
        if "data" in path.relative_to(tests).parts:
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list):
                body = ast.Module(body=node.body[1:] if ast.get_docstring(node) else node.body, type_ignores=[])
                for call in ast.walk(body):      # a temporary folder's name does not make another fixture
                    if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("mktemp") and call.args:
                        call.args = []
                found.setdefault(path.stem, {})[node.name] = (path.parent, ast.dump(body))
    return found


def test_no_module_imports_a_fixture_and_no_folder_repeats_one():
    """Fixtures live in conftest.py files (a folder's own, or tests/conftest.py for those folders share):
    a fixture imported into a module by name is that module's copy (a session fixture so imported was
    started again in each module that took it), and the same fixture written out in two modules of a folder
    belongs in the folder's conftest.py."""
    tests = REPO / "tests"
    fixtures = _fixtures_by_module(tests)
    imported = []
    for path in tests.rglob("*.py"):
        if "data" in path.relative_to(tests).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in fixtures:
                imported += [f"{path.relative_to(tests)}: {a.name} from {node.module}" for a in node.names
                             if a.name in fixtures[node.module]]
    assert not imported, "fixtures imported by name (move them to a conftest.py):\n" + "\n".join(imported)
    seen, repeated = {}, []
    for module, defined in sorted(fixtures.items()):
        for name, (folder, code) in defined.items():
            key = (folder, name, code)
            if module != "conftest" and key in seen:
                repeated.append(f"{folder.relative_to(tests)}: {name} in {seen[key]} and {module}")
            seen.setdefault(key, module)
    assert not repeated, "the same fixture in two modules of a folder (move it to the folder's conftest.py):\n" \
        + "\n".join(repeated)
    helpers = sorted(m for m in fixtures if m != "conftest" and not m.startswith("test_"))
    assert not helpers, f"fixtures in helper modules (move them to a conftest.py): {helpers}"
