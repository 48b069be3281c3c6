# The script behind attn_add_gtest_suites (cmake/gtest_suites.cmake): run with cmake -P after the test executable
# links, it writes one CTest test per GoogleTest suite.
#
# Why not gtest_discover_tests: it makes one process per case, and each process spends ~0.6 s (Debian's
# LibTorch) to ~0.9 s (the wheel's) loading LibTorch before its case starts. Over attn_tests' ~770 cases that
# was about half of ctest's time. A suite per process keeps the failure's name one level coarser; the output
# of the failing run (--output-on-failure) still names the case.
#
# The cases that need CUDA (a "cuda" anywhere in Suite.Case/param, whatever the case) run in their own test,
# SUITE.cuda, which CTest reports as skipped when GoogleTest skipped them (no GPU; SKIP_CODE_SCRIPT turns that
# into exit code 77), so skips stay visible in the summary. So do the cases of a CPU extension that some CPUs
# lack (an "amx" or "int8_dot" word in the name: AMX's tiles, AVX512-VNNI's dot products), in SUITE.cpu_extension.
# Every other test fails if anything in it skips: only those cases may.
#
# Inputs (-D): TEST_EXECUTABLE, CTEST_FILE (written), TIMEOUT (seconds per suite), DISCOVERY_TIMEOUT,
# SKIP_CODE_SCRIPT (cmake/gtest_skip_code.sh); optional: ENVIRONMENT (a list of var=value, set for every test).
foreach(var TEST_EXECUTABLE CTEST_FILE TIMEOUT DISCOVERY_TIMEOUT SKIP_CODE_SCRIPT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "gtest_suites_discover.cmake: -D${var}=... is required")
  endif()
endforeach()
set(environment "")
if(ENVIRONMENT)
  set(environment " ENVIRONMENT \"${ENVIRONMENT}\"")
endif()

execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests
                OUTPUT_VARIABLE listing ERROR_VARIABLE listing_err RESULT_VARIABLE listing_rc
                TIMEOUT ${DISCOVERY_TIMEOUT})
if(NOT listing_rc EQUAL 0)
  message(FATAL_ERROR "gtest_suites_discover.cmake: ${TEST_EXECUTABLE} --gtest_list_tests failed (${listing_rc}):\n"
                      "${listing}${listing_err}")
endif()

# Bracket arguments keep names with regex or list characters (/, [, ;) literal in the written file.
function(attn_bracket out value)
  set(${out} "[==[${value}]==]" PARENT_SCOPE)
endfunction()

string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(suites "")
set(suite "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #][^ ]*)\\.( +#.*)?$")   # "Prefix/Suite."  or "Suite.  # TypeParam = ..."
    set(suite "${CMAKE_MATCH_1}")
    list(APPEND suites "${suite}")
    set(cases_${suite} "")
  elseif(line MATCHES "^  ([^ ]+)")                 # "  Case/param  # GetParam() = ..."
    if(suite STREQUAL "")
      message(FATAL_ERROR "gtest_suites_discover.cmake: a case before any suite in the listing: '${line}'")
    endif()
    list(APPEND cases_${suite} "${CMAKE_MATCH_1}")
  endif()
endforeach()

set(test_suffix_cuda "cuda")
set(test_suffix_extension "cpu_extension")
set(script "# Written by cmake/gtest_suites_discover.cmake from ${TEST_EXECUTABLE} --gtest_list_tests; do not edit.\n")
set(total 0)
foreach(suite IN LISTS suites)
  set(cpu "")
  set(cuda "")
  set(extension "")
  foreach(case IN LISTS cases_${suite})
    string(TOLOWER "${suite}.${case}" lowered)
    if(lowered MATCHES "cuda")
      list(APPEND cuda "${suite}.${case}")
    elseif(lowered MATCHES "(^|[/_.])(amx|int8_dot)($|[/_.])")
      list(APPEND extension "${suite}.${case}")
    else()
      list(APPEND cpu "${suite}.${case}")
    endif()
    math(EXPR total "${total} + 1")
  endforeach()
  if(cpu)
    # Suite.* less the gated cases keeps the argument short for suites of hundreds of cases.
    set(filter "${suite}.*")
    if(cuda OR extension)
      set(gated ${cuda} ${extension})
      list(JOIN gated ":" excluded)
      string(APPEND filter "-${excluded}")
    endif()
    attn_bracket(name "${suite}")
    attn_bracket(filter "--gtest_filter=${filter}")
    string(APPEND script "add_test(${name} \"${TEST_EXECUTABLE}\" ${filter})\n"
      "set_tests_properties(${name} PROPERTIES TIMEOUT ${TIMEOUT} FAIL_REGULAR_EXPRESSION \"\\\\[  SKIPPED \\\\]\"${environment})\n")
  endif()
  foreach(kind cuda extension)
    if(${kind})
      list(JOIN ${kind} ":" filter)
      attn_bracket(name "${suite}.${test_suffix_${kind}}")
      attn_bracket(filter "--gtest_filter=${filter}")
      string(APPEND script "add_test(${name} \"${SKIP_CODE_SCRIPT}\" \"${TEST_EXECUTABLE}\" ${filter})\n"
        "set_tests_properties(${name} PROPERTIES TIMEOUT ${TIMEOUT} SKIP_RETURN_CODE 77${environment})\n")
    endif()
  endforeach()
endforeach()
if(total EQUAL 0)
  message(FATAL_ERROR "gtest_suites_discover.cmake: ${TEST_EXECUTABLE} lists no test cases")
endif()
file(WRITE "${CTEST_FILE}" "${script}")
