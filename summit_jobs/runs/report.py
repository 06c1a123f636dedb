"""Run reports: plots, a Markdown summary and a terminal table from a run's metrics.

Why the metrics are de-duplicated: a chained run resumes from its latest
checkpoint, so the steps between that checkpoint and the kill are trained (and
logged) twice. The second pass is the one the weights descend from, so the
LAST record for each (kind, step) is kept, and the chain reads as one
continuous run.

Why "training time" beside wall time: between two links of a chain the run
waits in the queue. The time axis of the plots removes those waits (a gap
between two trainer launches counts as one logging interval), so curves of a
chained run and of a single-job run can be laid side by side.

Why the plotted data is written to ``report.json``: every series drawn in a
PNG is the very list passed to the plotting function, kept in that file, so a
test (or a user) can check a plot against the metrics without reading pixels.

Where it writes: ``<run>/report/`` by default (``--out`` elsewhere). That folder
belongs to the report: a new report replaces the previous report's files
(recognised by its ``report.json``); files of any other origin are never
replaced without ``--force``.

Why every figure is optional: a user's own program (``submit --command``) writes
records as small as ``{"kind": "train", "step": ..., "loss": ...}``. A run
without epochs is drawn against steps, one without times has no time axis, and
a panel (or a whole plot) with nothing to draw is left out rather than drawn
empty.

Torch-free (login-node side): metrics are parsed here, not with the trainer's reader.
"""
from __future__ import annotations

import bisect
import json
import math
import os
import re
import shlex
import textwrap
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from summit_jobs.errors import UserError
from summit_jobs.runs.lifecycle import exit_code_of
from summit_jobs.progress import Progress
from trainer import rundir
from trainer import files, units

METRICS = rundir.METRICS
SCALING = "scaling.json"
GENERATOR = "summit-jobs report"
#: Everything a report writes (scaling.png only when the run holds scaling.json; a plot only when the run's
#: records have something to draw in it).
PLOTS = ("loss.png", "accuracy.png", "lr.png", "throughput.png")
FILES = PLOTS + ("scaling.png", "report.md", "report.json")
#: A pause longer than this many expected intervals (plus a minute) is a gap between trainer launches.
GAP_FACTOR = 3.0
GAP_SLACK_S = 60.0

_STOP_RE = re.compile(r"stopping at step (\d+) \(([^)]*)\)")
_RESUME_RE = re.compile(r"resumed from \S+ at step (\d+)")
_DONE_RE = re.compile(r"all (\d+) epochs done")


# ---- metrics -------------------------------------------------------------------------------

def parse_metrics(text: str) -> List[Dict]:
    """Whole JSON records in file order; a torn or foreign line is skipped, as the trainer's reader does, and
    an odd figure (text where a number belongs, a time that is not finite) is left out of its record."""
    return [_clean(rec) for rec in rundir.json_records(text, _well_formed)]


#: Fields the report does arithmetic with; any of them may be missing from a record, and one that is not a
#: finite number (text, NaN, Infinity: JSON lets a writer put them there) is left out of it.
_NUM_FIELDS = ("time", "loss", "top1", "top5", "lr", "clips_per_s", "data_wait_frac", "step_time", "ranks",
               "accum_steps", "global_batch")


