// Reports which BLAS kernels run, because the GEMM ceiling, and every % of it, depends on them: Debian 12's
// OpenBLAS takes some newer CPUs for a "Prescott" and runs generic SSE3 kernels, 5x slower than its AVX-512 ones.

#include "bench.h"

#include <fmt/core.h>

#include <dlfcn.h>

#include <string>

namespace bench {

BlasInfo blas_info() {
  // OpenBLAS's own queries, if the BLAS that LibTorch loaded is OpenBLAS (libblas.so.3 is an alternative).
  using Query = char* (*)();
  const auto corename = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const auto config = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  if (!corename || !config) return {"not OpenBLAS (or LibTorch's own MKL)", ""};
  const std::string core = corename();
  BlasInfo info{fmt::format("{}, kernels {}", config(), core), ""};
  const bool generic = core == "Prescott" || core == "Core2" || core == "Nehalem" || core == "Unknown";
  if (generic && __builtin_cpu_supports("avx2")) {
    info.warning = fmt::format(
        "OpenBLAS runs its generic {} kernels on a CPU with AVX2{}: matrix products are several times slower than "
        "they could be. Set OPENBLAS_CORETYPE={} (the Makefile does; see scripts/openblas-coretype.sh)",
        core, __builtin_cpu_supports("avx512f") ? " and AVX-512" : "",
        __builtin_cpu_supports("avx512f") ? "SKYLAKEX" : "HASWELL");
  }
  return info;
}

}  // namespace bench
