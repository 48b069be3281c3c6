# The include rule of docs/architecture.md, checked on every build:
#
#   apps -> public headers -> modules -> backends -> ops -> kernels (ops/cpu, ops/cuda), with common/ at the bottom;
#   nothing includes from a layer above it. io/, jit/ and distributed/ sit beside the modules (they read module
#   types).
#
#   cmake -DROOT=<source dir> -P check_layers.cmake     (fails, listing each offending line)
#
# Each layer lists the includes it may NOT have: the layers above it. Quoted includes are attn's internal
# headers (relative to src/), <attn/...> its public ones.
set(above_common    "^\"(ops|backends|modules|io|jit|distributed)/" "^<attn/")
set(above_ops       "^\"(backends|modules|io|jit|distributed)/" "^<attn/(attn|functional|options|device)\\.h>" "^<attn/(modules|io|jit|distributed)/")
set(above_backends  "^\"(modules|io|jit|distributed)/" "^<attn/(attn|functional|device)\\.h>" "^<attn/(modules|io|jit|distributed)/")
set(above_modules   "^\"(io|jit|distributed)/" "^<attn/(attn|functional)\\.h>" "^<attn/(io|jit|distributed)/")
set(above_public    "^\"")  # public headers include only public headers

if(NOT ROOT)
  message(FATAL_ERROR "check_layers.cmake: pass -DROOT=<source dir>")
endif()
file(GLOB_RECURSE files RELATIVE "${ROOT}" "${ROOT}/src/*.h" "${ROOT}/src/*.cpp" "${ROOT}/src/*.cu" "${ROOT}/src/*.cuh"
     "${ROOT}/include/*.h")
set(violations "")
foreach(file IN LISTS files)
  if(file MATCHES "^src/common/")
    set(layer common)
  elseif(file MATCHES "^src/ops/")
    set(layer ops)
  elseif(file MATCHES "^src/backends/")
    set(layer backends)
  elseif(file MATCHES "^src/modules/")
    set(layer modules)
  elseif(file MATCHES "^include/")
    set(layer public)
  else()
    continue()  # the front door (src/*.cpp), io/, jit/ and distributed/ may include any layer below the apps
  endif()
  file(STRINGS "${ROOT}/${file}" lines REGEX "^[ \t]*#[ \t]*include")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*" "" target "${line}")
    foreach(pattern IN LISTS above_${layer})
      if(target MATCHES "${pattern}")
        string(APPEND violations "  ${file} (${layer}): #include ${target}\n")
      endif()
    endforeach()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "attn: includes that point up the layers (docs/architecture.md):\n${violations}")
endif()
