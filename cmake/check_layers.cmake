# The include rule of docs/architecture.md, checked on every build over every folder of src/ and include/:
#
#   apps -> public headers -> distributed -> io, jit -> modules -> the front door (src/*.cpp) -> backends
#        -> ops -> kernels (the rooms of ops/cpu/, ops/cuda/*.cuh) -> common
#
# nothing includes from a layer above its own, and only the ops layer reaches into the kernels (the layers
# above ask the ops). The op wrappers (ops/cpu/*.cpp, ops/cuda/*.cu) are ops; the kernels do not include them.
#
#   cmake -DROOT=<source dir> -P check_layers.cmake     (fails, listing each offending line)
#
# Each layer lists the includes it may NOT have. Quoted includes are attn's internal headers (relative to
# src/), <attn/...> its public ones.
set(kernel_internals "^\"ops/(cpu|cuda)/")
set(top_public "^<attn/attn\\.h>")
set(above_common    "^\"(ops|backends|modules|io|jit|distributed)/" "^<attn/")
set(above_kernels   "^\"(backends|modules|io|jit|distributed)/" "^\"ops/[^/\"]+\"" "^\"ops/(autograd|meta)/"
                    "^<attn/[^/>]+>" "^<attn/(modules|io|jit|distributed)/")
set(above_ops       "^\"(backends|modules|io|jit|distributed)/"
                    "^<attn/(attn|functional|options|device|kv_cache|varlen|rotary)\\.h>"
                    "^<attn/(modules|io|jit|distributed)/")
set(above_backends  "^\"(modules|io|jit|distributed)/" "${kernel_internals}"
                    "^<attn/(attn|functional|device|kv_cache)\\.h>" "^<attn/(modules|io|jit|distributed)/")
set(above_front     "^\"(modules|io|jit|distributed)/" "${kernel_internals}" "${top_public}"
                    "^<attn/(modules|io|jit|distributed)/")
set(above_modules   "^\"(io|jit|distributed)/" "${kernel_internals}" "^<attn/(attn|functional)\\.h>"
                    "^<attn/(io|jit|distributed)/")
set(above_io_jit    "^\"distributed/" "${kernel_internals}" "${top_public}" "^<attn/distributed/")
set(above_distributed "${kernel_internals}" "${top_public}")
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
  elseif(file MATCHES "^src/ops/cpu/[a-z_]+/" OR file MATCHES "^src/ops/cpu/kernels\\.(h|cpp)$"
         OR file MATCHES "^src/ops/cuda/.*\\.cuh$")
    set(layer kernels)
  elseif(file MATCHES "^src/ops/")
    set(layer ops)
  elseif(file MATCHES "^src/backends/")
    set(layer backends)
  elseif(file MATCHES "^src/[^/]+$")
    set(layer front)
  elseif(file MATCHES "^src/modules/")
    set(layer modules)
  elseif(file MATCHES "^src/(io|jit)/")
    set(layer io_jit)
  elseif(file MATCHES "^src/distributed/")
    set(layer distributed)
  elseif(file MATCHES "^include/")
    set(layer public)
  else()
    message(FATAL_ERROR "attn: ${file} is in no layer; add its folder to cmake/check_layers.cmake and "
                        "docs/architecture.md")
  endif()
  file(STRINGS "${ROOT}/${file}" lines REGEX "^[ \t]*#[ \t]*include")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*" "" target "${line}")
    foreach(pattern IN LISTS above_${layer})
      if(target MATCHES "${pattern}")
        string(APPEND violations "  ${file} (${layer}): #include ${target}\n")
        break()
      endif()
    endforeach()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "attn: includes that point up the layers (docs/architecture.md):\n${violations}")
endif()
