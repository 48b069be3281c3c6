# The fused kernels are compiled once per instruction set and picked at run time (as ATen does), so the
# library runs on any x86-64 and uses AVX2 or AVX-512 where present. at::vec's AVX variants call SLEEF for
# exp(), so they need sleef.h (Debian: libsleef-dev); without it only the portable variant is built.
#
# ATTN_KERNEL_VARIANTS=host builds only the variants and extensions that the building CPU can run, for builds
# that exist to run their code on the machine that built them: the sanitizer build (scripts/sanitize-and-fuzz.sh),
# where an AVX-512 variant that an AVX2-only CPU never runs costs three minutes of clang. The library still
# picks among what it has at run time, so a host build run on a CPU with less still works; one run on a CPU
# with more leaves the rest unused. Never for a library that is installed or shipped.
set(ATTN_KERNEL_VARIANTS all CACHE STRING
    "Which instruction-set variants of the CPU kernels to build: all (the default) or host (those this CPU runs)")
set_property(CACHE ATTN_KERNEL_VARIANTS PROPERTY STRINGS all host)
if(NOT ATTN_KERNEL_VARIANTS MATCHES "^(all|host)$")
  message(FATAL_ERROR "attn: ATTN_KERNEL_VARIANTS is '${ATTN_KERNEL_VARIANTS}'; expected all or host")
endif()

# ATTN_AMX_EMULATION runs AMX's tile instructions in software (src/ops/cpu/products/amx_emulation.cpp), so that the
# AMX route's code runs, and its tests with it, on a CPU with AVX512-BF16 but no AMX: the sanitizer build
# (scripts/sanitize-and-fuzz.sh) turns it on. A tile product takes microseconds there: never for a library that
# is installed or shipped.
option(ATTN_AMX_EMULATION "Test builds only: AMX's tile instructions in software, on CPUs with AVX512-BF16" OFF)

# The building CPU's /proc/cpuinfo flags, read once, for host.
if(ATTN_KERNEL_VARIANTS STREQUAL "host")
  if(NOT EXISTS /proc/cpuinfo)
    message(FATAL_ERROR "attn: ATTN_KERNEL_VARIANTS=host reads the CPU's flags from /proc/cpuinfo, which this system lacks")
  endif()
  file(STRINGS /proc/cpuinfo attn_host_cpu_flags REGEX "^flags[ \t]*:" LIMIT_COUNT 1)
  string(REGEX REPLACE "^flags[ \t]*:" "" attn_host_cpu_flags "${attn_host_cpu_flags}")
  separate_arguments(attn_host_cpu_flags UNIX_COMMAND "${attn_host_cpu_flags}")
endif()

