#include <attn/device.h>

#include <torch/cuda.h>
#include <torch/version.h>

#include <ATen/Context.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>

namespace attn {

bool cuda_available() { return torch::cuda::is_available() && torch::cuda::device_count() > 0; }

void check_device_usable(const char* fn, const torch::Device& device) {
  if (device.is_cpu()) return;
  TORCH_CHECK(device.is_cuda(), fn, ": device ", device, " is not supported; attn runs on cpu and cuda");
  TORCH_CHECK(at::globalContext().hasCUDA(), fn, ": device ", device, " is not usable: this LibTorch (",
              TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".", TORCH_VERSION_PATCH,
              ") was built without CUDA; use torch::kCPU, or build attn against a CUDA LibTorch");
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  TORCH_CHECK(count > 0, fn, ": device ", device, " is not usable: this LibTorch (", TORCH_VERSION_MAJOR, ".",
              TORCH_VERSION_MINOR, ".", TORCH_VERSION_PATCH, ") has CUDA but sees no GPU");
  TORCH_CHECK(!device.has_index() || device.index() < count, fn, ": device ", device, " is not usable: ", count,
              " CUDA device(s) are visible (cuda:0 .. cuda:", count - 1, ")");
}

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
                "visible); ask for \"cpu\", or \"auto\" for a GPU where there is one");
    const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
    TORCH_CHECK(index < count, "attn::resolve_device: device \"", spec, "\" was requested but only ", count,
                " CUDA device(s) are visible (cuda:0 .. cuda:", count - 1, ")");
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  TORCH_CHECK(false, "attn::resolve_device: unknown device \"", spec, "\"; expected auto, cpu, cuda or cuda:N");
}

}  // namespace attn
