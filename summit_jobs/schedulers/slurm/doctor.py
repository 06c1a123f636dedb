"""``summit-jobs doctor``, the Slurm part: the commands a Slurm run uses, Slurm's version (``sbatch --version``),
the profile's partitions (``sinfo``) and QOS (``sacctmgr``), and the account, as pure checks. The parsers are
tested on outputs captured from the test cluster (tests/data/slurm/); the probes run through the SiteProbe that
summit_jobs/cli/doctor.py builds on a host (``site_checks``, which SlurmScheduler.site_checks calls)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from summit_jobs.hosts.doctor import FAIL, OK, WARN, Check
from summit_jobs.profiles.machines import format_hhmm, parse_hhmm
from summit_jobs.schedulers.slurm.client import SlurmOutputError

# -- sbatch --version -----------------------------------------------------------------------------------------
#: ``slurm 22.05.8`` (SchedMD's builds), ``slurm-wlm 22.05.8`` (Debian's and Ubuntu's packages).
VERSION_RE = re.compile(r"^\s*slurm(?:-wlm)?\s+(?P<version>\d+\.\d+(?:\.\d+)*)", re.IGNORECASE | re.MULTILINE)


def parse_version(text: str) -> Tuple[int, ...]:
    """Slurm's version as numbers from ``sbatch --version``; anything else is a SlurmOutputError with the text,
    never a guessed version."""
    m = VERSION_RE.search(text or "")
    if m is None:
        raise SlurmOutputError("sbatch --version printed no line with Slurm's version (expected e.g. 'slurm "
                               f"22.05.8'); it printed:\n{(text or '').strip()[:2000]}")
    return tuple(int(p) for p in m.group("version").split("."))


# -- Slurm's times --------------------------------------------------------------------------------------------
#: How sinfo and sacctmgr write no limit (sinfo: ``infinite``; scontrol: ``UNLIMITED``; sacctmgr: nothing).
NO_LIMIT = ("", "infinite", "unlimited")
TIME_RE = re.compile(r"^(?:(?P<days>\d+)-)?(?P<rest>\d+(?::\d+){0,2})$")


def parse_time(text: str) -> Optional[int]:
    """Seconds of a time limit as Slurm writes one (``M``, ``M:SS``, ``H:MM:SS``, ``D-H``, ``D-H:MM``,
    ``D-H:MM:SS``, as slurm.conf(5) reads MaxTime); None for no limit. Anything else is a SlurmOutputError."""
    text = (text or "").strip()
    if text.lower() in NO_LIMIT:
        return None
    m = TIME_RE.match(text)
    if m is None:
        raise SlurmOutputError(f"{text!r} is not a time limit as Slurm writes one (e.g. 30:00, 2:00:00, "
                               "1-12:00:00, infinite)")
    parts = [int(p) for p in m.group("rest").split(":")]
    if m.group("days") is not None:         # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = (parts + [0, 0])[:3]
        return ((int(m.group("days")) * 24 + hours) * 60 + minutes) * 60 + seconds
    if len(parts) == 3:
        return (parts[0] * 60 + parts[1]) * 60 + parts[2]
    return parts[0] * 60 + (parts[1] if len(parts) == 2 else 0)


def minutes_text(seconds: Optional[int]) -> str:
    """A limit in the profile's H:MM words, in whole minutes within it (a fix line's "or less" then holds);
    ``no limit`` for None."""
    return "no limit" if seconds is None else format_hhmm(seconds // 60)


# -- sinfo and sacctmgr -----------------------------------------------------------------------------------------
#: sinfo's columns: the partition's name (without the default's ``*``), its availability and its MaxTime.
SINFO_ARGV = ["sinfo", "--all", "--noheader", "--format=%R|%a|%l"]
QOS_ARGV = ["sacctmgr", "-nP", "show", "qos", "format=Name,MaxWall"]


@dataclass(frozen=True)
class Partition:
    """One partition of sinfo: its availability (``up``, ``down``, ``drain``, ``inactive``) and MaxTime."""
    name: str
    availability: str
    max_time: str
    #: MaxTime in seconds; None for no limit.
    max_seconds: Optional[int]


def _fields(text: str, count: int, command: str) -> List[List[str]]:
    """The ``|``-separated rows of an answer, each of ``count`` fields; another row is an error with the text."""
    rows = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != count:
            raise SlurmOutputError(f"cannot read this line of {command} ({len(parts)} fields, not {count}): "
                                   f"{line!r}; full output:\n{(text or '').strip()[:3000]}")
        rows.append([p.strip() for p in parts])
    return rows


def parse_sinfo(text: str) -> Dict[str, Partition]:
    """Partitions by name from ``sinfo --all --noheader --format=%R|%a|%l`` (SINFO_ARGV), in sinfo's order."""
    out: Dict[str, Partition] = {}
    for name, availability, max_time in _fields(text, 3, "sinfo"):
        try:
            seconds = parse_time(max_time)
        except SlurmOutputError as exc:
            raise SlurmOutputError(f"sinfo's MaxTime of partition {name}: {exc}; full output:\n"
                                   f"{(text or '').strip()[:3000]}") from None
        out[name] = Partition(name=name, availability=availability.lower(), max_time=max_time, max_seconds=seconds)
    return out


