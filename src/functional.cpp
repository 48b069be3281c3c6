#include <attn/functional.h>

#include "detail/attention.h"
#include "detail/checks.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <vector>

namespace attn {
namespace detail {
namespace {

constexpr const char* kSdpa = "attn::scaled_dot_product_attention";

std::vector<int64_t> batch_dims(const torch::Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin(), t.sizes().end() - 2);
}

/// [Tq, Tk] bool, true where key j comes after query i (see CausalAlignment).
torch::Tensor causal_blocked(int64_t tq, int64_t tk, CausalAlignment alignment, const torch::Device& device) {
  const int64_t offset = alignment == CausalAlignment::BottomRight ? tk - tq : 0;
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  return torch::arange(tk, opts).unsqueeze(0) > torch::arange(tq, opts).unsqueeze(1) + offset;
}

torch::Tensor either(const torch::Tensor& a, const torch::Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return a.logical_or(b);
}

/// Every (query, key) pair that no query may use, as one bool mask broadcastable to [..., Tq, Tk];
/// undefined when nothing is masked.
torch::Tensor blocked_pairs(const torch::Tensor& query, const torch::Tensor& key, const SdpaOptions& options) {
  const AttentionMasks& masks = options.masks();
  torch::Tensor blocked;
  if (masks.key_padding_mask().defined()) blocked = masks.key_padding_mask().unsqueeze(-2);
  if (masks.attend_mask().defined()) blocked = either(blocked, masks.attend_mask().logical_not());
  // An additive -inf blocks the pair outright, so that a NaN score there (NaN key) is replaced, not summed.
  if (masks.additive_mask().defined()) blocked = either(blocked, masks.additive_mask().isneginf());
  if (options.causal()) {
    blocked = either(blocked, causal_blocked(query.size(-2), key.size(-2), options.causal_alignment(),
                                             query.device()));
  }
  return blocked;
}

/// probs @ value where a blocked key contributes exactly nothing. In a matrix product a zero weight times a
/// NaN or Inf value is still NaN, so a non-finite value at a masked key would leak into the output; here it
/// is multiplied as 0 and put back (with IEEE semantics) only where the key is allowed.
torch::Tensor weighted_values(const torch::Tensor& probs, const torch::Tensor& value, const torch::Tensor& blocked) {
  if (!blocked.defined()) return at::matmul(probs, value);
  const torch::Tensor finite = value.isfinite();
  // On the CPU the check is a cheap pass that saves two products in the usual all-finite case; on CUDA it
  // would stall the stream, so CUDA always takes the exact path.
  if (value.is_cpu() && finite.all().item<bool>()) return at::matmul(probs, value);

  torch::Tensor out = at::matmul(probs, value.masked_fill(finite.logical_not(), 0));
  const auto dtype = value.scalar_type();
  const torch::Tensor reach = blocked.logical_not().to(dtype);
  auto hits = [&](const torch::Tensor& where_bad) { return at::matmul(reach, where_bad.to(dtype)) > 0; };
  const torch::Tensor pos = hits(value.isposinf());
  const torch::Tensor neg = hits(value.isneginf());
  // NaN wins over Inf: an attended NaN, +Inf meeting -Inf, or a row already NaN (from a NaN score).
  const torch::Tensor nan = hits(value.isnan()).logical_or(pos.logical_and(neg)).logical_or(out.isnan());
  out = out.masked_fill(pos, std::numeric_limits<double>::infinity());
  out = out.masked_fill(neg, -std::numeric_limits<double>::infinity());
  return out.masked_fill(nan, std::numeric_limits<double>::quiet_NaN());
}

}  // namespace

void check_attention_inputs(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                            const torch::Tensor& value, const SdpaOptions& options) {
  TORCH_CHECK(query.defined() && key.defined() && value.defined(), fn, ": query, key and value must be defined");
  TORCH_CHECK(query.dim() >= 2, fn, ": query must be [..., Tq, d_k] (at least 2-D), got shape ", query.sizes());
  TORCH_CHECK(key.dim() == query.dim(), fn, ": key must have the same rank as query ([..., Tk, d_k]), got key ",
              key.sizes(), " and query ", query.sizes());
  TORCH_CHECK(value.dim() == query.dim(), fn, ": value must have the same rank as query ([..., Tk, d_v]), got value ",
              value.sizes(), " and query ", query.sizes());
  check_floating(fn, "query", query);
  check_same_device_dtype(fn, "key", key, "query", query);
  check_same_device_dtype(fn, "value", value, "query", query);
  const auto batch = batch_dims(query);
  TORCH_CHECK(batch_dims(key) == batch && batch_dims(value) == batch, fn,
              ": query, key and value must share their leading dimensions, got query ", query.sizes(), ", key ",
              key.sizes(), ", value ", value.sizes());
  TORCH_CHECK(query.size(-1) > 0, fn, ": d_k (query's last dimension) must be positive, got query ", query.sizes());
  TORCH_CHECK(key.size(-1) == query.size(-1), fn, ": key must be [..., Tk, d_k] with d_k = ", query.size(-1),
              " (query's last dimension), got key ", key.sizes());
  TORCH_CHECK(value.size(-2) == key.size(-2), fn, ": value must be [..., Tk, d_v] with Tk = ", key.size(-2),
              " (key's length), got value ", value.sizes());

  const int64_t tq = query.size(-2), tk = key.size(-2);
  const AttentionMasks& masks = options.masks();
  // Masks broadcast from the right, so a mask that skips a leading dimension would line up with the wrong
  // one (a [B, Tk] padding mask against [B, H, ...] inputs pairs B with H). Only unambiguous ranks pass.
  if (masks.key_padding_mask().defined()) {
    const torch::Tensor& pad = masks.key_padding_mask();
    TORCH_CHECK(pad.dim() == 1 || pad.dim() == query.dim() - 1, fn,
                ": key_padding_mask must be [Tk] or have one dimension per leading dimension of the query plus Tk (",
                query.dim() - 1, "-D, size 1 to broadcast, e.g. [B, 1, Tk] for [B, H, Tq, d] inputs), got shape ",
                pad.sizes());
    auto target = batch;
    target.push_back(tk);
    check_mask(fn, "key_padding_mask", pad, /*want_bool=*/true, query, target, "[..., Tk]");
  }
  auto scores_shape = batch;
  scores_shape.push_back(tq);
  scores_shape.push_back(tk);
  const auto check_pair_rank = [&](const char* arg, const torch::Tensor& mask) {
    TORCH_CHECK(mask.dim() == 2 || mask.dim() == query.dim(), fn, ": ", arg, " must be [Tq, Tk] or have the query's rank ",
                query.dim(), " (size 1 to broadcast, e.g. [B, 1, Tq, Tk] for [B, H, Tq, d] inputs), got shape ",
                mask.sizes());
  };
  if (masks.attend_mask().defined()) {
    check_pair_rank("attend_mask", masks.attend_mask());
    check_mask(fn, "attend_mask", masks.attend_mask(), /*want_bool=*/true, query, scores_shape, "[..., Tq, Tk]");
  }
  if (masks.additive_mask().defined()) {
    check_pair_rank("additive_mask", masks.additive_mask());
    check_mask(fn, "additive_mask", masks.additive_mask(), /*want_bool=*/false, query, scores_shape,
               "[..., Tq, Tk]");
  }
  if (options.scale()) {
    TORCH_CHECK(std::isfinite(*options.scale()), fn, ": scale must be finite, got ", *options.scale());
  }
  TORCH_CHECK(options.dropout() >= 0.0 && options.dropout() <= 1.0, fn, ": dropout must be in [0, 1], got ",
              options.dropout());
}

std::tuple<torch::Tensor, torch::Tensor> math_attention(const torch::Tensor& query, const torch::Tensor& key,
                                                        const torch::Tensor& value, const SdpaOptions& options,
                                                        bool need_weights) {
  const double scale = options.scale() ? *options.scale() : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  // Scale q before the product, not the scores after it: in float16 an unscaled q·k can overflow to inf.
  torch::Tensor scores = at::matmul(query * scale, key.transpose(-2, -1));
  if (options.masks().additive_mask().defined()) scores = scores + options.masks().additive_mask();

  const torch::Tensor blocked = blocked_pairs(query, key, options);
  torch::Tensor probs;
  if (blocked.defined()) {
    // A row with no allowed key would be softmax(-inf, ..., -inf) = NaN, and its gradient NaN too. Give such
    // rows finite scores, then zero their probabilities: the output row is 0 and no NaN reaches any gradient.
    const torch::Tensor row_blocked = blocked.all(-1, /*keepdim=*/true);
    scores = scores.masked_fill(blocked, -std::numeric_limits<double>::infinity()).masked_fill(row_blocked, 0.0);
    probs = at::softmax(scores, -1).masked_fill(row_blocked, 0.0);
  } else {
    probs = at::softmax(scores, -1);
  }
  if (options.dropout() > 0.0) probs = at::dropout(probs, options.dropout(), /*train=*/true);

  torch::Tensor out = weighted_values(probs, value, blocked);
  return {out, need_weights ? probs : torch::Tensor()};
}

}  // namespace detail

torch::Tensor scaled_dot_product_attention(const torch::Tensor& query, const torch::Tensor& key,
                                           const torch::Tensor& value, const SdpaOptions& options) {
  detail::check_attention_inputs(detail::kSdpa, query, key, value, options);
  return std::get<0>(detail::attention(detail::kSdpa, query, key, value, options, /*need_weights=*/false));
}

std::tuple<torch::Tensor, torch::Tensor> scaled_dot_product_attention_with_weights(const torch::Tensor& query,
                                                                                   const torch::Tensor& key,
                                                                                   const torch::Tensor& value,
                                                                                   const SdpaOptions& options) {
  constexpr const char* fn = "attn::scaled_dot_product_attention_with_weights";
  detail::check_attention_inputs(fn, query, key, value, options);
  return detail::attention(fn, query, key, value, options, /*need_weights=*/true);
}

Backend resolved_backend(const torch::Tensor& query, const SdpaOptions& options, bool need_weights) {
  TORCH_CHECK(query.defined(), "attn::resolved_backend: query is undefined");
  return detail::resolve_backend(need_weights ? "attn::scaled_dot_product_attention_with_weights" : detail::kSdpa,
                                 query, options, need_weights);
}

}  // namespace attn
