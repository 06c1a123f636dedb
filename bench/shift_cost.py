"""Cost of the temporal shift: a TSM-R50 training step vs the same step with the shift off.

Both variants are the same module (TemporalShift.enabled toggled), same weights,
same input, same optimizer; they are timed interleaved in the same process so
that machine noise hits both equally, and the median is reported. On a CPU the
residual branch's 1x1 conv1 runs as matrix products that read the shifted
frames in place (trainer/models/tsm.py), with or without the shift; the pair is also
timed with the library convolution everywhere (the shift then a copy), and the
two no-shift steps are compared, so the kernel's own speed is not taken for
the shift's. Where the shift is a copy it is timed in both forms: the one-pass
gather the trainer uses and the slice copies it used before (``shift_slices``).

On a GPU it also measures the paper's setting: TSM-R50 8x224 training clips/s
with autocast and channels_last, and the same harness's plain ResNet-50 (one
frame per sample, no shift) in images/s, as a per-frame ratio (goal >= 0.9).

Usage:
  .venv/bin/python bench/shift_cost.py                          # CPU: 1 clip x 8 frames, 112x112
  .venv/bin/python bench/shift_cost.py --device cuda --batch 8 --size 224
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainer.models import tsm  # noqa: E402
from trainer.models.model import build_model, param_groups  # noqa: E402


def shift_slices(x: torch.Tensor, t: int, fold: int, reverse: bool) -> torch.Tensor:
    """The eager shift as it was before the one-pass gather: slice copies into a new tensor (five kernels,
    each a strided copy in channels_last). Timed against ``tsm._shift_one_pass`` on the same step."""
    nt, c, h, w = x.shape
    v = x.view(nt // t, t, c, h, w)
    out = torch.empty_like(v)
    a, b = (slice(1, None), slice(None, -1)) if not reverse else (slice(None, -1), slice(1, None))
    out[:, b, :fold] = v[:, a, :fold]
    out[:, a, fold:2 * fold] = v[:, b, fold:2 * fold]
    if not reverse:
        out[:, -1:, :fold] = 0
        out[:, :1, fold:2 * fold] = 0
    else:
        out[:, :1, :fold] = 0
        out[:, -1:, fold:2 * fold] = 0
    out[:, :, 2 * fold:] = v[:, :, 2 * fold:]
    return out.view(nt, c, h, w)


ONE_PASS = tsm._shift_one_pass
SHIFTS = {"one-pass": ONE_PASS, "slices": shift_slices}


def make_step(model, opt, x, y, amp_dtype):
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(x.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
    return step


def timed(step, device, reps: int) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=1, help="clips per step")
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--size", type=int, default=112)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=2, help="steps per timed round")
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    amp = (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16) if cuda else None
    torch.manual_seed(0)
    model = build_model("resnet50", 400, a.frames).to(dev)
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(param_groups(model, 1e-4), lr=1e-4, momentum=0.9)
    x = torch.randn(a.batch * a.frames, 3, a.size, a.size, device=dev)
    if cuda:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 400, (a.batch,), device=dev)
    step = make_step(model, opt, x, y, amp)
    # (shift on?, CPU 1x1 kernel on?, the eager shift's form): on a GPU the kernel never applies, so the
    # shift is always a copy there, and both forms of it are timed; on a CPU both forms on the library path.
    variants = [(True, True, "one-pass"), (False, True, "one-pass")] + (
        [(True, True, "slices")] if cuda else
        [(True, False, "one-pass"), (False, False, "one-pass"), (True, False, "slices")])
    for _ in range(2):  # warm-up (allocator, cudnn autotune)
        step()
    times: dict = {v: [] for v in variants}
    for r in range(a.rounds):
        for v in (variants if r % 2 == 0 else variants[::-1]):
            model.set_shift(v[0])
            tsm.CPU_GEMM_1X1 = v[1]
            tsm._shift_one_pass = SHIFTS[v[2]]
            times[v].append(timed(step, dev, a.reps))
    tsm.CPU_GEMM_1X1, tsm._shift_one_pass = True, ONE_PASS
    med = {v: statistics.median(t) for v, t in times.items()}
    t_on, t_off = med[(True, True, "one-pass")], med[(False, True, "one-pass")]
    name = torch.cuda.get_device_name(dev) if cuda else f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {name}; TSM-R50 training step, {a.batch} clip(s) x {a.frames} frames x {a.size}^2"
          + (f", autocast {amp}, channels_last" if cuda else ", fp32"))
    print(f"step with shift    : {1000 * t_on:9.1f} ms (median of {a.rounds} rounds x {a.reps} steps)")
    print(f"step without shift : {1000 * t_off:9.1f} ms")
    print(f"ratio with/without : {t_on / t_off:9.3f}  (goal <= 1.03)")
    print(f"training clips/s   : {a.batch / t_on:9.2f} (TSM)")
    if not cuda:
        # The same pair with every conv1 on the library convolution (the shift as a copy of the block input),
        # and what the 1x1 kernel does to the network without the shift.
        l_on, l_off, l_old = med[(True, False, "one-pass")], med[(False, False, "one-pass")], \
            med[(True, False, "slices")]
        print(f"library conv path  : {1000 * l_on:9.1f} ms with shift, {1000 * l_off:.1f} ms without:"
              f" ratio {l_on / l_off:.3f} (the shift as one gather)")
        print(f"  the same, shift as slice copies (before): {1000 * l_old:.1f} ms, ratio {l_old / l_off:.3f}")
        print(f"no-shift step, 1x1 kernel / library conv: {t_off / l_off:.3f}")
    if cuda:
        t_old = med[(True, True, "slices")]
        print(f"shift as slice copies (before): {1000 * t_old:.1f} ms, ratio {t_old / t_off:.3f}")
        # The same harness, plain ResNet-50: one frame per sample, no shift, as many frames per step.
        plain = build_model("resnet50", 400, 1, shift=False).to(dev).to(memory_format=torch.channels_last)
        popt = torch.optim.SGD(param_groups(plain, 1e-4), lr=1e-4, momentum=0.9)
        yi = torch.randint(0, 400, (a.batch * a.frames,), device=dev)
        pstep = make_step(plain, popt, x, yi, amp)
        for _ in range(2):
            pstep()
        t_plain = statistics.median(timed(pstep, dev, a.reps) for _ in range(a.rounds))
        ips = a.batch * a.frames / t_plain
        fps = a.batch * a.frames / t_on
        print(f"plain ResNet-50    : {ips:9.1f} images/s ({a.batch * a.frames} images per step)")
        print(f"TSM frames/s       : {fps:9.1f}  -> per-frame ratio TSM/plain {fps / ips:.3f} (goal >= 0.9)")


if __name__ == "__main__":
    main()