def parse_qos(text: str) -> Dict[str, Optional[int]]:
    """Each QOS's MaxWall in seconds (None: no limit) from ``sacctmgr -nP show qos format=Name,MaxWall``."""
    out: Dict[str, Optional[int]] = {}
    for name, max_wall in _fields(text, 2, "sacctmgr show qos"):
        out[name] = parse_time(max_wall)
    return out


# -- 1. commands and version ----------------------------------------------------------------------------------
#: What submit, status, logs and cancel run (sbatch, squeue, sacct, scancel: client.py), then what the job
#: script runs on its first node (srun starts the ranks; scontrol names the nodes: templates/slurm/partials).
CORE_COMMANDS = ("sbatch", "squeue", "sacct", "scancel")
JOB_COMMANDS = ("srun", "scontrol")
#: What doctor itself reads the site with: sinfo (partitions), sacctmgr (QOS, where the site lets users ask).
PROBE_COMMANDS = ("sinfo", "sacctmgr")
#: The oldest Slurm this tool reads: client.py's readers of squeue --json (its fallback squeue --format, and
#: sacct -P for ended jobs) are written and tested against 22.05's answers and later ones' shapes (23.02's
#: set/number objects, 23.11's split exit codes); older releases' answers were never checked.
MIN_VERSION = (22, 5)
MIN_REASON = ("the status, cancel and chains of this tool read squeue --json (or squeue --format) and sacct -P as "
              "Slurm 22.05 and later print them")


def needed_commands() -> List[str]:
    return [*CORE_COMMANDS, *JOB_COMMANDS]


def version_text(version: Tuple[int, ...]) -> str:
    """A version as Slurm writes it: the month two digits wide (``22.05.8``)."""
    return ".".join(f"{p:02d}" if i == 1 else str(p) for i, p in enumerate(version))


def _slurm_fix(where: str, remote: bool) -> str:
    if remote:
        return (f"the non-interactive SSH session on {where} has no Slurm on its PATH: load it (your site's "
                "`module load slurm`) in ~/.bashrc on the login node, not only in ~/.bash_profile")
    return ("load Slurm's environment in this shell (your site's `module load slurm`), or check a login node "
            "over SSH with --host LOGIN_NODE")


def check_commands(found: Mapping[str, Optional[str]], where: str, remote: bool) -> Check:
    """Step 1: sbatch, squeue, sacct, scancel, srun and scontrol are on the PATH of ``where``."""
    needed = needed_commands()
    missing = [c for c in needed if not found.get(c)]
    if not missing:
        folders = sorted({str(found[c]).rsplit("/", 1)[0] for c in needed})
        return Check(OK, "slurm commands", f"{', '.join(needed)} found on {where} (in {', '.join(folders)})")
    return Check(FAIL, "slurm commands", f"{', '.join(missing)} not found on the PATH of {where}",
                 _slurm_fix(where, remote))


def check_version(version: Optional[Tuple[int, ...]], error: Optional[str]) -> Check:
    """Step 1: ``sbatch --version`` is MIN_VERSION or newer."""
    wanted = version_text(MIN_VERSION)
    if version is None:
        return Check(FAIL, "slurm version", error or "sbatch --version gave no answer",
                     "run `sbatch --version` on that machine by hand: it must print Slurm's version (a login node "
                     "has slurm.conf, or SLURM_CONF names it)")
    text = version_text(version)
    if version < MIN_VERSION:
        return Check(FAIL, "slurm version", f"Slurm {text} is older than {wanted}: {MIN_REASON}",
                     f"use a cluster (or login node) with Slurm {wanted} or newer")
    return Check(OK, "slurm version", f"Slurm {text}; this tool needs {wanted} or newer")


