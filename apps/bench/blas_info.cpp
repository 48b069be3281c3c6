// Reports which BLAS kernels run, because the GEMM ceiling, and every % of it, depends on them: Debian 12's
// OpenBLAS takes some newer CPUs for a "Prescott" and runs generic SSE3 kernels, 5x slower than its AVX-512 ones.

#include "bench.h"
#include "openblas_kernels.h"

#include <fmt/core.h>

#include <dlfcn.h>

#include <string>

namespace bench {

namespace {

// The file of the library that the process's Fortran sgemm_ binds to: the BLAS behind torch::mm and attn's
// tiles. In PyTorch's wheels that is libtorch_cpu.so itself (MKL linked in), whatever else is loaded.
std::string sgemm_library() {
  Dl_info where{};
  void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_");
  if (!sgemm || !dladdr(sgemm, &where) || !where.dli_fname) return "";
  const std::string path = where.dli_fname;
  return path.substr(path.find_last_of('/') + 1);
}

}  // namespace

BlasInfo blas_info() {
  const std::string library = sgemm_library();
  const std::string from = library.empty() ? "" : fmt::format(" (sgemm_ from {})", library);
  // MKL's version query, if the process has MKL (PyTorch's wheels and LibTorch zips link it in).
  using MklVersion = void (*)(char*, int);
  if (const auto mkl = reinterpret_cast<MklVersion>(dlsym(RTLD_DEFAULT, "MKL_Get_Version_String"))) {
    char version[256] = {};
    mkl(version, sizeof(version) - 1);
    return {fmt::format("{}{}", version, from), ""};
  }
  // OpenBLAS's own queries, if the BLAS that LibTorch loaded is OpenBLAS (libblas.so.3 is an alternative).
  using Query = char* (*)();
  const auto config = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  if (!config) return {fmt::format("neither MKL nor OpenBLAS{}", from), ""};
  std::string core;
  const std::string better = attn_apps::better_openblas_coretype(&core);
  BlasInfo info{fmt::format("{}, kernels {}{}", config(), core, from), ""};
  if (!better.empty()) {
    info.warning = fmt::format(
        "OpenBLAS runs its generic {} kernels on a CPU with AVX2{}: matrix products are several times slower than "
        "they could be. Set OPENBLAS_CORETYPE={} (the Makefile does; see scripts/openblas-coretype.sh)",
        core, better == "SKYLAKEX" ? " and AVX-512" : "", better);
  }
  return info;
}

}  // namespace bench
