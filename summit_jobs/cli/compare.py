"""CLI: `compare` (two runs' steps, learning rates, losses and final weights; see summit_jobs/runs/compare.py)."""
from __future__ import annotations

import json
from typing import Dict, List

import click

from summit_jobs.cli.submit import cli
from summit_jobs.cli.types import complete_runs, refuse_empty_argument

#: Logged steps shown in full; longer runs show the first and last ones and every step that differs.
SHOWN_STEPS = 12


def _num(v: object) -> str:
    return "-" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v))


def _shown(rows: List[Dict]) -> List[Dict]:
    """The step rows to print: all of a short run, else the first and last few and any that differ."""
    if len(rows) <= SHOWN_STEPS:
        return rows
    half = SHOWN_STEPS // 2
    return [r for i, r in enumerate(rows) if i < half or i >= len(rows) - half or r["differs"]]


def _print_steps(rows: List[Dict]) -> None:
    if not rows:
        click.echo("steps: no train records in metrics.jsonl of either run (checkpoint files given?): "
                   "only the weights are compared")
        return
    click.echo(f"{'step':>7} {'global batch A/B':>17} {'LR A':>12} {'LR B':>12} {'loss A':>10} {'loss B':>10}  "
               "agree")
    last = None
    for r in _shown(rows):
        if last is not None and rows.index(r) != last + 1:
            click.echo(f"{'...':>7}")
        last = rows.index(r)
        gb = "/".join(_num(v) for v in r["global_batch"])
        click.echo(f"{r['step']:>7} {gb:>17} {_num(r['lr'][0]):>12} {_num(r['lr'][1]):>12} "
                   f"{_num(r['loss'][0]):>10} {_num(r['loss'][1]):>10}  "
                   + ("yes" if not r["differs"] else "NO: " + ", ".join(r["differs"])))


def _print_weights(result: Dict) -> None:
    click.echo("weights, largest difference per module:")
    for g in result["groups"]:
        click.echo(f"  {g['group']:<12} max |dw| {g['abs']:.3g} (relative {g['rel']:.3g}), worst {g['tensor']}")
    if result["buffers_max_abs"] is not None:
        click.echo(f"  BatchNorm running statistics (kept per rank, not compared): max |d| "
                   f"{result['buffers_max_abs']:.3g}")
    loss = result["max_loss_diff"]
    click.echo("training loss: " + ("not logged in both runs" if loss is None else
                                    f"max |d loss| {loss:.3g} over {len(result['steps'])} logged steps"))


def summary_line(result: Dict) -> str:
    """The verdict in one line (the demo prints it too)."""
    worst = result["worst"]
    dw = "-" if worst is None else f"{worst['abs']:.2g}"
    if result["agree"]:
        return (f"same: max |dw| {dw} after {result['step']} steps (tolerance {result['tolerance']:g})")
    return f"differ after {result['step']} steps: {result['reason']}"


@cli.command("compare")
@click.argument("run_a", metavar="RUN_A", shell_complete=complete_runs,
                callback=refuse_empty_argument("RUN_A", "a run directory or a checkpoint file"))
@click.argument("run_b", metavar="RUN_B", shell_complete=complete_runs,
                callback=refuse_empty_argument("RUN_B", "a run directory or a checkpoint file"))
@click.option("--tolerance", type=float, default=1e-5, show_default=True,
              help="Largest difference that counts as the same: absolute for weights, relative to the value "
                   "(above 1) for LR and loss. 1e-5 suits fp32 on CPU; see docs/methods.md for GPUs.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.pass_context
def compare_cmd(ctx: click.Context, run_a: str, run_b: str, tolerance: float, as_json: bool) -> None:
    """Whether two runs trained the same: e.g. a real run and its `simulate` twin.

    RUN_A and RUN_B are run directories (their newest checkpoints/ckpt-*.pt
    is compared) or checkpoint files. Prints the global batch, LR and loss at
    every logged step of both (metrics.jsonl), the largest weight difference
    per module naming the worst tensor, and the largest loss difference.
    BatchNorm running statistics are shown but not compared: each rank keeps
    its own. Exit 0 when the runs agree within --tolerance, 1 when they do
    not (with the first step and the tensor that differ), 2 when they cannot
    be compared (different architectures or steps, a missing run or checkpoint).
    """
    from summit_jobs.runs.compare import compare
    result = compare(run_a, run_b, tolerance)
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        for side, run in zip("AB", result["runs"]):
            click.echo(f"{side}: {run['checkpoint']} (step {run['step']})")
        _print_steps(result["steps"])
        _print_weights(result)
        click.echo(summary_line(result))
    if not result["agree"]:
        click.echo(f"summit-jobs: compare: the runs differ: {result['reason']}", err=True)
        ctx.exit(1)
