"""The trainer runs on the oldest PyTorch the site profiles name: 2.0.1 (Summit's Open-CE 1.10).

Three layers, from the cheapest:

1. The API surface, always: every torch name the trainer's source refers to
   exists in torch 2.0.1 (tests/data/torch/torch-2.0.1-api.txt, made under that
   release), and the forms that are newer, or whose meaning changed since, are
   used only in trainer/dist/compat.py (or where the table says).
2. trainer/dist/compat.py and the amp choice under the torch installed here.
3. Under a real torch 2.0.1 when one is installed (its python in
   SUMMIT_JOBS_OLDEST_TORCH_PYTHON, default /tmp/torch20/bin/python; the
   .source file beside the API list says how to make it): the compat layer
   picks the old forms, the CPU kernels are right there, and a tiny run trains,
   stops, resumes and finishes, on one rank and on two meeting through the run
   directory.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "torch"
sys.path.insert(0, str(DATA))
sys.path.insert(0, str(REPO))

from torch_refs import keywords, method_calls, references, trainer_sources  # noqa: E402

from trainer.dist import compat  # noqa: E402
from trainer.loop.setup import amp_dtype  # noqa: E402

OLDEST_PYTHON = Path(os.environ.get("SUMMIT_JOBS_OLDEST_TORCH_PYTHON", "/tmp/torch20/bin/python"))
API_LIST = DATA / "torch-2.0.1-api.txt"

#: Names that torch 2.0 lacks: used only in compat.py, behind a check that the running torch has them.
NEW_FORMS: Dict[str, str] = {
    "torch.get_autocast_dtype": "2.4 (device argument); compat.autocast_dtype",
    "torch.amp.GradScaler": "2.3; compat.grad_scaler, compat.GradScaler",
    "torch.utils.flop_counter": "2.1; compat.count_flops",
    "torch.serialization.add_safe_globals": "2.4; checkpoints hold plain values instead",
    "torch.serialization.safe_globals": "2.5; checkpoints hold plain values instead",
    "torch.distributed.device_mesh": "2.2",
    "torch._inductor.cpp_builder": "private, newer than 2.0: compat.cpp_compiler_problem, None where missing",
}
#: Names that 2.0 has but whose meaning or form changed since: only compat.py (or the named place) uses them.
ROUTED: Dict[str, str] = {
    "torch.is_autocast_enabled": "CUDA only before 2.4, a device argument since: compat.autocast_enabled",
    "torch.is_autocast_cpu_enabled": "deprecated from 2.4: compat.autocast_enabled",
    "torch.get_autocast_gpu_dtype": "deprecated from 2.4: compat.autocast_dtype",
    "torch.get_autocast_cpu_dtype": "deprecated from 2.4: compat.autocast_dtype",
    "torch.cuda.amp.GradScaler": "deprecated from 2.4: compat.grad_scaler",
    "torch.load": "weights_only's default changed in 2.6: compat.load_data_only",
    "torch.cuda.is_bf16_supported": "True on a V100 (emulation) from 2.3: setup.amp_dtype decides",
    "torch.distributed.algorithms.ddp_comm_hooks.default_hooks._compress_hook": "private, absent in 2.0",
}
#: Keyword arguments newer than 2.0, with the release that brought them.
NEW_KEYWORDS: Dict[str, str] = {
    "master_listen_fd": "TCPStore, 2.1: compat.listening_store",
    "including_emulation": "torch.cuda.is_bf16_supported, 2.4",
    "device_id": "init_process_group, 2.3",
    "in_order": "DataLoader, 2.6",
    "mmap": "torch.load, 2.1",
}
#: Methods newer than 2.0 on objects the AST cannot type: ``Store.check`` is bound in Python from 2.3.
NEW_METHODS: Dict[str, str] = {"check": "Store.check, 2.3: compat.store_value"}


def _matches(name: str, table: Dict[str, str]) -> str:
    """The entry of ``table`` that ``name`` is, or lies under (a module's names); '' if none."""
    return next((k for k in table if name == k or name.startswith(k + ".")), "")


def _uses(path: Path) -> List[str]:
    """Newer or routed forms in one trainer module, as 'file:line name (why)'."""
    rel, text = str(path.relative_to(REPO)), path.read_text()
    found = []
    for name, line in references(text):
        hit = _matches(name, NEW_FORMS) or _matches(name, ROUTED)
        if hit:
            found.append(f"{rel}:{line} {name} ({NEW_FORMS.get(hit) or ROUTED[hit]})")
    found += [f"{rel}:{line} {kw}= ({NEW_KEYWORDS[kw]})" for kw, line in keywords(text) if kw in NEW_KEYWORDS]
    found += [f"{rel}:{line} .{m}() ({NEW_METHODS[m]})" for m, line in method_calls(text) if m in NEW_METHODS]
    return found


def test_newer_torch_forms_are_used_only_in_the_compat_layer():
    found = [u for p in trainer_sources(REPO) if str(p.relative_to(REPO)) != "trainer/dist/compat.py"
             for u in _uses(p)]
    assert not found, "newer torch forms outside trainer/dist/compat.py:\n" + "\n".join(found)


def test_the_api_checks_see_the_forms_they_look_for():
    """The checks can fail: the forms trainer/models/tsm.py used before the compat layer are caught."""
    bad = ('import torch\nfrom torch.distributed import TCPStore\n'
           'c = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else None\n'
           's = TCPStore("h", 1, None, True, master_listen_fd=3)\nok = s.check(["k"])\n'
           'from torch.utils.flop_counter import FlopCounterMode\n')
    names = {n for n, _ in references(bad)}
    assert {"torch.get_autocast_dtype", "torch.is_autocast_enabled", "torch.distributed.TCPStore",
            "torch.utils.flop_counter.FlopCounterMode"} <= names
    assert ("master_listen_fd", 4) in set(keywords(bad)) and ("check", 5) in set(method_calls(bad))
    api = set(API_LIST.read_text().split())
    assert "torch.get_autocast_dtype" not in api and "torch.is_autocast_enabled" in api


def test_every_torch_name_the_trainer_uses_exists_in_torch_2_0_1():
    api = set(API_LIST.read_text().split())
    assert len(api) > 1000 and "torch.nn.functional.conv2d" in api and (DATA / f"{API_LIST.name}.source").exists()
    missing = []
    for path in trainer_sources(REPO):
        rel = str(path.relative_to(REPO))
        for name, line in references(path.read_text()):
            if rel == "trainer/dist/compat.py" and _matches(name, NEW_FORMS):
                continue  # the new form, behind a check that the running torch has it
            if name not in api:
                missing.append(f"{rel}:{line} {name}")
    assert not missing, (f"torch names not in torch 2.0.1 ({API_LIST.name}): use trainer/dist/compat.py, or check "
                         "the name under 2.0.1 and make the list again (its .source says how):\n"
                         + "\n".join(missing))


# -- the amp choice: from the GPU's compute capability, not torch.cuda.is_bf16_supported() -------------------
@pytest.mark.parametrize("option,cuda,capability,expected", [
    ("auto", True, (7, 0), torch.float16),     # V100 (Summit): bf16 only emulated -> fp16 with a GradScaler
    ("auto", True, (7, 5), torch.float16),     # T4
    ("auto", True, (8, 0), torch.bfloat16),    # A100
    ("auto", True, (9, 0), torch.bfloat16),    # H100
    ("auto", True, None, torch.float16),       # unknown: the format every CUDA GPU has
    ("fp16", True, (9, 0), torch.float16),
    ("bf16", True, (8, 6), torch.bfloat16),
    ("off", True, (9, 0), None),
    ("auto", False, None, None),               # never on CPU
    ("bf16", False, None, None),
])
def test_amp_dtype(option, cuda, capability, expected):
    assert amp_dtype(option, cuda, capability) == expected


def test_amp_bf16_below_ampere_is_refused_with_the_capability_and_the_way_out():
    with pytest.raises(ValueError) as err:
        amp_dtype("bf16", True, (7, 0))
    assert "--amp bf16" in str(err.value) and "7.0" in str(err.value) and "8.0" in str(err.value)
    assert "--amp fp16" in str(err.value)


def test_cudnn_autotuning_is_switched_on_for_gpus_only():
    from trainer.loop.setup import backends
    was = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = False
        backends(torch.device("cpu"))
        assert torch.backends.cudnn.benchmark is False
        backends(torch.device("cuda", 0))  # a device object: nothing runs on it
        assert torch.backends.cudnn.benchmark is True
    finally:
        torch.backends.cudnn.benchmark = was


# -- the compat layer under the torch installed here ------------------------------------------------------
def test_autocast_queries_follow_torch_autocast_on_cpu():
    assert compat.autocast_dtype("cpu") is None and not compat.autocast_enabled("cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compat.autocast_enabled("cpu") and compat.autocast_dtype("cpu") == torch.bfloat16
        assert not compat.autocast_enabled("cuda") and compat.autocast_dtype("cuda") is None
        with torch.autocast("cpu", enabled=False):
            assert compat.autocast_dtype("cpu") is None


def test_grad_scaler_is_of_the_annotated_class():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA here: the scaler says it is disabled
        assert isinstance(compat.grad_scaler(), compat.GradScaler)


def test_flop_count_of_the_fallback_equals_torchs_counter():
    from trainer.models.model import build_model
    model = build_model("resnet18", 5, 4, width=0.125).eval()
    clip = torch.randn(1, 4, 3, 32, 32)
    with torch.no_grad():
        ours = compat._dispatch_flops(lambda: model(clip))
        theirs = compat.count_flops(lambda: model(clip))
    assert ours == theirs > 0


def _listening_socket():
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock.getsockname()[1], sock.detach()


def test_store_on_a_listening_socket_and_key_lookups():
    from torch.distributed import TCPStore
    port, fd = _listening_socket()
    master = compat.listening_store("127.0.0.1", port, datetime.timedelta(seconds=10), fd)
    client = TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=5), wait_for_workers=False)
    master.set("k", "v")
    master.get("k")  # a set is not acknowledged: this round trip makes it visible on other connections
    assert compat.store_value(client, "k") == b"v"
    assert compat.store_value(client, "absent") is None

    class OldStore:  # the Python surface of a torch 2.0 store: no check()
        def get(self, key):
            return client.get(key)
    assert compat.store_value(OldStore(), "k") == b"v" and compat.store_value(OldStore(), "absent") is None


