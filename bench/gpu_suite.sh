#!/usr/bin/env bash
# Every GPU figure of BENCHMARKS.md ("GPU training throughput") in one go, on one GPU machine:
#
#   0. the machine: nvidia-smi, CPU count, torch / torchvision / triton versions
#   1. a packed synthetic data set for the real reader, written by `summit-jobs synth` and `pack` in the
#      background while case A runs (one CPU process; case A is GPU-bound)
#   A. eager bf16: TSM-R50 8x224 clips/s and peak memory, ResNet-50 images/s, the per-frame ratio,
#      and torch.profiler over 3 TSM steps (top ops by self device time, chrome trace)
#   B. the real reader, --decode cpu (DataLoader workers decode)
#   C. the real reader, --decode device (nvJPEG on its own stream)
#   D. --compile default (inductor): cases 1-3 compiled
#   E. the reader as the trainer read before (--reader-pass restart: a pool pass per epoch whose queue
#      starts empty), beside case B's read-ahead on the same machine, only while time is left
#
# Each case runs bench/gpu_train.py in its own process under its own `timeout`, and the whole script
# stops starting cases at a deadline (GPU_SUITE_DEADLINE seconds, default 430), so one hang cannot
# eat the rest. Everything lands in $OUT (default bench/out/gpu_suite): suite.log (all output),
# figures.json (every case's JSON, merged after each case), top_ops.txt, trace.json.gz.
#
# Usage, from the repository root (the project need not be installed: PYTHONPATH is set here):
#   bash bench/gpu_suite.sh                      # on the GPU machine
#   GPU_SUITE_SMOKE=1 bash bench/gpu_suite.sh  # the same steps on a CPU at tiny sizes (~2-3 min)
set -u
START=$(date +%s)
OUT=${OUT:-bench/out/gpu_suite}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
DEADLINE=${GPU_SUITE_DEADLINE:-430}
WORK=${GPU_SUITE_WORK:-/tmp/gpu_suite}
rm -rf "$WORK" && mkdir -p "$WORK/json"
DATA=$WORK/shards
exec > >(tee -a "$OUT/suite.log") 2>&1

if [ "${GPU_SUITE_SMOKE:-0}" = 1 ]; then
    COMMON=(--device cpu --threads 1 --arch resnet18 --width 0.25 --frames 4 --size 32 --batch 2 --classes 8)
    STEPS=(--steps 3 --warmup 1)
    CSTEPS=(--steps 3 --warmup 2)
    SYNTH=(--videos-per-class 4 --frames 8 --size 64)
    W_CPU=1; W_DEV=1
else
    COMMON=()
    STEPS=(--steps 50 --warmup 10)
    CSTEPS=(--steps 30 --warmup 15)
    # 8 classes x 64 videos (384 training clips, 12 steps of 32 per epoch), 16 frames of 256x256
    SYNTH=(--videos-per-class 64 --frames 16 --size 256)
    W_CPU=12; W_DEV=4
fi

elapsed() { echo $(( $(date +%s) - START )); }

merge() {  # every case's JSON into one file (rewritten after each case: a killed run keeps what it had)
    "$PY" - "$WORK/json" "$OUT/figures.json" <<'EOF'
import json, pathlib, sys
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
figs = {p.stem: json.loads(p.read_text()) for p in sorted(src.glob("*.json"))}
dst.write_text(json.dumps(figs, indent=1, sort_keys=True) + "\n")
EOF
}

case_run() {  # case_run NAME LIMIT_S ARGS...: one gpu_train.py process, its JSON kept as NAME
    local name=$1 limit=$2; shift 2
    local left=$(( DEADLINE - $(elapsed) ))
    if [ "$left" -lt 30 ]; then echo "=== $name: skipped, $(elapsed) s gone of $DEADLINE"; return 1; fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "=== $name (t=$(elapsed) s, limit $limit s): bench/gpu_train.py $*"
    local t0; t0=$(date +%s)
    timeout -k 10 "$limit" "$PY" bench/gpu_train.py "$@" --json "$WORK/json/$name.json"
    local rc=$?
    echo "=== $name: rc $rc, $(( $(date +%s) - t0 )) s"
    merge
    return $rc
}

echo "=== machine (t=$(elapsed) s)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit \
    --format=csv 2>&1 || echo "no nvidia-smi"
