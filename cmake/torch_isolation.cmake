# A LibTorch from outside the system (the pip lane's wheel) beside Debian's packages: keep the two apart.

# TorchConfig.cmake looks for some of LibTorch's libraries with find_library(... PATHS <its prefix>/lib), which
# searches the system directories first: with Debian's libtorch-dev installed, the wheel's LibTorch would link
# Debian's libc10.so beside its own, two c10s in one process. Fail at configure instead.
function(attn_check_torch_libraries)
  get_filename_component(prefix "${TORCH_INSTALL_PREFIX}" REALPATH)
  foreach(var c10_LIBRARY C10_CUDA_LIBRARY)
    if(${var})
      get_filename_component(file "${${var}}" REALPATH)
      string(FIND "${file}" "${prefix}/" at)
      if(NOT at EQUAL 0)
        message(FATAL_ERROR "attn: LibTorch in ${prefix}, but its ${var} is ${${var}}, from another installation. "
                "Put ${prefix} on CMAKE_PREFIX_PATH (the pip lane's scripts/torch-pip-env.sh does) and configure "
                "a fresh build directory.")
      endif()
    endif()
  endforeach()
endfunction()

# The wheel's include directory carries its own fmt headers (12.x), searched before Debian's /usr/include/fmt
# (9.x, the libfmt.so the apps link): the apps would compile against one fmt and link another. Where that is so,
# fmt::fmt also brings a -I directory holding only Debian's fmt, which the compiler searches before any -isystem.
function(attn_fmt_headers_before_torch)
  get_target_property(fmt_dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  list(GET fmt_dirs 0 fmt_dir)
  get_filename_component(fmt_dir "${fmt_dir}" REALPATH)
  foreach(dir ${TORCH_INCLUDE_DIRS})
    get_filename_component(dir "${dir}" REALPATH)
    if(EXISTS "${dir}/fmt" AND NOT dir STREQUAL fmt_dir)
      set(first ${PROJECT_BINARY_DIR}/fmt-before-torch)
      file(MAKE_DIRECTORY ${first})
      file(CREATE_LINK ${fmt_dir}/fmt ${first}/fmt SYMBOLIC)
      add_library(attn_fmt_before_torch INTERFACE)
      target_include_directories(attn_fmt_before_torch INTERFACE ${first})
      set_property(TARGET fmt::fmt APPEND PROPERTY INTERFACE_LINK_LIBRARIES attn_fmt_before_torch)
      message(STATUS "attn: ${dir}/fmt shadows ${fmt_dir}/fmt; the apps read the latter through ${first}")
      return()
    endif()
  endforeach()
endfunction()
