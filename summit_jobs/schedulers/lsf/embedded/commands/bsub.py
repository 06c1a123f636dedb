"""Embedded ``bsub``: accept a job, print LSF's submit line, hand it to a detached supervisor.

``bsub [options] script.lsf [args]`` reads ``#BSUB`` lines from the file (Summit's
way); ``bsub [options] < script`` reads the script and its ``#BSUB`` lines from
stdin (most LSF sites). Options on the command line win over ``#BSUB`` lines.
``bsub [options] command args`` runs the command directly (without a shell);
``bsub [options] "command args"``, one string naming no file, is run by
``/bin/sh -c`` as IBM documents it.

``-env`` chooses the submission variables the job gets (env_selection), ``-J
"name[1-N%M]"`` submits a job array (parse_array): one record per element,
each with an id of its own that only the state uses, shown as ``ID[i]``.
``-K`` waits for the job and exits with its exit code (wait_for_job). On a
generic cluster (SUMMIT_JOBS_LSF_CLUSTER=generic) every job has the generic
form and ``-nnodes`` is refused (slot_request).

The job is spooled (the script copied into the state folder, as LSF does) so
that editing the file after submission changes nothing. The job runs in the
submission folder (``LS_SUBCWD``) with the submission environment, like LSF.
Jobs without ``-o`` write their output to ``<LSF home>/jobs/<id>/output``.
The submission environment is kept for the job in ``env.json`` (private to the
user, see job_environment for what is left out).

``-w`` takes LSF's dependency expressions (deps.py); ``-ti`` with it ends the
job as EXIT (TERM_ORPHAN_SYSTEM) as soon as its dependency can never be
satisfied, instead of leaving it pending. A dependency that cannot be read, or
names a job LSF does not know, is refused with LSF's words ("Dependency
condition syntax error", "No matching job found"). A refused bsub uses up no
job id: the id is committed only once the job is accepted. Ids come from a
counter shared by every LSF home of this machine (state.machine_ids), so two
homes never hand out the same one.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from summit_jobs.schedulers.lsf.embedded import state
from summit_jobs.schedulers.lsf.embedded import resources
from summit_jobs.schedulers.lsf.embedded.deps import DependencyError, parse_dependency
from summit_jobs.errors import describe_os_error

#: Options that take a value, and flags that do not.
VALUE_OPTS = {"-J", "-q", "-o", "-oo", "-e", "-eo", "-W", "-nnodes", "-P", "-G", "-w", "-wa", "-wt",
              "-alloc_flags", "-U", "-cwd", "-n", "-R", "-M", "-ln_slots", "-csm", "-gpu", "-app", "-env"}
FLAG_OPTS = {"-B", "-N", "-rn", "-r", "-x", "-ti", "-K"}
#: Options that may be given several times (merged, as LSF does).
REPEATABLE = {"-R"}
QUEUE_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
DEFAULT_QUEUE = "batch"
#: LSF's longest job name (IBM: bsub -J).
MAX_NAME = 4094


class BsubError(Exception):
    pass


#: Words that mark a variable as a secret (a part of its name, split at ``_``).
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS", "KEY",
                "APIKEY", "PRIVATE", "AUTH", "COOKIE")
#: Variables that hand out the user's identity to whoever can read them.
SECRET_NAMES = ("SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "KRB5CCNAME", "NETRC")
#: Variables passed even though their names look secret (comma-separated names).
PASS_ENV = "SUMMIT_JOBS_LSF_PASS_ENV"


def looks_secret(name: str) -> bool:
    """Whether a variable's name says it holds a credential (API keys, tokens, agent sockets)."""
    upper = name.upper()
    if upper in SECRET_NAMES:
        return True
    parts = [p for p in re.split(r"[^A-Z0-9]+", upper) if p]
    return any(p in SECRET_WORDS or p.endswith(("KEY", "TOKEN", "SECRET", "PASSWORD")) for p in parts)


def job_environment(environ: Dict[str, str]) -> Dict[str, str]:
    """The variables a job gets: the submission environment minus what looks like a secret.

    Why not an allow-list: IBM LSF gives a job the whole submission
    environment, and job scripts, the trainer and users' own programs rely on
    it (PATH, HOME, the virtual environment, PYTHONPATH, SUMMIT_JOBS_*,
    HOROVOD_*/NCCL_*/OMP_* tuning, variables of their own). An allow-list would
    break jobs that run on a real LSF. What a job does not need are the user's
    credentials (cloud and API tokens, passwords, the SSH agent socket, the
    Kerberos ticket cache), which would otherwise sit in a file on disk; those
    are dropped. A job that really needs one names it in
    SUMMIT_JOBS_LSF_PASS_ENV. The file itself is private (0600).
    """
    passed = {n.strip() for n in environ.get(PASS_ENV, "").split(",") if n.strip()}
    return {k: v for k, v in environ.items() if k in passed or not looks_secret(k)}


