#include "openblas_kernels.h"

#include <dlfcn.h>

namespace attn_apps {

std::string better_openblas_coretype(std::string* core) {
  using Query = char* (*)();
  const auto corename = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (!corename) return "";
  const std::string chosen = corename();
  if (core) *core = chosen;
  const bool generic = chosen == "Prescott" || chosen == "Core2" || chosen == "Nehalem" || chosen == "Unknown";
  if (!generic || !__builtin_cpu_supports("avx2")) return "";
  return __builtin_cpu_supports("avx512f") ? "SKYLAKEX" : "HASWELL";
}

}  // namespace attn_apps
