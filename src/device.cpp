#include <attn/device.h>

#include "ops/cpu/kernels.h"

#include <torch/cuda.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace attn {

bool cuda_available() { return torch::cuda::is_available() && torch::cuda::device_count() > 0; }

torch::Device resolve_device(const std::string& spec) {
  if (spec == "auto") return cuda_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  if (spec == "cpu") return torch::Device(torch::kCPU);

  const std::string prefix = "cuda";
  if (spec.compare(0, prefix.size(), prefix) == 0) {
    int64_t index = 0;
    if (spec.size() > prefix.size()) {
      const std::string digits = spec.substr(prefix.size() + 1);
      const bool well_formed = spec[prefix.size()] == ':' && !digits.empty() && digits.size() <= 4 &&
                               std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); });
      TORCH_CHECK(well_formed, "attn::resolve_device: cannot parse device \"", spec,
                  "\"; expected auto, cpu, cuda or cuda:N");
      index = std::stoll(digits);
    }
    TORCH_CHECK(cuda_available(), "attn::resolve_device: device \"", spec,
                "\" was requested but CUDA is not available (this LibTorch has no CUDA support or no GPU is "
                "visible); use --device cpu or auto");
    const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
    TORCH_CHECK(index < count, "attn::resolve_device: device \"", spec, "\" was requested but only ", count,
                " CUDA device(s) are visible (cuda:0 .. cuda:", count - 1, ")");
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  TORCH_CHECK(false, "attn::resolve_device: unknown device \"", spec, "\"; expected auto, cpu, cuda or cuda:N");
}

CpuKernelInfo cpu_kernel_info() {
  using ops::cpu::Capability;
  CpuKernelInfo info;
  const Capability active = ops::cpu::active_capability();
  info.bfloat16_route = ops::cpu::bf16_route_chosen();
  info.variant = info.bfloat16_route                     ? "avx512_bf16"
                 : active == Capability::Avx512Bf16 ? "avx512"
                                                     : ops::cpu::capability_name(active);
  info.bfloat16_pair_speed = ops::cpu::bf16_pair_speed();
  char measured[64] = "";
  if (info.bfloat16_pair_speed > 0) {
    std::snprintf(measured, sizeof(measured), ": AVX512-BF16 measured %.2fx", info.bfloat16_pair_speed);
  }
  if (info.bfloat16_route) {
    info.summary = info.variant + " (bfloat16 multiplied as bfloat16 pairs" + measured + ")";
  } else if (ops::cpu::hardware_capability_limit() == Capability::Avx512Bf16) {
    info.summary = info.variant + " (bfloat16 widened to float" + measured + ")";
  } else {
    info.summary = info.variant + " (bfloat16 widened to float: no AVX512-BF16)";
  }
  const bool avx512 = active == Capability::Avx512 || active == Capability::Avx512Bf16;
  info.float_products = avx512 && ops::cpu::float_products() == ops::cpu::FloatProducts::Tiles ? "tiles" : "blas";
  info.summary += info.float_products == "tiles" ? ", float products on attn's tiles" : ", float products on BLAS";
#ifdef _OPENMP
  info.parallel_loops = true;
#else
  info.parallel_loops = false;
  info.summary += ", tile loops on the calling thread (built without OpenMP)";
#endif
  return info;
}

}  // namespace attn
