#!/usr/bin/env bash
# docs/python.md's install, as a user runs it: `pip install --no-build-isolation .` of this checkout into a
# fresh virtual environment that sees the 2.x lane's torch, then, from outside the checkout, the installed
# package's own libattn.so checked against PyTorch's SDPA and registered with transformers. CI's last stage
# (.ci/run); needs the lane's .venv-torch (scripts/setup-torch-pip.sh) and PyPI for scikit-build-core.
#
# Usage: scripts/check-python-package.sh [--keep]   (--keep leaves the venv in $ATTN_PACKAGE_VENV)
# Environment: ATTN_PACKAGE_VENV (default: a temporary folder), JOBS (default: nproc).
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  --keep|"") ;;
  *) echo "check-python-package: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
lane_python=${ATTN_TORCH_VENV:-$root/.venv-torch}/bin/python
[ -x "$lane_python" ] || { echo "check-python-package: no $lane_python: run scripts/setup-torch-pip.sh first" >&2; exit 1; }
venv=${ATTN_PACKAGE_VENV:-$(mktemp -d /tmp/attn-package.XXXXXX)}
[ "${1:-}" = --keep ] || trap 'rm -rf "$venv"' EXIT

# A venv of its own (the lane's venv holds exactly its pins), seeing the lane's torch and transformers.
"$lane_python" -m venv "$venv"
site=$("$lane_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/attn-lane-torch.pth"

# The build backend, pinned (pip does not install it without build isolation).
"$venv/bin/pip" install --quiet --disable-pip-version-check scikit-build-core==1.1.2

# docs/python.md's steps: the wheel's CMake prefix path; for a CUDA wheel, nvcc and its architectures.
eval "$(bash "$root/scripts/torch-pip-env.sh")"
export CMAKE_PREFIX_PATH
CMAKE_PREFIX_PATH=$("$venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
export CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)}
started=$SECONDS
"$venv/bin/pip" install --disable-pip-version-check --no-build-isolation "$root"
echo "check-python-package: pip install took $((SECONDS - started)) s"

# From outside the checkout, with no ATTN_LIBRARY: the package's own library.
cd "$venv"
env -u ATTN_LIBRARY -u PYTHONPATH "$venv/bin/python" - <<'EOF'
import math
import torch
import attn_torch
import attn_torch.transformers
from transformers.integrations.sdpa_attention import sdpa_attention_forward

path = str(attn_torch.library_path())
assert "/site-packages/attn_torch/" in path, f"loaded {path}, not the installed package's library"
g = torch.Generator().manual_seed(0)
q = torch.randn(2, 6, 33, 16, generator=g, dtype=torch.float64)
k, v = (torch.randn(2, 2, 33, 16, generator=g, dtype=torch.float64) for _ in range(2))
out, _ = attn_torch.flash_attention(q, k, v, is_causal=True)
want = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1),
                                                        is_causal=True)
err = (out - want).abs().max().item()
assert err < 1e-12, f"flash_attention against SDPA: max abs err {err}"

name = attn_torch.transformers.register()
module = torch.nn.Module()
module.is_causal, module.training, module.num_key_value_groups = True, False, 3
got, _ = attn_torch.transformers.attention_forward(module, q, k, v, None, scaling=0.25)
ref, _ = sdpa_attention_forward(module, q, k, v, None, scaling=0.25)
err = (got - ref).abs().max().item()
assert err < 1e-12, f"attention_forward against transformers' sdpa_attention_forward: max abs err {err}"
print(f"check-python-package: attn_torch {attn_torch.__version__} from {path}; registered as {name!r}; "
      f"matches SDPA and transformers' sdpa_attention_forward")
EOF
