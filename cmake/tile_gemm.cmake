# The fused kernels' tile GEMM (src/ops/cpu/products/blas.cpp): LibTorch's own BLAS wrapper where it is exported,
# else the Fortran BLAS that LibTorch links (1.13 on Debian: libblas.so.3, i.e. OpenBLAS), else at::addmm_.
# ATTN_TILE_GEMM=aten forces the last (to test it); auto picks the first that works.
set(ATTN_TILE_GEMM auto CACHE STRING "GEMM route of the fused kernels' tiles: auto or aten")
set_property(CACHE ATTN_TILE_GEMM PROPERTY STRINGS auto aten)

function(attn_configure_tile_gemm target)
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS})
  # The library files, not the torch target: LibTorch 2.x's config makes protobuf::libprotobuf an ALIAS of a
  # local target, which try_compile cannot bring into its test project.
  set(CMAKE_REQUIRED_LIBRARIES)
  foreach(lib torch torch_cpu c10)
    get_target_property(file ${lib} LOCATION)
    list(APPEND CMAKE_REQUIRED_LIBRARIES ${file})
  endforeach()
  # The standard that attn itself is compiled with: LibTorch 2.x raises it to C++20 (cxx_std_20 on torch).
  get_target_property(torch_features torch INTERFACE_COMPILE_FEATURES)
  if(cxx_std_20 IN_LIST torch_features)
    set(CMAKE_CXX_STANDARD 20)
  endif()
  set(CMAKE_REQUIRED_FLAGS "-std=c++${CMAKE_CXX_STANDARD} ${TORCH_CXX_FLAGS}")
  check_cxx_source_compiles([=[
#include <ATen/native/CPUBlas.h>
int main() {
  float x = 0;
  using at::native::TransposeType;
  at::native::cpublas::gemm(TransposeType::NoTranspose, TransposeType::NoTranspose, 1, 1, 1, 1.f, &x, 1, &x, 1,
                            0.f, &x, 1);
}]=] ATTN_HAVE_CPUBLAS_GEMM)
  if(ATTN_TILE_GEMM STREQUAL "aten")
    message(STATUS "attn: fused kernels' tiles use at::addmm_ (ATTN_TILE_GEMM=aten)")
  elseif(ATTN_HAVE_CPUBLAS_GEMM)
    target_compile_definitions(${target} PRIVATE ATTN_HAVE_CPUBLAS_GEMM)
  else()
    find_library(ATTN_BLAS_LIBRARY NAMES blas libblas.so.3)
    if(ATTN_BLAS_LIBRARY)
      target_compile_definitions(${target} PRIVATE ATTN_HAVE_FORTRAN_BLAS)
      target_link_libraries(${target} PRIVATE ${ATTN_BLAS_LIBRARY})
    else()
      message(WARNING "attn: no BLAS found for the fused kernels' tiles; falling back to at::addmm_ (slower)")
    endif()
  endif()
endfunction()
