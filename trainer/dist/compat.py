"""The PyTorch API differences between the oldest torch the trainer supports and today's, in one place.

Why: the HPC sites' environments lag behind PyTorch releases. Summit's Open-CE
1.10 has PyTorch 2.0.1, and every form below that is newer raised there
(``torch.is_autocast_enabled("cuda")`` is a TypeError on 2.0, so every TSM
forward on a GPU failed). The oldest supported torch is ``OLDEST`` (2.0); the
trainer calls these functions instead of the newer forms, and
tests/model/test_torch_compat.py checks that no other trainer module calls a newer
form and that each fallback below names only what torch 2.0.1 has.

Each function picks the new form when the running torch has it (the old forms
are deprecated there and warn) and says in its docstring which release brought
it. Detection is by feature, not by version number: a site's own build may
carry a back-port.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import warnings
from typing import Callable, List, Optional

import torch

from trainer.config import TORCH_RANGE

#: The oldest torch release the trainer runs on (Summit's Open-CE 1.10: PyTorch 2.0.1): trainer.config.TORCH_RANGE.
OLDEST = TORCH_RANGE[0]


def version() -> tuple:
    """(major, minor) of the running torch, e.g. (2, 0) for "2.0.1+cu117"."""
    parts = torch.__version__.split("+")[0].split(".")
    return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` ("cuda" or "cpu").

    ``torch.is_autocast_enabled(device_type)`` came with torch 2.4; before it,
    ``torch.is_autocast_enabled()`` answered for CUDA only and
    ``torch.is_autocast_cpu_enabled()`` for the CPU. Other devices had no
    query before 2.4: they count as off there.
    """
    if hasattr(torch, "get_autocast_dtype"):  # 2.4: the device-argument forms, together
        return bool(torch.is_autocast_enabled(device_type))
    if device_type == "cuda":
        return bool(torch.is_autocast_enabled())
    if device_type == "cpu":
        return bool(torch.is_autocast_cpu_enabled())
    return False


def autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    """The dtype autocast casts to on ``device_type``, or None when autocast is off there.

    ``torch.get_autocast_dtype(device_type)`` came with torch 2.4; before it,
    ``torch.get_autocast_gpu_dtype()`` (CUDA) and ``torch.get_autocast_cpu_dtype()``.
    """
    if not autocast_enabled(device_type):
        return None
    if hasattr(torch, "get_autocast_dtype"):
        return torch.get_autocast_dtype(device_type)
    if device_type == "cuda":
        return torch.get_autocast_gpu_dtype()
    return torch.get_autocast_cpu_dtype()


#: The CUDA loss scaler's class, for annotations: ``torch.amp.GradScaler`` from torch 2.3 (the
#: device is its first argument), ``torch.cuda.amp.GradScaler`` before (deprecated from 2.4).
GradScaler = getattr(torch.amp, "GradScaler", None) or torch.cuda.amp.GradScaler


def is_compiling() -> bool:
    """Whether the code is being traced by torch.compile (dynamo).

    ``torch.compiler.is_compiling()`` came with torch 2.3; before it,
    ``torch._dynamo.is_compiling()`` (2.0).
    """
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):
        return bool(compiler.is_compiling())
    from torch import _dynamo
    return bool(_dynamo.is_compiling())


def grad_scaler() -> "GradScaler":
    """A loss scaler for fp16 autocast on CUDA: ``torch.amp.GradScaler("cuda")`` from torch 2.3,
    ``torch.cuda.amp.GradScaler()`` before. Both save the same state_dict keys, so a checkpoint
    written under one resumes under the other."""
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


