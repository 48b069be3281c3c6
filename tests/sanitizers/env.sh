# shellcheck shell=bash
# Runtime options of the sanitizer build (ATTN_SANITIZE / ATTN_BUILD_FUZZERS, clang-14): sourced by
# scripts/sanitize-and-fuzz.sh, or by hand before running build-sanitize's tests or fuzzers:
#
#   source tests/sanitizers/env.sh && (cd build-sanitize && ctest -E '^(python\..*|package\.consumer)$')
#
# Every finding is fatal: ASan halts on its first error (its default), UBSan too (the build has
# -fno-sanitize-recover=undefined, and halt_on_error=1 here), and LeakSanitizer fails the process at exit.
_attn_sanitizers_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Readable stacks (function, file:line): Debian's llvm-14 package has the symbolizer.
if [ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]; then
  export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
fi

# detect_leaks: LeakSanitizer at exit (and during fuzzing).
# detect_stack_use_after_return, check_initialization_order, strict_init_order: the checks ASan leaves off by
#   default; they cost nothing measurable here.
# handle_abort: a stack for std::terminate (an exception nothing caught) and other aborts.
# color=never: plain CI logs.
# allocator_may_return_null: an allocation larger than any machine has fails as malloc's does (LibTorch then throws,
#   and attn names the options that asked for it: a KVCache test does so), instead of halting the process. The
#   fuzzers' own -malloc_limit_mb still reports an input that makes attn allocate what it should have refused.
export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:handle_abort=1:allocator_may_return_null=1:color=never"

# Suppressions name functions inside LibTorch only; lsan.supp says why for each.
export LSAN_OPTIONS="suppressions=${_attn_sanitizers_dir}/lsan.supp:print_suppressions=1"

export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:report_error_type=1:color=never"

# Added to ASAN_OPTIONS where LibTorch's zip reader runs on hostile files (the weight-file tests, the torch_zip
# fuzzer). ASan records allocation stacks with its frame-pointer unwinder, which stops at the first frame
# inside LibTorch (Debian builds it without frame pointers), so a leak inside LibTorch shows only an anonymous
# libtorch_cpu.so address. A suppression could then name nothing finer than the whole library, which would
# also hide tensors leaked by attn. The full unwinder sees LibTorch's exported function names, so lsan.supp
# can name the one leaking function; it makes every process ~3x slower (LibTorch's static initialisers
# allocate thousands of times), hence only there. Ten frames reach from malloc to LibTorch's entry point.
export ATTN_ASAN_FULL_UNWIND="fast_unwind_on_malloc=0:malloc_context_size=10"

unset _attn_sanitizers_dir
