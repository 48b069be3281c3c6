#!/usr/bin/env bash
# Prints, as export lines, the environment of the LibTorch 2.x lane (the torch wheel in .venv-torch/, made by
# scripts/setup-torch-pip.sh). `make test TORCH=pip` uses it; by hand:
#
#   eval "$(scripts/torch-pip-env.sh)"
#   cmake -S . -B build-torch-pip -G Ninja -DCMAKE_PREFIX_PATH="$ATTN_TORCH_CMAKE_PREFIX_PATH" \
#         -DATTN_PYTHON="$ATTN_TORCH_PYTHON" -DTORCH_CUDA_ARCH_LIST="$TORCH_CUDA_ARCH_LIST" &&
#     cmake --build build-torch-pip && (cd build-torch-pip && ctest)
#
# That is the README's recipe for any torch wheel, nothing more: attn's CMake finds the wheel's own c10 and its
# nvidia-* libraries itself (cmake/torch_isolation.cmake), so that every run of the lane tests the recipe.
#
# Environment: ATTN_TORCH_VENV (default .venv-torch in the repo), CUDA_HOME (default /usr/local/cuda).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${ATTN_TORCH_VENV:-$root/.venv-torch}
cuda=${CUDA_HOME:-/usr/local/cuda}
python=$venv/bin/python

if [ ! -f "$venv/attn-torch-pip.stamp" ]; then
  echo "torch-pip-env: no complete environment at $venv: run scripts/setup-torch-pip.sh first" >&2
  exit 1
fi
if [ ! -x "$cuda/bin/nvcc" ]; then
  echo "torch-pip-env: no nvcc at $cuda/bin/nvcc: the wheel's LibTorch is a CUDA build and its CMake config" \
       "needs the CUDA toolkit; set CUDA_HOME" >&2
  exit 1
fi
# One Python call for what the wheel knows: where its CMake config is, and the GPU architectures it was built for
# (sm_75 ... sm_120; the toolkit's nvcc 13 no longer builds the sm_50 that CMake's autodetection falls back to).
info=$("$python" -c '
import torch
archs = [a[3:] for a in torch._C._cuda_getArchFlags().split() if a.startswith("sm_")]
print(torch.utils.cmake_prefix_path, ";".join(f"{a[:-1]}.{a[-1]}" for a in archs))') ||
  { echo "torch-pip-env: $python cannot import torch (see above): run scripts/setup-torch-pip.sh" >&2; exit 1; }
read -r cmake_prefix arch_list <<< "$info"
if [ -z "$arch_list" ]; then
  echo "torch-pip-env: the torch of $python lists no GPU architectures: not the environment" \
       "scripts/setup-torch-pip.sh makes" >&2
  exit 1
fi

q() { printf '%q' "$1"; }
echo "export ATTN_TORCH_PYTHON=$(q "$python")"
echo "export ATTN_TORCH_CMAKE_PREFIX_PATH=$(q "$cmake_prefix")"
echo "export CUDACXX=$(q "$cuda/bin/nvcc")"
echo "export TORCH_CUDA_ARCH_LIST=$(q "$arch_list")"
