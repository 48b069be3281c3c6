#!/usr/bin/env bash
# Prints, as export lines, the environment of the LibTorch 2.x lane (the torch wheel in .venv-torch/, made by
# scripts/setup-torch-pip.sh). `make test TORCH=pip` uses it; by hand:
#
#   eval "$(scripts/torch-pip-env.sh)"
#   cmake -S . -B build-torch-pip -G Ninja -DCMAKE_PREFIX_PATH="$ATTN_TORCH_CMAKE_PREFIX_PATH" \
#         -DATTN_PYTHON="$ATTN_TORCH_PYTHON" && cmake --build build-torch-pip && (cd build-torch-pip && ctest)
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
# One Python call for what the wheel knows: its directory, and the GPU architectures it was built for
# (sm_75 ... sm_120; the toolkit's nvcc 13 no longer builds the sm_50 that CMake's autodetection falls back to).
info=$("$python" -c '
import os, torch
archs = [a[3:] for a in torch._C._cuda_getArchFlags().split() if a.startswith("sm_")]
print(os.path.dirname(torch.__file__), ";".join(f"{a[:-1]}.{a[-1]}" for a in archs))') ||
  { echo "torch-pip-env: $python cannot import torch (see above): run scripts/setup-torch-pip.sh" >&2; exit 1; }
read -r torch_dir arch_list <<< "$info"
site=$(dirname "$torch_dir")
rpath_link=$(ls -d "$site"/nvidia/*/lib 2>/dev/null | paste -sd:)
if [ -z "$rpath_link" ] || [ -z "$arch_list" ]; then
  echo "torch-pip-env: $site has no nvidia/*/lib or torch lists no GPU architectures: not the environment" \
       "scripts/setup-torch-pip.sh makes" >&2
  exit 1
fi

q() { printf '%q' "$1"; }
echo "export ATTN_TORCH_PYTHON=$(q "$python")"
# share/cmake holds TorchConfig.cmake. The torch folder itself comes too: TorchConfig looks for libc10.so with
# find_library(... PATHS <torch>/lib), which prefers a system libc10.so (Debian's 1.13) over the wheel's unless
# <torch>/lib is on CMAKE_PREFIX_PATH.
echo "export ATTN_TORCH_CMAKE_PREFIX_PATH=$(q "$torch_dir/share/cmake;$torch_dir")"
echo "export CMAKE_PREFIX_PATH=$(q "$torch_dir/share/cmake:$torch_dir${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}")"
echo "export CUDACXX=$(q "$cuda/bin/nvcc")"
echo "export TORCH_CUDA_ARCH_LIST=$(q "$arch_list")"
# The linker resolves libtorch_cuda.so's own libraries to check its symbols. The toolkit's libnccl.so.2 (2.28)
# lacks symbols that torch 2.15 calls; the wheel's (nvidia/nccl/lib) has them. At run time torch's RPATH finds
# the wheel's; at link time -rpath-link must say so, since CMake's -rpath to the toolkit comes first.
echo "export LDFLAGS=$(q "-Wl,-rpath-link,$rpath_link${LDFLAGS:+ $LDFLAGS}")"
