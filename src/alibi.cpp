// attn::alibi_slopes: the standard ALiBi slopes (Press et al., "Train Short, Test Long"), as BLOOM's
// build_alibi_tensor and MPT compute them.

#include <attn/functional.h>

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

namespace attn {

torch::Tensor alibi_slopes(int64_t num_heads) {
  TORCH_CHECK(num_heads > 0, "attn::alibi_slopes: num_heads must be positive, got ", num_heads);
  // For a power of two n the slopes are the geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8). Otherwise the
  // closest lower power of two's sequence comes first, then every other slope of the next power of two's.
  const auto geometric = [](int64_t n, int64_t count, int64_t first, int64_t step) {
    std::vector<float> out;
    const double ratio = std::pow(2.0, -8.0 / static_cast<double>(n));
    for (int64_t i = 0, power = first; i < count; ++i, power += step) {
      out.push_back(static_cast<float>(std::pow(ratio, static_cast<double>(power))));
    }
    return out;
  };
  int64_t lower = 1;
  while (lower * 2 <= num_heads) lower *= 2;
  std::vector<float> slopes = geometric(lower, lower, 1, 1);
  if (lower < num_heads) {
    const std::vector<float> extra = geometric(2 * lower, num_heads - lower, 1, 2);
    slopes.insert(slopes.end(), extra.begin(), extra.end());
  }
  return torch::tensor(slopes, torch::kFloat32);
}

}  // namespace attn
