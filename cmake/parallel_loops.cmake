# at::parallel_for is inline, and runs serially unless the including file is compiled with OpenMP (ATen's
# INTRA_OP_PARALLEL follows _OPENMP): without the flag, a target's own parallel loops would use one core.
# Only with GCC: LibTorch (Debian's, built by GCC) runs its threads on GCC's libgomp. Clang's -fopenmp emits
# calls into LLVM's libomp instead, a second OpenMP runtime in the process (two thread pools, and omp_* calls
# answered by whichever runtime the loader bound first), and clang's -fopenmp=libgomp links libgomp but
# generates no OpenMP code at all (_OPENMP stays undefined). So a clang build (the sanitizer and fuzzing
# build) leaves OpenMP out: attn's at::parallel_for loops run on the calling thread, LibTorch's own ops stay
# parallel on its libgomp, and the tile GEMMs are threaded by OpenBLAS, which on some kernel sets rounds
# differently for different thread counts (cpu_kernel_info().parallel_loops says which build this is).
#
# attn_parallel_loops(target scope): compiles target's at::parallel_for loops with OpenMP where the compiler is
# GCC; scope is PRIVATE, or PUBLIC where the targets that use it must compile with the same flags.
function(attn_parallel_loops target scope)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    find_package(OpenMP REQUIRED COMPONENTS CXX)
    target_link_libraries(${target} ${scope} OpenMP::OpenMP_CXX)
  else()
    message(STATUS "${target}: ${CMAKE_CXX_COMPILER_ID} build: no OpenMP in its own loops (one thread each; "
                   "LibTorch's libgomp runs its ops), so that one OpenMP runtime serves the process")
  endif()
endfunction()
