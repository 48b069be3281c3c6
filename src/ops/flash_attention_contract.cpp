#include "ops/flash_attention_contract.h"

#include "common/checks.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace attn::ops {
void check_input(const char* fn, const char* arg, const at::Tensor& t, const char* layout) {
  TORCH_CHECK(t.defined(), fn, ": ", arg, " is undefined");
  TORCH_CHECK(t.dim() == 4, fn, ": ", arg, " must be 4-D ", layout, ", got shape ", t.sizes());
  TORCH_CHECK(t.device().is_cpu() || t.device().is_meta(), fn, ": ", arg, " is on ", t.device(),
              "; this op runs on the CPU (attn::scaled_dot_product_attention picks a CUDA backend itself)");
  TORCH_CHECK(common::is_fused_kernel_dtype(t.scalar_type()), fn, ": ", arg,
              " must be float32, float64 or bfloat16, got ", common::dtype_name(t));
}

namespace {

FlashSizes check_qkv(const char* fn, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  check_input(fn, "query", q, "[B, H, Tq, d_k]");
  check_input(fn, "key", k, "[B, H_kv, Tk, d_k]");
  check_input(fn, "value", v, "[B, H_kv, Tk, d_v]");
  common::check_same_device_dtype(fn, "key", k, "query", q);
  common::check_same_device_dtype(fn, "value", v, "query", q);
  const FlashSizes s{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3), k.size(1)};
  TORCH_CHECK(s.dk > 0, fn, ": d_k (query's last dimension) must be positive, got query ", q.sizes());
  constexpr int64_t kMaxWidth = std::numeric_limits<int32_t>::max();  // BLAS's 32-bit sizes
  TORCH_CHECK(s.dk <= kMaxWidth && v.size(3) <= kMaxWidth, fn, ": d_k and d_v must be at most ", kMaxWidth,
              " for the fused kernel's BLAS tiles, got query ", q.sizes(), " and value ", v.sizes(),
              "; use attn::Backend::Math");
  const bool heads_divide = s.kv_heads > 0 && s.heads % s.kv_heads == 0;
  TORCH_CHECK(k.size(0) == s.batch && heads_divide && k.size(3) == s.dk, fn,
              ": key must be [B, H_kv, Tk, d_k] = [", s.batch, ", H_kv, Tk, ", s.dk,
              "] with H_kv dividing the query's ", s.heads, " heads, to match query ", q.sizes(), ", got key ",
              k.sizes());
  TORCH_CHECK(v.size(0) == s.batch && v.size(1) == s.kv_heads && v.size(2) == s.tk, fn,
              ": value must be [B, H_kv, Tk, d_v] = [", s.batch, ", ", s.kv_heads, ", ", s.tk,
              ", d_v] to match key ", k.sizes(), ", got value ", v.sizes());
  return s;
}

void check_masks(const char* fn, const FlashSizes& s, const at::Tensor& q, const c10::optional<at::Tensor>& padding,
                 const c10::optional<at::Tensor>& attend, const c10::optional<at::Tensor>& additive) {
  using common::MaskKind;
  const auto check = [&](const char* arg, const at::Tensor& mask, MaskKind kind, at::IntArrayRef target,
                         const char* layout) { common::check_mask(fn, arg, mask, kind, q, target, layout); };
  if (padding && padding->defined()) check("key_padding_mask", *padding, MaskKind::Bool, {s.batch, s.heads, s.tk}, "[B, H, Tk]");
  if (attend && attend->defined()) {
    check("attend_mask", *attend, MaskKind::Bool, {s.batch, s.heads, s.tq, s.tk}, "[B, H, Tq, Tk]");
  }
  if (additive && additive->defined()) {
    check("additive_mask", *additive, MaskKind::AdditiveAnyFloat, {s.batch, s.heads, s.tq, s.tk}, "[B, H, Tq, Tk]");
  }
}

}  // namespace

FlashSizes check_forward_args(const char* fn, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                              const c10::optional<at::Tensor>& key_padding_mask,
                              const c10::optional<at::Tensor>& attend_mask,
                              const c10::optional<at::Tensor>& additive_mask, c10::optional<double> scale) {
  const FlashSizes s = check_qkv(fn, query, key, value);
  check_masks(fn, s, query, key_padding_mask, attend_mask, additive_mask);
  if (scale) TORCH_CHECK(std::isfinite(*scale), fn, ": scale must be finite, got ", *scale);
  return s;
}

FlashSizes check_backward_args(const at::Tensor& grad_output, const at::Tensor& query, const at::Tensor& key,
                               const at::Tensor& value, const at::Tensor& output, const at::Tensor& logsumexp,
                               const c10::optional<at::Tensor>& key_padding_mask,
                               const c10::optional<at::Tensor>& attend_mask,
                               const c10::optional<at::Tensor>& additive_mask, c10::optional<double> scale) {
  const FlashSizes s =
      check_forward_args(kBackwardOp, query, key, value, key_padding_mask, attend_mask, additive_mask, scale);
  const std::vector<int64_t> out_shape{s.batch, s.heads, s.tq, s.dv};
  TORCH_CHECK(grad_output.defined() && grad_output.sizes() == at::IntArrayRef(out_shape), kBackwardOp,
              ": grad_output must be [B, H, Tq, d_v] = ", at::IntArrayRef(out_shape), ", got ",
              grad_output.defined() ? grad_output.sizes() : at::IntArrayRef{});
  TORCH_CHECK(output.defined() && output.sizes() == at::IntArrayRef(out_shape), kBackwardOp,
              ": output must be [B, H, Tq, d_v] = ", at::IntArrayRef(out_shape), ", got ",
              output.defined() ? output.sizes() : at::IntArrayRef{});
  const at::ScalarType compute = compute_type(query);
  TORCH_CHECK(logsumexp.defined() && logsumexp.sizes() == at::IntArrayRef({s.batch, s.heads, s.tq}) &&
                  logsumexp.scalar_type() == compute,
              kBackwardOp, ": logsumexp must be the forward pass's [B, H, Tq] = [", s.batch, ", ", s.heads, ", ", s.tq,
              "] ", c10::toString(compute), " tensor, got ",
              logsumexp.defined() ? logsumexp.sizes() : at::IntArrayRef{});
  return s;
}

at::ScalarType compute_type(const at::Tensor& query) {
  return query.scalar_type() == at::kBFloat16 ? at::kFloat : query.scalar_type();
}

double resolved_scale(c10::optional<double> scale, int64_t dk) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(dk));
}

std::tuple<at::Tensor, at::Tensor> empty_forward_results(const FlashSizes& s, const at::TensorOptions& options) {
  return {at::empty({s.batch, s.tq, s.heads, s.dv}, options).transpose(1, 2),
          at::empty({s.batch, s.heads, s.tq}, options)};
}

}  // namespace attn::ops
