#include "backends/validate.h"

#include "common/checks.h"

#include <cmath>
#include <string>
#include <vector>

namespace attn::backends {
namespace {

std::vector<int64_t> batch_dims(const torch::Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin(), t.sizes().end() - 2);
}

}  // namespace

void check_sdpa_inputs(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                       const torch::Tensor& value, const SdpaOptions& options) {
  TORCH_CHECK(query.defined() && key.defined() && value.defined(), fn, ": query, key and value must be defined");
  TORCH_CHECK(query.dim() >= 2, fn, ": query must be [..., Tq, d_k] (at least 2-D), got shape ", query.sizes());
  TORCH_CHECK(key.dim() == query.dim(), fn, ": key must have the same rank as query ([..., Tk, d_k]), got key ",
              key.sizes(), " and query ", query.sizes());
  TORCH_CHECK(value.dim() == query.dim(), fn, ": value must have the same rank as query ([..., Tk, d_v]), got value ",
              value.sizes(), " and query ", query.sizes());
  common::check_floating(fn, "query", query);
  common::check_same_device_dtype(fn, "key", key, "query", query);
  common::check_same_device_dtype(fn, "value", value, "query", query);
  const auto batch = batch_dims(query);
  // Grouped-query attention: key and value may have fewer heads (dimension -3) than the query, as long as
  // they divide its count; every other leading dimension must match.
  const auto same_or_grouped = [&](const torch::Tensor& t) {
    auto dims = batch_dims(t);
    if (dims == batch) return true;
    if (dims.size() != batch.size() || batch.empty()) return false;
    const int64_t kv_heads = dims.back(), q_heads = batch.back();
    dims.back() = q_heads;
    return dims == batch && kv_heads > 0 && q_heads % kv_heads == 0;
  };
  TORCH_CHECK(same_or_grouped(key) && same_or_grouped(value), fn,
              ": query, key and value must share their leading dimensions, except that key and value may have "
              "H_kv heads (dimension -3) where H_kv divides the query's heads (grouped-query attention), got query ",
              query.sizes(), ", key ", key.sizes(), ", value ", value.sizes());
  TORCH_CHECK(query.dim() < 3 || key.size(-3) == value.size(-3), fn,
              ": key and value must have the same number of heads (dimension -3), got key ", key.sizes(),
              " and value ", value.sizes());
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
    common::check_mask(fn, "key_padding_mask", pad, common::MaskKind::Bool, query, target, "[..., Tk]");
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
    common::check_mask(fn, "attend_mask", masks.attend_mask(), common::MaskKind::Bool, query, scores_shape, "[..., Tq, Tk]");
  }
  if (masks.additive_mask().defined()) {
    check_pair_rank("additive_mask", masks.additive_mask());
    common::check_mask(fn, "additive_mask", masks.additive_mask(), common::MaskKind::AdditiveOfInputDtype, query, scores_shape,
               "[..., Tq, Tk]");
  }
  if (options.scale()) {
    TORCH_CHECK(std::isfinite(*options.scale()), fn, ": scale must be finite, got ", *options.scale());
  }
  TORCH_CHECK(options.dropout() >= 0.0 && options.dropout() <= 1.0, fn, ": dropout must be in [0, 1], got ",
              options.dropout());
  check_score_options(fn, query, options, query.dim() >= 3 ? query.size(-3) : 1,
                      query.dim() >= 4 ? query.size(-4) : -1);
}

void check_score_options(const char* fn, const torch::Tensor& query, const SdpaOptions& options, int64_t heads,
                         int64_t batch) {
  TORCH_CHECK(options.window_left() >= -1 && options.window_right() >= -1, fn,
              ": window_left and window_right must be >= 0, or -1 for an unbounded side, got window(",
              options.window_left(), ", ", options.window_right(), ")");
  TORCH_CHECK(std::isfinite(options.softcap()) && options.softcap() >= 0.0, fn,
              ": softcap must be finite and >= 0 (0 turns it off), got ", options.softcap());
  const auto check_per_head = [&](const char* arg, const torch::Tensor& t, bool batched_ok) {
    common::check_floating(fn, arg, t);
    TORCH_CHECK(t.device() == query.device(), fn, ": ", arg, " must be on the query's device ", query.device(),
                ", got ", t.device());
    const bool per_head = t.dim() == 1 && t.size(0) == heads;
    const bool per_row = batched_ok && batch >= 0 && t.dim() == 2 && (t.size(0) == batch || t.size(0) == 1) &&
                         t.size(1) == heads;
    TORCH_CHECK(per_head || per_row, fn, ": ", arg, " must be [H] = [", heads, "]",
                batched_ok && batch >= 0 ? " or [B, H] = [" + std::to_string(batch) + ", " + std::to_string(heads) + "]"
                                        : std::string(),
                " (one per query head), got shape ", t.sizes());
  };
  if (options.alibi_slopes().defined()) check_per_head("alibi_slopes", options.alibi_slopes(), true);
  if (options.sinks().defined()) check_per_head("sinks", options.sinks(), false);
}

}  // namespace attn::backends