#: IBM's bsub -env page (https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bsub.env.1.html):
#: a variable's name may not be one of these words nor hold one of these characters.
ENV_RESERVED_NAMES = ("none", "all")
ENV_NAME_RE = re.compile(r"^[^,~=\"'\s]+$")
ENV_REF_RE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def _env_items(text: str) -> List[str]:
    """The comma-separated items of a ``-env`` value; a comma inside single quotes belongs to the value."""
    items: List[str] = []
    current, quoted = "", False
    for ch in text:
        if ch == "'":
            quoted = not quoted
        if ch == "," and not quoted:
            items.append(current.strip())
            current = ""
        else:
            current += ch
    if quoted:
        raise BsubError(f'-env "{text}": a single quote is not closed')
    items.append(current.strip())
    if any(not item for item in items):
        raise BsubError(f'-env "{text}": an empty item between commas')
    return items


def _env_name(text: str, name: str) -> str:
    if name.lower() in ENV_RESERVED_NAMES or not ENV_NAME_RE.fullmatch(name):
        raise BsubError(f'-env "{text}": {name!r} is not a variable name (IBM LSF forbids the words none and '
                        "all, commas, tildes, equal signs and quotes in one)")
    return name


def _env_value(raw: str, environ: Dict[str, str]) -> str:
    """A ``-env`` value: single quotes around it removed, ``$VAR`` / ``${VAR}`` taken from the submission
    environment (IBM: the value may "quote the value of an existing environment variable")."""
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == "'":
        value = value[1:-1]
    return ENV_REF_RE.sub(lambda m: environ.get(m.group(1) or m.group(2), ""), value)


def env_selection(text: Optional[str], environ: Dict[str, str]) -> Dict[str, str]:
    """The submission variables a job gets under ``bsub -env`` (IBM LSF 10.1, bsub -env).

    ``all`` (the default): every variable, less ``~NAME`` ones, with ``NAME=value``
    ones set; ``none``: no submission variable at all; a list ``NAME[=value], ...``:
    only those. LSF's own variables are set for the job whatever this says
    (supervisor.py). Credentials are left out of ``all`` (job_environment); a
    variable the user names in the list is passed, as asked.
    """
    if text is None or not text.strip():
        return job_environment(environ)
    items = _env_items(text)
    if items[0].lower() == "none":
        if len(items) > 1:
            raise BsubError(f'-env "{text}": none stands alone (no submission variable at all)')
        return {}
    keep_all = items[0].lower() == "all"
    chosen: Dict[str, str] = job_environment(environ) if keep_all else {}
    for item in items[1:] if keep_all else items:
        if item.startswith("~"):
            if not keep_all:
                raise BsubError(f'-env "{text}": ~{item[1:]} leaves a variable out of all; give "all, {item}"')
            chosen.pop(_env_name(text, item[1:].strip()), None)
            continue
        name, eq, raw = item.partition("=")
        name = _env_name(text, name.strip())
        if eq:
            chosen[name] = _env_value(raw, environ)
        elif name in environ:
            chosen[name] = environ[name]
    return chosen


def parse_options(args: List[str], where: str) -> Tuple[Dict[str, object], List[str]]:
    """Options up to the first non-option; the rest is the command (or script) and its arguments."""
    opts: Dict[str, object] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return opts, args[i + 1:]
        if not arg.startswith("-") or arg == "-":
            return opts, args[i:]
        if arg in FLAG_OPTS:
            opts[arg] = True
            i += 1
            continue
        if arg in VALUE_OPTS:
            if i + 1 >= len(args):
                raise BsubError(f"{where}: option {arg} needs a value")
            if arg in REPEATABLE:
                # LSF merges repeated -R options; later ones extend the earlier ones.
                opts[arg] = " ".join(filter(None, [str(opts.get(arg) or ""), args[i + 1]]))
            elif arg == "-env" and arg in opts:
                # IBM's -env page does not say what a repeated -env does. psij writes "-env all" and then
                # one "-env NAME=value" per variable of the job, meaning one list: join them in order
                # (docs/embedded-lsf.md). "-env all" after a name is then refused as a name, not dropped.
                opts[arg] = f"{opts[arg]}, {args[i + 1]}"
            else:
                opts[arg] = args[i + 1]
            i += 2
            continue
        raise BsubError(f"{where}: illegal option {arg!r}; this embedded bsub knows "
                        f"{' '.join(sorted(VALUE_OPTS | FLAG_OPTS))}")
    return opts, []