# -- 2. partitions, QOS and account ---------------------------------------------------------------------------
def longest_walltime(profile, queue: str) -> Tuple[int, str]:
    """(minutes, where the profile says it) of the longest job the planner would send to ``queue``: its longest
    walltime bin (those it allows), within the queue's own max_walltime, as plan.py caps a job."""
    q = profile.queues[queue]
    bins = [b for b in profile.walltime_bins if q.allowed_bins is None or b.bin in q.allowed_bins]
    top = max(bins or profile.walltime_bins, key=lambda b: b.max_minutes)
    limits = [(top.max_minutes, f"walltime bin {top.bin}")] if q.use_bins or not q.max_walltime else []
    if q.max_walltime:
        limits.append((parse_hhmm(q.max_walltime, f"queues.{queue}.max_walltime"), f"queues.{queue}.max_walltime"))
    return min(limits)


def _partition_check(profile, name: str, row: Optional[Partition], listed: List[str]) -> Check:
    label = f"partition {name}" + (" (default)" if profile.queues[name].default else "")
    if row is None:
        return Check(FAIL, label, f"not listed by sinfo (it lists: {', '.join(listed) or 'no partition'})",
                     f"name a partition the site has in the profile's queues (or submit --queue one of "
                     f"{', '.join(listed) or 'them'}); `scontrol show partition NAME` shows its limits")
    if row.availability in ("drain", "inactive"):
        return Check(FAIL, label, f"{row.availability}: sbatch refuses new jobs in it",
                     "use another partition (--queue), or ask the site when it is up again")
    if row.availability != "up":
        return Check(WARN, label, f"{row.availability}: jobs are accepted but none starts until it is up again",
                     f"see `scontrol show partition {name}`, or submit to a partition that is up")
    minutes, where = longest_walltime(profile, name)
    if row.max_seconds is not None and minutes * 60 > row.max_seconds:
        return Check(FAIL, label, f"up, MaxTime {row.max_time}: shorter than the {format_hhmm(minutes)} of "
                     f"{where}, so a job asking that long is refused or never starts (PartitionTimeLimit)",
                     f"lower {where} in the profile to {minutes_text(row.max_seconds)} or less")
    return Check(OK, label, f"up, MaxTime {row.max_time} (the profile's longest job here: {format_hhmm(minutes)})")


def check_partitions(profile, rows: Optional[Dict[str, Partition]], error: Optional[str]) -> List[Check]:
    """Step 2: every queue of the profile is a partition sinfo lists, up, whose MaxTime holds its longest job
    (the default first); nothing to check where jobs name no partition."""
    if not profile.scheduler.slurm.partition:
        return [Check(OK, "partitions", "jobs name no partition (scheduler.slurm.partition is false): the site "
                      "places them by QOS and constraint")]
    if rows is None:
        return [Check(FAIL, "partitions", error or "sinfo gave no answer",
                      "run `sinfo` on that machine by hand: it must list the site's partitions")]
    names = sorted(profile.queues, key=lambda n: not profile.queues[n].default)
    return [_partition_check(profile, n, rows.get(n), list(rows)) for n in names]


def _qos_check(profile, name: str, listed: Dict[str, Optional[int]]) -> Check:
    qos = profile.scheduler.slurm.qos[name]
    label = f"qos {name}" + (" (default)" if qos.default else "")
    if name not in listed:
        alike = [q for q in listed if q.endswith("_" + name) or q.startswith(name + "_")]
        found = f"not listed by sacctmgr (it lists: {', '.join(listed) or 'no QOS'})"
        fix = "name a QOS sacctmgr lists under scheduler.slurm.qos, or --qos one of them"
        if alike:
            return Check(WARN, label, f"{found}; the site may map --qos {name} onto {', '.join(alike)} (a "
                         "job_submit plugin)", f"check the site's guide; else {fix}")
        return Check(FAIL, label, found, fix)
    if qos.max_walltime:
        where = f"scheduler.slurm.qos.{name}.max_walltime"
        minutes = parse_hhmm(qos.max_walltime, where)
    else:
        minutes, where = max(longest_walltime(profile, q) for q in profile.queues)
    wall = listed[name]
    if wall is not None and minutes * 60 > wall:
        return Check(FAIL, label, f"MaxWall {minutes_text(wall)} is shorter than the {format_hhmm(minutes)} of "
                     f"{where}: a job asking that long is refused or never starts (QOSMaxWallDurationPerJobLimit)",
                     f"set {where} to {minutes_text(wall)} or less in the profile")
    return Check(OK, label, f"MaxWall {minutes_text(wall)} (the profile's: {format_hhmm(minutes)})")