# Sets `out` to whether the variant or extension needing every one of the /proc/cpuinfo flags after `out` is
# to be built: always under ATTN_KERNEL_VARIANTS=all, and under host only where this CPU lists each flag.
function(attn_variant_wanted out)
  set(${out} TRUE PARENT_SCOPE)
  if(ATTN_KERNEL_VARIANTS STREQUAL "all")
    return()
  endif()
  foreach(flag ${ARGN})
    if(NOT flag IN_LIST attn_host_cpu_flags)
      set(${out} FALSE PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

# Adds ${dir}/products/*_<extension>.cpp to target, compiled for AVX-512 and that extension, and defines
# `definition` for the target, where the compiler takes -m<extension> (or the flags given after `found`, for an
# extension with several: AMX's tiles and bfloat16 products) and ATTN_KERNEL_VARIANTS wants it (`cpu_flags`, a
# list of /proc/cpuinfo's names); `found` says whether it did.
function(attn_add_extension_files target extension definition found cpu_flags)
  set(flags ${ARGN})
  if(NOT flags)
    set(flags -m${extension})
  endif()
  attn_variant_wanted(wanted ${cpu_flags})
  if(wanted)
    string(REPLACE ";" " " flags_string "${flags}")
    check_cxx_compiler_flag("${flags_string}" ${found})
  else()
    set(${found} FALSE)
  endif()
  if(${found})
    file(GLOB sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/ops/cpu/products/*_${extension}.cpp)
    target_sources(${target} PRIVATE ${sources})
    # The micro-kernels' functions start on a cache line, so that where their hot loops fall does not move with
    # unrelated code (the pairs product's loop, moved by a change elsewhere in the library, ran 2.5 % slower).
    set_source_files_properties(${sources} PROPERTIES
      COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;${flags};-mfma;-falign-functions=64;$<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>;$<$<CXX_COMPILER_ID:GNU>:-Wno-uninitialized>"
      SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
    target_compile_definitions(${target} PRIVATE ${definition})
  endif()
  set(${found} ${${found}} PARENT_SCOPE)
endfunction()

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
  attn_variant_wanted(want_avx2 avx2 fma f16c)
  attn_variant_wanted(want_avx512 avx512f avx512bw avx512vl avx512dq)
  if(want_avx2)
    target_sources(${target} PRIVATE ${dir}/variant_avx2.cpp)
    set_source_files_properties(${dir}/variant_avx2.cpp PROPERTIES
      COMPILE_DEFINITIONS "CPU_CAPABILITY=AVX2;CPU_CAPABILITY_AVX2"
      COMPILE_OPTIONS "-mavx2;-mfma;-mf16c" SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
    target_compile_definitions(${target} PRIVATE ATTN_HAVE_AVX2_KERNELS)
  endif()
  if(want_avx512)
    target_sources(${target} PRIVATE ${dir}/variant_avx512.cpp)
    # (GCC 12 warns falsely inside its own avx512fintrin.h as at::vec uses it, bfloat16 conversions included;
    # clang has no such warning.) Its functions start on a cache line, as the extension files' below: the AMX
    # forward's task ran 1.7 % slower at T=1024 when a change in the backward moved its start.
    set_source_files_properties(${dir}/variant_avx512.cpp PROPERTIES
      COMPILE_DEFINITIONS "CPU_CAPABILITY=AVX512;CPU_CAPABILITY_AVX512"
      COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mfma;-falign-functions=64;$<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>;$<$<CXX_COMPILER_ID:GNU>:-Wno-uninitialized>"
      SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
    target_compile_definitions(${target} PRIVATE ATTN_HAVE_AVX512_KERNELS)
    # Products that need an extension CPUs with AVX-512 may lack live in files of their own, named for it, so
    # that no other code is compiled for it: the bfloat16 pairs route's micro-kernel and softmax step
    # (products/*_avx512bf16.cpp) and the int8 cache's dot products (products/*_avx512vnni.cpp).
    include(CheckCXXCompilerFlag)
    attn_add_extension_files(${target} avx512bf16 ATTN_HAVE_BF16_DOT ATTN_COMPILER_HAS_AVX512BF16 avx512_bf16)
    attn_add_extension_files(${target} avx512vnni ATTN_HAVE_INT8_DOT ATTN_COMPILER_HAS_AVX512VNNI avx512_vnni)
    # AMX's tile products (products/*_amx.cpp), a route of bfloat16 pairs: built only beside the pairs route.
    # Emulated (ATTN_AMX_EMULATION), they are wanted where the CPU has the pairs route, AMX or not, and compiled
    # without AMX's flags, so that clang refuses a tile intrinsic the software does not stand in for.
    if(ATTN_COMPILER_HAS_AVX512BF16)
      if(ATTN_AMX_EMULATION)
        attn_add_extension_files(${target} amx ATTN_HAVE_AMX ATTN_COMPILER_HAS_AMX avx512_bf16 -mavx512bf16)
      else()
        attn_add_extension_files(${target} amx ATTN_HAVE_AMX ATTN_COMPILER_HAS_AMX "amx_tile;amx_bf16"
                                 -mamx-tile -mamx-bf16 -mavx512bf16)
      endif()
      if(ATTN_AMX_EMULATION AND ATTN_COMPILER_HAS_AMX)
        target_sources(${target} PRIVATE ${dir}/products/amx_emulation.cpp)
        set_source_files_properties(${dir}/products/amx_emulation.cpp PROPERTIES
          COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mfma"
          SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
        target_compile_definitions(${target} PRIVATE ATTN_AMX_EMULATION)
        message(STATUS "attn: AMX's tile instructions emulated in software (ATTN_AMX_EMULATION: a test build)")
      endif()
    else()
      set(ATTN_COMPILER_HAS_AMX FALSE)
    endif()
  else()
    set(ATTN_COMPILER_HAS_AVX512BF16 FALSE)
    set(ATTN_COMPILER_HAS_AMX FALSE)
  endif()
  if(ATTN_AMX_EMULATION AND NOT ATTN_COMPILER_HAS_AMX)
    message(STATUS "attn: ATTN_AMX_EMULATION is on, but no AMX route is built (it needs the AVX-512 variant with "
                   "AVX512-BF16, and under host a CPU with AVX512-BF16)")
  endif()
  # The tests of the micro-kernel are compiled where it is.
  set(ATTN_HAVE_BF16_DOT ${ATTN_COMPILER_HAS_AVX512BF16} CACHE INTERNAL "the bfloat16 route is compiled")
  set(ATTN_HAVE_AMX ${ATTN_COMPILER_HAS_AMX} CACHE INTERNAL "the AMX route is compiled")
  target_include_directories(${target} PRIVATE ${ATTN_SLEEF_INCLUDE_DIR})
  target_link_libraries(${target} PRIVATE ${ATTN_SLEEF_LIBRARY})
  set(built default)
  if(want_avx2)
    list(APPEND built AVX2)
  endif()
  if(want_avx512)
    list(APPEND built AVX-512)
  endif()
  string(REPLACE ";" ", " built "${built}")
  message(STATUS "attn: fused CPU kernels for ${built} (ATTN_KERNEL_VARIANTS=${ATTN_KERNEL_VARIANTS})")
endfunction()
