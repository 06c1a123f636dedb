"""Oversized runs by exact gradient accumulation, their cost, and scaling projections. Pure.

When the allocation's quota is smaller than the run you want (the paper's quota
was 384 nodes; it ran 512 and 1,024 "nodes" by accumulation), the same
optimisation runs on p physical nodes with k = V / p accumulation steps: same
global batch, LR, warm-up and sample -> virtual-rank assignment. k must be a
whole number, so p must divide V.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence

from summit_jobs.errors import UserError
from summit_jobs import wording
from summit_jobs.profiles.machines import Profile

#: Kinetics-400 training videos (the paper: about 240k).
KINETICS_TRAIN_CLIPS = 240_000
#: ResNet-50 TSM, 400 classes (the paper's Table 1: 24.3M); measured by the trainer's tests.
TSM_R50_PARAMS = 24_330_000
#: Each of the trainer's networks (trainer.models.model.ARCHS) at width 1: its parameters without the classifier,
#: and the features the classifier reads (counted on the models themselves: tests/planning/test_simulate_plan.py).
ARCH_PARAMS = {"resnet18": (11_176_512, 512), "resnet34": (21_284_672, 512), "resnet50": (23_508_032, 2048),
               "resnet101": (42_500_160, 2048), "resnet152": (58_143_808, 2048)}
#: The paper's Table 3 (nodes -> seconds for 100 epochs), Summit, 6 GPUs and 48 clips x 2 per node.
PAPER_TABLE3 = {1: 49 * 3600 + 55 * 60, 8: 7 * 3600 + 7 * 60, 16: 3 * 3600 + 38 * 60, 32: 3600 + 50 * 60,
                64: 55 * 60 + 56, 128: 28 * 60 + 14, 256: 14 * 60 + 13}


def divisors_up_to(v: int, limit: int) -> List[int]:
    out = set()
    for d in range(1, int(math.isqrt(v)) + 1):
        if v % d == 0:
            out.update((d, v // d))
    return sorted(x for x in out if x <= limit)


@dataclass(frozen=True)
class Shape:
    virtual_nodes: int
    nodes: int
    accum_steps: int


def choose_shape(virtual_nodes: int, quota: int, forced_nodes: Optional[int] = None,
                 max_accum: int = 16) -> Shape:
    """The largest p <= quota dividing V (or the forced p), with k = V / p <= max_accum."""
    v, count = virtual_nodes, wording.count
    if v < 1:
        raise UserError(f"--virtual-nodes {v} must be at least 1.")
    if quota < 1:
        raise UserError(f"the quota ({quota} nodes) must be at least 1 node.")
    if v > quota * max_accum:
        raise UserError(f"--virtual-nodes {v:,} cannot be reproduced under your quota of {count(quota, 'node')}: "
                        f"at most {count(quota, 'node')} x {count(max_accum, 'accumulation step')} = "
                        f"{count(quota * max_accum, 'virtual node')} can (raise --max-accum-steps, at the cost of "
                        "that many times longer steps, or use fewer virtual nodes).")
    if forced_nodes is not None:
        p = forced_nodes
        if p < 1 or p > quota:
            raise UserError(f"--nodes {p} must be between 1 and your quota of {count(quota, 'node')}.")
        if v % p:
            ok = divisors_up_to(v, quota)[-4:]
            raise UserError(
                f"{count(v, 'virtual node')} cannot be run exactly on {count(p, 'node')}: {v:,} / {p:,} is not a "
                f"whole number of accumulation steps. Node counts that divide {v:,} within your quota: "
                f"{', '.join(f'{x:,}' for x in ok)}.")
        return Shape(v, p, v // p)
    feasible = [p for p in divisors_up_to(v, quota) if v // p <= max_accum]
    if not feasible:
        best = divisors_up_to(v, quota)[-1]
        near = nearest_feasible(v, quota, max_accum)
        raise UserError(
            f"{count(v, 'virtual node')} cannot be run exactly under your quota of {count(quota, 'node')}: the "
            f"accumulation steps k = {v:,} / p must be a whole number, and the largest node count within the "
            f"quota that divides {v:,} is {best:,} (k = {v // best:,}, above the limit of "
            f"{count(max_accum, 'step')}: that run would take {v // best:,}x as long per step). Nearest virtual "
            f"node counts that can: {', '.join(f'{x:,}' for x in near)} (or raise --max-accum-steps).")
    p = feasible[-1]
    return Shape(v, p, v // p)


def nearest_feasible(v: int, quota: int, max_accum: int, count: int = 4) -> List[int]:
    """Virtual node counts closest to v that run exactly on <= quota nodes with k <= max_accum."""
    found: List[int] = []
    for delta in range(0, v + quota * max_accum):
        for cand in ((v - delta, v + delta) if delta else (v,)):
            if cand >= 1 and cand not in found:
                if any(cand // p <= max_accum for p in divisors_up_to(cand, quota)):
                    found.append(cand)
        if len(found) >= count:
            break
    return sorted(found[:count])


def better_quota_use(v: int, shape: Shape, quota: int) -> List[int]:
    """Nearby virtual counts that would use more of the quota (k x quota-ish), for the summary."""
    ks = range(max(1, shape.accum_steps - 1), shape.accum_steps + 2)
    return [k * quota for k in ks if k * quota != v]


# ---- communication and time model ------------------------------------------------------------

@dataclass(frozen=True)
class CommModel:
    """Ring allreduce: each of ceil(M / fusion) fused buffers pays 2(n-1) latency hops, plus
    2(n-1)/n of the gradient bytes over the slowest link (the node's network port). ``overlap``
    is the fraction hidden behind the backward pass."""
    bandwidth_gbps: float
    latency_us: float
    overlap: float
    fusion_bytes: int

    def seconds(self, ranks: int, model_bytes: int) -> float:
        if ranks <= 1:
            return 0.0
        buffers = max(1, math.ceil(model_bytes / self.fusion_bytes)) if self.fusion_bytes > 0 else 1
        latency = buffers * 2 * (ranks - 1) * self.latency_us * 1e-6
        transfer = 2 * (ranks - 1) / ranks * model_bytes / (self.bandwidth_gbps * 1e9)
        return (1.0 - self.overlap) * (latency + transfer)


def comm_model(profile: Profile, fusion_bytes: Optional[int] = None) -> CommModel:
    perf = profile.performance
    if perf.allreduce_bandwidth_gbps <= 0:
        raise UserError(f"profile {profile.name} has no performance.allreduce_bandwidth_gbps; add it to estimate "
                        "communication time.")
    if fusion_bytes is None:
        fusion_bytes = int(profile.environment.variables.get("HOROVOD_FUSION_THRESHOLD", 128 * 1024 * 1024))
    return CommModel(perf.allreduce_bandwidth_gbps, perf.allreduce_latency_us, perf.comm_overlap, fusion_bytes)


@dataclass(frozen=True)
class InputModel:
    """The input pipeline's share of the time: decoding a step's clips on the node's cores (hidden behind
    the step while the workers keep up, the step's time when they do not) and the wait at each epoch's start.

    Why in the projection: at the paper's 1,536 GPUs an epoch is ~19 steps, so a fixed cost per epoch is
    paid every ~8 s, and a node's cores must decode 48 clips per ~0.4 s step; either can become the limit
    long before the allreduce does. A rate of 0 (unknown) counts no decode time.
    """
    clips_per_second_per_core: float
    cores_per_node: int
    epoch_start_seconds: float
    #: Whether the workers have cores of their own, so that they decode while the ranks compute; without (a CPU
    #: machine whose ranks take every core) the decoding adds to each step.
    overlapped: bool = True

    def seconds_per_iteration(self, clips_per_node: float) -> float:
        """Seconds the node's data workers need for one iteration's clips (0: rate unknown)."""
        rate = self.clips_per_second_per_core * self.cores_per_node
        return clips_per_node / rate if rate > 0 else 0.0

    def clips_per_second_per_node(self) -> float:
        return self.clips_per_second_per_core * self.cores_per_node

    def step_seconds(self, compute: float, decode: float) -> float:
        """An iteration's time before its allreduce: the longer of compute and decoding when they overlap."""
        return max(compute, decode) if self.overlapped else compute + decode


def input_model(profile: Profile, clips_per_second_per_core: Optional[float] = None,
                epoch_start_seconds: Optional[float] = None) -> InputModel:
    """The profile's input figures (performance.input_*, epoch_start_seconds), each overridable. The workers'
    cores: ``input_cores_per_node``, else the node's cores less one per rank; where the ranks take every core,
    the workers share them and their decoding adds to the step."""
    perf = profile.performance
    free = profile.node.cores - profile.node.slots
    cores = perf.input_cores_per_node or (free if free >= 1 else profile.node.cores)
    overlapped = bool(perf.input_cores_per_node) or free >= 1
    rate = perf.input_clips_per_second_per_core if clips_per_second_per_core is None else clips_per_second_per_core
    start = perf.epoch_start_seconds if epoch_start_seconds is None else epoch_start_seconds
    return InputModel(rate, cores, start, overlapped)


@dataclass(frozen=True)
class Estimate:
    iterations_per_epoch: int
    compute_seconds_per_step: float
    comm_seconds_per_step: float
    step_seconds: float
    wall_seconds: float
    node_hours: float
    jobs_needed: int
    bin: int
    bin_max_walltime: str
    #: Seconds the node's data workers need for a step's clips (in the step when above its compute) and
    #: the wait at each epoch's start (in the wall time once per epoch); 0 where the profile has no figure.
    input_seconds_per_step: float = 0.0
    epoch_start_seconds: float = 0.0
    #: Whether decoding overlaps the compute (InputModel.overlapped).
    input_overlapped: bool = True

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)


