# The package.consumer test: install attn from a build tree, then configure, build and run tests/package (a
# separate project that uses find_package(attn)) against that installation. Any failing step fails the test
# and prints that step's output.
#
#   cmake -DATTN_BUILD_DIR=<attn build> -DCONSUMER_SOURCE_DIR=<tests/package> [-DCONSUMER_GENERATOR=Ninja]
#         [-DCONSUMER_MAKE_PROGRAM=...] [-DCONSUMER_CXX_COMPILER=...] [-DTorch_DIR=...] -P run_consumer.cmake
#
# Everything goes under <attn build>/package: prefix/ (the installation) and build/ (the consumer), both
# recreated on every run so that nothing stale can stand in for what the package lacks.
cmake_minimum_required(VERSION 3.25)

foreach(required ATTN_BUILD_DIR CONSUMER_SOURCE_DIR)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "run_consumer.cmake: -D${required}=... is required")
  endif()
endforeach()
if(NOT DEFINED CONSUMER_GENERATOR)
  set(CONSUMER_GENERATOR Ninja)
endif()

set(work ${ATTN_BUILD_DIR}/package)
set(prefix ${work}/prefix)
set(build ${work}/build)
file(REMOVE_RECURSE ${prefix} ${build})

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  list(JOIN ARGN " " command)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "package.consumer: ${name} failed (${result}):\n  ${command}\n${output}")
  endif()
  message(STATUS "package.consumer: ${name}: ok")
  set(step_output "${output}" PARENT_SCOPE)
endfunction()

run_step("install" ${CMAKE_COMMAND} --install ${ATTN_BUILD_DIR} --prefix ${prefix})

set(configure_args -S ${CONSUMER_SOURCE_DIR} -B ${build} -G ${CONSUMER_GENERATOR} -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH=${prefix})
if(CONSUMER_MAKE_PROGRAM)
  list(APPEND configure_args -DCMAKE_MAKE_PROGRAM=${CONSUMER_MAKE_PROGRAM})
endif()
if(CONSUMER_CXX_COMPILER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER=${CONSUMER_CXX_COMPILER})
endif()
if(Torch_DIR)
  list(APPEND configure_args -DTorch_DIR=${Torch_DIR})
endif()
run_step("configure" ${CMAKE_COMMAND} ${configure_args})
run_step("build" ${CMAKE_COMMAND} --build ${build})
run_step("run" ${build}/consumer)
message(STATUS "${step_output}")
