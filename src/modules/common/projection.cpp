#include "modules/common/projection.h"

#include <ATen/ATen.h>

namespace attn::modules {

torch::Tensor project_rows(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const int64_t in = weight.size(1);
  if (!x.device().is_cpu() || x.dim() == 0 || x.size(-1) != in || x.numel() != in) return at::linear(x, weight, bias);
  const torch::Tensor row = x.reshape({in});
  const torch::Tensor y = bias.defined() ? at::addmv(bias, weight, row) : at::mv(weight, row);
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  return y.view(sizes);
}

}  // namespace attn::modules
