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

Torch-free (login-node side): metrics are parsed here, not with the trainer's reader.
"""
from __future__ import annotations

import json
import os
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from summit_jobs.errors import UserError
from trainer import rundir
from trainer import files, units

METRICS = rundir.METRICS
SCALING = "scaling.json"
GENERATOR = "summit-jobs report"
#: Everything a report writes (scaling.png only when the run holds scaling.json).
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
    """Whole JSON records in file order; a torn or foreign line is skipped, as the trainer's reader does."""
    return rundir.json_records(text, _well_formed)


#: Fields the report does arithmetic with: a record whose values are not numbers is not the trainer's.
_INT_FIELDS = ("step", "epoch")
_NUM_FIELDS = ("time", "loss", "top1", "top5", "lr", "clips_per_s", "data_wait_frac", "step_time", "ranks",
               "accum_steps", "global_batch")


def _well_formed(rec: Dict) -> bool:
    """A record the report can use: a text kind, whole step/epoch, numeric figures (foreign lines are skipped)."""
    if not isinstance(rec.get("kind"), str) or "step" not in rec:
        return False
    for key in _INT_FIELDS:
        if key in rec and (isinstance(rec[key], bool) or not isinstance(rec[key], int) or rec[key] < 0):
            return False
    return all(not isinstance(rec[k], bool) and isinstance(rec[k], (int, float))
               for k in _NUM_FIELDS if rec.get(k) is not None)


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
    launches: int          # trainer launches that wrote records (a resume starts a new one)
    replayed: int          # train records replaced by a later launch's record for the same step
    wall_seconds: float    # first to last record, queue waits included
    active_seconds: float  # the same with the gaps between launches removed


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


def deduplicate(records: List[Dict]) -> Metrics:
    """Keep the last record per key; give every kept record ``elapsed`` (active seconds since the first)."""
    records = [r for r in records if r.get("kind") in ("train", "eval", "test") and "step" in r]
    segs = _segments(records)
    kept: Dict[Tuple, Tuple[Dict, int]] = {}
    replayed = 0
    for rec, seg in zip(records, segs):
        key = record_key(rec)
        if key in kept and rec["kind"] == "train":
            replayed += 1
        kept[key] = (rec, seg)
    items = sorted(kept.values(), key=lambda rs: float(rs[0].get("time", 0.0)))
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
    by_kind = {k: sorted((r for r in out if r["kind"] == k and not r.get("summary")), key=lambda r: int(r["step"]))
               for k in ("train", "eval", "test")}
    summaries = [r for r in out if r["kind"] == "test" and r.get("summary")]
    times = [float(r.get("time", 0.0)) for r in records]
    return Metrics(train=by_kind["train"], eval=by_kind["eval"], test=by_kind["test"],
                   test_summary=summaries[-1] if summaries else None, launches=(max(segs) + 1) if segs else 0,
                   replayed=replayed, wall_seconds=(max(times) - min(times)) if times else 0.0,
                   active_seconds=out[-1]["elapsed"] if out else 0.0)


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
    else:
        how = ""
    step = resumed.get("step") if resumed else None
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


def _jobs(host, run_dir: str, record: Optional[Dict]) -> List[Dict]:
    """One entry per job of the chain: exit code (from its exit-code file) and how the trainer ended."""
    from summit_jobs import runs
    ids = [str(j) for j in (record or {}).get("job_ids") or []]
    if record is not None:
        ids = runs.with_chain_links(host, {**record, "run_dir": run_dir}, ids)
    for name in host.listdir(run_dir):
        if name.startswith(rundir.exitcode_name("")) and name[9:] not in ids:
            ids.append(name[9:])
    script = host.read_text(host.join(run_dir, rundir.SCRIPT)) or ""
    events = rundir.parse_events(host.read_text(host.join(run_dir, rundir.EVENTS)) or "")
    out = []
    for jid in ids:
        text = host.read_text(host.join(run_dir, rundir.exitcode_name(jid)))
        code = int(text.strip()) if text is not None and text.strip().lstrip("-").isdecimal() else None
        mine = rundir.job_events(events, jid)
        if mine:
            resumed, how = _ending_from_events(mine)
        else:
            output = "".join(host.read_text(host.join(run_dir, f)) or "" for f in runs.output_files(script, jid))
            resumed, how = _job_ending(output)
        if code is None:
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
                        f"pending or starting: check `summit-jobs status {os.path.basename(run_dir.rstrip('/'))}`), "
                        "or this is not a run directory.")
    metrics = deduplicate(parse_metrics(text))
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
    return RunData(name=name, location=where, metrics=metrics, plan=plan if isinstance(plan, dict) else None,
                   record=record, complete=host.exists(host.join(run_dir, rundir.COMPLETE)),
                   jobs=_jobs(host, run_dir, record), scaling=scaling)