def check_qos(profile, listed: Optional[Dict[str, Optional[int]]], error: Optional[str]) -> List[Check]:
    """Step 2: each QOS the profile lists exists, with a MaxWall no shorter than the profile plans for. Where
    sacctmgr cannot answer (many sites keep slurmdbd from users) that is a warning, not a failure."""
    if not profile.scheduler.slurm.qos:
        return []
    if listed is None:
        return [Check(WARN, "qos", f"not checked: {error or 'sacctmgr gave no answer'}",
                      "check the profile's QOS and their MaxWall in the site's guide (`sacctmgr show qos` where "
                      "the site allows it)")]
    return [_qos_check(profile, n, listed) for n in profile.scheduler.slurm.qos]


def check_account(profile, project: Optional[str]) -> Check:
    """Step 2: the account (--account): set where the site requires one. Whether the account may be charged is
    the site's association table, which not every site lets users read, so a set account is a warning."""
    flag, what = profile.scheduler.account_flag, profile.scheduler.account_name
    from summit_jobs.schedulers import ACCOUNT_RE
    if project and not ACCOUNT_RE.fullmatch(project.strip()):
        return Check(FAIL, "account", f"{flag} {project!r} is not a valid {what} name: submit refuses it",
                     "use letters, digits, '_', '.' and '-' only (at most 64 characters), as printed by your "
                     "allocation")
    if not project:
        if profile.scheduler.account_required:
            return Check(FAIL, "account", f"{profile.name} requires {flag} {what} and none is set",
                         "pass --project NAME, set SUMMIT_JOBS_PROJECT, or write project: NAME in the config file")
        return Check(OK, "account", f"{profile.name} does not require {flag}; none set (Slurm charges your "
                     "default account)")
    queue = f" --partition={profile.default_queue}" if profile.scheduler.slurm.partition else ""
    return Check(WARN, "account", f"{flag}={project} cannot be checked before a submission (not every site lets "
                 f"users read its associations)",
                 f"check by hand: `sacctmgr -nP show assoc user=$USER format=account` where the site allows it, "
                 f"or a one-minute test job: sbatch {flag}={project}{queue} --time=1 --wrap true")


# -- the checks in the report's order ---------------------------------------------------------------------------
def site_checks(probe, profile, project: Optional[str]) -> List[Check]:
    """Steps 1 and 2 through ``probe`` (summit_jobs.schedulers.SiteProbe): the commands, the version, the
    partitions and QOS (not asked when no Slurm command is on PATH: each would only repeat that), the account."""
    found = probe.commands([*needed_commands(), *PROBE_COMMANDS])
    checks = [check_commands(found, probe.label, probe.is_remote)]
    if not any(found[c] for c in CORE_COMMANDS):
        why = "not checked: Slurm's commands are not on PATH (see slurm commands)"
        checks += [Check(WARN, "slurm version", why), Check(WARN, "partitions", why)]
        return checks + [check_account(profile, project)]
    checks.append(check_version(*_answer(probe, ["sbatch", "--version"], parse_version, found)))
    partitions = _answer(probe, SINFO_ARGV, parse_sinfo, found) if profile.scheduler.slurm.partition else (None, None)
    checks += check_partitions(profile, *partitions)
    if profile.scheduler.slurm.qos:
        checks += check_qos(profile, *_answer(probe, QOS_ARGV, parse_qos, found))
    return checks + [check_account(profile, project)]


def _answer(probe, argv: List[str], parse, found: Mapping[str, Optional[str]]):
    """The probe's answer to ``argv``, or why there is none when its command is not on PATH."""
    if not found.get(argv[0]):
        return None, f"{argv[0]} not found on the PATH of {probe.label}"
    return probe.answer(argv, parse)
