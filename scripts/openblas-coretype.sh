#!/usr/bin/env bash
# Prints the OpenBLAS kernel set that suits this CPU (SKYLAKEX with AVX-512, HASWELL with AVX2 and FMA), or
# nothing. Why: Debian 12's OpenBLAS 0.3.21 does not recognise some newer CPUs (seen here: a KVM guest of a
# recent Intel Xeon, which it takes for a "Prescott") and then runs its generic SSE3 kernels: a 2048³ float32
# GEMM drops from ~240 to ~40 GFLOP/s on 2 cores. OPENBLAS_CORETYPE, read when OpenBLAS loads, names the right
# set; the Makefile exports it unless the caller has set it.
set -euo pipefail
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() { for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done; }
if has avx512f avx512bw avx512dq avx512vl; then
  echo SKYLAKEX
elif has avx2 fma; then
  echo HASWELL
fi