def model_params(arch: str, width: float = 1.0, num_classes: int = 400) -> int:
    """The parameters of the trainer's TSM network ``arch`` at channel ``width`` with ``num_classes`` classes,
    whose fp32 gradients each step's allreduce carries.

    Why not always ResNet-50's: the embedded machine's and the test cluster's jobs train a ResNet-18 a quarter
    wide (0.75 M parameters), whose allreduce is 30 times smaller; counted as ResNet-50's it took a quarter of
    every estimated step. The convolutions scale with the square of the width (within 2%: the first one's
    input and the classifier's are not widened); an arch the table does not know counts as ResNet-50.
    """
    backbone, features = ARCH_PARAMS.get(arch, ARCH_PARAMS["resnet50"])
    classes = num_classes if num_classes > 0 else 400
    return int(backbone * width * width + (round(features * width) + 1) * classes)


@dataclass(frozen=True)
class TrainingSet:
    """The training clips of an epoch an estimate counts, and where that count comes from, in words."""
    clips: int
    source: str


def training_set(data: Optional[str], given: Optional[int]) -> TrainingSet:
    """The clips of an epoch: ``given`` (--train-clips), else those the manifest of ``data`` (a manifest.json or
    the folder that holds one) counts, else Kinetics-400's, with the reason. A manifest that is there but cannot
    be read as one is a UserError; one that is not here (a path on the cluster) counts as Kinetics-400 and the
    source says so, with the way to give the count."""
    if given:
        return TrainingSet(given, "--train-clips")
    if not data:
        return TrainingSet(KINETICS_TRAIN_CLIPS, "Kinetics-400's: no data given")
    from pathlib import Path

    from trainer.shards import MANIFEST_NAME, ShardError, read_manifest
    where = Path(data) / MANIFEST_NAME if Path(data).is_dir() else Path(data)
    if not where.exists():
        return TrainingSet(KINETICS_TRAIN_CLIPS, f"Kinetics-400's: {where} is not readable here; --train-clips N "
                                                 "gives the count")
    try:
        manifest = read_manifest(where)
    except ShardError as exc:
        raise UserError(str(exc)) from None
    clips = sum(int(s["samples"]) for s in manifest["shards"] if s["split"] == "train")
    if not clips:
        return TrainingSet(KINETICS_TRAIN_CLIPS, f"Kinetics-400's: {where} lists no training clips")
    return TrainingSet(clips, f"counted in {where}")


