#!/usr/bin/env bash
# The robustness run CI does after `make test` (.ci/run): attn, its tests and apps built with clang-14's
# AddressSanitizer + UndefinedBehaviorSanitizer, the GoogleTest suite run under them, then a libFuzzer target
# per weight-file reader run for a bounded time. Any sanitizer report, failing test or fuzzer crash fails it.
#
#   scripts/sanitize-and-fuzz.sh                     # on a fresh Debian 12; installs what is missing (apt)
#   FUZZ_SECONDS=600 scripts/sanitize-and-fuzz.sh    # fuzz longer (default 60 s per fuzzer)
#
# Environment: FUZZ_SECONDS (per fuzzer, default 60), BUILD_DIR (default build-sanitize), JOBS (default nproc).
# Runtime options and suppressions: tests/sanitizers/ (env.sh, lsan.supp). A fuzzer's crashing input is saved
# as BUILD_DIR/fuzz/artifacts/<fuzzer>-<kind>-<hash>; rerun it with ./BUILD_DIR/tests/fuzz/<fuzzer> <file>.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-sanitize}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
JOBS=${JOBS:-$(nproc)}
FUZZERS=(torch_zip torch_legacy safetensors)
case "$FUZZ_SECONDS" in '' | *[!0-9]*) echo "FUZZ_SECONDS must be a number of seconds, got '$FUZZ_SECONDS'" >&2; exit 2 ;; esac
# OpenBLAS's kernels for this CPU, as the Makefile sets them (scripts/openblas-coretype.sh), for speed. This
# clang build runs attn's tile loops on one thread, so each tile GEMM is threaded by OpenBLAS itself, whose
# generic and AVX2 (Haswell) kernels round differently for different thread counts: the thread-count test
# compares to float rounding in this build (cpu_kernel_info().parallel_loops), bitwise in the GCC build.
if [ -z "${OPENBLAS_CORETYPE+set}" ]; then
  coretype=$(bash scripts/openblas-coretype.sh)  # the working directory is the repository root
  [ -z "$coretype" ] || export OPENBLAS_CORETYPE=$coretype
fi

script_start=$(date +%s)
summary=()
failed=0
phase_start=$script_start
phase_done() {  # phase_done NAME RESULT
  local now
  now=$(date +%s)
  summary+=("$(printf '%-34s %-58s %5ds' "$1" "$2" $((now - phase_start)))")
  phase_start=$now
}
print_summary() {
  echo
  echo "== sanitize-and-fuzz summary"
  printf '%s\n' "${summary[@]}"
  printf '%-93s %5ds\n' "total" $(($(date +%s) - script_start))
}

# --- 1. Packages: attn's (scripts/install-deps.sh), then clang-14, its sanitizer and libFuzzer runtimes
# (libclang-rt-14-dev) and llvm-14 (llvm-symbolizer, for readable stacks).
bash scripts/install-deps.sh clang-14 libclang-rt-14-dev llvm-14
phase_done "packages" "ok"

# The sanitizers' runtime options, for everything below (the build runs the test binary to list its tests).
# shellcheck disable=SC1091
source tests/sanitizers/env.sh

# --- 2. Build: one clang tree with the sanitizers everywhere and the fuzzers (RelWithDebInfo: optimised, with
# line numbers in the reports). Only the kernel variants this CPU runs (ATTN_KERNEL_VARIANTS=host): a sanitizer
# checks code as it runs, and the GCC lanes compile every variant. AMX's tile instructions run in software
# (ATTN_AMX_EMULATION), so that on a CPU with AVX512-BF16, AMX or not, the AMX route's cases run here too, and the
# sanitizers see each tile load and store as the memory it reads and writes.
CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DATTN_SANITIZE=ON -DATTN_BUILD_FUZZERS=ON \
  -DATTN_KERNEL_VARIANTS=host -DATTN_AMX_EMULATION=ON >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
phase_done "build (clang-14, ASan+UBSan)" "ok"

