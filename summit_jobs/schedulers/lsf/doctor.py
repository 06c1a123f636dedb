"""``summit-jobs doctor``, the LSF part: the commands a profile needs, the LSF version (``lsid``), the queues
(``bqueues``) and the account, as pure checks. Parsers of ``lsid`` and ``bqueues`` are tested on captured
outputs; the probes run through the SiteProbe that summit_jobs/cli/doctor.py builds on a host
(``site_checks``, which LsfScheduler.site_checks calls)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from summit_jobs.hosts.doctor import FAIL, OK, WARN, Check
from summit_jobs.schedulers.lsf.client import BANNER_RE, LsfOutputError


# -- lsid ---------------------------------------------------------------------------------------------------
#: The product line: ``IBM Spectrum LSF Standard 10.1.0.13, Jan 04 2023``, ``LSF 3.0, Dec 10, 1996``.
LSID_PRODUCT_RE = re.compile(r"^(?P<product>.*?\bLSF\b.*?)\s+(?P<version>\d+(?:\.\d+)+)\s*,\s*(?P<build>.*)$")
LSID_CLUSTER_RE = re.compile(r"^My cluster name is (\S+)")
#: IBM's newer documents call the master the management host; the captured outputs all say master.
LSID_MASTER_RE = re.compile(r"^My (?:master|management host) name is (\S+)")
LSID_SUITE_RE = re.compile(r"^Suite Edition:\s*(.+)$")


@dataclass(frozen=True)
class LsidInfo:
    """What ``lsid`` says: the product and its version (as numbers), the cluster and its master host."""
    product: str
    version: Tuple[int, ...]
    build: str
    cluster: Optional[str] = None
    master: Optional[str] = None
    #: LSF Suite installs add a line naming the suite (its own version is not LSF's).
    suite: Optional[str] = None

    @property
    def version_text(self) -> str:
        return ".".join(str(v) for v in self.version)


def parse_lsid(text: str) -> LsidInfo:
    """The product line (the first line naming LSF and a version), cluster and master from ``lsid``'s output.

    Banner lines of a busy master are skipped; output without a product line
    is an LsfOutputError carrying the raw text, never a guessed version.
    """
    found: Dict[str, Optional[str]] = {"cluster": None, "master": None, "suite": None}
    product = None
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or BANNER_RE.match(line):
            continue
        m = LSID_PRODUCT_RE.match(line)
        if product is None and m:
            product = m
        for key, pattern in (("cluster", LSID_CLUSTER_RE), ("master", LSID_MASTER_RE), ("suite", LSID_SUITE_RE)):
            hit = pattern.match(line)
            if hit and found[key] is None:
                found[key] = hit.group(1).strip()
    if product is None:
        raise LsfOutputError("lsid printed no line with LSF's product and version (expected e.g. 'IBM Spectrum LSF "
                             f"Standard 10.1.0.13, Jan 04 2023'); it printed:\n{(text or '').strip()[:2000]}")
    version = tuple(int(p) for p in product.group("version").split("."))
    return LsidInfo(product=product.group("product"), version=version, build=product.group("build").strip(),
                    **found)


# -- bqueues ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QueueRow:
    """One queue of ``bqueues``: its name, status (``Open:Active``, ``Closed:Inact``, ...) and every column."""
    name: str
    status: str
    columns: Mapping[str, str]

    @property
    def open(self) -> bool:
        """Takes new jobs (``Open:...``); a Closed queue refuses them at bsub."""
        return self.status.split(":")[0] == "Open"

    @property
    def active(self) -> bool:
        """Starts jobs (``...:Active``); an inactive queue (window closed, admin) holds them."""
        return self.status.split(":")[-1] == "Active"


def parse_bqueues(text: str) -> Dict[str, QueueRow]:
    """Queues by name from ``bqueues`` or ``bqueues -w``, columns read from the header line.

    Every column of the default and wide tables is filled (LSF prints ``-``
    for no limit), so a row splits on white space; a row with another number
    of fields than the header is an error carrying the line and the output.
    Lines before the header (a busy master's notices) are skipped; no header
    at all is an error carrying the output.
    """
    columns: Optional[List[str]] = None
    rows: Dict[str, QueueRow] = {}
    for line in (text or "").splitlines():
        if not line.strip() or BANNER_RE.match(line):
            continue
        words = line.split()
        if words[0] == "QUEUE_NAME":
            columns = words
            continue
        if columns is None:
            continue                    # a site's notice before the table, like the busy banners
        if len(words) != len(columns) or "STATUS" not in columns:
            raise LsfOutputError(f"cannot read this bqueues line (with {len(words)} fields for {len(columns)} "
                                 f"columns): {line!r}; full output:\n{(text or '').strip()[:3000]}")
        values = dict(zip(columns, words))
        rows[words[0]] = QueueRow(name=words[0], status=values["STATUS"], columns=values)
    if columns is None:
        raise LsfOutputError(f"bqueues printed no QUEUE_NAME header; it printed:\n{(text or '').strip()[:2000]}")
    return rows


# -- 1. LSF commands and version ------------------------------------------------------------------------------
#: LSF's own commands that submit, status, logs and cancel use on every site.
CORE_COMMANDS = ("bsub", "bjobs", "bkill")
#: What the profile's launcher needs of LSF on the node that runs the batch script (torchrun and mpirun are
#: started through blaunch; mpirun itself comes with the trainer's environment, checked there).
LAUNCH_COMMANDS = {"jsrun": ("jsrun",), "blaunch": ("blaunch",), "torchrun": ("blaunch",), "mpirun": ("blaunch",)}
#: The commands doctor itself reads the site with.
PROBE_COMMANDS = ("lsid", "bqueues")
#: What this tool needs of LSF, by version (IBM's release notes): bjobs -o ... -json (status, logs, cancel,
#: chains) came with LSF 10.1 Fix Pack 2, bsub -gpu with LSF 10.1.
JSON_STATUS = ((10, 1, 0, 2), "bjobs -o ... -json (status, logs, cancel and chains read it; LSF 10.1 Fix Pack 2)")
GPU_OPTION = ((10, 1), "bsub -gpu (the profile asks GPUs with it; LSF 10.1)")


def needed_commands(profile) -> List[str]:
    """The LSF commands a job of ``profile`` needs on the submitting side, in the order they are named."""
    return [*CORE_COMMANDS, *LAUNCH_COMMANDS[profile.launcher.kind]]


def all_commands(profile) -> List[str]:
    return [*needed_commands(profile), *PROBE_COMMANDS]


def uses_gpu_option(profile) -> bool:
    sched = profile.scheduler
    return sched.request == "slots" and profile.node.gpus > 0 and not sched.gpu.legacy_rusage


def lsf_requirements(profile) -> List[Tuple[Tuple[int, ...], str]]:
    """(oldest LSF version, what needs it) for a job of ``profile``."""
    return [JSON_STATUS] + ([GPU_OPTION] if uses_gpu_option(profile) else [])


def _lsf_fix(profile, where: str, remote: bool) -> str:
    if profile.scheduler.embedded and not remote:
        return ("the embedded LSF's commands are summit_jobs/schedulers/lsf/embedded/bin of this installation, put on PATH by "
                "summit-jobs itself: reinstall summit-jobs (that folder is missing or not executable)")
    if remote:
        return (f"the non-interactive SSH session on {where} has no LSF on its PATH: source LSF's profile.lsf "
                "(or your site's `module load lsf`) in ~/.bashrc on the login node, not only in ~/.bash_profile")
    return ("load LSF's environment in this shell (`source $LSF_ENVDIR/profile.lsf`, or your site's `module load "
            "lsf`), check a login node over SSH with --host LOGIN_NODE, or use --machine local for the embedded LSF")


def check_commands(found: Mapping[str, Optional[str]], profile, where: str, remote: bool) -> Check:
    """Step 1: bsub, bjobs, bkill and the launcher's LSF command are on the PATH of ``where``."""
    needed = needed_commands(profile)
    missing = [c for c in needed if not found.get(c)]
    if not missing:
        folders = sorted({str(found[c]).rsplit("/", 1)[0] for c in needed})
        return Check(OK, "lsf commands", f"{', '.join(needed)} found on {where} (in {', '.join(folders)})")
    fix = _lsf_fix(profile, where, remote)
    if len(missing) < len(needed) and set(missing) <= set(LAUNCH_COMMANDS[profile.launcher.kind]):
        fix = (f"{profile.name}'s launcher is {profile.launcher.kind}, which needs {', '.join(missing)}: pick the "
               "launcher your site has (launcher.kind in the profile, or submit --launcher)")
    return Check(FAIL, "lsf commands", f"{', '.join(missing)} not found on the PATH of {where}", fix)


def check_lsf_version(info: Optional[LsidInfo], error: Optional[str], profile) -> Check:
    """Step 1: the LSF version from ``lsid`` is at least what the profile's jobs need."""
    if info is None:
        return Check(FAIL, "lsf version", error or "lsid gave no answer",
                     "run `lsid` on that machine by hand: it must print LSF's version, cluster and master")
    where = f" (cluster {info.cluster}, master {info.master})" if info.cluster else ""
    needs = lsf_requirements(profile)
    short = [(v, what) for v, what in needs if info.version < v]
    if short:
        wanted = ".".join(str(p) for p in max(v for v, _ in short))
        return Check(FAIL, "lsf version", f"{info.product} {info.version_text}{where} is older than {wanted}, which "
                     f"{'; '.join(what for _, what in short)} needs",
                     "ask the site for LSF 10.1 Fix Pack 2 or newer; where only -gpu is missing, set "
                     "scheduler.gpu.legacy_rusage: true in the profile if the site still takes rusage[ngpus_excl_p]")
    top = ".".join(str(p) for p in max(v for v, _ in needs))
    return Check(OK, "lsf version", f"{info.product} {info.version_text}{where}; this profile needs {top} or newer")


# -- 2. queues and account ------------------------------------------------------------------------------------
def _queue_check(name: str, is_default: bool, row: Optional[QueueRow], listed: Sequence[str]) -> Check:
    label = f"queue {name}" + (" (default)" if is_default else "")
    if row is None:
        return Check(FAIL, label, f"not listed by bqueues (it lists: {', '.join(listed) or 'no queue'})",
                     f"name a queue the site has in the profile's queues (or submit --queue one of "
                     f"{', '.join(listed) or 'them'}); `bqueues -l QUEUE` shows a queue's limits")
    if not row.open:
        return Check(FAIL, label, f"{row.status}: bsub refuses new jobs in a closed queue",
                     "use another queue (--queue), or ask the site when it reopens (`bqueues -l` gives the "
                     "administrator's comment)")
    if not row.active:
        return Check(WARN, label, f"{row.status}: jobs are accepted but held until the queue is active again "
                     "(a run or dispatch window, or an administrator)",
                     f"see `bqueues -l {name}` for its windows, or submit to an active queue")
    return Check(OK, label, row.status)


def check_queues(profile, rows: Optional[Dict[str, QueueRow]], error: Optional[str]) -> List[Check]:
    """Step 2: every queue of the profile is listed by bqueues and Open:Active (the default first)."""
    if rows is None:
        return [Check(FAIL, "queues", error or "bqueues gave no answer",
                      "run `bqueues` on that machine by hand: it must list the site's queues")]
    names = sorted(profile.queues, key=lambda n: not profile.queues[n].default)
    return [_queue_check(n, profile.queues[n].default, rows.get(n), list(rows)) for n in names]


def check_account(profile, project: Optional[str]) -> Check:
    """Step 2: the account (-P project / -G group): set where the site requires one; its validity is not
    something LSF lets anyone check reliably before a submission, so a set account is a warning."""
    flag, what = profile.scheduler.account_flag, profile.scheduler.account_name
    from summit_jobs.schedulers import ACCOUNT_RE
    if project and not ACCOUNT_RE.fullmatch(project.strip()):
        return Check(FAIL, "account", f"{flag} {project!r} is not a valid {what} name: submit refuses it",
                     "use letters, digits, '_', '.' and '-' only (at most 64 characters), as printed by your "
                     "allocation")
    if profile.scheduler.embedded:
        return Check(OK, "account", f"the embedded LSF accepts any {what}" + (f" ({flag} {project})" if project
                                                                              else ""))
    if not project:
        if profile.scheduler.account_required:
            return Check(FAIL, "account", f"{profile.name} requires {flag} {what} and none is set",
                         f"pass --project NAME, set SUMMIT_JOBS_PROJECT, or write project: NAME in the config file")
        return Check(OK, "account", f"{profile.name} does not require {flag}; none set")
    listing = "`bugroup -w`" if flag == "-G" else "its user portal"
    return Check(WARN, "account", f"{flag} {project} cannot be checked before a submission (bugroup and bacct do not "
                 f"say reliably on every site which {what}s you may charge)",
                 f"check by hand: your centre's list of your {what}s ({listing}), or a one-minute test job: "
                 f"bsub {flag} {project} -q {profile.default_queue} -W 1 /bin/true")


# -- the checks in the report's order ---------------------------------------------------------------------------
def site_checks(probe, profile, project: Optional[str]) -> List[Check]:
    """Steps 1 and 2 through ``probe`` (summit_jobs.schedulers.SiteProbe): the commands on PATH, lsid's version,
    bqueues' queues (not run when no LSF command is on PATH: each would only repeat that), then the account."""
    found = probe.commands(all_commands(profile))
    checks = [check_commands(found, profile, probe.label, probe.is_remote)]
    if not any(found[c] for c in CORE_COMMANDS):
        why = "not checked: LSF's commands are not on PATH (see lsf commands)"
        checks += [Check(WARN, "lsf version", why), Check(WARN, "queues", why)]
        return checks + [check_account(profile, project)]
    info, error = probe.answer(["lsid"], parse_lsid) if found["lsid"] else \
        (None, f"lsid not found on the PATH of {probe.label}")
    checks.append(check_lsf_version(info, error, profile))
    rows, error = probe.answer(["bqueues", "-w"], parse_bqueues) if found["bqueues"] else \
        (None, f"bqueues not found on the PATH of {probe.label}")
    return checks + check_queues(profile, rows, error) + [check_account(profile, project)]