def is_count(value: object) -> bool:
    """A whole number of at least 0 (not a bool: JSON's true would pass for 1)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_number(value: object) -> bool:
    """A finite number (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _well_formed(rec: Dict) -> bool:
    """A record the report can use: a text kind and a whole step (foreign lines are skipped)."""
    return isinstance(rec.get("kind"), str) and is_count(rec.get("step"))


def _clean(rec: Dict) -> Dict:
    """The record without the figures that are not what their name says: a user's program may write any
    subset of them, and an odd value costs that value, not the whole record."""
    odd = [k for k in _NUM_FIELDS if k in rec and not is_number(rec[k])]
    odd += ["epoch"] if "epoch" in rec and not is_count(rec["epoch"]) else []
    return {k: v for k, v in rec.items() if k not in odd}


def has_times(records: List[Dict]) -> bool:
    """Whether every record says when it was written (the time axis and wall time need them all)."""
    return bool(records) and all("time" in r for r in records)


def has_epochs(records: List[Dict]) -> bool:
    """Whether every record says its epoch (the epoch axis needs them all; else steps are the axis)."""
    return bool(records) and all("epoch" in r for r in records)


def record_key(rec: Dict) -> Tuple:
    """(kind, step), told apart for test records: one per checkpoint plus the summary at the last step."""
    return (rec.get("kind"), rec.get("step"), bool(rec.get("summary")), rec.get("checkpoint"))


@dataclass
class Metrics:
    """De-duplicated records by kind, each in step order, with each record's active-time offset."""
    train: List[Dict]
    eval: List[Dict]
    test: List[Dict]
    test_summary: Optional[Dict]
    launches: int          # trainer launches (a resume starts a new one)
    replayed: int          # train records replaced by a later launch's record for the same step
    wall_seconds: Optional[float]    # first to last record, queue waits included (None: records without times)
    active_seconds: Optional[float]  # the same with the gaps between launches removed
    launches_estimated: bool = True  # counted from pauses in the records, not from launch events
    test_only: List[Dict] = field(default_factory=list)  # --test-only results, in file order


def _segments(records: List[Dict]) -> List[int]:
    """Launch number of each record (file order): a step that does not advance, or a long silence, starts one."""
    seg, out = 0, []
    last_step: Optional[int] = None
    last_time: Optional[float] = None
    for rec in records:
        t = float(rec.get("time", 0.0))
        if rec.get("kind") == "train" and last_step is not None and int(rec["step"]) <= last_step:
            seg += 1
        elif last_time is not None:
            steps = max(1, int(rec["step"]) - last_step) if rec.get("kind") == "train" and last_step else 1
            expected = float(rec.get("step_time") or 0.0) * steps
            if t - last_time > GAP_FACTOR * expected + GAP_SLACK_S:
                seg += 1
        if rec.get("kind") == "train":
            last_step = int(rec["step"])
        last_time = t
        out.append(seg)
    return out


def _launch_segments(records: List[Dict], launch_times: List[float]) -> List[int]:
    """Launch number of each record: the last launch event at or before the record's time."""
    times = sorted(launch_times)
    return [max(bisect.bisect_right(times, float(r.get("time", 0.0))) - 1, 0) for r in records]


def deduplicate(records: List[Dict], launch_times: Optional[List[float]] = None) -> Metrics:
    """Keep the last record per key; give every kept record ``elapsed`` (active seconds since the first).

    ``launch_times``: when the trainer's ``launch`` events are known, they say which launch wrote each
    record and how many there were; without them both are estimated from pauses (``_segments``).
    --test-only records are kept apart: a test run later does not stretch the training's time.
    """
    test_only = [r for r in records if r.get("kind") == "test" and r.get("test_only")]
    records = [r for r in records if r.get("kind") in ("train", "eval", "test") and "step" in r
               and not r.get("test_only")]
    segs = _launch_segments(records, launch_times) if launch_times else _segments(records)
    kept: Dict[Tuple, Tuple[Dict, int]] = {}
    replayed = 0
    for rec, seg in zip(records, segs):
        key = record_key(rec)
        if key in kept and rec["kind"] == "train":
            replayed += 1
        kept[key] = (rec, seg)
    timed = has_times(records)
    items = list(kept.values())   # without times: in the order their steps were first written
    out = _elapsed(sorted(items, key=lambda rs: float(rs[0]["time"])) if timed else items, timed)
    by_kind = {k: sorted((r for r in out if r["kind"] == k and not r.get("summary")), key=lambda r: int(r["step"]))
               for k in ("train", "eval", "test")}
    summaries = [r for r in out if r["kind"] == "test" and r.get("summary")]
    times = [float(r["time"]) for r in records] if timed else []
    launches = len(launch_times) if launch_times else (max(segs) + 1) if segs else 0
    return Metrics(train=by_kind["train"], eval=by_kind["eval"], test=by_kind["test"],
                   test_summary=summaries[-1] if summaries else None, launches=launches,
                   replayed=replayed, wall_seconds=(max(times) - min(times)) if times else None,
                   active_seconds=out[-1]["elapsed"] if out and timed else None, launches_estimated=not launch_times,
                   test_only=test_only)


def _elapsed(items: List[Tuple[Dict, int]], timed: bool = True) -> List[Dict]:
    """Copies of the records (in time order, with their launch) with ``elapsed``: active seconds since the
    first, where the pause between two launches counts as one typical interval (None: records without
    times, which have no time axis)."""
    if not timed:
        return [dict(rec, elapsed=None) for rec, _ in items]
    elapsed, prev_t, prev_seg = 0.0, None, None
    intervals = [float(b[0]["time"]) - float(a[0]["time"]) for a, b in zip(items, items[1:]) if a[1] == b[1]]
    typical = statistics.median(intervals) if intervals else 0.0
    out = []
    for rec, seg in items:
        t = float(rec.get("time", 0.0))
        if prev_t is not None:
            elapsed += (t - prev_t) if seg == prev_seg else typical
        rec = dict(rec, elapsed=elapsed)
        out.append(rec)
        prev_t, prev_seg = t, seg
    return out


def fractional_epochs(train: List[Dict]) -> List[float]:
    """Epoch position of each train record: e + (steps into epoch e) / (steps of epoch e).

    An epoch's last logged step is its end (the trainer always logs the last
    step of an epoch); an unfinished last epoch borrows the previous epoch's
    length, so multigrid's varying epoch lengths are handled too.
    """
    ends: Dict[int, int] = {}
    for r in train:
        ends[int(r["epoch"])] = max(ends.get(int(r["epoch"]), 0), int(r["step"]))
    epochs = sorted(ends)
    start: Dict[int, int] = {}
    length: Dict[int, int] = {}
    prev_end, prev_len = 0, None
    for i, e in enumerate(epochs):
        start[e] = prev_end
        complete = i < len(epochs) - 1
        length[e] = ends[e] - prev_end if complete or prev_len is None else prev_len
        prev_end, prev_len = ends[e], length[e]
    return [int(r["epoch"]) + (int(r["step"]) - start[int(r["epoch"])]) / max(length[int(r["epoch"])], 1)
            for r in train]


# ---- the run ---------------------------------------------------------------------------------

@dataclass
class RunData:
    name: str
    location: str
    metrics: Metrics
    plan: Optional[Dict] = None
    record: Optional[Dict] = None
    complete: bool = False
    jobs: List[Dict] = field(default_factory=list)
    scaling: Optional[List[Dict]] = None
    launches: List[Dict] = field(default_factory=list)  # the trainer's training ``launch`` events, in order
    dataset: Dict[str, int] = field(default_factory=dict)  # "classes" and "missing" where known
    device: Optional[str] = None   # "gpu" or "cpu" where the run's records say what its ranks ran on


def run_device(plan: Optional[Dict], launches: List[Dict], record: Optional[Dict] = None) -> Optional[str]:
    """"gpu" or "cpu" where the run's records say what its ranks ran on, else None: the newest launch's
    ``device`` where it has one, else the GPUs per rank of plan.json, as the run's scheduler reads its plan
    (none: a CPU run, whose throughput per GPU would be a wrong label)."""
    from summit_jobs import schedulers
    device = launches[-1].get("device") if launches else None
    if isinstance(device, str) and device.split(":")[0] in ("cuda", "cpu"):
        return "gpu" if device.startswith("cuda") else "cpu"
    gpus = schedulers.for_record(record).gpus_per_rank(plan) if isinstance(plan, dict) else None
    return None if not is_count(gpus) else "gpu" if gpus > 0 else "cpu"


def rank_unit(device: Optional[str]) -> str:
    """What one rank is, in words: a GPU, a CPU rank, or (unknown) a rank."""
    return {"gpu": "GPU", "cpu": "CPU rank"}.get(str(device), "rank")


def trainer_plan(plan: Optional[Dict]) -> Dict:
    """plan.json's figures of the built-in trainer (batch, LR, epochs, accumulation), or {} for a user's own
    command, whose plan holds the recipe's defaults and not what that program does."""
    return {} if not plan or plan.get("user_command") else plan


def training_launches(events: List[Dict]) -> List[Dict]:
    """The ``launch`` events of launches that trained (not --test-only, not one that found the run
    complete), in time order."""
    found = [e for e in events if e.get("event") == "launch" and e.get("mode", "train") == "train"
             and not e.get("already_complete") and isinstance(e.get("time"), (int, float))]
    return sorted(found, key=lambda e: float(e["time"]))


def chain_boundaries(run: "RunData") -> List[Dict]:
    """Where each launch after the first took over: {"step", "launch"} (1-based), from the launch events;
    for runs without them, the resume steps read from the jobs' output."""
    out = []
    for i, e in enumerate(run.launches):
        if (i or e.get("resumed_from")) and isinstance(e.get("step"), int):
            out.append({"step": e["step"], "launch": i + 1})
    if not run.launches:
        steps = [j["resumed_from_step"] for j in run.jobs if isinstance(j.get("resumed_from_step"), int)]
        out = [{"step": st, "launch": i + 2} for i, st in enumerate(steps)]
    return out


def missing_count(value: object) -> Optional[int]:
    """How many videos a manifest's ``missing`` names: a count, or a list (or mapping) of the videos."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, (list, dict)):
        return len(value)
    return None


def dataset_facts(host, launches: List[Dict]) -> Dict[str, int]:
    """The class count and the missing-video count of the run's data, from ``<--data>/manifest.json``.

    The folder is the one the last launch trained on; it may be node-local or otherwise unreadable from
    here, and an older manifest has no ``missing``: whatever cannot be read is left out, silently.
    """
    options = launches[-1].get("options") if launches else None
    data = options.get("data") if isinstance(options, dict) else None
    out: Dict[str, int] = {}
    if isinstance(options, dict) and isinstance(options.get("num_classes"), int) and options["num_classes"] > 0:
        out["classes"] = options["num_classes"]
    if not isinstance(data, str) or not data.startswith("/"):  # relative: to a job's folder, not to here
        return out
    try:
        manifest = json.loads(host.read_text(host.join(data, "manifest.json")) or "null")
    except (OSError, UserError, ValueError):
        return out
    if not isinstance(manifest, dict):
        return out
    if isinstance(manifest.get("classes"), list) and manifest["classes"]:
        out.setdefault("classes", len(manifest["classes"]))
    missing = missing_count(manifest.get("missing"))
    if missing is not None:
        out["missing"] = missing
    return out


def _json_file(host, path: str) -> Optional[object]:
    text = host.read_text(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise UserError(f"{host.label}:{path} is not valid JSON; the file is damaged.") from None


def _ending_from_events(events: List[Dict]) -> Tuple[Optional[int], str]:
    """(step resumed from, how the trainer ended) from one job's event records (trainer.rundir)."""
    resumed = next((e for e in events if e.get("event") == "resumed"), None)
    stopped = rundir.last_event(events, "stopped")
    if rundir.last_event(events, "complete"):
        how = "training complete"
    elif rundir.last_event(events, "already_complete"):
        how = "nothing left to do (run already complete)"
    elif stopped:
        how = f"stopped at step {stopped.get('step')} ({stopped.get('reason')}), checkpoint saved"
    elif rundir.last_event(events, "link_end"):
        from summit_jobs.runs.statusview import link_end_text   # a user's program: the job script's words
        how = link_end_text(rundir.last_event(events, "link_end") or {})
    elif rundir.last_event(events, "launch") or rundir.last_event(events, "link_start"):
        how = "no end recorded (still running, or killed or failed: see its output)"
    else:
        how = ""
    step = resumed.get("step") if resumed else None
    if step is None:
        start = rundir.last_event(events, "link_start") or {}
        found = re.fullmatch(r"ckpt-(\d{9})\.pt", str(start.get("checkpoint") or ""))
        step = int(found.group(1)) if found else None
    return (step if isinstance(step, int) else None), how


def _job_ending(output: str) -> Tuple[Optional[int], str]:
    """(step resumed from, how the trainer ended) from a job's output: for run directories written
    before the trainer recorded events (events.jsonl), read from its log lines."""
    resumed = _RESUME_RE.search(output)
    if _DONE_RE.search(output):
        how = "training complete"
    elif "COMPLETE exists: nothing to do" in output or "is already complete; nothing to do" in output:
        # The trainer's message, or the job script's (it skips the launch once COMPLETE exists).
        how = "nothing left to do (run already complete)"
    else:
        stops = _STOP_RE.findall(output)
        how = f"stopped at step {stops[-1][0]} ({stops[-1][1]}), checkpoint saved" if stops else ""
    return (int(resumed.group(1)) if resumed else None), how


def _jobs(host, run_dir: str, record: Optional[Dict], events: Optional[List[Dict]] = None) -> List[Dict]:
    """One entry per job of the chain: exit code (from its exit-code file) and how the trainer ended."""
    from summit_jobs.runs import records as runs
    ids = [str(j) for j in (record or {}).get("job_ids") or []]
    if record is not None:
        ids = runs.with_chain_links(host, {**record, "run_dir": run_dir}, ids)
    for name in host.listdir(run_dir):
        if name.startswith(rundir.exitcode_name("")) and name[9:] not in ids:
            ids.append(name[9:])
    script = runs.read_script(host, run_dir, record)
    if events is None:
        events = rundir.parse_events(host.read_text(host.join(run_dir, rundir.EVENTS)) or "")
    out = []
    for jid in ids:
        name = rundir.exitcode_name(jid)
        code, problem = exit_code_of(host.read_text(host.join(run_dir, name)), name)
        mine = rundir.job_events(events, jid)
        if mine:
            resumed, how = _ending_from_events(mine)
        else:
            output = "".join(host.read_text(host.join(run_dir, f)) or "" for f in runs.output_files(script, jid, record))
            resumed, how = _job_ending(output)
        if problem:
            state = problem
        elif code is None:
            state = "no exit-code file (pending, running, or killed before the script's end)"
        else:
            state = "exit 0" if code == 0 else f"exit {code} (failed)"
        out.append({"job_id": jid, "exit_code": code, "resumed_from_step": resumed, "ended": how,
                    "state": state})
    return out


def load(host, run_dir: str, record: Optional[Dict] = None) -> RunData:
    """Read a run directory (on this machine or over SSH) into RunData; UserError when it cannot be reported."""
    path = host.join(run_dir, METRICS)
    text = host.read_text(path)
    where = f"{host.label}:{run_dir}" if host.is_remote else run_dir
    if text is None:
        raise UserError(f"{where} has no {METRICS}: the trainer has not written any step yet (the job may still be "
                        f"pending or starting: check `summit-jobs status {shlex.quote(run_dir)}`), "
                        "or this is not a run directory.")
    events = rundir.parse_events(host.read_text(host.join(run_dir, rundir.EVENTS)) or "")
    launches = training_launches(events)
    # A user's own program writes no launch events: the job script's link_start events say when each of its
    # launches began (one per link that ran its step).
    starts = launches or [e for e in events if e.get("event") == "link_start" and isinstance(e.get("time"), (int, float))]
    metrics = deduplicate(parse_metrics(text), [float(e["time"]) for e in starts] or None)
    if not metrics.train and not metrics.eval:
        raise UserError(f"{path} holds no training or evaluation records yet; report again once the run has "
                        "logged its first steps.")
    plan = _json_file(host, host.join(run_dir, "plan.json"))
    scaling = _json_file(host, host.join(run_dir, SCALING))
    if scaling is not None:
        if not (isinstance(scaling, list) and scaling and all(
                isinstance(r, dict) and {"nodes", "seconds", "efficiency"} <= set(r) for r in scaling)):
            raise UserError(f"{where}/{SCALING} is not a list of scaling rows (nodes, seconds, efficiency) as "
                            "`summit-jobs scaling --json` prints them; regenerate it or remove it.")
    name = str((record or {}).get("name") or os.path.basename(run_dir.rstrip("/")))
    plan = plan if isinstance(plan, dict) else None
    return RunData(name=name, location=where, metrics=metrics, plan=plan,
                   record=record, complete=host.exists(host.join(run_dir, rundir.COMPLETE)),
                   jobs=_jobs(host, run_dir, record, events), scaling=scaling, launches=launches,
                   dataset=dataset_facts(host, launches), device=run_device(plan, launches, record))


# ---- figures -------------------------------------------------------------------------------

def shapes(run: RunData) -> Dict[str, object]:
    """Physical and virtual shapes: from plan.json, else from what the trainer logged. ``rank_unit`` says what
    a rank was (the keys say GPUs, as they always have)."""
    p, t = run.plan or {}, trainer_plan(run.plan)
    last = run.metrics.train[-1] if run.metrics.train else {}
    k = int(t.get("accum_steps") or last.get("accum_steps") or 1)
    ranks = p.get("ranks") or last.get("ranks")
    out: Dict[str, object] = {"physical_nodes": p.get("nodes"), "physical_gpus": ranks, "accum_steps": k,
                              "ranks_per_node": p.get("ranks_per_node"),
                              "global_batch": last.get("global_batch") or t.get("global_batch"),
                              "lr": max((float(r["lr"]) for r in run.metrics.train if "lr" in r), default=None),
                              "rank_unit": rank_unit(run.device)}
    vnodes = t.get("virtual_nodes") or (p.get("nodes") * k if p.get("nodes") else None)
    vranks = t.get("virtual_ranks") or (ranks * k if ranks else None)
    out.update(virtual_nodes=vnodes, virtual_gpus=vranks, trainer_ranks=last.get("ranks"),
               simulated=bool(k > 1 or (vnodes and p.get("nodes") and vnodes != p.get("nodes"))))
    return out


def steps_per_second(train: List[Dict]) -> List[float]:
    """Steps per second between each two train records of one launch that have times (records in time
    order, ``elapsed`` from deduplicate: the pause between two launches is not counted as training)."""
    timed = [r for r in train if isinstance(r.get("elapsed"), (int, float))]
    timed.sort(key=lambda r: float(r["elapsed"]))
    out = []
    for a, b in zip(timed, timed[1:]):
        seconds, steps = float(b["elapsed"]) - float(a["elapsed"]), int(b["step"]) - int(a["step"])
        if seconds > 0 and steps > 0:
            out.append(steps / seconds)
    return out


def _median(values: List[float]) -> Optional[float]:
    values = [float(v) for v in values if v is not None]
    return statistics.median(values) if values else None


def _last(records: List[Dict], key: str) -> Optional[float]:
    """The newest record's ``key``, among the records that have it."""
    return next((r[key] for r in reversed(records) if key in r), None)


def summarize(run: RunData) -> Dict[str, object]:
    """The figures of the summary table (fractions as fractions, times in seconds)."""
    m = run.metrics
    ev = [r for r in m.eval if "top1" in r]
    best = max(ev, key=lambda r: r["top1"]) if ev else None
    epochs_planned = trainer_plan(run.plan).get("epochs")
    fe = fractional_epochs(m.train) if has_epochs(m.train) else []
    last = m.train[-1] if m.train else {}
    out: Dict[str, object] = {
        "run": run.name, "location": run.location, "complete": run.complete,
        "epochs_done": round(fe[-1], 3) if fe else None, "epochs_planned": epochs_planned,
        "steps": int(last["step"]) if last else None,
        "final_train_loss": _last(m.train, "loss"), "final_train_top1": _last(m.train, "top1"),
        "final_eval_top1": ev[-1]["top1"] if ev else None, "final_eval_top5": ev[-1].get("top5") if ev else None,
        "best_eval_top1": best["top1"] if best else None,
        "best_eval_epoch": int(best["epoch"]) + 1 if best and "epoch" in best else None,
        "test_top1_mean": None, "test_top1_std": None, "test_views": None, "test_checkpoints": None,
        "clips_per_s_median": _median([r.get("clips_per_s") for r in m.train]),
        "steps_per_s_median": _median(steps_per_second(m.train)),
        "data_wait_frac_median": _median([r.get("data_wait_frac") for r in m.train]),
        "wall_seconds": m.wall_seconds, "training_seconds": m.active_seconds,
        "launches": m.launches, "replayed_steps": m.replayed, "launches_estimated": m.launches_estimated,
        "resume_steps": [b["step"] for b in chain_boundaries(run)],
        "classes": run.dataset.get("classes"), "missing_videos": run.dataset.get("missing"),
        "test_only": [_test_only_row(r, run) for r in m.test_only],
        "jobs": run.jobs, "shapes": shapes(run), "user_command": bool((run.plan or {}).get("user_command")),
    }
    if m.test_summary:
        s = m.test_summary
        out.update(test_top1_mean=s.get("top1"), test_top1_std=s.get("top1_std"), test_views=s.get("views"),
                   test_checkpoints=len(s.get("checkpoints") or []))
    if run.scaling:
        out["scaling"] = [{"nodes": r["nodes"], "seconds": r["seconds"], "efficiency": r["efficiency"]}
                          for r in run.scaling]
    return out


def test_protocol(rec: Dict, run: RunData) -> str:
    """"C clips x K crops" of a test record: its own fields, else the options of the last launch, else its
    view count."""
    options = (run.launches[-1].get("options") if run.launches else None) or {}
    clips = rec.get("clips") or (options.get("test_clips") if isinstance(options, dict) else None)
    crops = rec.get("crops") or (options.get("test_crops") if isinstance(options, dict) else None)
    if isinstance(clips, int) and isinstance(crops, int):
        return f"{clips} clips x {crops} crops"
    return f"{rec.get('views')} views" if rec.get("views") else "multi-clip"


def _test_only_row(rec: Dict, run: RunData) -> Dict[str, object]:
    return {"checkpoint": rec.get("checkpoint"), "top1": rec.get("top1"), "top5": rec.get("top5"),
            "protocol": test_protocol(rec, run)}


def compare(a: Dict[str, object], b: Dict[str, object]) -> Dict[str, Optional[float]]:
    """Accuracy differences a - b (fractions) where both runs have the figure."""
    out = {}
    for key in ("final_eval_top1", "best_eval_top1", "test_top1_mean"):
        out[key] = (a[key] - b[key]) if a.get(key) is not None and b.get(key) is not None else None
    return out


def _series(label: str, xs: List[float], ys: List[float], **style: object) -> Dict:
    """A plotted line: its label, its points and its look (``color``, ``style`` dashed/solid, ``alpha``)."""
    return {"label": label, "x": [float(x) for x in xs], "y": [float(y) for y in ys], **style}


#: Default smoothing of the train curves: a moving average over 1/SMOOTH_SHARE of the run's steps.
SMOOTH_SHARE = 50


def smooth_window(train: List[Dict], smooth: Optional[int]) -> int:
    """Steps of the train curves' moving average: ``smooth`` (--smooth), else 1/SMOOTH_SHARE of the run's
    steps; 0 when the window would hold fewer than two records, as there is then nothing to average."""
    if not train:
        return 0
    window = smooth if smooth is not None else int(train[-1]["step"]) // SMOOTH_SHARE
    steps = [int(r["step"]) for r in train]
    gaps = [b - a for a, b in zip(steps, steps[1:]) if b > a]
    return window if gaps and window >= 2 * statistics.median(gaps) else 0


def moving_average(steps: List[int], ys: List[float], window: int) -> List[float]:
    """At each record, the mean of the records within the last ``window`` steps (s - window, s]."""
    out, lo, total = [], 0, 0.0
    for i, (step, y) in enumerate(zip(steps, ys)):
        total += y
        while steps[lo] <= step - window:
            total -= ys[lo]
            lo += 1
        out.append(total / (i - lo + 1))
    return out


def at_step(step: int, steps: List[int], xs: List[float]) -> Optional[float]:
    """Where ``step`` falls on an axis whose value at each of ``steps`` is ``xs`` (linear between)."""
    if not steps:
        return None
    i = bisect.bisect_left(steps, step)
    if i == 0 or i == len(steps) or steps[i] == step:
        return float(xs[min(i, len(xs) - 1)])
    s0, s1, x0, x1 = steps[i - 1], steps[i], xs[i - 1], xs[i]
    return float(x0 + (x1 - x0) * (step - s0) / (s1 - s0))


def _panel(xlabel: str, ylabel: str, **extra: object) -> Dict:
    """A panel of the report's plots: series, and vertical lines (chain boundaries), horizontal lines
    (chance) and points (the multi-clip test) drawn over them."""
    return {"xlabel": xlabel, "ylabel": ylabel, "series": [], "vlines": [], "hlines": [], "points": [], **extra}


def _panels(unit: str, by_epoch: bool, per: str) -> Dict[str, Dict]:
    """The panels, empty. ``by_epoch``: the runs' records all say their epoch (else steps are the axis);
    ``per``: what one rank is, for the throughput per rank."""
    time_axis, x = f"training time ({unit})", "epoch" if by_epoch else "step"
    return {"loss_e": _panel(x, "loss"), "loss_t": _panel(time_axis, "loss"),
            "acc_e": _panel(x, "top-1 (%)", ylim=[0, 100]),
            "acc_t": _panel(time_axis, "top-1 (%)", ylim=[0, 100]),
            "top5_e": _panel(x, "top-5 (%)", ylim=[0, 100]), "lr": _panel("step", "learning rate"),
            "speed": _panel("step", "clips/s (all ranks)", ylim=[0, None]),
            "wait": _panel("step", "data wait (% of step time)", ylim=[0, 100]),
            "per_gpu": _panel("step", f"clips/s per {per}", ylim=[0, None])}


def _epoch_axis(run: RunData) -> bool:
    """Whether the run's train and eval records all say their epoch (a user's program may not)."""
    return has_epochs(run.metrics.train) and all("epoch" in r for r in run.metrics.eval)


class _RunCurves:
    """One run's lines and marks in the report's panels: one colour per run, train dashed, eval solid.
    A series is added only where the run has records with its figure: no empty legend entry."""

    def __init__(self, panels: Dict[str, Dict], run: RunData, index: int, tag: str, scale: float,
                 smooth: Optional[int], by_epoch: bool = True, per: str = "GPU"):
        m = run.metrics
        self.panels, self.run, self.tag, self.color, self.per = panels, run, tag, f"C{index % 10}", per
        self.by_epoch = by_epoch
        self.steps = [int(r["step"]) for r in m.train]
        self.axes = {"e": fractional_epochs(m.train) if by_epoch else [float(s) for s in self.steps]}
        self.eval_axes = {"e": [float(int(r["epoch"]) + 1 if by_epoch else r["step"]) for r in m.eval]}
        if m.active_seconds is not None:    # records with times: the time axis
            self.axes["t"] = [r["elapsed"] / scale for r in m.train]
            self.eval_axes["t"] = [r["elapsed"] / scale for r in m.eval]
        self.window = smooth_window(m.train, smooth)

    def _add(self, key: str, series: Dict) -> None:
        if series["x"]:
            self.panels[key]["series"].append(series)

    def _train(self, key: str, axis: str, label: str, field_: str, scale: float) -> None:
        """The train curve of ``field_`` over the records that have it, faint under its moving average when
        smoothed."""
        train = self.run.metrics.train
        have = [(x, st, scale * float(r[field_])) for x, st, r in zip(self.axes[axis], self.steps, train)
                if field_ in r]
        xs, steps, ys = [h[0] for h in have], [h[1] for h in have], [h[2] for h in have]
        style = {"color": self.color, "style": "dashed"}
        if not self.window or not have:
            self._add(key, _series(label, xs, ys, **style))
            return
        self._add(key, _series(label, xs, ys, alpha=0.3, **style))
        self._add(key, _series(f"{label} ({self.window}-step mean)", xs, moving_average(steps, ys, self.window),
                               **style))

    def curves(self) -> None:
        m, tag, solid = self.run.metrics, self.tag, {"color": self.color, "style": "solid"}
        for axis in self.axes:
            for key, name, field_, scale in (("loss", "", "loss", 1.0), ("acc", " top-1", "top1", 100.0),
                                             ("top5", " top-5", "top5", 100.0)):
                if f"{key}_{axis}" not in self.panels:
                    continue
                self._train(f"{key}_{axis}", axis, f"{tag}train{name}", field_, scale)
                have = [(x, scale * float(r[field_])) for x, r in zip(self.eval_axes[axis], m.eval) if field_ in r]
                self._add(f"{key}_{axis}", _series(f"{tag}eval{name}", [h[0] for h in have], [h[1] for h in have],
                                                   **solid))
        for key, label, field_, value in (
                ("lr", "lr", "lr", lambda r: r["lr"]), ("speed", "clips/s", "clips_per_s", lambda r: r["clips_per_s"]),
                ("wait", "data wait", "data_wait_frac", lambda r: 100 * r["data_wait_frac"]),
                ("per_gpu", f"clips/s per {self.per}", "clips_per_s",
                 lambda r: r["clips_per_s"] / max(int(r.get("ranks") or 1), 1))):
            have = [(st, value(r)) for st, r in zip(self.steps, m.train) if field_ in r]
            self._add(key, _series(tag + label, [h[0] for h in have], [h[1] for h in have], **solid))

    def marks(self) -> None:
        """Chain boundaries (vertical: plots.py draws them as thin marks with no legend entry, since a chain of
        19 links would bury the curves under 19 entries; the figure's note says what they are), chance
        (horizontal) and the multi-clip test (points)."""
        for b in chain_boundaries(self.run):
            for key, panel in self.panels.items():
                axis = key.rsplit("_", 1)[-1]
                if axis in ("e", "t") and axis not in self.axes:
                    continue       # no time axis: records without times
                x = at_step(b["step"], self.steps, self.axes[axis]) if axis in self.axes else float(b["step"])
                if x is not None:
                    panel["vlines"].append({"x": x, "label": f"{self.tag}launch {b['launch']} from step {b['step']}",
                                            "color": self.color})
        classes = self.run.dataset.get("classes")
        if classes:
            for key, y in (("acc_e", 100 / classes), ("acc_t", 100 / classes), ("top5_e", min(100.0, 500 / classes))):
                line = {"y": y, "label": f"chance ({y:.3g}%, {classes} classes)", "color": "grey"}
                if line not in self.panels[key]["hlines"]:
                    self.panels[key]["hlines"].append(line)
        for r in self.run.metrics.test:
            if self.by_epoch and "epoch" not in r:
                continue
            label = f"{self.tag}test {test_protocol(r, self.run)}"
            x = float(int(r["epoch"]) + 1) if self.by_epoch else float(r["step"])
            for key, field_ in (("acc_e", "top1"), ("top5_e", "top5")):
                if field_ in r:
                    self.panels[key]["points"].append({"x": x, "y": 100 * float(r[field_]), "label": label,
                                                       "color": self.color})


def _drawn(panel: Dict) -> bool:
    """Whether a panel has data to show (chance lines and chain marks alone are no plot)."""
    return any(s["x"] for s in panel["series"]) or bool(panel["points"])


def _title(runs: List[RunData]) -> str:
    """The runs' names, each run that has no COMPLETE marked as such (its curves stop where it is now)."""
    return " vs ".join(r.name + ("" if r.complete else " (not complete)") for r in runs)


def _note(runs: List[RunData]) -> Optional[str]:
    """What the figure's marks mean, in a line under it."""
    bounds = [(r.name, len(chain_boundaries(r))) for r in runs]
    parts = [f"{name}: {n} chain boundar{'y' if n == 1 else 'ies'}" if len(runs) > 1 else
             f"{n} chain boundar{'y' if n == 1 else 'ies'}" for name, n in bounds if n]
    if not parts:
        return None
    return "thin vertical marks: where a chain link resumed the run (" + "; ".join(parts) + ")"


def figures(runs: List[RunData], smooth: Optional[int] = None) -> Dict[str, Dict]:
    """The plots' data: file name -> {"title", "panels", "note"?}; the first run is the report's, the others
    compared. ``smooth``: steps of the train curves' moving average (None: 1/SMOOTH_SHARE of each run's steps).
    A panel with nothing to draw is left out, and a plot whose panels all are."""
    spans = [r.metrics.active_seconds for r in runs]
    longest = max((s for s in spans if s is not None), default=0.0)
    unit, scale = ("s", 1.0) if longest < 120 else ("min", 60.0) if longest < 7200 else ("h", 3600.0)
    by_epoch = all(_epoch_axis(r) for r in runs)
    units = {rank_unit(r.device) for r in runs}
    per = units.pop() if len(units) == 1 else "rank"
    panels = _panels(unit, by_epoch, per)
    for i, run in enumerate(runs):
        name = run.name if run.name not in [r.name for r in runs[:i]] else f"{run.name} #{i + 1}"
        curves = _RunCurves(panels, run, i, f"{name}: " if len(runs) > 1 else "", scale, smooth, by_epoch, per)
        curves.curves()
        curves.marks()
    title, note = _title(runs), _note(runs)
    figs = {
        "loss.png": {"title": f"Loss: {title}", "panels": [panels["loss_e"], panels["loss_t"]]},
        "accuracy.png": {"title": f"Accuracy: {title}",
                         "panels": [panels["acc_e"], panels["acc_t"], panels["top5_e"]]},
        "lr.png": {"title": f"Learning-rate schedule: {title}", "panels": [panels["lr"]]},
        "throughput.png": {"title": f"Throughput and input pipeline: {title}",
                           "panels": [panels["speed"], panels["wait"], panels["per_gpu"]]},
    }
    out = {}
    for name, fig in figs.items():
        shown = [p for p in fig["panels"] if _drawn(p)]
        if shown:
            out[name] = dict(fig, panels=shown, **({"note": note} if note else {}))
    return out


# ---- text ----------------------------------------------------------------------------------

def _pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


_hms = units.duration


def _num(v: Optional[float], fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _count(n: Optional[int], what: str) -> str:
    return f"- {what}s" if n is None else f"{n} {what}{'' if n == 1 else 's'}"


def rows(s: Dict[str, object]) -> List[Tuple[str, str]]:
    """(label, value) lines of one run's summary, in reading order."""
    return _figure_rows(s) + _chain_rows(s) + _shape_rows(s)


def _figure_rows(s: Dict[str, object]) -> List[Tuple[str, str]]:
    """Accuracy, loss, speed and time."""
    test = "-"
    if s.get("test_top1_mean") is not None:
        test = (f"{100 * s['test_top1_mean']:.1f}% +- {100 * (s.get('test_top1_std') or 0):.1f}% "
                f"({s.get('test_checkpoints')} checkpoints, {s.get('test_views')} views)")
    epochs = "-" if s.get("epochs_done") is None else f"{s['epochs_done']:.2f}"
    if s.get("epochs_planned"):
        epochs += f" of {s['epochs_planned']}"
    best = _pct(s.get("best_eval_top1")) + (f" (epoch {s['best_eval_epoch']})" if s.get("best_eval_epoch") else "")
    out = [("status", "complete" if s.get("complete") else "not complete"),
           ("epochs", epochs), ("steps", str(s.get("steps") or "-")),
           ("final eval top-1", _pct(s.get("final_eval_top1"))), ("best eval top-1", best),
           ("test top-1 (multi-clip)", test)]
    for t in s.get("test_only") or []:
        out.append((f"  test only {t['checkpoint']}", f"{_pct(t.get('top1'))} top-1, {_pct(t.get('top5'))} top-5 "
                                                      f"({t.get('protocol')})"))
    out += [("final train loss", _num(s.get("final_train_loss"), "{:.4f}")),
            ("throughput (median)", _num(s.get("clips_per_s_median")) + " clips/s" if s.get("clips_per_s_median")
             is not None or s.get("steps_per_s_median") is None else _num(s.get("steps_per_s_median")) + " steps/s"),
            ("data wait (median)", _pct(s.get("data_wait_frac_median"))),
            ("wall time", _hms(s.get("wall_seconds"))),
            ("training time (queue gaps removed)", _hms(s.get("training_seconds")))]
    if s.get("missing_videos") is not None:
        out.append(("data set", f"{s['missing_videos']} videos missing (from the data's manifest)"))
    return out


def _chain_rows(s: Dict[str, object]) -> List[Tuple[str, str]]:
    """Launches, resume steps and how each job of the chain ended."""
    launches = f"{s.get('launches')} ({s.get('replayed_steps')} steps replayed after resumes)"
    if s.get("launches_estimated"):
        launches = f"{s.get('launches')}, estimated from pauses in the metrics (no launch records); " \
                   f"{s.get('replayed_steps')} steps replayed after resumes"
    out = [("launches of your command" if s.get("user_command") else "trainer launches", launches)]
    if s.get("resume_steps"):
        out.append(("resumed at steps", ", ".join(str(st) for st in s["resume_steps"])))
    jobs = s.get("jobs") or []
    out.append(("jobs in the chain", str(len(jobs)) if jobs else "- (no job records)"))
    for j in jobs:
        text = j["state"] + (f"; resumed at step {j['resumed_from_step']}" if j.get("resumed_from_step") else "")
        text += f"; {j['ended']}" if j.get("ended") else ""
        out.append((f"  job {j['job_id']}", text))
    return out


def _shape_rows(s: Dict[str, object]) -> List[Tuple[str, str]]:
    """Virtual and physical shape, batch and LR, projected scaling."""
    out: List[Tuple[str, str]] = []
    sh = s.get("shapes") or {}
    ran = sh.get("trainer_ranks")
    differs = ran and sh.get("physical_gpus") and ran != sh["physical_gpus"]
    note = f" (the trainer logged {ran} ranks)" if differs else ""
    unit = str(sh.get("rank_unit") or "rank")   # what the run's records say a rank was
    if sh.get("simulated"):
        out.append(("virtual shape", f"{_count(sh.get('virtual_nodes'), 'node')}, "
                                     f"{_count(sh.get('virtual_gpus'), unit)}"))
        out.append(("physical shape", f"{_count(sh.get('physical_nodes'), 'node')}, "
                                      f"{_count(sh.get('physical_gpus'), unit)}, "
                                      f"k = {sh.get('accum_steps')} accumulation steps{note}"))
    elif sh.get("physical_nodes") or sh.get("physical_gpus"):
        out.append(("shape", f"{_count(sh.get('physical_nodes'), 'node')}, "
                             f"{_count(sh.get('physical_gpus'), unit)}{note}"))
    if sh.get("global_batch"):
        lr = f", peak LR {sh['lr']:.4g}" if sh.get("lr") else ""
        out.append(("global batch", f"{sh['global_batch']} clips{lr}"))
    for r in s.get("scaling") or []:
        out.append((f"  projected {r['nodes']} nodes", f"{_hms(r['seconds'])}, efficiency {_pct(r['efficiency'])}"))
    return out


#: The text table's width: it fits a terminal of 100 columns, however long the run names and values.
TABLE_WIDTH = 100
GUTTER = 2
LABEL_WIDTH = 40
ELLIPSIS = "\u2026"


def shorten(text: str, width: int, middle: bool = False) -> str:
    """``text`` in at most ``width`` characters, an ellipsis where it is cut: at the end, or in the
    ``middle`` (run names: two runs often differ only in their last characters)."""
    if len(text) <= width:
        return text
    if not middle or width < 5:
        return text[:max(width - 1, 0)] + ELLIPSIS
    head = (width - 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (width - 1 - head):]


def column_widths(natural: List[int], fixed: int, total: int = TABLE_WIDTH) -> List[int]:
    """Widths of the value columns: each its natural width where all fit in ``total`` beside the ``fixed``
    columns; otherwise the room is shared, narrow columns keeping their width and the rest wrapping."""
    room = max(total - fixed - GUTTER * len(natural), 8 * len(natural))
    widths = [0] * len(natural)
    left = sorted(range(len(natural)), key=lambda i: natural[i])
    while left:
        share = room // len(left)
        i = left.pop(0)
        widths[i] = max(min(natural[i], share), 1)
        room -= widths[i]
    return widths


def _text_table(head: List[str], body: List[List[str]]) -> str:
    """Aligned columns in TABLE_WIDTH: the label column whole, names shortened, long values wrapped."""
    label_w = min(max(len(r[0]) for r in [head] + body), LABEL_WIDTH)
    natural = [max(len(r[i]) for r in [head] + body) for i in range(1, len(head))]
    widths = [label_w] + column_widths(natural, label_w)
    lines = ["  ".join(shorten(c, w, middle=True).ljust(w) for c, w in zip(head, widths)).rstrip()]
    for row in body:
        cells = [[shorten(row[0], label_w)]] + [textwrap.wrap(c, w, break_on_hyphens=False) or [""]
                                                 for c, w in zip(row[1:], widths[1:])]
        for k in range(max(len(c) for c in cells)):
            parts = [(c[k] if k < len(c) else "").ljust(w) for c, w in zip(cells, widths)]
            lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def table(summaries: List[Dict[str, object]], diff: Optional[Dict[str, Optional[float]]] = None,
          markdown: bool = False) -> str:
    """The summary as aligned text (in TABLE_WIDTH columns), or as a Markdown table; with a comparison,
    one column per run."""
    cols = [dict(rows(s)) for s in summaries]
    labels: List[str] = []
    for s in summaries:
        for label, _ in rows(s):
            if label not in labels:
                labels.append(label)
    head = [""] + [str(s["run"]) for s in summaries]
    body = [[label] + [c.get(label, "") for c in cols] for label in labels]
    if diff is not None:
        head.append("difference")
        names = {"final eval top-1": "final_eval_top1", "best eval top-1": "best_eval_top1",
                 "test top-1 (multi-clip)": "test_top1_mean"}
        for row in body:
            d = diff.get(names.get(row[0], ""))
            row.append("" if d is None else f"{100 * d:+.1f} points")
    if markdown:
        lines = ["| " + " | ".join(h or "figure" for h in head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in body]
        return "\n".join(lines)
    return _text_table(head, body)


def verdict(summaries: List[Dict[str, object]], diff: Dict[str, Optional[float]]) -> str:
    """One sentence on which run is more accurate, with the figures."""
    a, b = summaries
    for key, what in (("test_top1_mean", "multi-clip test top-1"), ("best_eval_top1", "best eval top-1"),
                      ("final_eval_top1", "final eval top-1")):
        d = diff.get(key)
        if d is not None:
            better, worse = (a, b) if d >= 0 else (b, a)
            return (f"{better['run']} reaches {_pct(better[key])} {what} against {_pct(worse[key])} for "
                    f"{worse['run']}: {100 * abs(d):.1f} points {'better' if d else 'apart'}.")
    return "the runs share no accuracy figure to compare."


def markdown(summaries: List[Dict[str, object]], diff: Optional[Dict], files: List[str]) -> str:
    lines = [f"# Run report: {summaries[0]['run']}", "",
             f"Generated {time.strftime('%Y-%m-%d %H:%M:%S')} from `{summaries[0]['location']}/{METRICS}` "
             "(last record kept for each step after resumes).", ""]
    if diff is not None:
        lines += [f"Compared with `{summaries[1]['location']}`: {verdict(summaries, diff)}", ""]
    lines += [table(summaries, diff, markdown=True), ""]
    for f in files:
        if f.endswith(".png"):
            lines += [f"![{f[:-4]}]({f})", ""]
    return "\n".join(lines)


# ---- writing -------------------------------------------------------------------------------

def check_out_dir(out: Path, force: bool) -> None:
    """A folder the report may write into: new, a previous report's, or --force."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder; choose another --out.")
    if not out.is_dir() or force:
        return
    ours = False
    try:
        ours = json.loads((out / "report.json").read_text()).get("generator") == GENERATOR
    except (OSError, ValueError, AttributeError):
        ours = False
    clash = [f for f in FILES if (out / f).exists()]
    if clash and not ours:
        raise UserError(f"{out} already holds {', '.join(clash)} that no earlier report wrote; pass --force to "
                        "replace them, or choose another --out.")


def _write_text(path: Path, text: str) -> None:
    files.write_atomic(path, text)


def _draw(runs: List[RunData], figs: Dict[str, Dict], out: Path, progress: bool) -> List[str]:
    """Draw every plot into ``out`` (the slow part of a report), counted by the progress output."""
    from summit_jobs.runs import plots
    n = len(figs) + (1 if runs[0].scaling else 0)
    files: List[str] = []
    with Progress("report", n, "plots", enabled=progress) as bar:
        for name, fig in list(figs.items()):
            plots.panels_plot(fig["panels"], str(out / name), fig["title"], fig.get("note"))
            files.append(name)
            bar.update(len(files), name)
        if runs[0].scaling:
            plots.scaling_plot(runs[0].scaling, str(out / "scaling.png"))
            files.append("scaling.png")
            figs["scaling.png"] = {"title": "Projected scaling", "rows": runs[0].scaling}
            bar.update(len(files), "scaling.png")
    return files


def write(runs: List[RunData], out: Path, force: bool = False, progress: bool = False,
          smooth: Optional[int] = None) -> Dict[str, object]:
    """Write the plots, report.md and report.json into ``out``; return report.json's content.

    ``progress``: report the plots drawn on stderr (summit_jobs.progress).
    """
    check_out_dir(out, force)
    out.mkdir(parents=True, exist_ok=True)
    summaries = [summarize(r) for r in runs]
    diff = compare(summaries[0], summaries[1]) if len(runs) > 1 else None
    figs = figures(runs, smooth)
    files = _draw(runs, figs, out, progress)
    for name in PLOTS + ("scaling.png",):
        stale = out / name
        if name not in files and stale.exists():
            stale.unlink()   # a previous report's plot (or projection) would otherwise pass for this run's
    doc = {"generator": GENERATOR, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "summary": summaries[0],
           "compare": summaries[1:] and summaries[1] or None, "difference": diff,
           "verdict": verdict(summaries, diff) if diff else None, "files": files + ["report.md"],
           "figures": figs}
    _write_text(out / "report.md", markdown(summaries, diff, files))
    _write_text(out / "report.json", json.dumps(doc, indent=2))
    return doc