# --- 3. The test suite under the sanitizers. GoogleTest's cases run in JOBS shards, one process each
# (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX), rather than one process per case as `make test` runs them: under
# ASan, loading LibTorch takes seconds, and 609 processes took 14 to 28 min. The weight-file suites run apart,
# with the full unwinder (tests/sanitizers/env.sh says why). Then the ctest tests that are not GoogleTest
# cases: apps.* and layers.*. Left out: the python.* tests, which load libattn.so into /usr/bin/python3
# (torch.ops.load_library), a process without the ASan runtime, so an instrumented library cannot load there;
# and package.consumer, which installs this build and compiles a separate project against it (a packaging
# test, with no code of attn's to check beyond what the suite runs). Both run in `make test`.
gtest_binary=$BUILD_DIR/tests/attn_tests
weight_files='Files/*:HostileFiles.*:WeightFiles.*:WeightFiles/*'
mkdir -p "$BUILD_DIR/Testing"
rm -f "$BUILD_DIR"/Testing/sanitize-*.log
run_shards() {  # run_shards NAME GTEST_FILTER: the matching cases in JOBS processes; prints each failure
  local name=$1 filter=$2 status=0 i log
  local pids=()
  for ((i = 0; i < JOBS; i++)); do
    GTEST_TOTAL_SHARDS=$JOBS GTEST_SHARD_INDEX=$i "$gtest_binary" --gtest_filter="$filter" --gtest_brief=1 \
      >"$BUILD_DIR/Testing/sanitize-$name-$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    log=$BUILD_DIR/Testing/sanitize-$name-$i.log
    if ! wait "${pids[$i]}"; then
      status=1
      # A failed case, or a sanitizer report that ended the process: show the end of the shard's output.
      echo "-- $name shard $i failed; the end of $log:"
      tail -n 60 "$log"
    fi
  done
  return $status
}
count() {  # count LABEL: the sum over the shards' logs of GoogleTest's "[  LABEL  ] N tests" lines
  cat "$BUILD_DIR"/Testing/sanitize-*.log | awk -v label="$1" \
    'index($0, "[  " label) == 1 && $4 ~ /^[0-9]+$/ && $5 ~ /^tests?[.,]/ {s += $4} END {print s + 0}'
}
suite_ok=1
run_shards suite "-$weight_files" || suite_ok=0
ASAN_OPTIONS="$ASAN_OPTIONS:$ATTN_ASAN_FULL_UNWIND" run_shards weight-files "$weight_files" || suite_ok=0
cases_total=$("$gtest_binary" --gtest_list_tests | grep -c '^  ' || true)
passed=$(count "PASSED  ]")
skipped=$(count "SKIPPED ]")
others_log=$BUILD_DIR/Testing/sanitize-ctest.log
ctest --test-dir "$BUILD_DIR" -j "$JOBS" --output-on-failure -R '^(apps|layers)\.' >"$others_log" 2>&1 || {
  suite_ok=0
  grep -v -E '^ *Start +[0-9]+:|Test +#[0-9]+: .*Passed ' "$others_log" | grep -v '^$'
}
others=$(sed -n 's/.*tests passed, [0-9]* tests failed out of \([0-9]*\)/\1/p' "$others_log")
# Context parallelism: one process that starts its own instrumented ranks (tests/distributed), about a minute.
ring_log=$BUILD_DIR/Testing/sanitize-ring.log
"$BUILD_DIR/tests/attn_ring_tests" --gtest_brief=1 >"$ring_log" 2>&1 || {
  suite_ok=0
  echo "-- attn_ring_tests failed; the end of $ring_log:"
  tail -n 60 "$ring_log"
}
ring_cases=$(awk 'index($0, "[  PASSED  ]") == 1 {print $4}' "$ring_log")
if [ "$suite_ok" = 1 ]; then
  phase_done "tests under ASan+UBSan" "$cases_total cases: $passed passed, $skipped skipped (CUDA, or a CPU extension this CPU lacks); ${ring_cases:-0} multi-process (context parallelism); $others more (apps, layers)"
