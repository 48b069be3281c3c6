// The Autograd kernels of the inference ops, attn::decode_attention, attn::linear_rows (and _many) and
// attn::rotary_positions: they compute no gradient, so a call that would need one is refused (a silently
// detached result would train nothing), and any other call goes on to the device's kernel. Registered for
// every autograd key, the meta device's included.

#include <attn/ops/decode_attention.h>
#include <attn/ops/linear_rows.h>
#include <attn/ops/rotary_positions.h>

#include <ATen/core/grad_mode.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <initializer_list>
#include <vector>

namespace attn::ops {
namespace {

bool needs_grad(std::initializer_list<const c10::optional<at::Tensor>*> tensors) {
  if (!at::GradMode::is_enabled()) return false;
  for (const c10::optional<at::Tensor>* t : tensors) {
    if (*t && (*t)->defined() && (*t)->requires_grad()) return true;
  }
  return false;
}

at::Tensor decode_attention_autograd(const at::Tensor& query, const at::Tensor& key_cache,
                                     const at::Tensor& value_cache, const at::Tensor& query_starts,
                                     const at::Tensor& key_lengths, bool is_causal, c10::optional<double> scale,
                                     int64_t window_left, int64_t window_right, double softcap,
                                     const c10::optional<at::Tensor>& alibi_slopes,
                                     const c10::optional<at::Tensor>& sinks,
                                     const c10::optional<at::Tensor>& key_scales,
                                     const c10::optional<at::Tensor>& value_scales,
                                     const c10::optional<at::Tensor>& block_table,
                                     const c10::optional<at::Tensor>& tree_mask) {
  const c10::optional<at::Tensor> q = query, k = key_cache, v = value_cache;
  TORCH_CHECK(!needs_grad({&q, &k, &v, &alibi_slopes, &sinks}), "attn::decode_attention is an inference kernel and "
              "computes no gradient, but an input requires one: call it under torch.no_grad() (C++: "
              "torch::NoGradGuard), or use attn::flash_attention to train");
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return decode_attention(query, key_cache, value_cache, query_starts, key_lengths, is_causal, scale, window_left,
                          window_right, softcap, alibi_slopes, sinks, key_scales, value_scales, block_table, tree_mask);
}

at::Tensor linear_rows_autograd(const at::Tensor& input, const at::Tensor& weight,
                                const c10::optional<at::Tensor>& bias) {
  const c10::optional<at::Tensor> x = input, w = weight;
  TORCH_CHECK(!needs_grad({&x, &w, &bias}), "attn::linear_rows is an inference kernel and computes no gradient, "
              "but an input requires one: call it under torch.no_grad() (C++: torch::NoGradGuard), or use "
              "torch.nn.functional.linear to train");
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return linear_rows(input, weight, bias);
}

std::vector<at::Tensor> linear_rows_many_autograd(const at::Tensor& input, at::TensorList weights,
                                                  const c10::List<c10::optional<at::Tensor>>& biases) {
  std::vector<c10::optional<at::Tensor>> all{input};
  for (const at::Tensor& w : weights) all.emplace_back(w);
  for (size_t k = 0; k < biases.size(); ++k) all.push_back(biases.get(k));
  const bool grad =
      std::any_of(all.begin(), all.end(), [](const c10::optional<at::Tensor>& t) { return needs_grad({&t}); });
  TORCH_CHECK(!grad, "attn::linear_rows_many is an inference kernel and computes no gradient, but an input requires "
              "one: call it under torch.no_grad() (C++: torch::NoGradGuard), or use torch.nn.functional.linear to "
              "train");
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return linear_rows_many(input, weights, biases);
}

at::Tensor rotary_positions_autograd(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& inv_freq,
                                     double attention_factor, bool interleaved) {
  const c10::optional<at::Tensor> xs = x, f = inv_freq;
  TORCH_CHECK(!needs_grad({&xs, &f}), "attn::rotary_positions is an inference kernel and computes no gradient, "
              "but an input requires one: call it under torch.no_grad() (C++: torch::NoGradGuard), or use "
              "attn::rotary_cos_sin and attn::apply_rotary to train");
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return rotary_positions(x, positions, inv_freq, attention_factor, interleaved);
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, Autograd, m) {
  m.impl("decode_attention", TORCH_FN(decode_attention_autograd));
  m.impl("linear_rows", TORCH_FN(linear_rows_autograd));
  m.impl("linear_rows_many", TORCH_FN(linear_rows_many_autograd));
  m.impl("rotary_positions", TORCH_FN(rotary_positions_autograd));
}

}  // namespace attn::ops