# ---- figures -------------------------------------------------------------------------------

def shapes(run: RunData) -> Dict[str, object]:
    """Physical and virtual shapes: from plan.json, else from what the trainer logged."""
    p = run.plan or {}
    last = run.metrics.train[-1] if run.metrics.train else {}
    k = int(p.get("accum_steps") or last.get("accum_steps") or 1)
    ranks = p.get("ranks") or last.get("ranks")
    out: Dict[str, object] = {"physical_nodes": p.get("nodes"), "physical_gpus": ranks, "accum_steps": k,
                              "ranks_per_node": p.get("ranks_per_node"),
                              "global_batch": last.get("global_batch") or p.get("global_batch"),
                              "lr": max((float(r["lr"]) for r in run.metrics.train), default=None)}
    vnodes = p.get("virtual_nodes") or (p.get("nodes") * k if p.get("nodes") else None)
    vranks = p.get("virtual_ranks") or (ranks * k if ranks else None)
    out.update(virtual_nodes=vnodes, virtual_gpus=vranks, trainer_ranks=last.get("ranks"),
               simulated=bool(k > 1 or (vnodes and p.get("nodes") and vnodes != p.get("nodes"))))
    return out


def _median(values: List[float]) -> Optional[float]:
    values = [float(v) for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(run: RunData) -> Dict[str, object]:
    """The figures of the summary table (fractions as fractions, times in seconds)."""
    m = run.metrics
    ev = m.eval
    best = max(ev, key=lambda r: r["top1"]) if ev else None
    epochs_planned = (run.plan or {}).get("epochs")
    fe = fractional_epochs(m.train)
    out: Dict[str, object] = {
        "run": run.name, "location": run.location, "complete": run.complete,
        "epochs_done": round(fe[-1], 3) if fe else None, "epochs_planned": epochs_planned,
        "steps": int(m.train[-1]["step"]) if m.train else None,
        "final_train_loss": m.train[-1]["loss"] if m.train else None,
        "final_train_top1": m.train[-1]["top1"] if m.train else None,
        "final_eval_top1": ev[-1]["top1"] if ev else None, "final_eval_top5": ev[-1].get("top5") if ev else None,
        "best_eval_top1": best["top1"] if best else None, "best_eval_epoch": int(best["epoch"]) + 1 if best else None,
        "test_top1_mean": None, "test_top1_std": None, "test_views": None, "test_checkpoints": None,
        "clips_per_s_median": _median([r.get("clips_per_s") for r in m.train]),
        "data_wait_frac_median": _median([r.get("data_wait_frac") for r in m.train]),
        "wall_seconds": m.wall_seconds, "training_seconds": m.active_seconds,
        "launches": m.launches, "replayed_steps": m.replayed,
        "jobs": run.jobs, "shapes": shapes(run),
    }
    if m.test_summary:
        s = m.test_summary
        out.update(test_top1_mean=s["top1"], test_top1_std=s.get("top1_std"), test_views=s.get("views"),
                   test_checkpoints=len(s.get("checkpoints") or []))
    if run.scaling:
        out["scaling"] = [{"nodes": r["nodes"], "seconds": r["seconds"], "efficiency": r["efficiency"]}
                          for r in run.scaling]
    return out


def compare(a: Dict[str, object], b: Dict[str, object]) -> Dict[str, Optional[float]]:
    """Accuracy differences a - b (fractions) where both runs have the figure."""
    out = {}
    for key in ("final_eval_top1", "best_eval_top1", "test_top1_mean"):
        out[key] = (a[key] - b[key]) if a.get(key) is not None and b.get(key) is not None else None
    return out


def _series(label: str, xs: List[float], ys: List[float]) -> Dict:
    return {"label": label, "x": [float(x) for x in xs], "y": [float(y) for y in ys]}


def figures(runs: List[RunData]) -> Dict[str, Dict]:
    """The plots' data: file name -> {"title", "panels"}; the first run is the report's, the others compared."""
    loss_e, loss_t, acc_e, acc_t, lr, speed, wait = [], [], [], [], [], [], []
    many = len(runs) > 1
    longest = max(r.metrics.active_seconds for r in runs)
    unit, scale = ("s", 1.0) if longest < 120 else ("min", 60.0) if longest < 7200 else ("h", 3600.0)
    for i, run in enumerate(runs):
        m = run.metrics
        name = run.name if run.name not in [r.name for r in runs[:i]] else f"{run.name} #{i + 1}"
        tag = f"{name}: " if many else ""
        fe = fractional_epochs(m.train)
        minutes = [r["elapsed"] / scale for r in m.train]
        ev_e = [int(r["epoch"]) + 1 for r in m.eval]
        ev_t = [r["elapsed"] / scale for r in m.eval]
        steps = [int(r["step"]) for r in m.train]
        loss_e += [_series(tag + "train", fe, [r["loss"] for r in m.train]),
                   _series(tag + "eval", ev_e, [r["loss"] for r in m.eval])]
        loss_t += [_series(tag + "train", minutes, [r["loss"] for r in m.train]),
                   _series(tag + "eval", ev_t, [r["loss"] for r in m.eval])]
        acc_e += [_series(tag + "train top-1", fe, [100 * r["top1"] for r in m.train]),
                  _series(tag + "eval top-1", ev_e, [100 * r["top1"] for r in m.eval])]
        acc_t += [_series(tag + "train top-1", minutes, [100 * r["top1"] for r in m.train]),
                  _series(tag + "eval top-1", ev_t, [100 * r["top1"] for r in m.eval])]
        lr.append(_series(tag + "lr", steps, [r["lr"] for r in m.train]))
        speed.append(_series(tag + "clips/s", steps, [r["clips_per_s"] for r in m.train]))
        wait.append(_series(tag + "data wait", steps, [100 * r["data_wait_frac"] for r in m.train]))
    title = " vs ".join(r.name for r in runs)
    return {
        "loss.png": {"title": f"Loss: {title}", "panels": [
            {"xlabel": "epoch", "ylabel": "loss", "series": loss_e},
            {"xlabel": f"training time ({unit})", "ylabel": "loss", "series": loss_t}]},
        "accuracy.png": {"title": f"Top-1 accuracy: {title}", "panels": [
            {"xlabel": "epoch", "ylabel": "top-1 (%)", "series": acc_e, "ylim": [0, 100]},
            {"xlabel": f"training time ({unit})", "ylabel": "top-1 (%)", "series": acc_t, "ylim": [0, 100]}]},
        "lr.png": {"title": f"Learning-rate schedule: {title}", "panels": [
            {"xlabel": "step", "ylabel": "learning rate", "series": lr}]},
        "throughput.png": {"title": f"Throughput and input pipeline: {title}", "panels": [
            {"xlabel": "step", "ylabel": "clips/s (all ranks)", "series": speed},
            {"xlabel": "step", "ylabel": "data wait (% of step time)", "series": wait, "ylim": [0, 100]}]},
    }


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
           ("test top-1 (multi-clip)", test),
           ("final train loss", _num(s.get("final_train_loss"), "{:.4f}")),
           ("throughput (median)", _num(s.get("clips_per_s_median")) + " clips/s"),
           ("data wait (median)", _pct(s.get("data_wait_frac_median"))),
           ("wall time", _hms(s.get("wall_seconds"))),
           ("training time (queue gaps removed)", _hms(s.get("training_seconds"))),
           ("trainer launches", f"{s.get('launches')} ({s.get('replayed_steps')} steps replayed after resumes)")]
    jobs = s.get("jobs") or []
    out.append(("jobs in the chain", str(len(jobs)) if jobs else "- (no job records)"))
    for j in jobs:
        text = j["state"] + (f"; resumed at step {j['resumed_from_step']}" if j.get("resumed_from_step") else "")
        text += f"; {j['ended']}" if j.get("ended") else ""
        out.append((f"  job {j['job_id']}", text))
    sh = s.get("shapes") or {}
    ran = sh.get("trainer_ranks")
    differs = ran and sh.get("physical_gpus") and ran != sh["physical_gpus"]
    note = f" (the trainer logged {ran} ranks)" if differs else ""
    if sh.get("simulated"):
        out.append(("virtual shape", f"{_count(sh.get('virtual_nodes'), 'node')}, "
                                     f"{_count(sh.get('virtual_gpus'), 'GPU')}"))
        out.append(("physical shape", f"{_count(sh.get('physical_nodes'), 'node')}, "
                                      f"{_count(sh.get('physical_gpus'), 'GPU')}, "
                                      f"k = {sh.get('accum_steps')} accumulation steps{note}"))
    elif sh.get("physical_nodes") or sh.get("physical_gpus"):
        out.append(("shape", f"{_count(sh.get('physical_nodes'), 'node')}, "
                             f"{_count(sh.get('physical_gpus'), 'GPU')}{note}"))
    if sh.get("global_batch"):
        lr = f", peak LR {sh['lr']:.4g}" if sh.get("lr") else ""
        out.append(("global batch", f"{sh['global_batch']} clips{lr}"))
    for r in s.get("scaling") or []:
        out.append((f"  projected {r['nodes']} nodes", f"{_hms(r['seconds'])}, efficiency {_pct(r['efficiency'])}"))
    return out