else
  phase_done "tests under ASan+UBSan" "FAILED (logs: $BUILD_DIR/Testing/sanitize-*.log)"
  failed=1
fi

# --- 4. Seed corpora: valid files of each format (tests/fuzz/make_corpus.py, reusing the weight files that
# tests/reference/make_weights.py wrote for the test suite), and a dictionary per format.
/usr/bin/python3 tests/fuzz/make_corpus.py --out "$BUILD_DIR/fuzz/seeds" --weights "$BUILD_DIR/tests/weights"
phase_done "seed corpora" "ok"

# --- 5. The fuzzers, FUZZ_SECONDS each, side by side (each is one single-threaded process, so together they take
# FUZZ_SECONDS, not three times it). New inputs go to fuzz/corpus/<fuzzer> (kept between local runs), the seeds
# are read from fuzz/seeds/<fuzzer>. A crash, sanitizer report, leak, hang (-timeout, seconds per input) or
# out-of-memory (-rss_limit_mb; -malloc_limit_mb follows it) stops the fuzzer with a non-zero status and saves
# the input. -max_len: the seeds are at most ~6 KB; 16 KB leaves room to grow them.
mkdir -p "$BUILD_DIR/fuzz/artifacts"
declare -A fuzzer_pid
fuzz_start=$(date +%s)
for f in "${FUZZERS[@]}"; do
  corpus=$BUILD_DIR/fuzz/corpus/$f
  mkdir -p "$corpus"
  options=$ASAN_OPTIONS
  [ "$f" = torch_zip ] && options="$ASAN_OPTIONS:$ATTN_ASAN_FULL_UNWIND"  # LibTorch's zip reader: env.sh
  ASAN_OPTIONS=$options "$BUILD_DIR/tests/fuzz/fuzz_$f" -max_total_time="$FUZZ_SECONDS" -timeout=30 \
    -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 -print_funcs=0 -dict="$BUILD_DIR/fuzz/seeds/$f.dict" \
    -artifact_prefix="$BUILD_DIR/fuzz/artifacts/fuzz_$f-" "$corpus" "$BUILD_DIR/fuzz/seeds/$f" \
    >"$BUILD_DIR/fuzz/$f.log" 2>&1 &
  fuzzer_pid[$f]=$!
done
for f in "${FUZZERS[@]}"; do
  corpus=$BUILD_DIR/fuzz/corpus/$f
  log=$BUILD_DIR/fuzz/$f.log
  status=0
  wait "${fuzzer_pid[$f]}" || status=$?
  phase_start=$fuzz_start  # each line gives the time since the fuzzers started
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if [ "$status" = 0 ]; then
    phase_done "fuzz_$f" "${runs:-?} inputs (${speed:-?}/s), no crash; corpus $(find "$corpus" -type f | wc -l) files"
  else
    artifact=$(sed -n "s/.*Test unit written to //p" "$log" | tail -1)
    echo "== fuzz_$f failed (status $status); its report ($log):"
    grep -m1 -B2 -A40 -E '==[0-9]+==ERROR|runtime error|ERROR: libFuzzer|deadly signal' "$log" || tail -60 "$log"
    unwind=""
    # shellcheck disable=SC2016  # printed for the reader to paste, not expanded here
    [ "$f" = torch_zip ] && unwind=' ASAN_OPTIONS="$ASAN_OPTIONS:$ATTN_ASAN_FULL_UNWIND"'
    echo "== reproduce: source tests/sanitizers/env.sh &&$unwind $BUILD_DIR/tests/fuzz/fuzz_$f ${artifact:-<input>}"
    phase_done "fuzz_$f" "FAILED after ${runs:-?} inputs: ${artifact:-see $log}"
    failed=1
  fi
done

print_summary
exit "$failed"