def listening_store(host: str, port: int, timeout: datetime.timedelta, listen_fd: int):
    """A master ``TCPStore`` serving on ``listen_fd``, a socket already bound to ``port`` and listening.

    ``TCPStore(master_listen_fd=...)`` came with torch 2.1. Before it the store binds the
    port itself on every address: the socket is closed first and the store binds the same
    port at once. Another program that takes the port in that instant makes the store fail
    with "address already in use", which the caller treats as a taken port. Either way the
    descriptor is the store's or closed when this returns or raises: the caller must not
    close it again (its number may already belong to another file).
    """
    from torch.distributed import TCPStore
    if "master_listen_fd" in (TCPStore.__init__.__doc__ or ""):
        try:
            return TCPStore(host, port, None, True, timeout, wait_for_workers=False, master_listen_fd=listen_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(listen_fd)
            raise
    os.close(listen_fd)
    return TCPStore(host, port, None, True, timeout, wait_for_workers=False)


def store_value(store, key: str) -> Optional[bytes]:
    """``key``'s value in a torch.distributed store, or None when it is not set.

    ``Store.check`` is not bound in Python in torch 2.0 (it is from 2.1): there a
    ``get``, which waits for the key up to the store's timeout and then raises,
    tells the same at the cost of that wait. Any failure (a peer that is gone, a
    listener that is not a store) is None too.
    """
    try:
        if hasattr(store, "check") and not store.check([key]):
            return None
        return store.get(key)
    except Exception:  # noqa: BLE001 - timed out, reset, refused: not set, as far as this caller can tell
        return None


def _conv_flops(args, out) -> int:
    """2 x output elements x (input channels per group x kernel size): FlopCounterMode's count."""
    weight = args[1]
    per_output = 1
    for n in weight.shape[1:]:
        per_output *= int(n)
    return 2 * out.numel() * per_output


def _matmul_flops(func_name: str, args) -> int:
    """2 x m x k x n (times the batch for bmm/baddbmm); the added term of addmm is not counted."""
    a, b = (args[0], args[1]) if func_name in ("mm", "bmm") else (args[1], args[2])
    batch = int(a.shape[0]) if a.dim() == 3 else 1
    return 2 * batch * int(a.shape[-2]) * int(a.shape[-1]) * int(b.shape[-1])


def _dispatch_flops(fn: Callable[[], object]) -> int:
    """The fallback of ``count_flops`` for torch 2.0: the convolutions and matrix products that
    ``fn`` runs, seen through a dispatch mode and counted by FlopCounterMode's formulas."""
    from torch.utils._python_dispatch import TorchDispatchMode
    total: List[int] = [0]

    class _Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name in ("convolution", "_convolution"):
                total[0] += _conv_flops(args, out)
            elif name in ("mm", "addmm", "bmm", "baddbmm"):
                total[0] += _matmul_flops(name, args)
            return out

    with _Counter():
        fn()
    return total[0]


def count_flops(fn: Callable[[], object]) -> int:
    """Floating-point operations of ``fn()`` as torch's counter sees them (2 per multiply-add).

    ``torch.utils.flop_counter.FlopCounterMode`` came with torch 2.1; on 2.0 the
    same formulas are applied to the convolutions and matrix products (all that
    a ResNet's forward pass counts) through ``TorchDispatchMode``, which 2.0 has.
    """
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return _dispatch_flops(fn)
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return int(counter.get_total_flops())


def load_data_only(path: os.PathLike) -> object:
    """``torch.load`` of tensors and plain values only, onto the CPU.

    ``weights_only=True`` exists since torch 1.13 and is the default from 2.6;
    it is passed here whatever the release. torch 2.0's weights-only reader
    warns "TypedStorage is deprecated" from inside torch on every load: that
    says nothing about the file and is silenced here.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="TypedStorage is deprecated", category=UserWarning)
        return torch.load(path, map_location="cpu", weights_only=True)


def gloo_reduces_bf16() -> bool:
    """Whether the default process group (gloo) can allreduce bfloat16 tensors.

    torch 2.0's gloo back end cannot ("Invalid scalar type"), later releases
    can. Asked, not inferred from the version: a one-element allreduce, which
    fails on every rank alike before anything is sent where it is not
    supported, and leaves the group usable. Every rank must call it at the same
    point, as for any collective.
    """
    import torch.distributed as dist
    try:
        dist.all_reduce(torch.zeros(1, dtype=torch.bfloat16))
    except RuntimeError:
        return False
    return True


def cpp_compiler_problem() -> Optional[str]:
    """Why inductor would find no working C++ compiler for CPU kernels here (its error, as the first compile
    reports it: ``InvalidCxxCompiler: No working C++ compiler found ...``), or None.

    Inductor looks for its compiler only at its first compile, inside the first
    training step, after the data and the model are set up; asked at set-up, a
    machine without one is refused before any of that. The search asked is
    inductor's own: ``torch._inductor.cpp_builder.get_cpp_compiler`` (CXX, else
    the candidates of ``torch._inductor.config.cpp.cxx``, each run with
    ``--version``; the answer is cached, so the compile does not search again).
    torch has no public form of it and 2.0 lacks this private one: where it is
    missing, or fails other than by finding no compiler, the answer is None and
    inductor tells at its first compile, as it always did.
    """
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:
        return None
    try:
        get_cpp_compiler()
    except RuntimeError as exc:  # torch._inductor.exc.InvalidCxxCompiler; on Windows, cl's own checks
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    except Exception:  # noqa: BLE001 - a private function that changed: leave the answer to inductor
        return None
    return None


__all__ = ["OLDEST", "version", "autocast_enabled", "autocast_dtype", "GradScaler", "grad_scaler",
           "listening_store", "store_value", "count_flops", "load_data_only",
           "gloo_reduces_bf16", "cpp_compiler_problem"]
