#include "backends/groups.h"

#include <ATen/ATen.h>

#include <vector>

namespace attn::backends {

int64_t kv_group_size(const torch::Tensor& query, const torch::Tensor& key) {
  // No heads (an empty batch of 3-D inputs): nothing to group, and no division by zero.
  return query.dim() >= 3 && key.size(-3) > 0 ? query.size(-3) / key.size(-3) : 1;
}

torch::Tensor grouped_matmul(const torch::Tensor& x, const torch::Tensor& y) {
  if (x.dim() < 3 || x.size(-3) == y.size(-3)) return at::matmul(x, y);
  const int64_t kv_heads = y.size(-3), group = x.size(-3) / kv_heads;
  // [..., H_kv * g, R, C] -> [..., H_kv, g * R, C]: query heads h = kv * g + i are consecutive.
  std::vector<int64_t> stacked(x.sizes().begin(), x.sizes().end() - 3);
  stacked.insert(stacked.end(), {kv_heads, group * x.size(-2), x.size(-1)});
  const torch::Tensor out = at::matmul(x.reshape(stacked), y);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(y.size(-1));
  return out.reshape(shape);
}

torch::Tensor repeat_kv_heads(const torch::Tensor& y, int64_t group) {
  return group == 1 ? y : y.repeat_interleave(group, /*dim=*/-3);
}

}  // namespace attn::backends
