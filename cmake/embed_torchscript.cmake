# Embeds TorchScript source files in a C++ header at build time, so that the exported forward is written as a
# .py-style file (src/jit/torchscript/) and not as a C++ string literal.
#   cmake -DOUTPUT=<header> -DSOURCES=<a.py;b.py;...> -P embed_torchscript.cmake
# Each file becomes `inline constexpr const char* k<Stem>` in namespace attn::jit::torchscript, e.g.
# multi_head_attention.py -> kMultiHeadAttention.
set(text "// Generated from src/jit/torchscript/*.py by cmake/embed_torchscript.cmake. Do not edit.\n#pragma once\n\n")
string(APPEND text "namespace attn::jit::torchscript {\n")
foreach(source IN LISTS SOURCES)
  get_filename_component(stem "${source}" NAME_WE)
  string(REPLACE "_" ";" words "${stem}")
  set(name "k")
  foreach(word IN LISTS words)
    string(SUBSTRING "${word}" 0 1 first)
    string(TOUPPER "${first}" first)
    string(SUBSTRING "${word}" 1 -1 rest)
    string(APPEND name "${first}${rest}")
  endforeach()
  file(READ "${source}" body)
  if(body MATCHES "\\)torchscript\"")
    message(FATAL_ERROR "${source} contains the raw-string delimiter )torchscript\"")
  endif()
  string(APPEND text "\ninline constexpr const char* ${name} = R\"torchscript(${body})torchscript\";\n")
endforeach()
string(APPEND text "\n}  // namespace attn::jit::torchscript\n")
# Rewrite only on change, so that an unchanged source does not rebuild export.cpp.
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" previous)
endif()
if(NOT previous STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
