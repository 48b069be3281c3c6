#!/usr/bin/env bash
# attn on a CUDA machine, in one command: builds attn against that machine's LibTorch with every core, runs the
# whole suite with its CUDA cases, then the GPU benchmarks and the CPU kernel against PyTorch's, and writes the
# logs, the JSON records and a summary under $OUT. Made for a lent GPU machine (an H100 or H200 with a CUDA
# PyTorch, nvcc, cmake and ninja, and nothing to fetch from): every stage is time-boxed and the summary is
# printed last. docs/testing.md says how it was run.
#
#   scripts/gpu-check.sh fetch-debs     # here, once: the Debian packages the build needs, into .gpu-debs/
#   scripts/gpu-check.sh [STAGE ...]    # there: stages env deps configure build test bench cpu (default: all),
#                                       # amx (the host CPU's AMX route) and profile (where the host CPU's time
#                                       # goes in the bfloat16 rows), not in the default run
#
# Environment:
#   OUT             where logs and results go (default: gpu-check-out/ in the repository)
#   ATTN_GPU_DEBS   the .deb folder (default: .gpu-debs/); unpacked with dpkg -x into a prefix of its own,
#                   never into /
#   ATTN_GPU_BUILD  the build directory (default: build-gpu/)
#   PYTHON          the Python whose torch attn builds against (default: python3)
#   GPU_CHECK_QUICK=1  shorter benchmarks (fewer reps and shapes), for a second try in a tight budget
#   GPU_CHECK_LIMIT_<stage>  seconds for that stage instead of its default (e.g. GPU_CHECK_LIMIT_build=300)
#   GPU_CHECK_CPU_FILTER     the cpu stage's --filter (e.g. T=2048), to fit a tight budget
#   GPU_CHECK_TARGETS        build only these targets (e.g. "attn attn_tests attn-bench"), for a second try
#   GPU_CHECK_CTEST_REGEX    run only the CTest tests it matches (e.g. cuda), for a second try
#   GPU_CHECK_AMX_MODES      the amx stage's bench runs (default "on off": with the tiles and without them)
#   GPU_CHECK_PROFILE        the profile stage's "CONFIG@THREADS" items (default: three bfloat16 rows)
#   GPU_CHECK_CMAKE_ARGS     more arguments for the configure stage (e.g. -DATTN_CUDA_KERNELS=OFF for a CPU-only
#                            check such as the amx stage's)
#
# Exit status: 0 when every stage it ran passed, 1 otherwise (the summary names the stage).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-check-out}
debs=${ATTN_GPU_DEBS:-$root/.gpu-debs}
build=${ATTN_GPU_BUILD:-$root/build-gpu}
python=${PYTHON:-python3}
prefix=/tmp/attn-gpu-deps
jobs=$(nproc)
quick=${GPU_CHECK_QUICK:-0}

# The Debian 12 packages that a bare CUDA machine lacks: GoogleTest, fmt, CLI11, nlohmann-json, SLEEF (the CPU
# kernels' AVX variants), Gloo's headers (ring attention), PCRE2 and utf8proc (configure only: the text apps
# are not built there), and gperftools' CPU profiler for the profile stage (a timer signal in the process: it
# needs no perf events, which that machine has not).
deb_packages=(libgtest-dev libgmock-dev libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev libsleef-dev libsleef3
              libgloo-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev
              libutf8proc2 libgoogle-perftools4 libtcmalloc-minimal4 libunwind8 google-perftools)

if [ "${1:-}" = fetch-debs ]; then
  mkdir -p "$debs"
  (cd "$debs" && apt-get download "${deb_packages[@]}") || exit 1
  du -sh "$debs"
  exit 0
fi

summary=$out/summary.txt
say() { echo "$*" | tee -a "$summary"; }
failed=()

# run_stage NAME SECONDS COMMAND...: the command's output to $out/NAME.log, its time and status to the summary.
run_stage() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  echo "== gpu-check: $name (at most ${limit} s) at $(date -u +%H:%M:%S)"
  # timeout runs a program, not a shell function: the stage runs in a fresh copy of this script.
  timeout --kill-after=10 "$limit" bash "$0" __stage "$@" > "$out/$name.log" 2>&1
  local rc=$?
  local took=$((SECONDS - start))
  if [ $rc -eq 0 ]; then
    say "$name: ok in ${took} s"
  else
    [ $rc -eq 124 ] && say "$name: TIMED OUT after ${took} s" || say "$name: FAILED (exit $rc) in ${took} s"
    tail -n 40 "$out/$name.log"
    failed+=("$name")
  fi
  return $rc
}

