# Robustness builds (scripts/sanitize-and-fuzz.sh runs both, with clang-14): AddressSanitizer and
# UndefinedBehaviorSanitizer over attn, its tests and apps; libFuzzer targets for the weight-file readers
# (tests/fuzz). The fuzzers need the sanitizers, so ATTN_BUILD_FUZZERS turns them on too.
option(ATTN_SANITIZE "Build attn, its tests and apps with -fsanitize=address,undefined" OFF)
option(ATTN_BUILD_FUZZERS "Build libFuzzer targets for the weight-file readers (clang only; implies ATTN_SANITIZE)" OFF)
if(ATTN_BUILD_FUZZERS AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "ATTN_BUILD_FUZZERS needs clang's libFuzzer: configure with CC=clang-14 CXX=clang++-14")
endif()
if(ATTN_SANITIZE OR ATTN_BUILD_FUZZERS)
  # Directory-wide, so every target below (attn, tests, apps, fuzzers) is instrumented and links the runtimes.
  # Any UB finding aborts (no recover), so a test or fuzz run cannot pass over one.
  set(ATTN_SANITIZER_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_compile_options(${ATTN_SANITIZER_FLAGS})
  add_link_options(${ATTN_SANITIZER_FLAGS})
  message(STATUS "attn: building with ${ATTN_SANITIZER_FLAGS}")
endif()

# Coverage feedback for libFuzzer from inside the library (the readers live there); the fuzz targets link
# libFuzzer itself with -fsanitize=fuzzer (tests/fuzz).
function(attn_add_fuzzer_instrumentation target)
  if(ATTN_BUILD_FUZZERS)
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
endfunction()
