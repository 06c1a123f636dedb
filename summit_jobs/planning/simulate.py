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
from summit_jobs.profiles.machines import Profile

#: Kinetics-400 training videos (the paper: about 240k).
KINETICS_TRAIN_CLIPS = 240_000
#: ResNet-50 TSM, 400 classes (the paper's Table 1: 24.3M); measured by the trainer's tests.
TSM_R50_PARAMS = 24_330_000
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
    v = virtual_nodes
    if v < 1:
        raise UserError(f"--virtual-nodes {v} must be at least 1.")
    if quota < 1:
        raise UserError(f"the quota ({quota} nodes) must be at least 1 node.")
    if v > quota * max_accum:
        raise UserError(f"--virtual-nodes {v:,} cannot be reproduced under your quota of {quota:,} nodes: at most "
                        f"{quota:,} nodes x {max_accum} accumulation steps = {quota * max_accum:,} virtual nodes can "
                        "(raise --max-accum-steps, at the cost of that many times longer steps, or use fewer "
                        "virtual nodes).")
    if forced_nodes is not None:
        p = forced_nodes
        if p < 1 or p > quota:
            raise UserError(f"--nodes {p} must be between 1 and your quota of {quota:,} nodes.")
        if v % p:
            ok = divisors_up_to(v, quota)[-4:]
            raise UserError(
                f"{v:,} virtual nodes cannot be run exactly on {p:,} nodes: {v:,} / {p:,} is not a whole number of "
                f"accumulation steps. Node counts that divide {v:,} within your quota: "
                f"{', '.join(f'{x:,}' for x in ok)}.")
        return Shape(v, p, v // p)
    feasible = [p for p in divisors_up_to(v, quota) if v // p <= max_accum]
    if not feasible:
        best = divisors_up_to(v, quota)[-1]
        near = nearest_feasible(v, quota, max_accum)
        raise UserError(
            f"{v:,} virtual nodes cannot be run exactly under your quota of {quota:,} nodes: the accumulation steps "
            f"k = {v:,} / p must be a whole number, and the largest node count within the quota that divides {v:,} "
            f"is {best:,} (k = {v // best:,}, above the limit of {max_accum} steps: that run would take {v // best:,}x "
            f"as long per step). Nearest virtual node counts that can: {', '.join(f'{x:,}' for x in near)} "
            f"(or raise --max-accum-steps).")
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

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)


def estimate(profile: Profile, *, nodes: int, ranks_per_node: int, accum_steps: int, clips_per_gpu: int,
             epochs: int, train_clips: int, clips_per_second_per_gpu: float, model_params: int,
             walltime_minutes: int, fusion_bytes: Optional[int] = None, warning_minutes: int = 0) -> Estimate:
    """Time and cost of a (possibly accumulated) run from a per-GPU throughput figure.

    A job trains until its warning signal, ``warning_minutes`` before its run limit (then it checkpoints and
    the next link resumes): the jobs needed count those training minutes, not the whole walltime.
    """
    if clips_per_second_per_gpu <= 0:
        raise UserError(f"no throughput figure for {profile.name}: set performance.clips_per_second_per_gpu in the "
                        "profile or pass --throughput-from RUN_DIR (a previous run's metrics).")
    ranks = nodes * ranks_per_node
    global_batch = ranks * accum_steps * clips_per_gpu
    iters = max(1, train_clips // global_batch)
    compute = accum_steps * clips_per_gpu / clips_per_second_per_gpu
    comm = comm_model(profile, fusion_bytes).seconds(ranks, model_params * 4)
    step = compute + comm
    wall = iters * epochs * step
    nbin = profile.bin_for(nodes)
    jobs = max(1, math.ceil(wall / (max(1, walltime_minutes - warning_minutes) * 60)))
    return Estimate(iters, compute, comm, step, wall, nodes * wall / 3600.0, jobs, nbin.bin if nbin else 0,
                    nbin.max_walltime if nbin else "?")


#: The margin a walltime sized from an estimate adds: estimates from a profile's throughput figure are rough.
WALLTIME_MARGIN = 1.25


def sized_walltime_minutes(wall_seconds: float, warning_minutes: int) -> int:
    """A walltime for a run estimated at ``wall_seconds``: the estimate plus the margin, the warning before the
    run limit on top, rounded up to 5 minutes (what `simulate` suggests instead of the queue's longest)."""
    minutes = math.ceil(wall_seconds * WALLTIME_MARGIN / 60) + warning_minutes
    return max(5, 5 * math.ceil(minutes / 5))


def project_scaling(profile: Profile, node_counts: Sequence[int], *, single_node_seconds: float,
                    per_node_batch: int, epochs: int, train_clips: int, model_params: int,
                    fusion_bytes: Optional[int] = None) -> List[Dict[str, float]]:
    """Time-to-train and efficiency for each node count from one node's measured time.

    One node's throughput (clips/s, whatever batch it was measured with) sets the
    compute time of an iteration of ``per_node_batch`` clips per node; each
    iteration on more than one node adds the ring allreduce of the model's fp32
    gradients over all ranks (the paper's model: latency + size / bandwidth).
    """
    model = comm_model(profile, fusion_bytes)
    per_node_ranks = profile.node.slots
    clips_per_second_per_node = epochs * train_clips / single_node_seconds
    t_iter = per_node_batch / clips_per_second_per_node
    rows = []
    for n in node_counts:
        iters = epochs * train_clips / (per_node_batch * n)
        comm = model.seconds(n * per_node_ranks, model_params * 4) if n > 1 else 0.0
        seconds = iters * (t_iter + comm)
        rows.append({"nodes": n, "gpus": n * per_node_ranks, "batch": per_node_batch * n,
                     "seconds": seconds, "efficiency": single_node_seconds / (n * seconds),
                     "comm_seconds_per_iter": comm})
    return rows


def hms(seconds: float) -> str:
    """A duration as every command spells it (trainer.units)."""
    from trainer import units
    return units.duration(seconds)


def train_clips_from(data: Optional[str], given: Optional[int]) -> int:
    """Training clips per epoch: as given, else counted in the manifest, else Kinetics-400's."""
    from summit_jobs.errors import UserError
    if given:
        return given
    if data:
        from trainer.shards import ShardError, read_manifest
        try:
            manifest = read_manifest(data)
        except ShardError as exc:
            raise UserError(str(exc)) from None
        return sum(s["samples"] for s in manifest["shards"] if s["split"] == "train") or KINETICS_TRAIN_CLIPS
    return KINETICS_TRAIN_CLIPS
