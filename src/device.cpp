#include <attn/device.h>

#include <torch/cuda.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>

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

}  // namespace attn
