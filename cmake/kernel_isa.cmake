# The fused kernels are compiled once per instruction set and picked at run time (as ATen does), so the
# library runs on any x86-64 and uses AVX2 or AVX-512 where present. at::vec's AVX variants call SLEEF for
# exp(), so they need sleef.h (Debian: libsleef-dev); without it only the portable variant is built.
function(attn_add_kernel_variants target)
  set(dir ${PROJECT_SOURCE_DIR}/src/ops/cpu)
  target_sources(${target} PRIVATE ${dir}/variant_default.cpp)
  set_source_files_properties(${dir}/variant_default.cpp PROPERTIES
    COMPILE_DEFINITIONS "CPU_CAPABILITY=DEFAULT;CPU_CAPABILITY_DEFAULT"
    SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
  find_path(ATTN_SLEEF_INCLUDE_DIR sleef.h)
  find_library(ATTN_SLEEF_LIBRARY sleef)
  if(NOT (CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64" AND ATTN_SLEEF_INCLUDE_DIR AND ATTN_SLEEF_LIBRARY))
    message(STATUS "attn: fused CPU kernels for default only (x86-64 with sleef.h enables AVX2/AVX-512)")
    return()
  endif()
  target_sources(${target} PRIVATE ${dir}/variant_avx2.cpp ${dir}/variant_avx512.cpp)
  set_source_files_properties(${dir}/variant_avx2.cpp PROPERTIES
    COMPILE_DEFINITIONS "CPU_CAPABILITY=AVX2;CPU_CAPABILITY_AVX2"
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c" SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
  # (GCC 12 warns falsely inside its own avx512fintrin.h as at::vec uses it, bfloat16 conversions included;
  # clang has no such warning.)
  set_source_files_properties(${dir}/variant_avx512.cpp PROPERTIES
    COMPILE_DEFINITIONS "CPU_CAPABILITY=AVX512;CPU_CAPABILITY_AVX512"
    COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mfma;$<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>;$<$<CXX_COMPILER_ID:GNU>:-Wno-uninitialized>"
    SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
  # The bfloat16 pairs route's micro-kernel and softmax step (src/ops/cpu/products/*_avx512bf16.cpp): files of
  # their own, so that no other code is compiled for AVX512-BF16, which CPUs with AVX-512 may lack.
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-mavx512bf16 ATTN_COMPILER_HAS_AVX512BF16)
  if(ATTN_COMPILER_HAS_AVX512BF16)
    file(GLOB bf16_sources CONFIGURE_DEPENDS ${dir}/products/*_avx512bf16.cpp)
    target_sources(${target} PRIVATE ${bf16_sources})
    set_source_files_properties(${bf16_sources} PROPERTIES
      COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512bf16;-mfma;$<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>;$<$<CXX_COMPILER_ID:GNU>:-Wno-uninitialized>"
      SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
    target_compile_definitions(${target} PRIVATE ATTN_HAVE_BF16_DOT)
  endif()
  # The int8 cache's dot products (src/ops/cpu/products/*_avx512vnni.cpp), likewise in files of their own.
  check_cxx_compiler_flag(-mavx512vnni ATTN_COMPILER_HAS_AVX512VNNI)
  if(ATTN_COMPILER_HAS_AVX512VNNI)
    file(GLOB vnni_sources CONFIGURE_DEPENDS ${dir}/products/*_avx512vnni.cpp)
    target_sources(${target} PRIVATE ${vnni_sources})
    set_source_files_properties(${vnni_sources} PROPERTIES
      COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mfma;$<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>;$<$<CXX_COMPILER_ID:GNU>:-Wno-uninitialized>"
      SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
    target_compile_definitions(${target} PRIVATE ATTN_HAVE_INT8_DOT)
  endif()
  # The tests of the micro-kernel are compiled where it is.
  set(ATTN_HAVE_BF16_DOT ${ATTN_COMPILER_HAS_AVX512BF16} CACHE INTERNAL "the bfloat16 route is compiled")
  target_include_directories(${target} PRIVATE ${ATTN_SLEEF_INCLUDE_DIR})
  target_link_libraries(${target} PRIVATE ${ATTN_SLEEF_LIBRARY})
  target_compile_definitions(${target} PRIVATE ATTN_HAVE_AVX2_KERNELS ATTN_HAVE_AVX512_KERNELS)
  message(STATUS "attn: fused CPU kernels for default, AVX2 and AVX-512")
endfunction()