def table(summaries: List[Dict[str, object]], diff: Optional[Dict[str, Optional[float]]] = None,
          markdown: bool = False) -> str:
    """The summary as aligned text, or as a Markdown table; with a comparison, one column per run."""
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
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head] + body)


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


def write(runs: List[RunData], out: Path, force: bool = False, progress=None) -> Dict[str, object]:
    """Write the plots, report.md and report.json into ``out``; return report.json's content."""
    from summit_jobs import plots
    say = progress or (lambda msg: None)
    check_out_dir(out, force)
    out.mkdir(parents=True, exist_ok=True)
    summaries = [summarize(r) for r in runs]
    diff = compare(summaries[0], summaries[1]) if len(runs) > 1 else None
    figs = figures(runs)
    files = []
    for i, (name, fig) in enumerate(figs.items(), 1):
        say(f"plot {i}/{len(figs)}: {out / name}")
        plots.panels_plot(fig["panels"], str(out / name), fig["title"])
        files.append(name)
    if runs[0].scaling:
        say(f"plot: {out / 'scaling.png'}")
        plots.scaling_plot(runs[0].scaling, str(out / "scaling.png"))
        files.append("scaling.png")
        figs["scaling.png"] = {"title": "Projected scaling", "rows": runs[0].scaling}
    stale = out / "scaling.png"
    if "scaling.png" not in files and stale.exists():
        stale.unlink()   # a previous report's projection would otherwise pass for this run's
    doc = {"generator": GENERATOR, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "summary": summaries[0],
           "compare": summaries[1:] and summaries[1] or None, "difference": diff,
           "verdict": verdict(summaries, diff) if diff else None, "files": files + ["report.md"],
           "figures": figs}
    _write_text(out / "report.md", markdown(summaries, diff, files))
    _write_text(out / "report.json", json.dumps(doc, indent=2))
    return doc