stage_env() {
  set -x
  date -u
  nvidia-smi || true
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv || true
  command -v nvcc && nvcc --version
  g++ --version | head -1
  cmake --version | head -1
  ninja --version
  lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-400
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu",
torch.cuda.is_available() and torch.cuda.get_device_name(0), "cudnn", torch.backends.cudnn.version())'
  "$python" -c 'import transformers; print("transformers", transformers.__version__)' || true
}

stage_deps() {
  [ -d "$debs" ] || { echo "no .deb folder at $debs: run scripts/gpu-check.sh fetch-debs here first"; return 1; }
  rm -rf "$prefix" && mkdir -p "$prefix"
  for f in "$debs"/*.deb; do
    if command -v dpkg-deb > /dev/null; then
      dpkg-deb -x "$f" "$prefix" || return 1
    else  # a .deb is an ar archive holding data.tar.*
      (cd "$prefix" && ar p "$f" "$(ar t "$f" | grep '^data.tar')" | tar -x -a -f - 2> /dev/null ||
        ar p "$f" "$(ar t "$f" | grep '^data.tar')" | tar -x -J -f -) || return 1
    fi
  done
  ls "$prefix/usr/include" | head -30
}

# What CMake and the linker need from this machine's torch: its CMake folder, the GPU architecture to build
# for (the GPU's own, or the wheel's list where there is no GPU), and its nvidia/*/lib for -rpath-link.
torch_env() {
  local info
  info=$("$python" - << 'EOF'
import glob, os, torch
d = os.path.dirname(torch.__file__)
if torch.cuda.is_available():
    archs = "%d.%d" % torch.cuda.get_device_capability(0)
else:
    archs = ";".join(f"{a[3:-1]}.{a[-1]}" for a in torch._C._cuda_getArchFlags().split() if a.startswith("sm_"))
libs = ":".join(sorted(glob.glob(os.path.join(os.path.dirname(d), "nvidia", "*", "lib"))))
print(d, archs, libs or "-")
EOF
) || return 1
  read -r torch_dir arch_list nvidia_libs <<< "$info"
  export CUDACXX=${CUDACXX:-$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2> /dev/null)}
  # For every CMake run, the package consumer's test too: LibTorch's config looks its libraries up on the
  # prefix path, ahead of any other LibTorch on the system.
  export CMAKE_PREFIX_PATH="$torch_dir/share/cmake:$torch_dir:$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  [ "$nvidia_libs" = - ] || export LDFLAGS="-Wl,-rpath-link,$nvidia_libs"
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Headers found by __has_include rather than by a CMake package (Gloo's, for make_gloo_group), searched after
  # every -isystem directory as the system's own would be, so that LibTorch's bundled fmt still wins.
  export CPLUS_INCLUDE_PATH="$prefix/usr/include${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}"
  export PKG_CONFIG_PATH="$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig"
}

stage_configure() {
  torch_env || return 1
  rm -rf "$build"
  # The apps that need no tokenizer (attn-bench, attn-export, attn-ring, attn-demo); the model apps need the
  # model packages, which a GPU machine does not have.
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_dir/share/cmake;$torch_dir;$prefix/usr" \
    -DCMAKE_INCLUDE_PATH="$prefix/usr/include" -DCMAKE_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu" \
    -DATTN_PYTHON="$(command -v "$python")" -DTORCH_CUDA_ARCH_LIST="$arch_list" \
    -DATTN_CUDA_ARCHITECTURES="$(echo "$arch_list" | tr -d . | tr ';' '\n' | awk '$1 >= 80' | paste -sd';')" \
    -DATTN_BUILD_MODEL_APPS=OFF ${GPU_CHECK_CMAKE_ARGS:-}
}

stage_build() {
  torch_env || return 1
  local targets=()
  [ -n "${GPU_CHECK_TARGETS:-}" ] && targets=(--target $GPU_CHECK_TARGETS)
  cmake --build "$build" -j "$jobs" "${targets[@]}"
}

# The whole suite. On a GPU, a skipped CUDA case is a failure: the point of the run is that none skips.
stage_test() {
  torch_env || return 1
  local has_gpu
  has_gpu=$("$python" -c 'import torch; print(int(torch.cuda.is_available()))')
  # As many suites at once as there are cores, each on 2 threads (LibTorch's default, every core, would put
  # cores² threads on the cores).
  local only=()
  [ -n "${GPU_CHECK_CTEST_REGEX:-}" ] && only=(-R "$GPU_CHECK_CTEST_REGEX")
  (cd "$build" && OMP_NUM_THREADS=2 ctest -j "$jobs" --output-on-failure --timeout 900 "${only[@]}" \
     --output-junit "$out/ctest-junit.xml")
  local rc=$?
  "$python" "$root/scripts/gpu-check-count.py" "$build/Testing/Temporary/LastTest.log" --require-gpu "$has_gpu" \
    --json "$out/cuda-cases.json"
  local count_rc=$?
  [ $rc -eq 0 ] && [ $count_rc -eq 0 ]
}

bench() { "$build/apps/bench/attn-bench" "$@"; }

stage_bench() {
  torch_env || return 1
  local reps=()
  [ "$quick" = 1 ] && reps=(--reps 5)
  bench --suite gpu --device cuda "${reps[@]}" --json "$out/bench-gpu.json" &&
    bench --routes --device cuda --json "$out/routes-cuda.json"
}

# attn's CPU kernel on this machine's cores against its PyTorch's CPU flash attention (the peer suite).
stage_cpu() {
  torch_env || return 1
  local filter=()
  [ -n "${GPU_CHECK_CPU_FILTER:-}" ] && filter=(--filter "$GPU_CHECK_CPU_FILTER")
  OMP_NUM_THREADS=$jobs bench --suite peer --threads "$jobs" --reps 3 "${filter[@]}" --json "$out/bench-cpu.json"
}

# The GPU machines' hosts are Intel Xeons with AMX (seen on the H200's, 2026-11-27): attn's AMX route there, its
# tests (the route's own, the fused kernel's and the variants' bfloat16 cases), then the bfloat16 peer rows with
# the tiles and without them (ATTN_AMX=off: the route the CPU takes otherwise).
stage_amx() {
  torch_env || return 1
  if ! grep -qw amx_bf16 /proc/cpuinfo; then
    echo "this CPU has no AMX: nothing to check"
    return 0
  fi
  local rc=0
  # Every case with an AMX part: the route's own, the fused kernel's, the variants' and varlen's bfloat16 cases,
  # the decode kernel's and the token tree's, and the few-row linear kernel's.
  local filter='*Bf16*:*AmxRoute*:*ProductRoute*:Amx.*:*FusedKernel*/avx512_bf16*:*Variants*Fused_BFloat16*'
  filter+=':*Varlen*Fused_BFloat16*:*_amx:*VariantDecode*:*TokenTree*:*LinearRows*:*Linear.*'
  OMP_NUM_THREADS=$jobs timeout 200 "$build/tests/attn_tests" --gtest_filter="${GPU_CHECK_AMX_TESTS:-$filter}" \
    > "$out/amx-tests.log" 2>&1 || rc=1
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? from .* ran|AMX|bfloat16 route on' "$out/amx-tests.log" | head -60
  # The tiles' own rate on this CPU, without attn or LibTorch (the ceiling beside oneDNN's GEMM), and on the
  # blocks of a forward pass's products as attn's first AMX kernel walked them.
  g++ -O2 -std=c++17 -mamx-tile -mamx-bf16 -pthread "$root/scripts/bench-amx-peak.cpp" -o "$out/amx-peak" &&
    (taskset -c 0 "$out/amx-peak" 1 && taskset -c 0,1 "$out/amx-peak" 2 && "$out/amx-peak" "$jobs") |
    tee "$out/amx-peak.txt" || rc=1
  local reps=3
  [ "$quick" = 1 ] && reps=2
  for amx in ${GPU_CHECK_AMX_MODES:-on off}; do
    ATTN_AMX=$amx OMP_NUM_THREADS=$jobs timeout 150 "$build/apps/bench/attn-bench" --suite peer --filter bfloat16 \
      --threads "$jobs" --reps "$reps" --json "$out/amx-bench-$amx.json" > "$out/amx-bench-$amx.txt" 2>&1 || rc=1
    echo "== ATTN_AMX=$amx"
    cat "$out/amx-bench-$amx.txt"
  done
  return $rc
}

# Where the host CPU's time goes in the bfloat16 rows that trail PyTorch most (issue 32): each configuration in
# one process (attn-bench --run-one) under gperftools' sampling profiler, then the functions with the most
# samples. GPU_CHECK_PROFILE lists "CONFIG@THREADS" items instead of the default ones.
stage_profile() {
  torch_env || return 1
  local profiler=$prefix/usr/lib/x86_64-linux-gnu/libprofiler.so.0 pprof=$prefix/usr/bin/google-pprof
  [ -f "$profiler" ] || { echo "no $profiler: run scripts/gpu-check.sh fetch-debs here, then the deps stage"; return 1; }
  local items=${GPU_CHECK_PROFILE:-"core/fused/T=1024/noncausal/bfloat16@$jobs train/fused/T=1024/noncausal/bfloat16@$jobs core/fused/T=2048/noncausal/bfloat16@2"}
  local rc=0 item config threads reps name cpus
  for item in $items; do
    config=${item%@*} threads=${item#*@}
    name=$(echo "$config-t$threads" | tr '/=' '__')
    cpus=$(seq -s, 0 $((threads - 1)))
    # About 2 s of work per profile, so that the timer (100 Hz of CPU time) takes a few thousand samples: the
    # reps from a short run without the profiler.
    local ms
    ms=$(taskset -c "$cpus" env OMP_NUM_THREADS="$threads" "$build/apps/bench/attn-bench" --run-one "$config" \
           --warmup 1 --reps 3 --threads "$threads" | sed -n 's/.*ms_median=\([0-9.]*\).*/\1/p')
    reps=$(awk -v ms="${ms:-0}" 'BEGIN { r = ms > 0 ? int(2000 / ms) : 20; print (r < 5 ? 5 : r > 2000 ? 2000 : r) }')
    echo "== $config on $threads threads (cpus $cpus), $reps reps"
    # The profiler is preloaded into attn-bench alone: its timer outlives an exec, and would kill the program
    # that a preloaded taskset ran.
    taskset -c "$cpus" env OMP_NUM_THREADS="$threads" CPUPROFILE="$out/$name.prof" \
      LD_PRELOAD="$profiler" "$build/apps/bench/attn-bench" --run-one "$config" --warmup 2 --reps $reps \
      --threads "$threads" || rc=1
    perl "$pprof" --text "$build/apps/bench/attn-bench" "$out/$name.prof" > "$out/$name.txt" 2> /dev/null || rc=1
    head -32 "$out/$name.txt"
  done
  return $rc
}

# Internal: run one stage function (run_stage calls the script so, under timeout).
if [ "${1:-}" = __stage ]; then
  "$2"
  exit $?
fi

mkdir -p "$out"
: > "$summary"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(env deps configure build test bench cpu)
# Seconds per stage: the build is the long one (~3 min on 16 cores, measured here on 2 cores as docs/testing.md
# says); the rest is bounded so that one stage that hangs leaves time for the others.
declare -A limits=([env]=60 [deps]=60 [configure]=180 [build]=600 [test]=420 [bench]=300 [cpu]=240 [amx]=520
                   [profile]=120)
for stage in "${stages[@]}"; do
  if [ -z "${limits[$stage]:-}" ]; then
    echo "gpu-check: unknown stage '$stage' (env deps configure build test bench cpu amx profile)"
    exit 2
  fi
  override=GPU_CHECK_LIMIT_$stage  # e.g. GPU_CHECK_LIMIT_build=300
  [ -n "${!override:-}" ] && limits[$stage]=${!override}
  run_stage "$stage" "${limits[$stage]}" "stage_$stage"
  # Nothing after a failed build or configure can run.
  if [ $? -ne 0 ] && { [ "$stage" = configure ] || [ "$stage" = build ] || [ "$stage" = deps ]; }; then break; fi
done

echo
echo "== gpu-check summary ($out)"
cat "$summary"
[ -f "$out/cuda-cases.txt" ] && cat "$out/cuda-cases.txt"
[ ${#failed[@]} -eq 0 ]
