#include "int8_rows.h"

#include <ATen/ATen.h>

namespace attn {

StoredRows quantize_rows(const char* fn, const char* arg, const torch::Tensor& x) {
  const torch::Tensor wide = x.to(torch::kFloat32);
  TORCH_CHECK(wide.isfinite().all().item<bool>(), fn, ": ", arg,
              " holds a non-finite value, which an int8 cache cannot store; nothing was written");
  const torch::Tensor amax = wide.abs().amax(-1);
  const torch::Tensor inverse = at::where(amax > 0, 127.0 / amax, at::zeros_like(amax));
  return {(wide * inverse.unsqueeze(-1)).round_().clamp_(-127, 127).to(torch::kInt8), amax / 127.0};
}

}  // namespace attn
