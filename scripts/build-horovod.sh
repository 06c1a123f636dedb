#!/usr/bin/env bash
# Build (once per machine) and install Horovod 0.28.1 with its PyTorch and gloo
# back ends into the given virtual environment.
#
# Why a script: PyPI's horovod 0.28.1 asks CMake for C++14, and PyTorch >= 2.1
# headers need C++17, so the released sdist does not compile against torch 2.13.
# We raise the two CMAKE_CXX_STANDARD lines to 17, build a wheel without build
# isolation (so it compiles against the torch already installed in the venv) and
# cache the wheel under ~/.cache/summit-jobs/wheels keyed by the torch version.
#
# Usage: scripts/build-horovod.sh [VENV_DIR]   (default .venv)
set -euo pipefail

venv=${1:-.venv}
py="$venv/bin/python"
[ -x "$py" ] || { echo "build-horovod: no python at $py (create the venv first: make venv)" >&2; exit 2; }

hvd_version=0.28.1
torch_version=$("$py" -c 'import torch; print(torch.__version__)')
cache=${SUMMIT_JOBS_WHEEL_CACHE:-$HOME/.cache/summit-jobs/wheels}/horovod-$hvd_version-torch-${torch_version//+/_}
mkdir -p "$cache"

if "$py" -c 'import horovod.torch' 2>/dev/null; then
  echo "build-horovod: horovod already importable in $venv"
  exit 0
fi

wheel=$(ls "$cache"/horovod-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "build-horovod: building horovod $hvd_version against torch $torch_version (about 12 minutes on 2 cores)"
  "$py" -m pip download --quiet --no-deps --no-binary :all: "horovod==$hvd_version" -d "$work"
  tar -xzf "$work/horovod-$hvd_version.tar.gz" -C "$work"
  src="$work/horovod-$hvd_version"
  for f in "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"; do
    grep -q 'set(CMAKE_CXX_STANDARD 14)' "$f" || { echo "build-horovod: expected C++14 line not found in $f" >&2; exit 1; }
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$f"
  done
  # The sdist's setup.py needs these in the build environment.
  "$py" -m pip install --quiet "cloudpickle" "psutil" "packaging" "pyyaml" "setuptools<70" wheel
  # Build into a temporary folder then move: a killed build never leaves a half wheel in the cache.
  HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
  HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=gloo \
  MAKEFLAGS="-j$(nproc)" \
    "$py" -m pip wheel --no-build-isolation --no-deps -w "$work/out" "$src"
  built=$(ls "$work"/out/horovod-*.whl)
  cp "$built" "$cache/.tmp-$(basename "$built")"
  mv "$cache/.tmp-$(basename "$built")" "$cache/$(basename "$built")"
  wheel="$cache/$(basename "$built")"
fi
echo "build-horovod: installing $wheel"
"$py" -m pip install --quiet --no-deps "$wheel"
"$py" -m pip install --quiet cloudpickle psutil packaging
"$py" -c 'import horovod.torch as hvd; print("build-horovod: horovod", __import__("horovod").__version__, "gloo built:", hvd.gloo_built())'
