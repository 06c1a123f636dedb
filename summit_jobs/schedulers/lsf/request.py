"""What a job asks LSF for and what starts its ranks: the request kind and the launcher kind. Pure.

Why a module of its own: the machines users have today are not Summit. A CSM
machine takes ``-nnodes N`` and starts ranks with jsrun; every other LSF GPU
cluster takes IBM's slot form (``-n S -R "span[ptile=P]"`` with ``-gpu
"num=G:mode=..."``), often memory (``-M``, ``rusage[mem=]``), an application
profile (``-app``) or a container (``-a "docker(image)"``), and starts ranks
with blaunch, Open MPI's mpirun, or one torchrun per node. Each of those is a
profile setting with an option to override it, turned into ``#BSUB``
directives and a launch line here, so templates print data and never branch
on a machine.

Every value is checked: a ``#BSUB`` directive is an option and words of
LSF's token characters; anything else is refused with the rule named.
"""
from __future__ import annotations

import math
import re
from typing import List, Optional, Sequence, Tuple

from summit_jobs.errors import UserError
from summit_jobs.profiles.machines import MAX_MEMORY_KB, NAME_RE, REQUESTS, Profile
from summit_jobs.schedulers import Request
from summit_jobs.schedulers.lsf.launch import LAUNCHERS

#: One extra #BSUB line: an option and its value words, each a validated token; brackets for -R strings.
DIRECTIVE_RE = re.compile(r"-[A-Za-z][A-Za-z_]*(?: [A-Za-z0-9_.,:=+/@%\[\]>()!<&|-]+)*")
#: A container image reference (registry/name:tag@digest).
CONTAINER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,255}")
#: The forms of a memory request a site may want: ``-M`` (a limit) and ``rusage`` (a reservation in -R).
MEMORY_FORM_RE = re.compile(r"-M|rusage")
#: A memory size as users write it: 64GB, 64000MB, 64G, 500M, 1.5T (powers of 1,024, as LSF counts).
MEM_RE = re.compile(r"(?i)([0-9]+(?:\.[0-9]+)?)\s*([KMGT])B?")
UNIT_KB = {"K": 1, "M": 1024, "G": 1024 ** 2, "T": 1024 ** 3}
#: Options summit-jobs writes itself: --bsub-option may not set them (it would contradict the plan).
OWNED = {"-J": "--job-name", "-o": "(the run directory's output file)", "-oo": "(the run directory's output file)",
         "-e": "(the run directory's error file)", "-eo": "(the run directory's error file)", "-W": "--walltime",
         "-q": "--queue", "-P": "--project", "-G": "--project", "-n": "--nodes", "-nnodes": "--nodes",
         "-w": "--chain", "-wa": "(the warning before the run limit)", "-wt": "--warning-minutes",
         "-gpu": "the profile's scheduler.gpu", "-M": "--mem", "-app": "--app", "-a": "--container",
         "-alloc_flags": "the profile's alloc_flags"}
#: Options that change how the job is submitted or rerun, and what does it here instead: summit-jobs submits one
#: batch job per run directory, returns once it is queued, and resumes a run by its chain (the next link starts
#: from the checkpoint). ``-I`` stands for every interactive form (-Ip, -Is, -IS, -ISp, -ISs, -IX).
SUBMISSION = {
    "-K": "makes bsub wait for the job to end, so submit would block for the job's whole run: follow it with "
          "summit-jobs status RUN --watch",
    "-I": "runs the job interactively, so submit would block for the job's whole run: summit-jobs submits batch "
          "jobs; read their output with summit-jobs logs RUN",
    "-r": "sets whether LSF reruns the job, and summit-jobs resumes a run by its chain: use --chain or "
          "--until-complete",
    "-rn": "sets whether LSF reruns the job, and summit-jobs resumes a run by its chain: use --chain or "
           "--until-complete",
    "-Q": "sets which exits LSF requeues the job on, and summit-jobs resumes a run by its chain: use --chain or "
          "--until-complete",
    "-cwd": "sets the job's working folder, and the job script works in its run directory: give --run-dir",
    "-pack": "submits the jobs a file describes, and summit-jobs submits one job per run: give the options "
             "themselves"}
SUBMISSION.update({flag: "reads the job's options from a file, and summit-jobs writes them into the job script: "
                         "give the options themselves" for flag in ("-json", "-yaml", "-jsdl", "-jsdl_strict")})