def test_checkpoint_reader_loads_data_and_refuses_code(tmp_path):
    import pickle
    torch.save({"w": torch.ones(2), "n": 3}, tmp_path / "ok.pt")
    assert compat.load_data_only(tmp_path / "ok.pt")["n"] == 3
    torch.save({"f": os.getcwd}, tmp_path / "bad.pt")  # a pickle that names a function to call
    with pytest.raises(pickle.UnpicklingError):
        compat.load_data_only(tmp_path / "bad.pt")


# -- under a real torch 2.0.1 ----------------------------------------------------------------------------
oldest = pytest.mark.skipif(not OLDEST_PYTHON.exists(),
                            reason=f"no torch 2.0.1 at {OLDEST_PYTHON} (SUMMIT_JOBS_OLDEST_TORCH_PYTHON; "
                                   "tests/data/torch/torch-2.0.1-api.txt.source says how to make one)")


def _old(code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run([str(OLDEST_PYTHON), "-c", code], cwd=str(REPO), env=env, capture_output=True,
                          text=True, timeout=timeout)


@oldest
def test_oldest_torch_is_2_0_and_compat_picks_its_forms():
    flops = compat.count_flops(lambda: _tiny_forward())
    code = f"""
import torch
from trainer.dist import compat
assert compat.version() == (2, 0), torch.__version__
assert not hasattr(torch, "get_autocast_dtype") and not hasattr(torch.amp, "GradScaler")
assert compat.autocast_dtype("cpu") is None
with torch.autocast("cpu", dtype=torch.bfloat16):
    assert compat.autocast_enabled("cpu") and compat.autocast_dtype("cpu") == torch.bfloat16
    assert compat.autocast_dtype("cuda") is None
assert compat.GradScaler is torch.cuda.amp.GradScaler
from tests.model.test_torch_compat import _tiny_forward
with torch.no_grad():
    got = compat.count_flops(_tiny_forward)
assert got == {flops}, got
print("ok")
"""
    out = _old(code)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def _tiny_forward():
    """One forward pass of a tiny TSM, the same on every torch (seeded)."""
    from trainer.models.model import build_model
    torch.manual_seed(0)
    model = build_model("resnet18", 5, 4, width=0.125).eval()
    with torch.no_grad():
        return model(torch.randn(1, 4, 3, 32, 32))


@oldest
def test_oldest_torch_shift_kernels_match_the_reference_under_autocast_and_gradcheck():
    """The CPU 1x1 kernel's gradients pass gradcheck there (torch 2.0's baddbmm_ with beta=0 carried NaN from
    fresh memory into them), and the fused shift-conv under CPU autocast equals conv(shift(x))."""
    code = """
import torch
from trainer.models.tsm import _ShiftConv1x1, shift_conv, temporal_shift
torch.manual_seed(2)
x = torch.randn(12, 16, 3, 2, dtype=torch.float64)
w = torch.randn(8, 16, 1, 1, dtype=torch.float64, requires_grad=True)
for fold in (0, 2):
    assert torch.autograd.gradcheck(lambda a, b: _ShiftConv1x1.apply(a, b, 4, fold), (x.clone().requires_grad_(), w))
conv = torch.nn.Conv2d(16, 8, 3, padding=1, bias=False)
xf = torch.randn(8, 16, 6, 6)
with torch.autocast("cpu", dtype=torch.bfloat16):
    a, b = shift_conv(xf, conv, 4), conv(temporal_shift(xf, 4))
assert a.dtype == b.dtype == torch.bfloat16 and torch.equal(a, b), (a - b).abs().max()
print("ok")
"""
    out = _old(code)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def _old_ranks(size: int, args: List[str], logs: Path, timeout: float = 300) -> List[int]:
    """The trainer under torch 2.0.1 on ``size`` ranks with jsrun's variables, as a job runs it."""
    from trainer_utils import free_jobid, rank_env
    job = free_jobid()
    logs.mkdir(parents=True, exist_ok=True)
    procs = []
    for r in range(size):
        with open(logs / f"rank{r}.log", "w") as out:
            procs.append(subprocess.Popen([str(OLDEST_PYTHON), "-m", "trainer", *args], env=rank_env(r, size, job),
                                          stdout=out, stderr=subprocess.STDOUT, cwd=str(REPO)))
    codes = []
    try:
        codes = [p.wait(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return codes


def _log(logs: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(logs.glob("rank*.log")))


@oldest
@pytest.mark.parametrize("ranks", [1, 2])
def test_oldest_torch_trains_stops_resumes_and_finishes(ranks, tmp_path):
    """A tiny run under torch 2.0.1: stopped after 3 steps with a checkpoint, resumed, complete; two ranks
    meet through the run directory (the store on a socket closed and bound again, keys read without check)."""
    from trainer_utils import make_dataset, tiny_args
    data = make_dataset(tmp_path / "data", train=16, val=8)
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=2)
    assert _old_ranks(ranks, args + ["--max-steps", "3"], tmp_path / "a") == [0] * ranks, _log(tmp_path / "a")
    assert not (run / "COMPLETE").exists()
    assert _old_ranks(ranks, args, tmp_path / "b") == [0] * ranks, _log(tmp_path / "b")
    assert (run / "COMPLETE").exists()
    log = _log(tmp_path / "a") + _log(tmp_path / "b")
    assert "Traceback" not in log and "TypedStorage" not in log, log[-3000:]
    events = [json.loads(line)["event"] for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]
    assert "resumed" in events and "complete" in events, events
