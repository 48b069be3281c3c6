#!/usr/bin/env bash
# Makes the LibTorch 2.x lane's virtual environment, .venv-torch/ (git-ignored): PyPI's torch wheel and the few
# packages it needs here, exactly as pinned in scripts/torch-pip.requirements. Reuses the environment when it is
# complete and was made from the requirements as they are now; otherwise makes it anew. Checks it before use:
# Python (import torch, CPU ops, NumPy, torch.jit, torch.export, torch.compile) and C++ (a CMake project that
# finds the wheel's LibTorch, compiles C++ and CUDA, links and runs on the CPU).
#
#   scripts/setup-torch-pip.sh                              # downloads from PyPI (about 1 GB) or pip's cache
#   PIP_FIND_LINKS=/tmp/wheels scripts/setup-torch-pip.sh   # also takes wheels from a folder
#
# Environment: PYTHON (the interpreter that makes the venv, default python3), ATTN_TORCH_VENV (default
# .venv-torch in the repo), CUDA_HOME (default /usr/local/cuda). docs/torch-pip-lane.md has sizes and times.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${ATTN_TORCH_VENV:-$root/.venv-torch}
requirements=$root/scripts/torch-pip.requirements
check=$root/scripts/torch-pip-check
python=${PYTHON:-python3}
stamp=$venv/attn-torch-pip.stamp
start=$(date +%s)

say() { echo "setup-torch-pip: $*"; }
fail() { echo "setup-torch-pip: error: $*" >&2; exit 1; }

# The stamp is written last, after every check passed: it names the requirements the venv was made from.
want_stamp=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want_stamp" ]; then
  say "reusing $venv (made from the current $(basename "$requirements"); full checks passed when it was made)"
  "$venv/bin/python" "$check/check.py" "$requirements" ||
    fail "$venv is not usable any more; delete it and run this script again"
  exit 0
fi

command -v "$python" >/dev/null || fail "no '$python' to make the venv with; set PYTHON"
if [ -e "$venv" ]; then
  say "$venv is incomplete or was made from other pins: removing it"
  rm -rf "$venv"
fi
say "creating $venv with $("$python" --version 2>&1) ($(command -v "$python"))"
"$python" -m venv "$venv" || fail "'$python -m venv' failed"

say "installing the pins of $requirements with --no-deps (torch is a 540 MB wheel)"
install_start=$(date +%s)
"$venv/bin/python" -m pip install --no-input --disable-pip-version-check --no-deps -r "$requirements" ||
  fail "pip install failed (see above)"
say "installed in $(($(date +%s) - install_start)) s; the venv takes $(du -sh "$venv" | cut -f1)"

say "checking Python: the installed set, import torch, CPU ops, NumPy, torch.jit, torch.export, torch.compile"
"$venv/bin/python" "$check/check.py" "$requirements" --full || fail "the Python checks failed (see above)"

# The C++ check reads the lane's environment (scripts/torch-pip-env.sh), which wants the stamp: it is written
# now and removed again on any way out but success.
say "checking C++: find_package(Torch), C++ and CUDA compiled, linked and run (about a minute)"
echo "$want_stamp" > "$stamp"
build=$(mktemp -d)
ready=0
trap 'rm -rf "$build"; [ "$ready" = 1 ] || rm -f "$stamp"' EXIT
env_lines=$("$root/scripts/torch-pip-env.sh") || fail "scripts/torch-pip-env.sh failed (see above)"
eval "$env_lines"
# The check is a plain find_package(Torch) project, not attn, so it does itself what attn's CMake does for it
# (cmake/torch_isolation.cmake), as any such project beside Debian's libtorch-dev must: the torch folder on the
# prefix path, else TorchConfig links Debian's libc10.so; -rpath-link to the nvidia-* wheels, else the linker
# checks libtorch_cuda.so against the toolkit's older NCCL.
torch_dir=$(dirname "$(dirname "$ATTN_TORCH_CMAKE_PREFIX_PATH")")
rpath_link=$(ls -d "$(dirname "$torch_dir")"/nvidia/*/lib 2>/dev/null | paste -sd: || true)
[ -n "$rpath_link" ] || fail "$(dirname "$torch_dir") has no nvidia/*/lib: the nvidia-* wheels are missing"
if ! { cmake -S "$check" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
         -DCMAKE_PREFIX_PATH="$ATTN_TORCH_CMAKE_PREFIX_PATH;$torch_dir" \
         -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$rpath_link" > "$build/configure.log" 2>&1 &&
       cmake --build "$build" -j "${JOBS:-$(nproc)}" > "$build/build.log" 2>&1 &&
       "$build/torch_pip_check"; }; then
  cat "$build"/*.log >&2
  fail "the C++ check failed (its configure and build output is above)"
fi
ready=1
say "ready in $(($(date +%s) - start)) s: $venv ($(du -sh "$venv" | cut -f1))"