#: bsub's options that begin with a refused flag and are options of their own (everything else that does is the
#: refused flag with its value attached, or no bsub option).
DISTINCT = ("-Jd", "-outdir", "-env", "-eptl", "-ext", "-extsched", "-We", "-network", "-notify", "-ar", "-aps",
            "-rnc", "-rcacct")
#: An -R section that sets how slots spread over hosts: the plan's span[ptile=P] says it.
SPAN_RE = re.compile(r"\bspan\s*\[")


def _kind(profile: Profile, asked: Optional[str], choices: Sequence[str], what: str, default: str) -> str:
    kind = asked or default
    if kind not in choices:
        raise UserError(f"--{what} {kind!r} is not known: use one of {', '.join(choices)}.")
    return kind


def request_and_launcher(profile: Profile, request: Optional[str], launcher: Optional[str]) -> Tuple[str, str]:
    """The request kind and the launcher kind (options over the profile), checked against each other."""
    kind = _kind(profile, request, REQUESTS, "request", profile.scheduler.request)
    starter = _kind(profile, launcher, LAUNCHERS, "launcher", profile.launcher.kind)
    if kind == "nnodes" and starter != "jsrun":
        raise UserError(f"--launcher {starter}: a CSM allocation (-nnodes) starts its ranks with jsrun from the "
                        "launch node. Use --request slots (IBM's -n/span[ptile] form) for blaunch, mpirun or "
                        "torchrun.")
    if kind == "slots" and starter == "jsrun":
        raise UserError("--launcher jsrun needs a CSM allocation (-nnodes, Summit and Lassen); a slot request "
                        "(-n/span[ptile]) starts ranks with blaunch, mpirun or torchrun.")
    return kind, starter


def parse_mem_kb(text: str) -> int:
    """KB in a memory size such as 64GB or 500M (at most MAX_MEMORY_KB); a UserError for anything else."""
    m = MEM_RE.fullmatch(str(text).strip())
    if not m or float(m.group(1)) <= 0:
        raise UserError(f"--mem {text!r} is not a memory size: write a number and a unit, e.g. 64GB, 500MB "
                        "(memory per node; KB, MB, GB, TB count in 1,024s as LSF does).")
    kb = float(m.group(1)) * UNIT_KB[m.group(2).upper()]
    if not kb <= MAX_MEMORY_KB:
        raise UserError(f"--mem {shown_size(text)} is more memory than a node has: give at most "
                        f"{MAX_MEMORY_KB // UNIT_KB['T']}TB per node, e.g. 64GB.")
    return int(math.ceil(kb))


def shown_size(text: str) -> str:
    """A size as a one-line message shows it: quoted, a typo of hundreds of digits by its head and length."""
    text = str(text).strip()
    return repr(text) if len(text) <= 24 else f"'{text[:12]}...' ({len(text)} characters)"


def _memory(profile: Profile, mem: Optional[str], kind: str, nodes: int, slots_per_host: int
            ) -> Tuple[List[Tuple[str, str]], str]:
    """-M and rusage[mem=] for --mem (memory per node), in the site's unit and counting."""
    if not mem:
        return [], ""
    if kind == "nnodes":
        raise UserError(f"--mem {mem}: {profile.name} allocates whole nodes (-nnodes), and the memory comes "
                        "with them; drop --mem.")
    per_node_kb = parse_mem_kb(mem)
    policy = profile.scheduler.memory
    count = {"slot": per_node_kb / slots_per_host, "host": per_node_kb, "job": per_node_kb * nodes}[policy.per]
    value = max(1, int(math.ceil(count / UNIT_KB[policy.unit[0]])))
    out = []
    for form in policy.forms:
        out.append(("-M", str(value)) if form == "-M" else ("-R", f"rusage[mem={value}]"))
    text = f"{mem} per node = {value} {policy.unit} per {policy.per} ({' and '.join(policy.forms)})"
    return out, text


def _gpu(profile: Profile) -> List[Tuple[str, str]]:
    gpus, gpu = profile.node.gpus, profile.scheduler.gpu
    if not gpus:
        return []
    if gpu.legacy_rusage:
        return [("-R", f"rusage[ngpus_excl_p={gpus}]")]
    words = [f"num={gpus}", f"mode={gpu.mode}"]
    words += [f"{k}={'yes' if v else 'no'}" for k, v in (("mps", gpu.mps), ("j_exclusive", gpu.j_exclusive))
              if v is not None]
    words += [f"{k}={v}" for k, v in (("gmodel", gpu.gmodel), ("gmem", gpu.gmem)) if v]
    return [("-gpu", ":".join(words))]


