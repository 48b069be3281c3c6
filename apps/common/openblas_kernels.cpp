#include "openblas_kernels.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

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

void restart_with_fast_openblas(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;  // the user's choice, or this restart already happened
  const std::string coretype = better_openblas_coretype();
  if (coretype.empty()) return;
  setenv("OPENBLAS_CORETYPE", coretype.c_str(), /*overwrite=*/0);
  execv("/proc/self/exe", argv);  // returns only on failure: then run on as we are
}

}  // namespace attn_apps
