#include "ops/rotary_angles.h"

#include <ATen/ATen.h>

namespace attn::ops {

std::tuple<at::Tensor, at::Tensor> rotary_angle_table(const at::Tensor& positions, const at::Tensor& inv_freq,
                                                      double attention_factor, at::ScalarType dtype) {
  const at::Tensor angles =
      positions.to(at::kDouble).unsqueeze(-1) * inv_freq.to(positions.device()).to(at::kDouble);
  return {(angles.cos() * attention_factor).to(dtype), (angles.sin() * attention_factor).to(dtype)};
}

}  // namespace attn::ops