def directives(script: str) -> List[str]:
    """Arguments of the ``#BSUB`` lines, up to the script's first command (as LSF reads them)."""
    out: List[str] = []
    for line in script.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#BSUB"):
            body = stripped[len("#BSUB"):]
            try:
                out += shlex.split(body, comments=False)
            except ValueError as exc:
                raise BsubError(f"bad #BSUB line {line!r}: {exc}") from None
            continue
        if stripped.startswith("#"):
            continue
        break
    return out


#: The longest run limit or warning time taken, in minutes (a century: more is a typo, not a wish).
MAX_MINUTES = 100 * 366 * 24 * 60


def minutes(text: str, what: str) -> int:
    """``[hours:]minutes`` in ASCII digits, as LSF reads -W and -wt; positive and at most MAX_MINUTES."""
    parts = [resources.whole_number(p) if p.strip() == p else None for p in str(text).split(":")]
    if not (1 <= len(parts) <= 2 and all(p is not None for p in parts)):
        raise BsubError(f"{what} {_shown(text)!r}: give [hours:]minutes")
    value = int(parts[0] or 0) * 60 + int(parts[1] or 0) if len(parts) == 2 else int(parts[0] or 0)
    if value <= 0:
        raise BsubError(f"{what} {text!r} must be positive")
    if value > MAX_MINUTES:
        raise BsubError(f"{what} {_shown(text)!r}: longer than this embedded LSF takes ({MAX_MINUTES} minutes)")
    return value


#: The signals IBM LSF sends for -wa and bkill -s: by name, or by number from 1 to 31.
SIGNAL_RANGE = range(1, 32)


def signal_number(name: str, what: str = "-wa") -> int:
    """The signal ``name`` names (``USR2``, ``SIGUSR2``, ``12``), checked to be one LSF sends.

    Why the range: a number the kernel has no signal for (``-wa 65``) would fail the job's supervisor at
    the warning and lose the job; 0 would silently send nothing; the real-time signals above 31 are no
    LSF signal.
    """
    import signal
    text = str(name).strip().upper()
    number = resources.whole_number(text)
    if number is None:
        try:
            number = int(signal.Signals[text if text.startswith("SIG") else "SIG" + text])
        except KeyError:
            number = None
    if number not in SIGNAL_RANGE:
        raise BsubError(f"{what} {_shown(str(name))!r} is not a signal: give a signal name (e.g. USR2) or a number from "
                        f"{SIGNAL_RANGE[0]} to {SIGNAL_RANGE[-1]}")
    return int(number)


def _user() -> str:
    import pwd
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return os.environ.get("USER") or str(os.getuid())


def dependency_terms(opts: Dict[str, object]) -> Tuple[Optional[str], List[Tuple[str, int]]]:
    """The ``-w`` expression and the jobs it names, its syntax checked; ``-ti`` only with it."""
    dependency = str(opts["-w"]).strip() if "-w" in opts else None
    if opts.get("-ti") and not dependency:
        raise BsubError("-ti: use it with -w (it ends the job when its dependency can never be satisfied)")
    if not dependency:
        return None, []
    try:
        return dependency, list(parse_dependency(dependency))
    except DependencyError as exc:
        raise BsubError(f"{dependency}: Dependency condition syntax error: {exc}") from None


def check_dependency(opts: Dict[str, object], lsf_home: Path) -> Optional[str]:
    """The ``-w`` expression, checked: readable, every job in it known (caller holds the home's lock)."""
    dependency, terms = dependency_terms(opts)
    for _kind, dep_id in terms:
        rec = state.load_job(lsf_home, dep_id)
        if rec is None or state.lsf_id(rec) != dep_id:
            raise BsubError(f"{dependency}: No matching job found: job <{dep_id}>")
        if rec.get("array_id"):
            raise BsubError(f"{dependency}: job <{dep_id}> is a job array; this embedded LSF does not take "
                            "dependencies on job arrays")
    return dependency


def _whole(text: str, what: str) -> int:
    """A positive whole number in ASCII digits (LSF reads no other script's digits); one beyond 18 digits
    is read as resources.HUGE, which every limit then refuses."""
    number = resources.whole_number(text) if text.strip() == text else None
    if number is None or number < 1:
        raise BsubError(f"{what} {_shown(text)!r} is not a positive whole number (digits 0-9)")
    return number


def _shown(text: str, most: int = 60) -> str:
    """A value as a refusal names it: whole when short, its first ``most`` characters and ``...`` when not
    (a 5,000-digit value would bury the reason)."""
    return text if len(text) <= most else text[:most] + "..."


