# attn's own CUDA kernels (src/ops/cuda/): compiled where LibTorch is a CUDA build, whose CMake config turns
# CUDA on (nvcc found), and left out elsewhere (Debian's CPU-only LibTorch), where CUDA inputs take LibTorch's
# kernels instead. ATTN_HAVE_CUDA_KERNELS tells the code which build it is.
#
# The kernels use sm_80's cp.async and mma.sync, so they are built for compute capability 8.0 and newer only;
# at run time an older GPU is refused by each kernel's support check, and the callers take LibTorch's routes.
set(ATTN_CUDA_ARCHITECTURES "80-real;90-real;90-virtual" CACHE STRING
    "GPU architectures of attn's own CUDA kernels, as CMake's CUDA_ARCHITECTURES (8.0 or newer)")
option(ATTN_CUDA_KERNELS "Build attn's CUDA kernels where LibTorch has CUDA" ON)

# attn_add_cuda_kernels(TARGET): the kernels as an object library of their own, linked into TARGET: apart, so
# that TARGET's cxx_std_17 does not set their dialect. LibTorch's config also adds -gencode flags for every
# architecture of TORCH_CUDA_ARCH_LIST (7.5 and up) to CMAKE_CUDA_FLAGS; they are dropped here, since nothing
# else in attn is CUDA. Called from the top-level directory (it sets CMake variables there).
function(attn_add_cuda_kernels target)
  if(NOT ATTN_CUDA_KERNELS OR NOT TORCH_CUDA_LIBRARIES OR NOT CMAKE_CUDA_COMPILER)
    message(STATUS "attn: no CUDA kernels of attn's own (LibTorch without CUDA, or ATTN_CUDA_KERNELS=OFF)")
    set(ATTN_HAVE_CUDA_KERNELS OFF CACHE INTERNAL "attn's CUDA kernels are compiled")
    return()
  endif()
  foreach(arch ${ATTN_CUDA_ARCHITECTURES})
    string(REGEX MATCH "^[0-9]+" number "${arch}")
    if(number LESS 80)
      message(FATAL_ERROR "attn: ATTN_CUDA_ARCHITECTURES holds ${arch}; attn's CUDA kernels need 80 or newer")
    endif()
  endforeach()
  string(REGEX REPLACE "-gencode[ =]arch=compute_[0-9a-z]+,code=[^ ]+" "" flags "${CMAKE_CUDA_FLAGS}")
  set(CMAKE_CUDA_FLAGS "${flags}" PARENT_SCOPE)

  set(dir ${PROJECT_SOURCE_DIR}/src/ops/cuda)
  add_library(${target}_cuda_kernels OBJECT ${dir}/decode_attention_cuda.cu ${dir}/flash_attention_cuda.cu)
  set_target_properties(${target}_cuda_kernels PROPERTIES CUDA_ARCHITECTURES "${ATTN_CUDA_ARCHITECTURES}"
                        POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${target}_cuda_kernels PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src
                             ${TORCH_INCLUDE_DIRS})
  # LibTorch's headers set the C++ standard: C++20 for 2.15's, 17 before. CMake 3.25 knows no C++20 dialect
  # of nvcc (newer CMakes do), so it is told the flag.
  get_target_property(torch_features torch INTERFACE_COMPILE_FEATURES)
  if(cxx_std_20 IN_LIST torch_features)
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20" PARENT_SCOPE)
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20" PARENT_SCOPE)
      set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20 PARENT_SCOPE)
      set(CMAKE_CUDA_COMPILE_FEATURES ${CMAKE_CUDA_COMPILE_FEATURES} cuda_std_20 PARENT_SCOPE)
    endif()
    set_target_properties(${target}_cuda_kernels PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON)
  else()
    set_target_properties(${target}_cuda_kernels PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
  endif()
  separate_arguments(torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(${target}_cuda_kernels PRIVATE ${torch_flags} --expt-relaxed-constexpr)
  target_compile_definitions(${target}_cuda_kernels PRIVATE ATTN_HAVE_CUDA_KERNELS)
  target_link_libraries(${target} PRIVATE ${target}_cuda_kernels)
  target_compile_definitions(${target} PRIVATE ATTN_HAVE_CUDA_KERNELS)
  set(ATTN_HAVE_CUDA_KERNELS ON CACHE INTERNAL "attn's CUDA kernels are compiled")
  message(STATUS "attn: CUDA kernels for ${ATTN_CUDA_ARCHITECTURES}")
endfunction()