echo "cpus: $(nproc); $(uname -m)"
"$PY" - <<'EOF'
import importlib, importlib.metadata as md, sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "cudnn", torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("gpu", p.name, f"{p.total_memory / 2**30:.1f} GiB", p.multi_processor_count, "SMs, cc", p.major, p.minor)
for m, dist in (("torchvision", "torchvision"), ("triton", "triton"), ("PIL", "pillow"), ("numpy", "numpy"),
                ("click", "click"), ("jinja2", "jinja2"), ("yaml", "pyyaml")):
    try:
        importlib.import_module(m)
        print(m, md.version(dist))
    except Exception as exc:
        print(m, "MISSING", type(exc).__name__, exc)
EOF

echo "=== data set in the background (t=$(elapsed) s): summit-jobs synth ${SYNTH[*]} && pack"
(
    t0=$(date +%s)
    "$PY" -m summit_jobs synth "$WORK/synth" "${SYNTH[@]}" --layout rawframes --quiet \
        && "$PY" -m summit_jobs pack "$WORK/synth/rawframes" "$DATA" -j 8 --quiet
    echo "data rc $? in $(( $(date +%s) - t0 )) s"
) > "$WORK/data.log" 2>&1 &
DATA_PID=$!

# A: eager bf16, cases 1-3, and the profile of 3 TSM steps
case_run eager 150 "${COMMON[@]}" "${STEPS[@]}" --profile "$WORK/prof"
cp "$WORK/prof/gpu_train_top_ops.txt" "$OUT/top_ops.txt" 2>/dev/null
if [ -f "$WORK/prof/gpu_train_trace.json" ]; then
    gzip -c "$WORK/prof/gpu_train_trace.json" > "$WORK/trace.json.gz"
    # files that come back are capped at 16 MiB
    [ "$(stat -c %s "$WORK/trace.json.gz")" -lt 15000000 ] && cp "$WORK/trace.json.gz" "$OUT/trace.json.gz"
fi

echo "=== waiting for the data set (t=$(elapsed) s)"
wait "$DATA_PID"
cat "$WORK/data.log"
du -sh "$DATA" 2>/dev/null

if [ -f "$DATA/manifest.json" ]; then
    # B, C: the real reader, CPU decode in the workers, then nvJPEG on the device
    case_run reader_cpu_w$W_CPU 110 "${COMMON[@]}" "${STEPS[@]}" --data "$DATA" --workers $W_CPU --decode cpu
    case_run reader_dev_w$W_DEV 110 "${COMMON[@]}" "${STEPS[@]}" --data "$DATA" --workers $W_DEV --decode device
else
    echo "=== no data set: reader cases skipped"
fi

# D: torch.compile (inductor, default mode): two networks compiled, so a long limit
case_run compile 230 "${COMMON[@]}" "${CSTEPS[@]}" --compile default

# E: while time is left, the reader as it was before the read-ahead (a pool pass per epoch), beside B
if [ -f "$DATA/manifest.json" ]; then
    case_run reader_cpu_w${W_CPU}_restart 100 "${COMMON[@]}" "${STEPS[@]}" --data "$DATA" --workers $W_CPU \
        --decode cpu --reader-pass restart
    case_run reader_dev_w${W_DEV}_restart 100 "${COMMON[@]}" "${STEPS[@]}" --data "$DATA" --workers $W_DEV \
        --decode device --reader-pass restart
fi

echo "=== summary (t=$(elapsed) s)"
"$PY" - "$OUT/figures.json" <<'EOF'
import json, sys
figs = json.load(open(sys.argv[1]))
for name, rep in figs.items():
    r, o = rep["results"], rep["options"]
    t, p = r["tsm"], r["plain2d"]
    line = (f"{name:<16} {rep['device']}: TSM {t['clips_per_s']:.1f} clips/s ({1e3 * t['step_s']:.1f} ms, "
            f"{t['peak_mem_bytes'] / 2**30:.2f} GiB); 2D {p['images_per_s']:.0f} img/s "
            f"({p['peak_mem_bytes'] / 2**30:.2f} GiB); ratio {r['per_frame_ratio']:.3f}")
    if "reader" in r:
        d = r["reader"]
        line += (f"; reader ({d.get('reader_pass', 'epoch')} pass) {d['clips_per_s']:.1f} clips/s, "
                 f"wait {d['data_wait_share']:.3f}, "
                 f"input cost {d['input_cost_share']:.3f}")
    bad = [k for k in ("tsm", "plain2d", "reader") if k in r and not r[k]["loss_finite"]]
    print(line + (f"  NON-FINITE LOSS in {bad}" if bad else ""))
EOF
echo "=== done at t=$(elapsed) s"
