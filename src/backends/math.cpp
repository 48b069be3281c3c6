// Backend::Math: softmax(q kᵀ · scale + masks) v with the [..., Tq, Tk] scores in memory. The reference the
// other backends are tested against, and the only one that returns the weights or applies dropout anywhere.

#include "backends/groups.h"
#include "backends/implementations.h"
#include "backends/masks.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <vector>

namespace attn::backends {
namespace {

/// probs @ value where a blocked key contributes exactly nothing. In a matrix product a zero weight times a
/// NaN or Inf value is still NaN, so a non-finite value at a masked key would leak into the output; here it
/// is multiplied as 0 and put back (with IEEE semantics) only where the key is allowed.
torch::Tensor weighted_values(const torch::Tensor& probs, const torch::Tensor& value, const torch::Tensor& blocked) {
  if (!blocked.defined()) return grouped_matmul(probs, value);
  const torch::Tensor finite = value.isfinite();
  // On the CPU the check is a cheap pass that saves two products in the usual all-finite case; on CUDA it
  // would stall the stream, so CUDA always takes the exact path.
  if (value.is_cpu() && finite.all().item<bool>()) return grouped_matmul(probs, value);

  torch::Tensor out = grouped_matmul(probs, value.masked_fill(finite.logical_not(), 0));
  const auto dtype = value.scalar_type();
  const torch::Tensor reach = blocked.logical_not().to(dtype).expand(probs.sizes());
  auto hits = [&](const torch::Tensor& where_bad) { return grouped_matmul(reach, where_bad.to(dtype)) > 0; };
  const torch::Tensor pos = hits(value.isposinf());
  const torch::Tensor neg = hits(value.isneginf());
  // NaN wins over Inf: an attended NaN, +Inf meeting -Inf, or a row already NaN (from a NaN score).
  const torch::Tensor nan = hits(value.isnan()).logical_or(pos.logical_and(neg)).logical_or(out.isnan());
  out = out.masked_fill(pos, std::numeric_limits<double>::infinity());
  out = out.masked_fill(neg, -std::numeric_limits<double>::infinity());
  return out.masked_fill(nan, std::numeric_limits<double>::quiet_NaN());
}

/// q · kᵀ where a blocked key reaches neither the scores nor the query's gradient. The scores of blocked pairs are
/// overwritten later, but a product's backward multiplies their zero gradients by the key, so a NaN or Inf key
/// would make dq NaN for every query that the key is blocked for. Queries that attend no non-finite key read the
/// keys with those entries zeroed; the others (whose rows IEEE arithmetic owns) read them as they are.
torch::Tensor key_scores(const torch::Tensor& scaled_query, const torch::Tensor& key, const torch::Tensor& blocked) {
  const torch::Tensor key_t = key.transpose(-2, -1);
  if (!blocked.defined()) return grouped_matmul(scaled_query, key_t);
  const torch::Tensor finite = key.isfinite();
  // As in weighted_values: skip the exact path on the CPU when every key is finite, never check on CUDA.
  if (key.is_cpu() && finite.all().item<bool>()) return grouped_matmul(scaled_query, key_t);

  const auto dtype = scaled_query.scalar_type();
  std::vector<int64_t> pairs(scaled_query.sizes().begin(), scaled_query.sizes().end() - 1);  // [..., Tq, Tk]
  pairs.push_back(key.size(-2));
  const torch::Tensor reach = blocked.logical_not().to(dtype).expand(pairs);
  // [.., Tq, 1]: whether the query may attend a key with a non-finite entry.
  const torch::Tensor attends_bad =
      (grouped_matmul(reach, finite.logical_not().to(dtype)) > 0).any(-1, /*keepdim=*/true);
  const torch::Tensor clean = grouped_matmul(scaled_query, key.masked_fill(finite.logical_not(), 0).transpose(-2, -1));
  // The masked_fill's backward zeroes the rows whose gradient the exact product would make NaN.
  const torch::Tensor exact = grouped_matmul(scaled_query.masked_fill(attends_bad.logical_not(), 0), key_t);
  return at::where(attends_bad, exact, clean);
}

}  // namespace

std::tuple<torch::Tensor, torch::Tensor> math_attention(const torch::Tensor& query, const torch::Tensor& key,
                                                        const torch::Tensor& value, const SdpaOptions& options,
                                                        bool need_weights) {
  const auto dtype = query.scalar_type();
  if (query.is_cpu() && (dtype == torch::kBFloat16 || dtype == torch::kHalf)) {
    // On the CPU, LibTorch 1.13's bfloat16 and float16 matrix products accumulate in the reduced type unless
    // oneDNN has AVX-512 kernels for them: on an AVX2 CPU a 560-term product was 5% off. Compute in float32,
    // as the fused kernel and CUDA's GEMMs do, and round once at the end. Autograd casts the gradients back.
    auto [out, probs] = math_attention(query.to(torch::kFloat), key.to(torch::kFloat), value.to(torch::kFloat),
                                       options, need_weights);
    return {out.to(dtype), probs.defined() ? probs.to(dtype) : probs};
  }
  const double scale = options.scale() ? *options.scale() : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  const int64_t tq = query.size(-2), tk = key.size(-2);
  const torch::Tensor blocked = blocked_pairs(options, tq, tk, query.device());
  // Scale q before the product, not the scores after it: in float16 an unscaled q·k can overflow to inf.
  torch::Tensor scores = key_scores(query * scale, key, blocked);
  // The score terms in masks.h's order: softcap, ALiBi, additive mask, then the blocked pairs.
  scores = softcapped(scores, options.softcap());
  if (options.alibi_slopes().defined()) {
    const int64_t offset = band_of(options.attention(), tq, tk).offset;
    scores = scores + alibi_bias(options.alibi_slopes(), offset, tq, tk, scores.dim(), scores.scalar_type());
  }
  if (options.masks().additive_mask().defined()) scores = scores + options.masks().additive_mask();

  torch::Tensor no_keys;
  if (blocked.defined()) {
    // A row with no allowed key would be softmax(-inf, ..., -inf) = NaN, and its gradient NaN too. Give such
    // rows finite scores, then zero their probabilities: the output row is 0 and no NaN reaches any gradient.
    no_keys = rows_without_keys(blocked);
    scores = scores.masked_fill(blocked, -std::numeric_limits<double>::infinity()).masked_fill(no_keys, 0.0);
  }
  torch::Tensor probs;
  if (options.sinks().defined()) {
    // The sink is one more column of the softmax, with no value behind it.
    auto shape = scores.sizes().vec();
    shape.back() = 1;
    const torch::Tensor sink = per_head(options.sinks().to(scores.scalar_type()), scores.dim()).expand(shape);
    probs = at::softmax(at::cat({scores, sink}, -1), -1).narrow(-1, 0, tk);
  } else {
    probs = at::softmax(scores, -1);
  }
  if (no_keys.defined()) probs = probs.masked_fill(no_keys, 0.0);
  if (options.dropout() > 0.0) probs = at::dropout(probs, options.dropout(), /*train=*/true);

  torch::Tensor out = weighted_values(probs, value, blocked);
  return {out, need_weights ? probs : torch::Tensor()};
}

}  // namespace attn::backends