def _csm_nodes(opts: Dict[str, object], span: Dict[str, int], nodes_total: int, cores: int) -> List[int]:
    """Cores on each node of a CSM job (``-nnodes``, or neither option).

    IBM's -nnodes page (https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bsub.nnodes.1.html)
    names ``-csm y`` as its only conflict, and clients write ``-nnodes 1 -n 1``
    together (psij): the nodes make the allocation, ``-n`` is checked and recorded
    (a job asking more slots than its nodes have cores could never start).
    """
    if span:
        raise BsubError(f"-R {opts['-R']!r}: span[...] places the slots of -n; give -n without -nnodes")
    nnodes = _whole(str(opts["-nnodes"]), "-nnodes") if "-nnodes" in opts else 1
    if nnodes > nodes_total:
        raise BsubError(f"-nnodes {_shown(str(opts['-nnodes']))} is larger than the {nodes_total} virtual nodes of this embedded "
                        "LSF (SUMMIT_JOBS_LSF_NODES); the job could never start")
    if "-n" in opts:
        slots = _whole(str(opts["-n"]), "-n")
        if slots > nnodes * cores:
            raise BsubError(f"-n {_shown(str(opts['-n']))} with -nnodes {nnodes}: {nnodes} virtual node(s) of {cores} cores "
                            "(SUMMIT_JOBS_LSF_CORES) hold fewer slots; the job could never start")
    return [cores] * nnodes


