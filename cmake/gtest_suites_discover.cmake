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
# into exit code 77), so skips stay visible in the summary. Every other test fails if anything in it skips:
# only CUDA cases may.
#
# Inputs (-D): TEST_EXECUTABLE, CTEST_FILE (written), TIMEOUT (seconds per suite), DISCOVERY_TIMEOUT,
# SKIP_CODE_SCRIPT (cmake/gtest_skip_code.sh).
foreach(var TEST_EXECUTABLE CTEST_FILE TIMEOUT DISCOVERY_TIMEOUT SKIP_CODE_SCRIPT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "gtest_suites_discover.cmake: -D${var}=... is required")
  endif()
endforeach()

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

set(script "# Written by cmake/gtest_suites_discover.cmake from ${TEST_EXECUTABLE} --gtest_list_tests; do not edit.\n")
set(total 0)
foreach(suite IN LISTS suites)
  set(cpu "")
  set(cuda "")
  foreach(case IN LISTS cases_${suite})
    string(TOLOWER "${suite}.${case}" lowered)
    if(lowered MATCHES "cuda")
      list(APPEND cuda "${suite}.${case}")
    else()
      list(APPEND cpu "${suite}.${case}")
    endif()
    math(EXPR total "${total} + 1")
  endforeach()
  if(cpu)
    # Suite.* less the CUDA cases keeps the argument short for suites of hundreds of cases.
    set(filter "${suite}.*")
    if(cuda)
      list(JOIN cuda ":" excluded)
      string(APPEND filter "-${excluded}")
    endif()
    attn_bracket(name "${suite}")
    attn_bracket(filter "--gtest_filter=${filter}")
    string(APPEND script "add_test(${name} \"${TEST_EXECUTABLE}\" ${filter})\n"
      "set_tests_properties(${name} PROPERTIES TIMEOUT ${TIMEOUT} FAIL_REGULAR_EXPRESSION \"\\\\[  SKIPPED \\\\]\")\n")
  endif()
  if(cuda)
    list(JOIN cuda ":" filter)
    attn_bracket(name "${suite}.cuda")
    attn_bracket(filter "--gtest_filter=${filter}")
    string(APPEND script "add_test(${name} \"${SKIP_CODE_SCRIPT}\" \"${TEST_EXECUTABLE}\" ${filter})\n"
      "set_tests_properties(${name} PROPERTIES TIMEOUT ${TIMEOUT} SKIP_RETURN_CODE 77)\n")
  endif()
endforeach()
if(total EQUAL 0)
  message(FATAL_ERROR "gtest_suites_discover.cmake: ${TEST_EXECUTABLE} lists no test cases")
endif()
file(WRITE "${CTEST_FILE}" "${script}")