def estimate(profile: Profile, *, nodes: int, ranks_per_node: int, accum_steps: int, clips_per_gpu: int,
             epochs: int, train_clips: int, clips_per_second_per_gpu: float, model_params: int,
             walltime_minutes: int, fusion_bytes: Optional[int] = None, warning_minutes: int = 0,
             seconds_per_minute: float = 60.0, startup_seconds: float = 0.0) -> Estimate:
    """Time and cost of a (possibly accumulated) run from a per-GPU throughput figure.

    A job trains until its warning signal, ``warning_minutes`` before its run limit (then it checkpoints and
    the next link resumes), after its start-up (``startup_seconds``, the profile's performance figure): the
    jobs needed count the seconds between the two, not the whole walltime. A minute lasts
    ``seconds_per_minute`` (the embedded LSF's may be shortened).
    """
    if clips_per_second_per_gpu <= 0:
        raise UserError(f"no throughput figure for {profile.name}: set performance.clips_per_second_per_gpu in the "
                        "profile or pass --throughput-from RUN_DIR (a previous run's metrics).")
    ranks = nodes * ranks_per_node
    global_batch = ranks * accum_steps * clips_per_gpu
    iters = max(1, train_clips // global_batch)
    compute = accum_steps * clips_per_gpu / clips_per_second_per_gpu
    comm = comm_model(profile, fusion_bytes).seconds(ranks, model_params * 4)
    feed = input_model(profile)
    decode = feed.seconds_per_iteration(ranks_per_node * accum_steps * clips_per_gpu)
    step = feed.step_seconds(compute, decode) + comm   # the workers decode the next step's clips meanwhile
    wall = epochs * (iters * step + feed.epoch_start_seconds)
    nbin = profile.bin_for(nodes)
    per_link = link_training_seconds(walltime_minutes, warning_minutes, seconds_per_minute, startup_seconds)
    jobs = max(1, math.ceil(wall / per_link)) if per_link > 0 else 0
    return Estimate(iters, compute, comm, step, wall, nodes * wall / 3600.0, jobs, nbin.bin if nbin else 0,
                    nbin.max_walltime if nbin else "?", decode, feed.epoch_start_seconds, feed.overlapped)


def link_training_seconds(walltime_minutes: int, warning_minutes: int, seconds_per_minute: float = 60.0,
                          startup_seconds: float = 0.0) -> float:
    """Seconds a job (a link of a chain) trains: from the end of its start-up to its warning signal,
    ``warning_minutes`` before its walltime (at least a minute); 0 or less when the start-up takes it all."""
    return max(1, walltime_minutes - warning_minutes) * seconds_per_minute - startup_seconds


#: The margin a walltime sized from an estimate adds: estimates from a profile's throughput figure are rough.
WALLTIME_MARGIN = 1.25


def sized_walltime_minutes(wall_seconds: float, warning_minutes: int, seconds_per_minute: float = 60.0,
                           startup_seconds: float = 0.0) -> int:
    """A walltime for a run estimated at ``wall_seconds``: the estimate plus the margin and the start-up, the
    warning before the run limit on top, in minutes of ``seconds_per_minute`` rounded up to 5 (what `simulate`
    suggests instead of the queue's longest)."""
    minutes = math.ceil((wall_seconds * WALLTIME_MARGIN + startup_seconds) / seconds_per_minute) + warning_minutes
    return max(5, 5 * math.ceil(minutes / 5))


def project_scaling(profile: Profile, node_counts: Sequence[int], *, single_node_seconds: float,
                    per_node_batch: int, epochs: int, train_clips: int, model_params: int,
                    fusion_bytes: Optional[int] = None, feed: Optional[InputModel] = None) -> List[Dict[str, float]]:
    """Time-to-train and efficiency for each node count from one node's measured time.

    One node's throughput (clips/s, whatever batch it was measured with) sets the
    compute time of an iteration of ``per_node_batch`` clips per node; each
    iteration on more than one node adds the ring allreduce of the model's fp32
    gradients over all ranks (the paper's model: latency + size / bandwidth).
    The input pipeline (``feed``, default the profile's): an iteration lasts as
    long as the node's cores take to decode its clips when that is longer than
    its compute, and every epoch's start adds its wait, at every node count
    alike. The single-node time is taken to hold its own epochs' starts, so they
    are taken off it before it is divided into iterations. Efficiency is against
    the projection's own one-node time (the measured one unless the input is the
    limit, which the measurement then contradicts: the INPUT line says so).
    """
    model = comm_model(profile, fusion_bytes)
    feed = feed or input_model(profile)
    per_node_ranks = profile.node.slots
    starts = epochs * feed.epoch_start_seconds
    if starts >= single_node_seconds:
        raise UserError(f"{epochs} epoch starts of {feed.epoch_start_seconds:g} s take {hms(starts)}, all of the "
                        f"single-node time ({hms(single_node_seconds)}): give a smaller --epoch-start-seconds.")
    t_iter = per_node_batch * (single_node_seconds - starts) / (epochs * train_clips)
    step = feed.step_seconds(t_iter, feed.seconds_per_iteration(per_node_batch))

    def seconds(n: int, comm: float) -> float:
        return epochs * train_clips / (per_node_batch * n) * (step + comm) + starts

    base = seconds(1, 0.0)
    rows = []
    for n in node_counts:
        comm = model.seconds(n * per_node_ranks, model_params * 4) if n > 1 else 0.0
        total = seconds(n, comm)
        per_epoch = train_clips / (per_node_batch * n)
        rows.append({"nodes": n, "gpus": n * per_node_ranks, "batch": per_node_batch * n,
                     "seconds": total, "efficiency": base / (n * total),
                     "comm_seconds_per_iter": comm, "compute_seconds_per_iter": t_iter,
                     "steps_per_epoch": int(per_epoch),
                     "input_seconds_per_iter": feed.seconds_per_iteration(per_node_batch),
                     "input_bound": feed.overlapped and step > t_iter,
                     "input_share": (epochs * per_epoch * (step - t_iter) + starts) / total})
    return rows


def hms(seconds: float) -> str:
    """A duration as every command spells it (trainer.units)."""
    from trainer import units
    return units.duration(seconds)
