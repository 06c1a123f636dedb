"""CLI: `fuse` (two-stream late fusion of runs' per-video test scores; see summit_jobs/runs/fuse.py)."""
from __future__ import annotations

import json
from typing import Dict, Optional, Tuple

import click

from summit_jobs.cli.submit import cli
from summit_jobs.cli.types import complete_runs, refuse_empty_argument


def _pct(v: float) -> str:
    return f"{100 * v:.2f}%"


def _print_table(result: Dict) -> None:
    """Which file each stream came from, then one line per stream and one for the fusion."""
    for s in result["streams"]:
        how = f" ({s['chosen']})" if s["chosen"] else ""
        click.echo(f"{s['name']}: {s['file']}{how}")
    rows = [(s["name"], _pct(s["top1"]), _pct(s["top5"]), str(s["videos"]), f"{s['weight']:g}")
            for s in result["streams"]]
    f = result["fused"]
    rows.append((f"fused ({f['average']})", _pct(f["top1"]), _pct(f["top5"]), str(f["videos"]), ""))
    width = max(len("stream"), *(len(r[0]) for r in rows))
    click.echo(f"{'stream':<{width}}  {'top1':>8}  {'top5':>8}  {'videos':>7}  weight")
    for name, t1, t5, n, w in rows:
        click.echo(f"{name:<{width}}  {t1:>8}  {t5:>8}  {n:>7}  {w}".rstrip())
    dropped = [f"{s['name']} {s['left_out']}" for s in result["streams"] if s["left_out"]]
    if dropped:
        click.echo("--common: videos left out (not in every stream): " + ", ".join(dropped))


@cli.command("fuse")
@click.argument("inputs", nargs=-1, metavar="RUN_OR_SCORES...", shell_complete=complete_runs,
                callback=refuse_empty_argument("RUN_OR_SCORES", "a run directory or a scores file"))
@click.option("--checkpoint", metavar="NAME",
              help="Which tested checkpoint's scores to take from each run directory: epoch-0003, best, ... "
                   "(its file name with or without .pt). Default: each run's newest tested checkpoint.")
@click.option("--weights", metavar="W1,W2,...",
              help="One positive weight per input, in their order (TSN: --weights 1,1.5 for RGB, flow). "
                   "Default: all 1.")
@click.option("--average", type=click.Choice(["probs", "logits"]), default="probs", show_default=True,
              help="probs: the weighted mean of each stream's softmax probabilities; logits: of the score "
                   "vectors as the tests wrote them.")
@click.option("--common", is_flag=True,
              help="Fuse only the videos every stream has (by default the streams must have the same videos).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def fuse_cmd(inputs: Tuple[str, ...], checkpoint: Optional[str], weights: Optional[str], average: str,
             common: bool, as_json: bool) -> None:
    """Late fusion of two or more streams: e.g. an RGB run and an optical-flow run.

    Two-stream networks (TSN, two-stream TSM) train one network on RGB frames
    and another on stacked optical flow, as separate runs; a video's
    prediction is the weighted average of the streams' class scores. TSN
    weights the flow stream 1.5 against RGB's 1 (--weights 1,1.5).

    Each input is a run directory or one of its scores files. Every test the
    trainer runs (the final test, --test-only) writes each video's scores to
    RUN/scores/<checkpoint>.npz; from a run directory the newest tested
    checkpoint's file is used (or --checkpoint's), and the output says which.
    Videos are matched by key; the streams must have the same videos (or
    --common), the same labels and the same classes.

    \b
    Prints each stream's top-1, top-5 and videos, then the fused top-1 and
    top-5.

    \b
    Example:
      summit-jobs fuse runs/tsm-rgb runs/tsm-flow --weights 1,1.5
    """
    from summit_jobs.runs.fuse import fuse_runs
    result = fuse_runs(list(inputs), checkpoint, weights, average, common)
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        _print_table(result)
