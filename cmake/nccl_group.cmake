# make_nccl_group (src/distributed/nccl_group.cpp) includes LibTorch's ProcessGroupNCCL.hpp, which needs nccl.h:
# the one of the nvidia-nccl wheel installed beside torch's (LibTorch's NCCL classes take their shape from the
# NCCL version, so the header must be the NCCL LibTorch runs with). Without it, or without CUDA, the file builds
# a make_nccl_group that says so.
function(attn_configure_nccl_group target)
  if(NOT TORCH_CUDA_LIBRARIES)
    return()
  endif()
  find_path(ATTN_NCCL_INCLUDE_DIR nccl.h
            HINTS ${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include ${TORCH_INSTALL_PREFIX}/../../nvidia/nccl/include
            NO_DEFAULT_PATH)
  if(NOT ATTN_NCCL_INCLUDE_DIR)
    message(STATUS "attn: no nccl.h beside LibTorch (nvidia/nccl/include): make_nccl_group is not available")
    return()
  endif()
  set_source_files_properties(${PROJECT_SOURCE_DIR}/src/distributed/nccl_group.cpp PROPERTIES
    INCLUDE_DIRECTORIES ${ATTN_NCCL_INCLUDE_DIR} COMPILE_DEFINITIONS ATTN_HAVE_NCCL_HEADER
    SKIP_UNITY_BUILD_INCLUSION ON)
  message(STATUS "attn: make_nccl_group with ${ATTN_NCCL_INCLUDE_DIR}/nccl.h")
endfunction()
