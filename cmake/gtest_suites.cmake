# attn_add_gtest_suites(TARGET TIMEOUT seconds [ENVIRONMENT var=value...]): registers TARGET's GoogleTest cases
# with CTest as one test per suite (and one per suite for its CUDA cases), listed from the executable each time
# it links; each test runs with ENVIRONMENT set.
# cmake/gtest_suites_discover.cmake says why a suite and not a case per process.
set(ATTN_GTEST_SUITES_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/gtest_suites_discover.cmake)
set(ATTN_GTEST_SKIP_CODE_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/gtest_skip_code.sh)

function(attn_add_gtest_suites target)
  cmake_parse_arguments(ARG "" "TIMEOUT" "ENVIRONMENT" ${ARGN})
  if(NOT ARG_TIMEOUT)
    message(FATAL_ERROR "attn_add_gtest_suites(${target}): TIMEOUT is required")
  endif()
  set(ctest_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake)
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -DTEST_EXECUTABLE=$<TARGET_FILE:${target}> -DCTEST_FILE=${ctest_file}
            -DTIMEOUT=${ARG_TIMEOUT} -DDISCOVERY_TIMEOUT=60 "-DENVIRONMENT=${ARG_ENVIRONMENT}"
            -DSKIP_CODE_SCRIPT=${ATTN_GTEST_SKIP_CODE_SCRIPT} -P ${ATTN_GTEST_SUITES_SCRIPT}
    BYPRODUCTS ${ctest_file}
    VERBATIM)
  # CTest reads the list when it runs; before the first build there is none, and a placeholder test says so.
  set(include_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_include.cmake)
  file(WRITE ${include_file}
    "if(EXISTS \"${ctest_file}\")\n"
    "  include(\"${ctest_file}\")\n"
    "else()\n"
    "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()
