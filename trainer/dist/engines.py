"""Distributed engines behind one small interface: Horovod (the paper's) and
torch.distributed DDP.

Why one interface: the training loop, exact gradient accumulation and the
checkpoint/stop protocol must be identical for both engines, so the loop only
calls ``micro_context`` / ``finish_grads`` / ``step`` / ``allreduce_sum``.

Where ranks come from (``trainer.rankenv.launcher_ranks``): jsrun sets JSM_NAMESPACE_*,
Spectrum MPI OMPI_COMM_WORLD_*, torchrun RANK/WORLD_SIZE/LOCAL_RANK, looked up in that
order, else srun's SLURM_PROCID and its kin (``trainer.slurm_tasks``), else blaunch's
LSF_PM_TASKID (one task per slot). The rendezvous host is
SUMMIT_JOBS_RENDEZVOUS_ADDR or MASTER_ADDR if set, else the first compute host
of LSB_MCPU_HOSTS / LSB_DJOB_HOSTFILE (launch or batch nodes skipped by the
profile's rule, see ``trainer.lsf_hosts``) or of SLURM_JOB_NODELIST; rank 0 checks that it runs there.
The port derives from the job id (LSB_JOBID or SLURM_JOB_ID); when the trainer knows its run directory, rank 0
moves to the next free port if that one is
taken and tells the other ranks through the run directory (``trainer.rendezvous``
explains why and how). Without a run directory: DDP uses ``port``, Horovod's
gloo rendezvous ``port + 1``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn

from trainer.dist import compat
from trainer import rankenv, rendezvous


@dataclass(frozen=True)
class Launch:
    rank: int
    size: int
    local_rank: int
    local_size: int
    addr: str
    port: int
    source: str
    #: The job id when ``port`` was derived from it (a rendezvous may then move to a free port), else "".
    job: str = ""
    #: torchrun's agent hosts the job's store (MASTER_ADDR:MASTER_PORT): every rank joins it as a client.
    agent_store: bool = False


def rendezvous_addr(env: Mapping[str, str]) -> str:
    """Where the ranks meet (rankenv reads it from the launcher's variables)."""
    return rankenv.rendezvous_addr(env)


def rendezvous_port(env: Mapping[str, str]) -> int:
    """The job's port: from the job id (LSB_JOBID or SLURM_JOB_ID), else SUMMIT_JOBS_RENDEZVOUS_PORT /
    MASTER_PORT, else 29500."""
    return rankenv.derived_port(env)


def launch_from_env(env: Optional[Mapping[str, str]] = None) -> Launch:
    env = os.environ if env is None else env
    try:
        r, s, lr, ls, source = rankenv.launcher_ranks(env)
    except rankenv.RankError as exc:
        raise ValueError(str(exc)) from None
    job = rankenv.job_id(env)
    agent = rankenv.agent_store(env) if source == "torchrun" else None
    if agent:
        return Launch(r, s, lr, ls, agent[0], agent[1], source, "", True)
    return Launch(r, s, lr, ls, rendezvous_addr(env), rendezvous_port(env), source,
                  job if job.isdigit() else "")


def pick_device(launch: Launch) -> torch.device:
    """One GPU per resource set -> device 0; all GPUs visible -> the local rank's."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    n = torch.cuda.device_count()
    idx = 0 if n == 1 else launch.local_rank % n
    torch.cuda.set_device(idx)
    return torch.device("cuda", idx)


class Engine:
    """What the training loop needs from a distributed backend."""

    name = "base"

    def __init__(self, launch: Launch, device: torch.device):
        self.launch, self.device = launch, device
        self.rank, self.size, self.local_rank = launch.rank, launch.size, launch.local_rank

    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer, accum_steps: int,
                compression: str) -> Tuple[nn.Module, torch.optim.Optimizer]:
        raise NotImplementedError

    def micro_context(self, model: nn.Module, micro: int, accum_steps: int):
        """Context for the backward pass of micro-batch ``micro`` of ``accum_steps``."""
        return contextlib.nullcontext()

    def finish_grads(self, optimizer: torch.optim.Optimizer) -> None:
        """After the last backward: gradients are globally averaged on return (clip after this)."""

    def step_context(self, optimizer: torch.optim.Optimizer):
        """Context around ``optimizer.step()`` (or a GradScaler's step)."""
        return contextlib.nullcontext()

    def allreduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def broadcast_model(self, model: nn.Module) -> None:
        raise NotImplementedError

    def barrier(self) -> None:
        self.allreduce_sum(torch.zeros(1, device=self.device))

    def broadcast_ints(self, values: Sequence[int], capacity: int) -> List[int]:
        """Rank 0's list of at most ``capacity`` integers, on every rank (the others' ``values`` are ignored).

        Why: decisions that read the file system (which checkpoints exist) must be
        taken once and shared, or ranks that list a folder at different moments
        disagree and then run different collectives. It rides on ``allreduce_sum``
        (rank 0 contributes the list, the others zeros), so every engine has it.
        Integers below 2**53 travel exactly in float64.
        """
        if self.rank == 0 and len(values) > capacity:
            raise ValueError(f"{len(values)} values do not fit a broadcast of {capacity}")
        t = torch.zeros(capacity + 1, dtype=torch.float64, device=self.device)
        if self.rank == 0:
            t[0] = len(values)
            if values:
                t[1:1 + len(values)] = torch.tensor([float(v) for v in values], dtype=torch.float64)
        t = self.allreduce_sum(t).tolist()
        return [int(v) for v in t[1:1 + int(t[0])]]

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on at least one: a stop decision all ranks share."""
        t = torch.tensor([1.0 if flag else 0.0], dtype=torch.float64, device=self.device)
        return self.allreduce_sum(t).item() > 0

    def agree(self, value: int) -> bool:
        """Whether every rank passed the same ``value`` (the same answer on every rank)."""
        t = torch.zeros(self.size, dtype=torch.float64, device=self.device)
        t[self.rank] = float(value)
        seen = self.allreduce_sum(t)
        return bool((seen == seen[0]).all())

    def shutdown(self) -> None:
        pass


def _loopback(addr: str) -> bool:
    """Whether the rendezvous host is this machine's loopback (one machine, or the embedded LSF's nodes):
    gloo must then use the loopback device rather than the address the machine's name resolves to."""
    import ipaddress
    if addr == "localhost":
        return True
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def _meets_in(launch: Launch, folder: Optional[os.PathLike]) -> bool:
    """Whether this launch meets through the run directory (a derived port that may move)."""
    return folder is not None and bool(launch.job) and launch.size > 1


class DDPEngine(Engine):
    name = "ddp"

    def __init__(self, launch: Launch, device: torch.device, rendezvous_dir: Optional[os.PathLike] = None):
        super().__init__(launch, device)
        import torch.distributed as dist
        self.dist = dist
        backend = "nccl" if device.type == "cuda" else "gloo"
        if _loopback(launch.addr):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        timeout = datetime.timedelta(minutes=30)
        if launch.agent_store:
            # torchrun: its agent on the first node hosts the store; every rank is a client (env://).
            store = rendezvous.agent_store(launch.addr, launch.port)
            dist.init_process_group(backend, store=store, rank=launch.rank, world_size=launch.size, timeout=timeout)
        elif _meets_in(launch, rendezvous_dir):
            store = rendezvous.meet(launch.addr, launch.port, rendezvous_dir, launch.job, launch.rank, launch.size)
            self._store = store     # rank 0 hosts it: it must outlive every rank's process group
            dist.init_process_group(backend, store=store, rank=launch.rank, world_size=launch.size, timeout=timeout)
            dist.barrier()  # every rank has read the record
            rendezvous.done(rendezvous_dir, launch.job, launch.rank)
        else:
            dist.init_process_group(backend, init_method=f"tcp://{launch.addr}:{launch.port}", rank=launch.rank,
                                    world_size=launch.size, timeout=timeout)

    def prepare(self, model, optimizer, accum_steps, compression):
        from torch.nn.parallel import DistributedDataParallel as DDP
        # broadcast_buffers=False is the point (per-GPU BatchNorm statistics, as with
        # Horovod); its replacement option still syncs at init, so keep it and its warning quiet.
        warnings.filterwarnings("ignore", message=".*broadcast_buffers.*deprecated")
        # 1x1 conv weight gradients come with equivalent but differently written strides: harmless.
        warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
        ddp = DDP(model, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                  broadcast_buffers=False)
        if compression in ("fp16", "bf16"):
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            if compression == "fp16":
                hook = default_hooks.fp16_compress_hook
            elif self.device.type == "cuda":
                hook = default_hooks.bf16_compress_hook
            elif compat.gloo_reduces_bf16():
                hook = _gloo_bf16_compress_hook
            else:
                raise SystemExit(f"trainer: --compression bf16 on CPU needs a gloo that reduces bfloat16, which "
                                 f"torch {torch.__version__} lacks: use --compression fp16 or none (or GPUs)")
            ddp.register_comm_hook(None, hook)
        elif self.device.type == "cpu" and self.size > 2:
            ddp.register_comm_hook(None, _ordered_mean_hook)
        return ddp, optimizer

    def micro_context(self, model, micro, accum_steps):
        return model.no_sync() if micro < accum_steps - 1 else contextlib.nullcontext()

    def allreduce_sum(self, t):
        self.dist.all_reduce(t)
        return t

    def broadcast_model(self, model):
        for v in model.state_dict().values():
            self.dist.broadcast(v, 0)

    def barrier(self):
        self.dist.barrier()

    def shutdown(self):
        if self.dist.is_initialized():
            self.dist.destroy_process_group()
        _release_store(getattr(self, "_store", None), self.rank, self.size)


RELEASED_KEY = "summit_jobs/released"


def _release_store(store, rank: int, size: int, wait: float = 10.0) -> None:
    """After the process group is gone: the store's host (rank 0) waits, at most ``wait`` seconds, until
    every rank has let go of it. Why: a rank whose store host exited first could abort at its own exit
    ("terminate called without an active exception"), turning a finished run into a failed job."""
    if store is None or size < 2:
        return
    try:
        store.add(RELEASED_KEY, 1)
        deadline = time.monotonic() + wait
        while rank == 0 and store.add(RELEASED_KEY, 0) < size and time.monotonic() < deadline:
            time.sleep(0.05)
    except Exception:  # noqa: BLE001 - a peer already gone: nothing left to wait for
        pass


def pairwise_sum(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """Ranks' buffers added as a pairwise tree in rank order: ((r0+r1)+(r2+r3))+...

    Why a tree and not r0+r1+r2+...: a simulated run with k = 2 accumulation
    steps holds, on physical rank p, the sum of virtual ranks 2p and 2p+1 (the
    sampler's contiguous mapping), which is exactly the first level of this
    tree; its own allreduce then adds those partial sums in the same tree. So
    4 virtual nodes simulated on 2 end with the real 4-node run's weights bit
    for bit on CPU, where a left-to-right sum would round differently and the
    two runs would drift apart after a few dozen steps.
    """
    level = [t.clone() for t in parts]
    while len(level) > 1:
        nxt = [level[i].add_(level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def _ordered_mean_hook(process_group, bucket):
    """Gradient mean summed in rank order, whatever the bucket layout (CPU, more than 2 ranks).

    Why: DDP rebuilds its buckets after the first iteration, and a resumed run's
    first iteration uses the initial layout again. Gloo's ring allreduce adds each
    element in an order set by its position in the bucket, so with 3+ ranks the
    resumed step rounds differently and the run leaves the uninterrupted
    trajectory. Gathering the buckets and adding them in a fixed tree over the
    ranks (pairwise_sum) keeps resumes bitwise on CPU (the promise); on GPUs NCCL
    keeps its fast allreduce.
    """
    import torch.distributed as dist
    group = process_group if process_group is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    buf = bucket.buffer()
    parts = [torch.empty_like(buf) for _ in range(world)]
    fut = dist.all_gather(parts, buf, group=group, async_op=True).get_future()

    def add_in_rank_order(f):
        f.wait()
        return pairwise_sum(parts).div_(world)

    return fut.then(add_in_rank_order)


def _gloo_bf16_compress_hook(process_group, bucket):
    """torch's bf16_compress_hook, for gloo (CPU): the same compress / allreduce / decompress.

    Why: torch refuses its bf16 hook unless NCCL >= 2.10 or XCCL is present (a
    check on the hook's name), though gloo reduces bfloat16 tensors; the same
    steps under another name keep ``--compression bf16`` usable (and testable)
    on CPU. Written out rather than calling torch's private ``_compress_hook``,
    which torch 2.0 does not have.
    """
    import torch.distributed as dist
    group = process_group if process_group is not None else dist.group.WORLD
    buf = bucket.buffer()
    compressed = buf.to(torch.bfloat16).div_(group.size())
    fut = dist.all_reduce(compressed, group=group, async_op=True).get_future()

    def decompress(f):
        buf.copy_(f.value()[0])  # in place: no second full-size buffer at the peak
        return buf

    return fut.then(decompress)


def _horovod_gloo_env(launch: Launch, http_port: int) -> Dict[str, str]:
    """What horovodrun's gloo launcher would export for this rank (uniform packed layout)."""
    ls = launch.local_size if launch.size % launch.local_size == 0 else launch.size
    cross_rank, local_rank = divmod(launch.rank, ls)
    env = {
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": launch.addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(http_port),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_HOSTNAME": f"node{cross_rank}",
        "HOROVOD_RANK": str(launch.rank),
        "HOROVOD_SIZE": str(launch.size),
        "HOROVOD_LOCAL_RANK": str(local_rank),
        "HOROVOD_LOCAL_SIZE": str(ls),
        "HOROVOD_CROSS_RANK": str(cross_rank),
        "HOROVOD_CROSS_SIZE": str(launch.size // ls),
    }
    if _loopback(launch.addr) and "HOROVOD_GLOO_IFACE" not in os.environ:
        env["HOROVOD_GLOO_IFACE"] = "lo"
    return env


def _start_horovod_rendezvous(launch: Launch, port: int) -> object:
    """Rank 0 hosts Horovod's HTTP rendezvous, as horovodrun does (port 0: any free one)."""
    from horovod.runner.common.util.hosts import SlotInfo
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer
    ls = launch.local_size if launch.size % launch.local_size == 0 else launch.size
    plan = []
    for r in range(launch.size):
        cross, local = divmod(r, ls)
        plan.append(SlotInfo(hostname=f"node{cross}", rank=r, local_rank=local, cross_rank=cross,
                             size=launch.size, local_size=ls, cross_size=launch.size // ls))
    httpd = RendezvousHTTPServer(("0.0.0.0", port), RendezvousHandler, 0)
    httpd.init(plan)
    threading.Thread(target=httpd.serve_forever, daemon=True, name="hvd-rendezvous").start()
    return httpd


HOROVOD_PORT_KEY = "summit_jobs/horovod_rendezvous_port"


class HorovodEngine(Engine):
    name = "horovod"

    def __init__(self, launch: Launch, device: torch.device, rendezvous_dir: Optional[os.PathLike] = None):
        super().__init__(launch, device)
        import horovod.torch as hvd
        self.hvd = hvd
        self._server = None
        self._store = None
        self._synced = False
        use_mpi = rankenv.open_mpi(os.environ) and hvd.mpi_built() \
            and launch.source in ("jsrun", "mpi") and os.environ.get("HOROVOD_CONTROLLER", "").lower() != "gloo"
        meets = not use_mpi and _meets_in(launch, rendezvous_dir)
        if not use_mpi:
            if not hvd.gloo_built():
                raise RuntimeError("this Horovod build has neither MPI nor gloo: rebuild it (make horovod)")
            os.environ.update(_horovod_gloo_env(launch, self._gloo_port(launch, rendezvous_dir, meets)))
        hvd.init()
        if hvd.rank() != launch.rank or hvd.size() != launch.size:
            raise RuntimeError(f"Horovod sees rank {hvd.rank()}/{hvd.size()} but the launcher says "
                               f"{launch.rank}/{launch.size}")
        if meets:
            self.barrier()  # every rank has read the record
            rendezvous.done(rendezvous_dir, launch.job, launch.rank)

    def _gloo_port(self, launch: Launch, folder: Optional[os.PathLike], meets: bool) -> int:
        """The port of the HTTP rendezvous that rank 0 hosts: any free one, passed on through the job's
        store (see ``trainer.rendezvous``; under torchrun, through its agent's store); without a run
        directory, the derived port + 1."""
        if launch.agent_store:
            self._store = rendezvous.agent_store(launch.addr, launch.port)
            if launch.rank == 0:
                self._server = _start_horovod_rendezvous(launch, 0)
                self._store.set(HOROVOD_PORT_KEY, str(self._server.server_address[1]))
            return int(self._store.get(HOROVOD_PORT_KEY).decode())
        if not meets:
            if launch.rank == 0:
                self._server = _start_horovod_rendezvous(launch, launch.port + 1)
            return launch.port + 1
        extra = None
        if launch.rank == 0:
            self._server = _start_horovod_rendezvous(launch, 0)
            extra = {HOROVOD_PORT_KEY: str(self._server.server_address[1])}
        self._store = rendezvous.meet(launch.addr, launch.port, folder, launch.job, launch.rank, launch.size, extra)
        return int(self._store.get(HOROVOD_PORT_KEY).decode())

    def prepare(self, model, optimizer, accum_steps, compression):
        hvd = self.hvd
        comp = hvd.Compression.fp16 if compression == "fp16" else hvd.Compression.none
        opt = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), compression=comp,
                                       backward_passes_per_step=accum_steps, op=hvd.Average)
        return model, opt

    def finish_grads(self, optimizer):
        optimizer.synchronize()
        self._synced = True

    @contextlib.contextmanager
    def step_context(self, optimizer):
        # Gradients were already averaged in finish_grads (and maybe clipped):
        # the step must not allreduce them a second time.
        if self._synced:
            with optimizer.skip_synchronize():
                yield
            self._synced = False
        else:
            yield

    def allreduce_sum(self, t):
        return self.hvd.allreduce(t, op=self.hvd.Sum, name="metric")

    def broadcast_model(self, model):
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)

    def shutdown(self):
        self.hvd.shutdown()
        if self._server is not None:
            self._server.shutdown()


_warned = False


def _free_port_pair(host: str = "127.0.0.1") -> int:
    """A port p with p and p+1 free now: a single rank needs no agreed port, and
    must not collide with another single-rank run on the same machine."""
    import socket
    for _ in range(100):
        with socket.socket() as s:
            s.bind((host, 0))
            p = s.getsockname()[1]
        if p >= 65535:
            continue
        with socket.socket() as s2:
            try:
                s2.bind((host, p + 1))
            except OSError:
                continue
        return p
    raise RuntimeError("no free port pair for a single-rank run")


def horovod_available() -> bool:
    try:
        import horovod.torch  # noqa: F401
        return True
    except Exception:
        return False


def make_engine(name: str, launch: Optional[Launch] = None, rendezvous_dir: Optional[os.PathLike] = None) -> Engine:
    """``name`` is 'horovod' or 'ddp'; Horovod falls back to DDP (said once) when it is not importable.

    ``rendezvous_dir`` (the run directory, shared by all nodes) lets rank 0 move off a derived port that
    is taken and tell the other ranks (``trainer.rendezvous``)."""
    global _warned
    launch = launch or launch_from_env()
    if launch.size == 1:
        launch = dataclasses.replace(launch, addr="127.0.0.1", port=_free_port_pair())
    elif launch.rank == 0 and not launch.agent_store:
        rendezvous.check_host(launch.addr)      # a rank 0 on the wrong node fails now, not after a long wait
    device = pick_device(launch)
    if name == "horovod" and not horovod_available():
        if not _warned and launch.rank == 0:
            print("trainer: horovod is not importable here; falling back to torch.distributed (ddp). "
                  "Build it with `make horovod`.", file=sys.stderr, flush=True)
        _warned = True
        name = "ddp"
    if name == "horovod":
        return HorovodEngine(launch, device, rendezvous_dir)
    if name == "ddp":
        return DDPEngine(launch, device, rendezvous_dir)
    raise ValueError(f"unknown engine {name!r}: use 'horovod' or 'ddp'")


def unwrap(model: nn.Module) -> nn.Module:
    """The network itself under its wrappers: torch.compile's (``_orig_mod``) and DDP's (``module``), so
    that checkpoints and evaluation see the plain module's parameter names."""
    inner = model._modules.get("_orig_mod")  # torch.compile; its attribute lookup would reach inside
    if isinstance(inner, nn.Module):
        model = inner
    return model.module if hasattr(model, "module") and isinstance(model.module, nn.Module) else model


__all__ = ["Launch", "launch_from_env", "make_engine", "Engine", "DDPEngine", "HorovodEngine", "unwrap"]
