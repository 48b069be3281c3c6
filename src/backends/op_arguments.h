#pragma once
// The functional core's values in the forms the attn ops take: an unset tensor or scale as an empty optional,
// packed sequences in the ops' [B, H, T, d] layout, and position tensors (any integer dtype, any device) as
// host int64 values.

#include <attn/options.h>

#include <c10/util/Optional.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace attn::backends {

/// `t`, or an empty optional when it is undefined (an undefined tensor inside an optional trips LibTorch up).
inline c10::optional<torch::Tensor> optional_tensor(const torch::Tensor& t) {
  return t.defined() ? c10::optional<torch::Tensor>(t) : c10::nullopt;
}

/// options.scale() as the ops' optional float.
inline c10::optional<double> optional_scale(const SdpaOptions& options) {
  return options.scale() ? c10::optional<double>(*options.scale()) : c10::nullopt;
}

/// A packed [total, H, d] tensor as the ops' [1, H, total, d], a view.
inline torch::Tensor packed_heads_first(const torch::Tensor& x) { return x.transpose(0, 1).unsqueeze(0); }

/// The values of an integer tensor, copied to the host as int64.
inline std::vector<int64_t> host_values(const torch::Tensor& t) {
  const torch::Tensor c = t.to(torch::kCPU, torch::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

}  // namespace attn::backends
