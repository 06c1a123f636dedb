"""CLI: `simulate` (oversized runs by exact accumulation) and `scaling` (projections)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional

import click

from summit_jobs.cli.submit import State, build_job, cli, emit_dry_run, shared_job_options
from summit_jobs.cli.types import FiniteFloat, whole
from summit_jobs.errors import UserError
from summit_jobs.profiles.machines import format_hhmm


def measured_throughput(run_dir: str) -> float:
    """Per-GPU clips/s from a previous run's metrics (median over its training steps).

    The file is appended to by a running trainer and may be edited or joined
    by hand, so, like `status` and `report`, this keeps the records it can
    use and passes over the rest: lines that are not JSON objects, undecodable
    bytes, and rates or rank counts that are not positive finite numbers.
    """
    path = Path(run_dir) / "metrics.jsonl"
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        raise UserError(f"--throughput-from: cannot read {path}; point it at a run directory that holds "
                        "metrics.jsonl.") from None

    def positive(value: object) -> bool:
        """A real, finite, positive number (NaN and infinity fail both comparisons)."""
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")

    rates = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or rec.get("kind") != "train":
            continue
        clips, ranks = rec.get("clips_per_s"), rec.get("ranks")
        if positive(clips) and positive(ranks):
            rates.append(float(clips) / float(ranks))
    if not rates:
        raise UserError(f"--throughput-from: {path} has no training steps with a throughput figure.")
    rates.sort()
    return rates[len(rates) // 2]


@cli.command("simulate")
@click.option("--virtual-nodes", "-V", type=whole(1), required=True,
              help="The node count whose optimisation to reproduce (global batch, LR, warm-up, sample assignment).")
@click.option("--nodes", "-n", "forced_nodes", type=whole(1),
              help="Physical nodes to use (must divide --virtual-nodes). Default: the largest count within the "
                   "quota that divides it.")
@click.option("--max-accum-steps", type=whole(1, 4096), default=16, show_default=True,
              help="Refuse shapes that need more accumulation steps than this.")
@click.option("--throughput-from", metavar="RUN_DIR",
              help="Estimate step time from a previous run's measured clips/s instead of the profile's figure.")
@click.option("--train-clips", type=whole(1),
              help="Training clips per epoch for the estimate. Default: the --data manifest's, else Kinetics-400's.")
@shared_job_options
@click.pass_obj
def simulate_cmd(state: State, virtual_nodes: int, forced_nodes: Optional[int], max_accum_steps: int,
                 throughput_from: Optional[str], train_clips: Optional[int], **kw) -> None:
    """Run a V-node optimisation on fewer nodes by exact gradient accumulation.

    When your allocation's quota is smaller than the run you want, the job runs
    on p <= quota nodes with k = V / p accumulation steps per optimiser step:
    the global batch, LR, warm-up and the samples each virtual rank sees are
    those of the V-node run, so the weights follow the same trajectory (up to
    floating-point summation order). The plan summary gives the cost first.

    \b
    Example (the paper's 1,024-node run under a 384-node quota):
      summit-jobs --machine summit simulate --virtual-nodes 1024 --quota-nodes 384 --project ABC123 --dry-run
    """
    from summit_jobs.planning import job as job_mod
    from summit_jobs.planning import plan as plan_mod
    from summit_jobs.planning import simulate
    from summit_jobs.runs import submission

    if kw.get("user_command") is not None:
        raise UserError("simulate reproduces a larger run by the built-in trainer's exact gradient accumulation, "
                        "and --command runs your own program, which the job cannot make accumulate: use "
                        "`summit-jobs submit --command ...` on the nodes you have.")
    limit = state.quota(kw.get("quota_nodes"))
    # Shown as set (a quota above the machine's size is still the user's figure); planned within the machine.
    quota = limit.nodes if limit.nodes is not None else limit.usable
    shape = simulate.choose_shape(virtual_nodes, limit.usable, forced_nodes, max_accum_steps)
    # Over SSH the run directory is a path on the login node, as for submit.
    kw = dict(submission.prepare(state, kw), nodes=shape.nodes, quota_nodes=quota, train_clips=train_clips)
    profile, plan, script = build_job(state, kw, accum_steps=shape.accum_steps, virtual_nodes=virtual_nodes)
    rate = measured_throughput(throughput_from) if throughput_from else None
    # The data the job trains on: the --data manifest, or the folder given to the trainer after `--`.
    run = job_mod.estimate(profile, plan, kw.get("data"), os.environ, rate=rate, train_clips=train_clips)
    est, clips = run.estimate, run.training_set.clips
    # Counted in the manifest, or Kinetics-400's: a count the plan could not know (--train-clips it checked).
    too_big = plan_mod.training_set_warning(plan.global_batch, clips) if train_clips is None else None
    if too_big:
        click.echo(f"summit-jobs: warning: {too_big}", err=True)
    summary = {
        "virtual_nodes": shape.virtual_nodes, "virtual_gpus": plan.virtual_ranks, "physical_nodes": plan.nodes,
        "physical_gpus": plan.ranks, "accum_steps": plan.accum_steps, "quota_nodes": quota,
        "global_batch": plan.global_batch, "lr": plan.lr, "train_clips": clips,
        "train_clips_from": run.training_set.source, "throughput_clips_per_s_per_gpu": run.rate, **est.to_dict(),
    }
    if too_big:
        summary["warnings"] = [too_big]
    lines = _cost_lines(plan, shape, run, quota) + _walltime_lines(plan, run, kw.get("walltime"))
    if kw["dry_run"]:
        emit_dry_run(plan, script, kw, extra={"simulate": summary})
        if not kw.get("as_json"):
            click.echo("\n".join(lines), err=True)
        return
    click.echo("\n".join(lines), err=True)
    from summit_jobs.planning.job import require_data
    require_data(state, plan, kw)
    submission.submit(state, profile, plan, script, dict(kw, simulate=summary))


def _cost_lines(plan, shape, run, quota: int) -> List[str]:
    """What the simulated run costs, for stderr: the figures a user weighs before spending node-hours. Counts
    read as counts, and the ranks of nodes without GPUs as CPU ranks (summit_jobs.wording)."""
    from summit_jobs import wording
    from summit_jobs.planning import simulate
    est, clips, rate = run.estimate, run.training_set.clips, run.rate
    gpus = plan.gpus_per_node
    lines = [
        f"simulate: {wording.count(shape.virtual_nodes, 'virtual node')} "
        f"({wording.ranks(plan.virtual_ranks, gpus)}) on {wording.count(plan.nodes, 'physical node')} "
        f"({wording.ranks(plan.ranks, gpus)}), k = {wording.count(plan.accum_steps, 'accumulation step')} "
        f"(quota {quota:,})",
        f"global batch {wording.count(plan.global_batch, 'clip')}, LR {plan.lr:g}, "
        f"{wording.count(est.iterations_per_epoch, 'iteration')} per epoch ({wording.count(clips, 'clip')}, "
        f"{run.training_set.source}), {wording.count(plan.epochs, 'epoch')}",
        _input_words(est),
        f"estimated step {est.step_seconds:.2f} s ({_step_parts(plan, est)} + "
        f"{est.comm_seconds_per_step * 1000:.1f} ms allreduce, one per step) at {rate:g} clips/s "
        f"{wording.per_rank(gpus)}; wall time {simulate.hms(est.wall_seconds)}",
        f"walltime bin {est.bin} (max {est.bin_max_walltime}); job walltime {plan.walltime}; "
        + _jobs_words(plan, run) + f"about {est.node_hours:,.1f} node-hours charged",
    ]
    if shape.nodes < quota / 2:
        alt = simulate.better_quota_use(shape.virtual_nodes, shape, quota)
        lines.append(f"note: this uses {shape.nodes:,} of your {wording.count(quota, 'quota node')}; virtual node "
                     f"counts that use more of it: {', '.join(f'{x:,}' for x in alt)}")
    return lines


def _step_parts(plan, est) -> str:
    """What a step's time before its allreduce is made of: compute, or decoding where that is the limit or
    shares the ranks' cores."""
    from summit_jobs import wording
    compute = (f"{est.compute_seconds_per_step:.2f} s compute for "
               f"{wording.count(plan.accum_steps, 'micro-batch', 'micro-batches')}")
    decode = est.input_seconds_per_step
    if decode > 0 and not est.input_overlapped:
        return f"{compute} + {decode:.2f} s decoding its clips on the same cores"
    if decode > est.compute_seconds_per_step:
        return f"{decode:.2f} s for the node's workers to decode its clips, longer than its {compute}"
    return compute


def _input_words(est) -> str:
    """The input pipeline's part of the estimate: whether a node's data workers keep up with a step, and the
    wait each epoch's start adds."""
    if est.input_seconds_per_step <= 0:
        words = "input: decoding not counted (the profile has no performance.input_clips_per_second_per_core)"
    elif not est.input_overlapped:
        words = (f"input: the ranks take every core, so decoding a step's clips ({est.input_seconds_per_step:.3f} s) "
                 "adds to each step")
    elif est.input_seconds_per_step > est.compute_seconds_per_step:
        words = (f"input: the node's data workers need {est.input_seconds_per_step:.2f} s for a step's clips, more "
                 f"than its {est.compute_seconds_per_step:.2f} s of compute: the input is the limit")
    else:
        words = (f"input: the node's data workers decode a step's clips in {est.input_seconds_per_step:.3f} s, "
                 f"within its {est.compute_seconds_per_step:.2f} s of compute")
    if est.epoch_start_seconds > 0:
        words += f"; each epoch's start adds {est.epoch_start_seconds:g} s"
    return words


def _jobs_words(plan, run) -> str:
    """How many jobs the run needs: one, a --chain of several, or none that trains (its start-up takes all of a
    job's minutes before the warning)."""
    jobs = run.estimate.jobs_needed
    if jobs == 0:
        return ("no job of this walltime trains: the profile's start-up (performance.startup_seconds) takes all of "
                "its minutes before the warning; give a longer --walltime; ")
    return f"needs --chain {jobs} (it cannot fit one job); " if jobs > 1 else "fits one job; "


def _walltime_lines(plan, run, given: Optional[str]) -> List[str]:
    """Why the job asks for the walltime it does: the planner takes the longest the bin and queue allow when
    --walltime is not given (a run limit is a cap, not a charge: a job that ends early is charged what it ran);
    say so, and what the estimate would need, since a shorter job may start sooner."""
    from summit_jobs import wording
    from summit_jobs.planning import simulate
    if given is not None:
        return []
    est, startup = run.estimate, run.startup_seconds
    line = (f"walltime {plan.walltime}: no --walltime was given, so the job asks for the longest that queue "
            f"{plan.queue} and bin {plan.bin} allow for {wording.count(plan.nodes, 'node')}")
    sized = simulate.sized_walltime_minutes(est.wall_seconds, plan.warning_minutes, run.seconds_per_minute, startup)
    if est.jobs_needed == 1 and sized < plan.walltime_minutes:
        line += (f"; the estimate needs {simulate.hms(est.wall_seconds)}: --walltime {format_hhmm(sized)} asks "
                 f"for that plus {simulate.WALLTIME_MARGIN - 1:.0%}"
                 + (f", the {simulate.hms(startup)} start-up" if startup else "")
                 + f" and the {plan.warning_minutes}-minute warning, and a shorter job may start sooner")
    return [line]


def _input_line(feed, rows, per_node_batch: int) -> str:
    """What INPUT counts: the workers' decode against the step, and the epoch start's weight where epochs are
    shortest."""
    from summit_jobs.planning import simulate
    if feed.clips_per_second_per_core <= 0:
        decode = ("decoding not counted (no performance.input_clips_per_second_per_core; "
                  "--input-clips-per-core gives one)")
    elif not feed.overlapped:
        decode = (f"the ranks take all {feed.cores_per_node} cores, so decoding a step's clips adds "
                  f"{feed.seconds_per_iteration(per_node_batch):.3f} s to each step")
    else:
        need = per_node_batch / rows[0]["compute_seconds_per_iter"]
        have = feed.clips_per_second_per_node()
        decode = (f"{feed.cores_per_node} cores x {feed.clips_per_second_per_core:g} clips/s = {have:,.0f} clips/s per "
                  f"node against the {need:,.0f} a step takes: "
                  + ("they keep up" if have >= need else
                     f"the input is the limit ({need / have:.2f}x short; a measured single-node time cannot be "
                     "that fast: check the figures)"))
    last = rows[-1]
    start = (f"; each epoch's start waits {feed.epoch_start_seconds:g} s"
             f" ({last['steps_per_epoch']:,} steps per epoch at {last['nodes']:,} nodes)"
             if feed.epoch_start_seconds > 0 else "; no wait at an epoch's start counted")
    return "INPUT: the input pipeline's share of the time: " + decode + start


#: A projection is arithmetic, so any machine size may be asked about; beyond this it is a typo.
MAX_PROJECTED_NODES = 1_000_000


def _single_node_hours(profile, epochs: int, train_clips: int) -> float:
    """The profile's measured single-node time for the recipe's epochs, else one from its throughput figure."""
    perf = profile.performance
    if perf.single_node_hours:
        return perf.single_node_hours * epochs / profile.recipe.epochs
    if perf.clips_per_second_per_gpu > 0:
        return epochs * train_clips / (perf.clips_per_second_per_gpu * profile.node.slots) / 3600
    raise UserError(f"{profile.name} has no performance figure to project from: pass --single-node-hours (a "
                    "measured time to train on one node), or set performance.clips_per_second_per_gpu.")


#: scaling's bounds: far above any real run (the paper: 100 epochs, 240,000 clips, 24 M parameters, 48 clips per
#: node, 49.9 single-node hours), low enough that the projection's float arithmetic cannot overflow.
MAX_EPOCHS = 10_000
MAX_TRAIN_CLIPS = 10 ** 10
MAX_PARAMS = 10 ** 13
MAX_FUSION_BYTES = 2 ** 40
MAX_PER_NODE_BATCH = 10 ** 6
MAX_SINGLE_NODE_HOURS = 10 ** 7
MAX_INPUT_RATE = 10 ** 9
MAX_EPOCH_START = 10 ** 6


@cli.command("scaling")
@click.option("--nodes-list", default="1,8,16,32,64,128,256,384,512,1024", show_default=True,
              help="Comma-separated node counts to project.")
@click.option("--single-node-hours", type=FiniteFloat(0, low_open=True, high=MAX_SINGLE_NODE_HOURS),
              help="Measured time to train on one node. Default: the profile's performance.single_node_hours "
                   "(Summit: the paper's 49 h 55 min for 100 epochs), else derived from its clips per second "
                   "per GPU and GPUs per node.")
@click.option("--per-node-batch", type=whole(1, MAX_PER_NODE_BATCH),
              help="Clips per node per iteration at scale. Default: the profile's GPUs per node x the recipe's "
                   "clips per GPU (Summit: 6 x 8 = 48).")
@click.option("--epochs", type=whole(1, MAX_EPOCHS), default=100, show_default=True)
@click.option("--train-clips", type=whole(1, MAX_TRAIN_CLIPS), help="Training clips per epoch (default: Kinetics-400's).")
@click.option("--params", type=whole(1, MAX_PARAMS), help="Model parameters (default: ResNet-50 TSM, 400 classes).")
@click.option("--fusion-bytes", type=whole(0, MAX_FUSION_BYTES),
              help="Horovod fusion buffer (default: the profile's threshold).")
@click.option("--input-clips-per-core", type=FiniteFloat(0, high=MAX_INPUT_RATE),
              help="Clips/s one core's data worker decodes (default: the profile's "
                   "performance.input_clips_per_second_per_core; 0: do not count decoding).")
@click.option("--epoch-start-seconds", type=FiniteFloat(0, high=MAX_EPOCH_START),
              help="A rank's wait for each epoch's first batch (default: the profile's "
                   "performance.epoch_start_seconds). 0.45 is what the trainer paid on one H200 before its "
                   "pool read into the next epoch.")
@click.option("--compare-paper", is_flag=True, help="Add the paper's Table 3 times and the deviation.")
@click.option("--png", metavar="FILE", help="Also plot time-to-train and efficiency to this PNG.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def scaling_cmd(state: State, nodes_list: str, single_node_hours: float, per_node_batch: int, epochs: int,
                train_clips: Optional[int], params: Optional[int], fusion_bytes: Optional[int],
                input_clips_per_core: Optional[float], epoch_start_seconds: Optional[float], compare_paper: bool,
                png: Optional[str], as_json: bool) -> None:
    """Project time-to-train and scaling efficiency over node counts.

    Weak scaling from one node's measured time, plus the paper's communication
    model per iteration (latency + bytes / bandwidth for a ring allreduce of
    the fp32 gradients, over the profile's network figures), plus the input
    pipeline: a step lasts as long as the node's cores take to decode its
    clips when that is longer than its compute, and each epoch's start adds
    its wait (STEPS/EP and INPUT show where that starts to count).
    """
    from summit_jobs.planning import simulate
    try:
        counts = sorted({int(x) for x in nodes_list.split(",") if x.strip()})
    except ValueError:
        raise UserError(f"--nodes-list {nodes_list!r} must be whole numbers separated by commas.") from None
    if not counts or counts[0] < 1 or counts[-1] > MAX_PROJECTED_NODES:
        raise UserError(f"--nodes-list {nodes_list!r} needs node counts between 1 and {MAX_PROJECTED_NODES:,}.")
    profile = state.profile
    train = train_clips or simulate.KINETICS_TRAIN_CLIPS
    per_node_batch = per_node_batch or profile.node.slots * profile.recipe.clips_per_gpu
    hours = single_node_hours or _single_node_hours(profile, epochs, train)
    feed = simulate.input_model(profile, input_clips_per_core, epoch_start_seconds)
    rows = simulate.project_scaling(
        profile, counts, single_node_seconds=hours * 3600, per_node_batch=per_node_batch,
        epochs=epochs, train_clips=train,
        model_params=params or simulate.TSM_R50_PARAMS, fusion_bytes=fusion_bytes, feed=feed)
    if compare_paper:
        for r in rows:
            paper = simulate.PAPER_TABLE3.get(r["nodes"])
            if paper:
                r["paper_seconds"] = paper
                r["deviation"] = r["seconds"] / paper - 1
    if png:
        from summit_jobs.runs import plots
        plots.scaling_plot(rows, png)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    ranks = "GPUs" if profile.node.gpus else "ranks"        # one rank per GPU, or per CPU slot without GPUs
    head = f"{'nodes':>6} {ranks:>6} {'batch':>7} {'steps/ep':>9} {'time to train':>15} {'efficiency':>10} {'input':>6}"
    if compare_paper:
        head += f" {'paper':>15} {'deviation':>9}"
    click.echo(head)
    for r in rows:
        line = (f"{r['nodes']:>6,} {r['gpus']:>6,} {r['batch']:>7,} {r['steps_per_epoch']:>9,} "
                f"{simulate.hms(r['seconds']):>15} {r['efficiency']:>10.1%} {r['input_share']:>6.1%}")
        if compare_paper and "paper_seconds" in r:
            line += f" {simulate.hms(r['paper_seconds']):>15} {r['deviation']:>+9.1%}"
        click.echo(line)
    click.echo(_input_line(feed, rows, per_node_batch))
    if png:
        click.echo(f"plot written to {png}", err=True)
