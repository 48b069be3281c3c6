// The standard ALiBi slopes (Press et al., "Train Short, Test Long"), as BLOOM's build_alibi_tensor and MPT
// compute them.

#include "common/alibi_slopes.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>


namespace attn::common {

torch::Tensor standard_alibi_slopes(const char* fn, int64_t num_heads, const torch::Device& device) {
  TORCH_CHECK(num_heads > 0, fn, ": num_heads must be positive, got ", num_heads);
  // For a power of two n the slopes are 2^(-8/n), 2^(-16/n), ..., 2^(-8). Otherwise the closest lower power of
  // two's sequence comes first, then every other slope of the next power of two's: 2^(-4/n), 2^(-12/n), ...
  int64_t lower = 1;
  while (lower * 2 <= num_heads) lower *= 2;
  const auto options = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  torch::Tensor exponents = at::arange(1, lower + 1, options) * (8.0 / static_cast<double>(lower));
  if (lower < num_heads) {
    const torch::Tensor odd = at::arange(num_heads - lower, options) * 2 + 1;
    exponents = at::cat({exponents, odd * (4.0 / static_cast<double>(lower))});
  }
  return at::exp2(-exponents);
}

}  // namespace attn::common