def slot_request(opts: Dict[str, object], nodes_total: int, cores: int) -> Tuple[str, List[int]]:
    """The job's shape: ("csm", cores on each of ``-nnodes`` nodes) or ("generic", slots on each host).

    ``-nnodes`` (or neither option) is Summit's CSM form: whole nodes behind a
    launch node. ``-n`` is the generic form: ``span[ptile=P]`` puts P slots on
    each host (the last takes the rest), ``span[hosts=1]`` all on one host,
    neither fills hosts a node's cores at a time. A job that could never start
    on this machine's virtual nodes is refused.

    On a generic cluster (SUMMIT_JOBS_LSF_CLUSTER=generic) every job has the
    generic form, as on an LSF cluster without IBM CSM: neither option is one
    slot (IBM's default, ``-n 1``), and ``-nnodes``, CSM's option, is refused.
    """
    if state.cluster_kind() == "generic":
        if "-nnodes" in opts:
            raise BsubError(f"-nnodes {_shown(str(opts['-nnodes']))}: -nnodes is an option of IBM CSM, and this "
                            "embedded LSF is a generic LSF cluster without CSM (SUMMIT_JOBS_LSF_CLUSTER=generic); "
                            "give -n SLOTS")
        if "-n" not in opts:
            opts = dict(opts, **{"-n": "1"})
    if "-nnodes" in opts and str(opts.get("-csm", "n")).lower() == "y":
        raise BsubError("-nnodes: Do not use with the -csm y option (-nnodes is CSM's easy mode, -csm y its "
                        "expert mode)")
    span = resources.parse_resreq(str(opts["-R"]))[0] if "-R" in opts else {}
    if "-n" not in opts or "-nnodes" in opts:
        return "csm", _csm_nodes(opts, span, nodes_total, cores)
    slots = _whole(str(opts["-n"]), "-n")
    asked = _shown(str(opts["-n"]))
    ptile = slots if span.get("hosts") else span.get("ptile", cores)
    if ptile > cores:
        per_host = ptile if ptile < resources.HUGE else "far more"
        raise BsubError(f"-n {asked} with {per_host} slots on one host: a virtual node of this embedded LSF has "
                        f"{cores} cores (SUMMIT_JOBS_LSF_CORES); the job could never start")
    hosts = -(-slots // ptile)          # counted before any list is made: -n 600000000 must cost nothing
    if hosts > nodes_total:
        needs = hosts if slots < resources.HUGE else "far more"
        raise BsubError(f"-n {asked} at {ptile} slots per host needs {needs} hosts, but this embedded "
                        f"LSF has {nodes_total} virtual nodes (SUMMIT_JOBS_LSF_NODES); the job could never start")
    return "generic", [ptile] * (slots // ptile) + ([slots % ptile] if slots % ptile else [])


def host_resources(opts: Dict[str, object]) -> Dict[str, object]:
    """The job's GPU, memory and application-profile requests (resources.py), checked.

    A job asking more GPUs per host than a virtual node has could never start,
    so it is refused at submission, as -nnodes beyond the nodes is.
    """
    gpu = resources.parse_gpu(str(opts["-gpu"])) if "-gpu" in opts else None
    if gpu is not None and int(gpu["num"]) > state.gpus_per_node():
        raise BsubError(f'-gpu "{opts["-gpu"]}" asks {gpu["num"]} GPUs per host, but a virtual node of this '
                        f"embedded LSF has {state.gpus_per_node()} (SUMMIT_JOBS_LSF_GPUS); the job could "
                        "never start")
    mem_limit = resources.memory_kb(str(opts["-M"]), "-M", "KB") if "-M" in opts else None
    _span, rusage_mem, select = resources.parse_resreq(str(opts["-R"])) if "-R" in opts else ({}, None, [])
    app = resources.check_app(str(opts["-app"]), state.app_profiles()) if "-app" in opts else None
    return {"gpu": gpu, "mem_limit_kb": mem_limit, "rusage_mem_mb": rusage_mem, "app": app,
            "select": [list(t) for t in select], "unsatisfiable": unsatisfiable(select, rusage_mem)}


def unsatisfiable(select: List[Tuple[str, str, int]], rusage_mem: Optional[int]) -> Optional[str]:
    """LSF's pending reason for a job no virtual node can ever run (None when nodes can).

    IBM LSF accepts such a job and keeps it pending with the reason
    (https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_admin/select_string.html: hosts that
    do not satisfy the selection are not candidates); every virtual node is alike
    and never changes, so one check against a node decides for good.
    """
    node = state.node_resources()
    if select and not resources.select_holds(select, node):
        return f"Job's resource requirements not satisfied: {state.virtual_nodes()} hosts"
    if rusage_mem is not None and rusage_mem > node["mem"]:
        return f"Job requirements for reserving resource (mem) not satisfied: {state.virtual_nodes()} hosts"
    return None


#: IBM's default MAX_JOB_ARRAY_SIZE (lsb.params): the most elements, and the largest index, of an array.
MAX_ARRAY = 1000
ARRAY_RE = re.compile(r"^(.*)\[([^\[\]]*)\](?:%(\S*))?$", re.S)


def parse_array(name: Optional[str]) -> Optional[Dict]:
    """A job array's ``-J "name[index_list]%limit"`` (IBM: bsub -J, "Job arrays"); None for a plain name.

    ``index_list`` is ``start[-end[:step]]`` items separated by commas, every
    index from 1 to MAX_JOB_ARRAY_SIZE (1000) and none twice; ``%limit`` is how
    many elements may run at once.
    """
    m = ARRAY_RE.fullmatch(str(name or ""))
    if not m:
        return None
    text = str(name)
    indices: List[int] = []
    for item in m.group(2).split(","):
        im = re.fullmatch(r"\s*([0-9]+)(?:\s*-\s*([0-9]+)(?:\s*:\s*([0-9]+))?)?\s*", item)
        if not im:
            raise BsubError(f'-J "{text}": Bad job name: {item.strip()!r} is not an index range '
                            "(start[-end[:step]], comma-separated)")
        start, end, step = (int(resources.whole_number(g) or 0) for g in (im.group(1), im.group(2) or im.group(1),
                                                                          im.group(3) or "1"))
        if not 1 <= start <= end <= MAX_ARRAY or step < 1:
            raise BsubError(f'-J "{text}": Bad job name: {item.strip()!r}: indices go from 1 to {MAX_ARRAY} '
                            "(MAX_JOB_ARRAY_SIZE), start <= end, step >= 1")
        indices += range(start, end + 1, step)
    if len(set(indices)) != len(indices) or len(indices) > MAX_ARRAY:
        raise BsubError(f'-J "{text}": Bad job name: an index is given twice, or more than {MAX_ARRAY} elements')
    limit = m.group(3)
    number = resources.whole_number(limit) if limit is not None and limit.strip() == limit else None
    if limit is not None and (number is None or number < 1):
        raise BsubError(f'-J "{text}": %{limit}: the job slot limit must be a positive whole number')
    if "[" in m.group(1) or "]" in m.group(1):
        raise BsubError(f'-J "{text}": Bad job name: brackets belong only around the index list, at the end')
    return {"base": m.group(1), "indices": indices, "end": max(indices), "limit": number}


def check_name(opts: Dict[str, object]) -> Optional[Dict]:
    """``-J``: at most MAX_NAME characters, not empty, brackets only as a job array's index list; the
    array it asks for (parse_array), or None.

    IBM's bsub -J page: a job name holds up to 4094 characters, and ``[`` ``]`` mark a job array; a name
    LSF cannot read is refused as "Bad job name" rather than kept as typed.
    """
    if "-J" not in opts:
        return None
    name = str(opts["-J"])
    shown = _shown(name)
    if not name.strip():
        raise BsubError(f"-J {name!r}: Bad job name: it is empty")
    if len(name) > MAX_NAME:
        raise BsubError(f"-J {shown!r}: Bad job name: {len(name)} characters, LSF's longest job name has "
                        f"{MAX_NAME}")
    array = parse_array(name)
    if array is None and ("[" in name or "]" in name):
        raise BsubError(f"-J {shown!r}: Bad job name: [ and ] only enclose a job array's index list at the end "
                        '(-J "name[1-10]")')
    return array


def queue_name(opts: Dict[str, object]) -> str:
    """``-q``, or the default queue: a queue name is letters, digits, ``_ . -``; an empty one is refused."""
    if "-q" not in opts:
        return DEFAULT_QUEUE
    queue = str(opts["-q"])
    if not queue:
        raise BsubError("-q '': No such queue: the queue name is empty (leave -q out for the default queue "
                        f"{DEFAULT_QUEUE})")
    if not QUEUE_RE.fullmatch(queue):
        raise BsubError(f"queue {queue[:60]!r} is not a valid queue name")
    return queue


def job_template(opts: Dict[str, object], command: List[str], script: Optional[str],
                 typed: Optional[List[str]] = None) -> Dict:
    """What every record of this bsub holds, every option checked; BsubError names the first value refused.

    It reads no state and takes no lock: bsub checks every value before it waits for a lock, so a
    refusal never waits for another bsub, and no lock is held while a value is read. What depends on
    the job's id (``%J`` in file names, the spooled file's name) or on other jobs (-w) comes later
    (numbered, check_dependency).
    """
    nodes_total = state.virtual_nodes()
    form, slots = slot_request(opts, nodes_total, state.cores_per_node())
    asked = host_resources(opts)
    queue = queue_name(opts)
    limits = time_limits(opts)
    dependency, _terms = dependency_terms(opts)
    env_selection(str(opts["-env"]) if "-env" in opts else None, dict(os.environ))   # refused before the id is used
    check_name(opts)
    typed_name = job_name(typed if typed is not None else command, script)
    return {
        "name": str(opts.get("-J") or typed_name), "command_line": typed_name,
        "name_given": "-J" in opts, "slots_asked": _whole(str(opts["-n"]), "-n") if "-n" in opts else None,
        "resreq": str(opts.get("-R") or ""),
        "queue": queue, "queue_given": "-q" in opts, "project": opts.get("-P") or opts.get("-G"),
        "form": form, "slots": slots, "nnodes": len(slots), "nodes_total": nodes_total,
        "cores": state.cores_per_node(),
        **limits, "dependency": dependency, "subcwd": os.getcwd(),
        "out_given": opts.get("-oo") or opts.get("-o"), "err_given": opts.get("-eo") or opts.get("-e"),
        "out_overwrite": "-oo" in opts, "err_overwrite": "-eo" in opts,
        "command": command, "is_script": script is not None, "shell_command": bool(opts.get("shell_command")),
        "alloc_flags": opts.get("-alloc_flags"),
        "state": "PEND", "pend_reason": "New job is waiting for scheduling",
        "start_time": None, "finish_time": None, "hosts": [],
        "pid": None, "exit_code": None, "exit_reason": None, "kill_requested": None,
        "warning_sent": None, "supervisor_pid": None,
        "user": _user(),
        "from_host": os.uname().nodename.split(".")[0],
        "kill_grace": state.kill_grace(), "runlimit_grace_s": state.runlimit_grace(),
        "orphan_terminate": bool(opts.get("-ti")), "env_spec": opts.get("-env"), **asked,
    }


def numbered(template: Dict, job_id: int, element: Optional[Tuple[Dict, int, int]] = None) -> Dict:
    """The record of job ``job_id``: the template with what depends on the id filled in.

    ``element``: (the array, its id, this element's index) for an element of a job array: its own
    record (own id, hidden), shown as ``id[index]``, with ``%J``/``%I`` of its file names filled in.
    """
    array, array_id, index = element if element else (None, job_id, 0)

    def path(given: object) -> Optional[str]:
        if given is None:
            return None
        return os.path.join(template["subcwd"], str(given).replace("%J", str(array_id)).replace("%I", str(index)))

    extra = {"array_id": array_id, "index": index, "array_end": array["end"],
             "array_limit": array["limit"], "name": f"{array['base']}[{index}]"} if array else {}
    return {**template, **extra, "id": job_id, "job_file": f"{int(time.time())}.{job_id}",
            "out": path(template["out_given"]), "err": path(template["err_given"]), "submit_time": time.time()}


def time_limits(opts: Dict[str, object]) -> Dict[str, object]:
    """The run limit (-W) and the warning (-wa signal, -wt minutes before the limit), in LSF minutes and in
    this machine's seconds (SUMMIT_JOBS_LSF_MINUTE); BsubError for a value refused or a half warning."""
    scale = state.seconds_per_minute()
    limit_min = minutes(str(opts["-W"]), "-W") if "-W" in opts else None
    warn_sig = signal_number(str(opts["-wa"])) if "-wa" in opts else None
    warn_min = minutes(str(opts["-wt"]), "-wt") if "-wt" in opts else None
    if (warn_sig is None) != (warn_min is None):
        raise BsubError("-wa and -wt go together: the signal and the minutes before the run limit")
    return {"limit_minutes": limit_min, "limit_s": limit_min * scale if limit_min else None,
            "warn_signal": warn_sig, "warn_s": warn_min * scale if warn_min else None}


def job_name(typed: List[str], script: Optional[str]) -> str:
    """LSF's default job name: the command as typed on the bsub line (``job.lsf arg``); for a script
    read from stdin, which has no command line, its lines joined with ``;``, as LSF shows them (a
    captured ``bjobs`` lists such a job as ``*#zsh;bash`` and its command as ``#!/bin/bash;#BSUB ...``)."""
    if typed:
        return " ".join(typed)[:MAX_NAME]
    lines = [line for line in (script or "").splitlines() if line.strip()]
    return ";".join(lines)[:MAX_NAME] or "STDIN"


def one_string_command(rest: List[str]) -> bool:
    """Whether the command is one string for /bin/sh (``bsub "prog a b"``, ``bsub 'echo a; echo b'``).

    IBM (https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bsub.1.html): the
    command is "anything that is provided to a UNIX Bourne shell". A lone word that
    names no file is such a string and is run by ``/bin/sh -c``; a program with
    separate arguments (``bsub prog a b``) keeps running without a shell, its
    arguments exactly as given, and so does a lone word naming a program.
    """
    return len(rest) == 1 and not os.path.exists(rest[0])


def _text_file(path: str) -> bool:
    """A job script (read for #BSUB lines and spooled) versus a program to run as the command.

    Text is what has no NUL byte in its first 4 KB (a compiled program always has some), in whatever
    encoding: a script with a Latin-1 ``é`` in a comment is still a script, its ``#BSUB`` lines honoured.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return b"\0" not in head


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        cmd_opts, rest = parse_options(args, "bsub")
        script: Optional[str] = None
        command: List[str] = []
        if rest and os.path.isfile(rest[0]) and _text_file(rest[0]):
            # Bytes, not text mode: universal newlines would turn a quoted "\r" into "\n".
            script = Path(rest[0]).read_bytes().decode("utf-8", "surrogateescape")
            command = rest[1:]
        elif rest:
            command = rest
            cmd_opts["shell_command"] = one_string_command(rest)
        else:
            if sys.stdin is None or sys.stdin.isatty():
                raise BsubError("no job: give a script file, a command, or the script on stdin")
            script = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
            if not script.strip():
                raise BsubError("the script on stdin is empty")
        opts: Dict[str, object] = {}
        if script is not None:
            opts, _ = parse_options(directives(script), "#BSUB")
        opts.update(cmd_opts)
        if opts.get("-K") and check_name(opts) is not None:
            raise BsubError("-K with a job array: this embedded bsub waits for one job only; submit the array "
                            "without -K and follow it with bjobs")
        job = submit(opts, command, script, rest)
    except (BsubError, resources.ResourceError, state.LsfError) as exc:
        print(f"{exc}. Job not submitted.", file=sys.stderr)
        return 255
    except OSError as exc:
        print(f"bsub: embedded LSF state: {describe_os_error(exc)} Job not submitted.", file=sys.stderr)
        return 255
    where = f"queue <{job['queue']}>" if job["queue_given"] else f"default queue <{job['queue']}>"
    print(f"Job <{job['id']}> is submitted to {where}.", flush=True)
    if opts.get("-K"):
        return wait_for_job(job["id"])
    return 0


#: Seconds between two looks at the job's record while ``bsub -K`` waits (a file read each).
WAIT_POLL = 0.1
#: Seconds between two checks that the job's supervisor is alive while ``bsub -K`` waits.
WAIT_REAP = 2.0


def wait_for_job(job_id: int) -> int:
    """``bsub -K``: wait for the job to end, with IBM's messages on stderr; the job's exit code.

    IBM (bsub -K, https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bsub.__k.1.html): "Waiting
    for dispatch" when the job is submitted, "Starting on execution_host" when it starts if
    LSB_SUBK_SHOW_EXEC_HOST is enabled, "Job is finished" when it is done; bsub exits with the job's exit
    code, and 126 if the job was terminated while pending. The words as LSF prints them (``<<Waiting for
    dispatch ...>>``, ``<<Starting on batch1>>``, ``<<Job is finished>>``, all on stderr) were captured on
    Summit (tests/data/lsf/bsub_K_summit.txt and its .source). IBM does not say what Ctrl-C does to a
    waiting bsub: here it stops the waiting only, and the job goes on, as one submitted without -K would.
    """
    lsf_home = state.home()
    print("<<Waiting for dispatch ...>>", file=sys.stderr, flush=True)
    show_host = os.environ.get("LSB_SUBK_SHOW_EXEC_HOST", "").strip().upper() == "Y"
    started = False
    last_reap = time.time()
    try:
        while True:
            job = state.load_job(lsf_home, job_id)
            if job is None:
                print(f"bsub: job <{job_id}> is no longer known to this embedded LSF (its record in {lsf_home} "
                      "is gone)", file=sys.stderr)
                return 255
            if show_host and not started and job.get("hosts"):
                started = True
                from summit_jobs.schedulers.lsf.embedded import jobenv
                print(f"<<Starting on {jobenv.host_slots(job)[0][0]}>>", file=sys.stderr, flush=True)
            if job["state"] in state.FINISHED:
                return _finished(job)
            if time.time() - last_reap >= WAIT_REAP:
                last_reap = time.time()
                if not state.pid_alive(job.get("supervisor_pid")):
                    with state.locked(lsf_home):       # a supervisor that died leaves no one to end the job
                        state.reap_lost(lsf_home, [job])
            time.sleep(WAIT_POLL)
    except KeyboardInterrupt:
        print(f"bsub: stopped waiting for job <{job_id}>; the job goes on (bkill {job_id} ends it)",
              file=sys.stderr)
        return 130


def _finished(job: Dict) -> int:
    """The last line of ``bsub -K`` and its exit status, from the finished job's record."""
    if not job.get("start_time"):
        print("<<Terminated while pending>>", file=sys.stderr)
        return 126
    print("<<Job is finished>>", file=sys.stderr)
    if job["state"] == "DONE":
        return 0
    code = job.get("exit_code")
    return int(code) & 0xFF if isinstance(code, int) else 255      # no code: the job was lost


def submit(opts: Dict[str, object], command: List[str], script: Optional[str],
           typed: Optional[List[str]] = None) -> Dict:
    """Record the job under the lock (spooled script, private environment) and start its supervisor.

    Every value is checked first, before any lock (job_template): a refused bsub never waits for
    another one, and the machine-wide id counter is never held while a value is read. The job's
    dependency is checked under this home's lock; the id is taken under the machine-wide counter's
    lock (state.machine_ids), always after the home's, so two bsubs never wait for each other's; it is
    committed only once the job is recorded, and a job folder left half-written by a failure is removed,
    so a refused or failed bsub leaves neither a used-up id nor a partial job behind.
    """
    template = job_template(opts, command, script, typed)
    array = check_name(opts)
    lsf_home = state.home()
    with state.locked(lsf_home):
        state.clean_leftovers(lsf_home)
        check_dependency(opts, lsf_home)
        with state.machine_ids() as counter:
            job_id = state.peek_job_id(lsf_home, counter)
            if array is None:
                jobs = [numbered(template, job_id)]
            else:
                jobs = [numbered(template, job_id + k, (array, job_id, idx)) for k, idx in enumerate(array["indices"])]
            made: List[Path] = []
            try:
                for job in jobs:
                    jdir = state.job_dir(lsf_home, job["id"])
                    jdir.mkdir(parents=True, exist_ok=False, mode=0o700)
                    made.append(jdir)
                    _record(lsf_home, jdir, job, script)
                state.commit_job_id(lsf_home, jobs[-1]["id"], counter)
            except BaseException:
                for jdir in made:
                    shutil.rmtree(jdir, ignore_errors=True)
                raise
        try:
            for job, jdir in zip(jobs, made):
                job["supervisor_pid"] = _start_supervisor(lsf_home, jdir, job["id"])
                state.save_job(lsf_home, job)
        except BaseException:
            for jdir in made:
                shutil.rmtree(jdir, ignore_errors=True)
            raise
    return dict(jobs[0], id=job_id)


def _record(lsf_home: Path, jdir: Path, job: Dict, script: Optional[str]) -> None:
    """The job's folder: spooled script, private environment, record."""
    if script is not None:
        # Named like LSF's spooled job file (LSB_JOBFILENAME); the hostfile is named after it.
        state.write_bytes(jdir / job["job_file"], script.encode("utf-8", "surrogateescape"), 0o700)
    state.write_json(jdir / "env.json", env_selection(job.get("env_spec"), dict(os.environ)), 0o600)
    state.save_job(lsf_home, job)


def _start_supervisor(lsf_home: Path, jdir: Path, job_id: int) -> int:
    """The job's detached supervisor (its own session); its pid.

    It gets bsub's environment without LSB_JOBID: a bsub run inside a job (a chain
    queueing its next link) would otherwise hand the new job's supervisor the
    submitting job's mark, and ending that job (state.job_processes) would end the
    next link's supervisor with it.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("LSB_JOBID", state.JOB_RECORD)}
    with open(jdir / "supervisor.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "summit_jobs.schedulers.lsf.embedded.supervisor", str(lsf_home), str(job_id)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True, env=env)
    return proc.pid


if __name__ == "__main__":
    sys.exit(main())
