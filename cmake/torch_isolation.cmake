# A LibTorch from outside the system (a PyPI wheel's) beside Debian's packages: keep the two apart.

# TorchConfig.cmake looks for c10, c10_cuda, kineto and torch with find_library(... PATHS <its prefix>/lib), which
# searches the system folders first: with Debian's libtorch-dev installed, a wheel's LibTorch would link Debian's
# libc10.so (1.13) beside its own, two c10s in one process. Where LibTorch's own lib folder has the library, take
# that one, in TORCH_LIBRARIES and TORCH_CUDA_LIBRARIES, and in the cache, where the next configure's
# find_library finds it.
function(attn_use_torch_own_libraries)
  get_filename_component(prefix "${TORCH_INSTALL_PREFIX}" REALPATH)
  set(libraries ${TORCH_LIBRARIES})
  set(cuda_libraries ${TORCH_CUDA_LIBRARIES})
  set(vars c10_LIBRARY C10_CUDA_LIBRARY kineto_LIBRARY TORCH_LIBRARY)
  set(names c10 c10_cuda kineto torch)
  foreach(var name IN ZIP_LISTS vars names)
    if(NOT ${var})
      continue()
    endif()
    get_filename_component(file "${${var}}" REALPATH)
    string(FIND "${file}" "${prefix}/" at)
    if(at EQUAL 0)
      continue()
    endif()
    unset(own)  # find_library does not search when the variable is already set
    find_library(own ${name} PATHS "${prefix}/lib" NO_DEFAULT_PATH NO_CACHE)
    if(NOT own)
      continue()  # attn_check_torch_libraries says so
    endif()
    foreach(list libraries cuda_libraries)
      list(FIND ${list} "${${var}}" index)
      if(index GREATER_EQUAL 0)
        list(REMOVE_AT ${list} ${index})
        list(INSERT ${list} ${index} "${own}")
      endif()
    endforeach()
    message(STATUS "attn: ${name} from LibTorch's own ${own}, not ${${var}} (found first by TorchConfig)")
    set(${var} "${own}" CACHE FILEPATH "${name} of LibTorch (attn: its own lib folder)" FORCE)
  endforeach()
  set(TORCH_LIBRARIES ${libraries} PARENT_SCOPE)
  set(TORCH_CUDA_LIBRARIES ${cuda_libraries} PARENT_SCOPE)
endfunction()

# What attn_use_torch_own_libraries cannot mend (LibTorch's lib folder lacks the library) fails the configure.
function(attn_check_torch_libraries)
  get_filename_component(prefix "${TORCH_INSTALL_PREFIX}" REALPATH)
  foreach(var c10_LIBRARY C10_CUDA_LIBRARY)
    if(${var})
      get_filename_component(file "${${var}}" REALPATH)
      string(FIND "${file}" "${prefix}/" at)
      if(NOT at EQUAL 0)
        message(FATAL_ERROR "attn: LibTorch in ${prefix}, but its ${var} is ${${var}}, from another installation, "
                "and ${prefix}/lib has none of its own: two LibTorch versions would share one process. Check "
                "that installation (TorchConfig takes its folder from the environment's TORCH_INSTALL_PREFIX "
                "where that is set).")
      endif()
    endif()
  endforeach()
endfunction()

# A wheel's libtorch_cuda.so finds NCCL, cuSPARSELt, NVSHMEM and cuFile in the nvidia-* wheels beside it
# (site-packages/nvidia/*/lib, through its RPATH). When a program links it, GNU ld also reads the libraries it
# needs, and searches the -rpath folders first: CMake's -rpath to the CUDA toolkit (/usr/local/cuda) would give
# it the toolkit's older libnccl.so.2, which lacks symbols that the wheel calls (undefined references). Sets
# <out> to a link option putting the wheel's folders first (-rpath-link; nothing at run time), or to nothing.
function(attn_torch_wheel_link_options out)
  get_filename_component(prefix "${TORCH_INSTALL_PREFIX}" REALPATH)
  get_filename_component(site "${prefix}" DIRECTORY)
  get_filename_component(name "${prefix}" NAME)
  set(dirs)
  if(name STREQUAL "torch")  # a wheel's layout: site-packages/torch beside site-packages/nvidia
    file(GLOB dirs LIST_DIRECTORIES true "${site}/nvidia/*/lib")
  endif()
  set(options)
  if(dirs)
    list(JOIN dirs ":" path)
    set(options "LINKER:-rpath-link,${path}")
    message(STATUS "attn: links LibTorch with -rpath-link to its wheel's libraries: ${path}")
  endif()
  set(${out} ${options} PARENT_SCOPE)
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
