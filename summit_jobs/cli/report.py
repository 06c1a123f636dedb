"""CLI: `report` (plots and summary of a run's metrics; see summit_jobs/runs/report.py)."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Optional

import click

from summit_jobs.cli.submit import State, cli
from summit_jobs.cli.types import complete_runs, refuse_empty_argument
from summit_jobs.errors import UserError


def _open_run(state: State, target: str, hosts_):
    """(host, run directory, run record or None) for a run directory, run name or job id.

    A local folder holding metrics.jsonl but no run record (a trainer started by
    hand) is reported too; everything else is resolved the way status and logs do.
    """
    from summit_jobs.hosts import host as hosts
    from summit_jobs.runs import records as runs
    from summit_jobs.runs.lifecycle import targets as _targets
    local = Path(target).expanduser()
    if local.is_dir() and not (local / runs.RECORD).is_file():
        return hosts.LocalHost(), str(local.resolve()), None
    record, _ids = _targets(state, target)[0]
    if record is None:
        raise UserError(f"job {target} belongs to no run recorded here; give the run directory or name instead.")
    return hosts_.get(record), str(record["run_dir"]), record


@cli.command("report")
@click.argument("target", metavar="RUN", shell_complete=complete_runs,
                callback=refuse_empty_argument("RUN", "a run directory, a run name or a job id"))
@click.option("--out", metavar="DIR", type=click.Path(file_okay=False),
              help="Folder for the plots and report.md. Default: RUN/report (for a run on another host: "
                   "./NAME-report here).")
@click.option("--compare", "other", metavar="OTHER_RUN", shell_complete=complete_runs,
              help="A second run (e.g. the same network without the temporal shift) to draw in the same plots "
                   "and to compare accuracy with.")
@click.option("--smooth", metavar="N", type=int, default=None,
              help="Also draw the train curves as a moving average over N steps (0: raw curves only). "
                   "Default: 1/50 of the run's steps, when that spans at least two records.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary (and comparison) as JSON.")
@click.option("--force", is_flag=True,
              help="Replace files in --out that no earlier report wrote. A previous report's files are always "
                   "replaced.")
@click.option("--quiet", is_flag=True, help="No progress output.")
@click.pass_obj
def report_cmd(state: State, target: str, out: Optional[str], other: Optional[str], smooth: Optional[int],
               as_json: bool, force: bool, quiet: bool) -> None:
    """Plots and a summary table of a run: accuracy, loss, LR, throughput, chain.

    RUN is a run directory, a run name (as submit printed it) or a job id.
    Chained runs read as one run: steps repeated after a resume keep their
    last record. The summary gives final and best eval top-1, the multi-clip
    test (mean +- std), median throughput and data-wait fraction, wall time,
    the trainer's launches and the steps they resumed from (from its launch
    records), each job of the chain and how it ended, and for simulated runs
    the virtual and physical shapes. The plots draw each run in one colour
    (train dashed, eval solid), chance, the multi-clip test and where each
    launch of a chain took over. A run holding scaling.json (from `summit-jobs
    scaling --json`) also gets the projected scaling plot.

    \b
    Writes loss.png, accuracy.png, lr.png, throughput.png, report.md and
    report.json (the plotted data) into RUN/report/, replacing the previous
    report there.

    \b
    Example (TSM against the same network without the shift):
      summit-jobs report runs/tsm-demo --compare runs/tsm-demo-noshift
    """
    from summit_jobs import progress
    from summit_jobs.runs import report
    from summit_jobs.runs.lifecycle import Hosts as _Hosts
    progress.check_environment(not quiet)
    if smooth is not None and smooth < 0:
        raise UserError(f"--smooth {smooth}: the moving average spans a number of steps, 0 or more (0 draws the "
                        "raw train curves only; leave it out for 1/50 of the run).")
    hosts_ = _Hosts(state)
    try:
        host, run_dir, record = _open_run(state, target, hosts_)
        data = [report.load(host, run_dir, record)]
        if other:
            ohost, odir, orecord = _open_run(state, other, hosts_)
            data.append(report.load(ohost, odir, orecord))
    finally:
        hosts_.close()
    if out:
        folder = Path(out).expanduser()
    elif host.is_remote:
        folder = Path.cwd() / f"{data[0].name}-report"
    else:
        folder = Path(run_dir) / "report"
    doc = report.write(data, folder, force=force, progress=not quiet, smooth=smooth)
    if as_json:
        click.echo(json.dumps({k: doc[k] for k in ("summary", "compare", "difference", "verdict", "files")}
                              | {"out": str(folder)}, indent=2))
        return
    summaries = [doc["summary"]] + ([doc["compare"]] if doc["compare"] else [])
    click.echo(report.table(summaries, doc["difference"]))
    if doc["verdict"]:
        click.echo(textwrap.fill(doc["verdict"], report.TABLE_WIDTH, break_on_hyphens=False))
    click.echo(f"report: {folder / 'report.md'} (plots: {', '.join(f for f in doc['files'] if f.endswith('.png'))})")