def owned(flag: str, value: str) -> Optional[str]:
    """Why a ``#BSUB flag value`` line would contradict the plan (the end of a sentence), or None.

    An owned flag, one that changes how the job is submitted or rerun (any interactive ``-I...`` form among
    them), either with letters attached that make no bsub option of their own (``-qdebug``, ``-Jname``), and an
    ``-R`` string with a ``span[]`` section (the plan's ptile) are refused.
    """
    def why(name: str) -> str:
        return f"summit-jobs writes {name} itself; set it with {OWNED[name]}" if name in OWNED else \
            f"{name} {SUBMISSION[name]}"

    if flag.startswith("-I"):
        return f"{flag} {SUBMISSION['-I']}"
    if flag in OWNED or flag in SUBMISSION:
        return why(flag)
    stem = next((o for o in sorted([*OWNED, *SUBMISSION], key=len, reverse=True) if flag.startswith(o)), None)
    if stem and flag not in DISTINCT:
        return f"{flag} is {stem} with its value attached, or no bsub option: {why(stem)}"
    if flag == "-R" and SPAN_RE.search(value):
        return ("summit-jobs writes the job's span[] itself (span[ptile=P]: its ranks per node); set it with "
                "--nodes and the profile's scheduler.slots_per_host, and give -R without span[]")
    return None


def user_directives(lines: Sequence[str], where: str) -> List[Tuple[str, str]]:
    """``-FLAG value`` lines (--bsub-option, the profile's extra_directives): checked, never an owned option."""
    out = []
    for line in lines:
        text = " ".join(str(line).split())
        if not DIRECTIVE_RE.fullmatch(text):
            raise UserError(f"{where} {line!r} is not a #BSUB option this tool can write: give '-OPTION value' "
                            "with letters, digits and . , : = + / @ % _ - [ ] > < ( ) ! & | (no quotes, $ or ;), "
                            "e.g. -B, -N, -U myreservation, -R select[mem>64000], -sla myclass.")
        flag, _, value = text.partition(" ")
        why = owned(flag, value)
        if why:
            raise UserError(f"{where} {line!r}: {why}.")
        out.append((flag, value))
    return out


def build(profile: Profile, kind: str, launcher: str, nodes: int, ranks_per_node: int, mem: Optional[str],
          app: Optional[str], container: Optional[str], bsub_options: Sequence[str]) -> Request:
    """The request of a job of ``nodes`` nodes (ranks_per_node ranks each), every directive checked."""
    if kind == "nnodes":
        sph, shape = profile.node.cores, [("-nnodes", str(nodes))]
    else:
        sph = ranks_per_node if launcher == "blaunch" else (profile.scheduler.slots_per_host or profile.node.cores)
        if launcher == "blaunch" and profile.scheduler.slots_per_host not in (None, ranks_per_node):
            raise UserError(f"--launcher blaunch starts one rank per slot, but {profile.name} asks "
                            f"{profile.scheduler.slots_per_host} slots per host for {ranks_per_node} ranks per "
                            "node; use --launcher torchrun (one per node) or mpirun.")
        shape = [("-n", str(sph * nodes)), ("-R", f"span[ptile={sph}]")] + _gpu(profile)
    memory, text = _memory(profile, mem, kind, nodes, sph)
    extra = list(memory)
    app = app or profile.scheduler.app
    if app:
        if not NAME_RE.fullmatch(app):
            raise UserError(f"--app {app!r} is not an application profile name (letters, digits, . _ -).")
        extra.append(("-app", app))
    image = container or profile.scheduler.container
    if image:
        if not CONTAINER_RE.fullmatch(image):
            raise UserError(f"--container {image!r} is not an image reference (letters, digits, . _ / : @ -).")
        extra.append(("-a", f"docker({image})"))
    extra += user_directives(profile.scheduler.extra_directives, "scheduler.extra_directives")
    extra += user_directives(bsub_options, "--bsub-option")
    legacy = [v for f, v in extra if "ngpus_excl_p" in v]
    if legacy and not profile.scheduler.gpu.legacy_rusage:
        raise UserError(f"-R {legacy[0]!r}: {profile.name} requests GPUs with -gpu (IBM LSF 10.1); the legacy "
                        "rusage[ngpus_excl_p=N] form is taken only where the profile says so "
                        "(scheduler.gpu.legacy_rusage: true).")
    return Request(kind=kind, launcher=launcher, slots_per_host=sph, slots=sph * nodes, shape=tuple(shape),
                   extra=tuple(extra), memory=text)
