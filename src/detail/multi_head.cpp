#include "detail/multi_head.h"

#include "detail/attention.h"
#include "detail/checks.h"

#include <ATen/ATen.h>

#include <limits>

namespace attn::detail {
namespace {

void check_input(const HeadLayout& layout, const char* arg, const torch::Tensor& x, int64_t width, int64_t rank,
                 const torch::Tensor& weight) {
  TORCH_CHECK(x.defined(), layout.module, ": ", arg, " is undefined");
  TORCH_CHECK(x.dim() == rank, layout.module, ": ", arg, " must be ", rank == 3 ? "[B, T, " : "[T, ", width,
              "] like the query (batched [B, T, E] or unbatched [T, E]), got shape ", x.sizes());
  check_floating(layout.module, arg, x);
  TORCH_CHECK(x.size(-1) == width, layout.module, ": ", arg, " must have last dimension ", width, ", got shape ",
              x.sizes());
  TORCH_CHECK(x.device() == weight.device(), layout.module, ": ", arg, " is on ", x.device(),
              " but the module's parameters are on ", weight.device(), "; move one with module->to(device)");
  TORCH_CHECK(x.scalar_type() == weight.scalar_type(), layout.module, ": ", arg, " is ", dtype_name(x),
              " but the module's parameters are ", dtype_name(weight), "; convert one with module->to(dtype)");
}

/// Checks a module-level attend/additive mask and lifts it to [B|1, H|1, Tq, Tk].
torch::Tensor lift_pair_mask(const HeadLayout& layout, const char* arg, const torch::Tensor& mask, bool want_bool,
                             const torch::Tensor& ref, bool batched, int64_t batch, int64_t tq, int64_t tk) {
  if (!mask.defined()) return mask;
  const int64_t heads = layout.num_heads;
  if (batched) {
    TORCH_CHECK(mask.dim() == 2 || mask.dim() == 4, layout.module, ": ", arg, " must be [Tq, Tk] = [", tq, ", ", tk,
                "] or [B|1, H|1, Tq, Tk] = [", batch, ", ", heads, ", ", tq, ", ", tk, "], got shape ", mask.sizes(),
                mask.dim() == 3 ? " (a 3-D mask is ambiguous; reshape PyTorch's [B*H, Tq, Tk] with "
                                  "view({B, H, Tq, Tk}))"
                                : "");
    check_mask(layout.module, arg, mask, want_bool, ref, {batch, heads, tq, tk}, "[B|1, H|1, Tq, Tk]");
    return mask;
  }
  TORCH_CHECK(mask.dim() == 2 || mask.dim() == 3, layout.module, ": ", arg, " must be [Tq, Tk] = [", tq, ", ", tk,
              "] or [H|1, Tq, Tk] for unbatched inputs, got shape ", mask.sizes());
  check_mask(layout.module, arg, mask, want_bool, ref, {heads, tq, tk}, "[H|1, Tq, Tk]");
  return mask.dim() == 3 ? mask.unsqueeze(0) : mask;
}

/// [B, T, H*d] -> [B, H, T, d]
torch::Tensor split_heads(const torch::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

/// [B, H, T, d] -> [B, T, H*d]
torch::Tensor merge_heads(const torch::Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

}  // namespace

std::tuple<torch::Tensor, torch::Tensor> project_and_attend(const HeadLayout& layout, const torch::Tensor& query,
                                                            const torch::Tensor& key, const torch::Tensor& value,
                                                            torch::nn::Linear& q_proj, torch::nn::Linear& k_proj,
                                                            torch::nn::Linear& v_proj, const AttentionMasks& masks,
                                                            const SdpaOptions& base, bool need_weights) {
  const torch::Tensor& weight = q_proj->weight;
  TORCH_CHECK(query.defined(), layout.module, ": ", layout.query_name, " is undefined");
  TORCH_CHECK(query.dim() == 2 || query.dim() == 3, layout.module, ": ", layout.query_name, " must be [B, T, ",
              layout.query_width, "] or unbatched [T, ", layout.query_width, "], got shape ", query.sizes());
  const int64_t rank = query.dim();
  check_input(layout, layout.query_name, query, layout.query_width, rank, weight);
  check_input(layout, layout.key_name, key, layout.key_width, rank, weight);
  check_input(layout, layout.value_name, value, layout.value_width, rank, weight);
  const bool batched = rank == 3;
  const int64_t tq = query.size(-2), tk = key.size(-2);
  TORCH_CHECK(value.size(-2) == tk, layout.module, ": ", layout.key_name, " and ", layout.value_name,
              " must have the same length, got ", key.sizes(), " and ", value.sizes());
  const int64_t batch = batched ? query.size(0) : 1;
  if (batched) {
    TORCH_CHECK(key.size(0) == batch && value.size(0) == batch, layout.module, ": ", layout.query_name, ", ",
                layout.key_name, " and ", layout.value_name, " must have the same batch size, got ", query.sizes(),
                ", ", key.sizes(), ", ", value.sizes());
  }

  AttentionMasks lifted;
  if (masks.key_padding_mask().defined()) {
    const torch::Tensor& pad = masks.key_padding_mask();
    const std::vector<int64_t> expected = batched ? std::vector<int64_t>{batch, tk} : std::vector<int64_t>{tk};
    TORCH_CHECK(pad.sizes() == at::IntArrayRef(expected), layout.module, ": key_padding_mask must be ",
                batched ? "[B, Tk] = " : "[Tk] = ", at::IntArrayRef(expected), " (true = padding), got shape ",
                pad.sizes());
    check_mask(layout.module, "key_padding_mask", pad, /*want_bool=*/true, query, expected, "[B, Tk]");
    lifted.key_padding_mask(pad.reshape({batch, 1, tk}));  // reshape: the caller's mask may be strided
  }
  lifted.attend_mask(lift_pair_mask(layout, "attend_mask", masks.attend_mask(), true, query, batched, batch, tq, tk));
  lifted.additive_mask(
      lift_pair_mask(layout, "additive_mask", masks.additive_mask(), false, query, batched, batch, tq, tk));

  const auto as_batch = [&](const torch::Tensor& x) { return batched ? x : x.unsqueeze(0); };
  const int64_t heads = layout.num_heads;
  torch::Tensor q, k, v;
  if (query.is_same(key) && key.is_same(value)) {
    // Self-attention: one product with the three weights stacked is faster than three (a wider GEMM), and
    // the q/k/v column slices it yields are views the attention reads in place.
    const auto stacked = [](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
      return a.defined() ? torch::cat({a, b, c}) : torch::Tensor();
    };
    const torch::Tensor qkv = at::linear(as_batch(query), stacked(q_proj->weight, k_proj->weight, v_proj->weight),
                                         stacked(q_proj->bias, k_proj->bias, v_proj->bias));
    const int64_t qk_width = q_proj->weight.size(0), v_width = v_proj->weight.size(0);
    q = split_heads(qkv.narrow(-1, 0, qk_width), heads);
    k = split_heads(qkv.narrow(-1, qk_width, qk_width), heads);
    v = split_heads(qkv.narrow(-1, 2 * qk_width, v_width), heads);
  } else {
    q = split_heads(q_proj(as_batch(query)), heads);
    k = split_heads(k_proj(as_batch(key)), heads);
    v = split_heads(v_proj(as_batch(value)), heads);
  }

  SdpaOptions options = base;
  options.masks(lifted);
  auto [out, weights] = attention(layout.module, q, k, v, options, need_weights);
  out = merge_heads(out);
  if (!batched) {
    out = out.squeeze(0);
    if (weights.defined()) weights = weights.squeeze(0);
  }
  return {out, weights};
}

SdpaOptions module_sdpa_options(bool causal, CausalAlignment alignment, double dropout, Backend backend,
                                bool training) {
  return SdpaOptions().causal(causal).causal_alignment(alignment).dropout(training ? dropout : 0.0).backend(backend);
}

torch::Tensor select_head_weights(const torch::Tensor& per_head, HeadWeights head_weights) {
  return head_weights == HeadWeights::Averaged ? per_head.mean(-3) : per_head;
}

void check_positive(const char* module, const char* option, int64_t value) {
  TORCH_CHECK(value > 0, module, ": ", option, " must be positive, got ", value);
}

int64_t checked_width(const char* module, const char* what, int64_t a, int64_t b) {
  TORCH_CHECK(a <= std::numeric_limits<int64_t>::max() / b, module, ": ", what, " = ", a, " * ", b,
              " does not fit in 64 bits");
  return a * b;
}

std::string causal_description(bool causal, CausalAlignment alignment) {
  std::string s = std::string(", causal=") + bool_name(causal);
  if (causal && alignment == CausalAlignment::TopLeft) s += ", causal_alignment=top_left";
  return s;
}

std::string backend_description(Backend backend) {
  switch (backend) {
    case Backend::Auto: return "";
    case Backend::Math: return ", backend=math";
    case Backend::Fused: return ", backend=fused";
    case Backend::Torch: return ", backend=torch";
  }
  return "";
}

void check_dropout(const char* module, double p) {
  TORCH_CHECK(p >= 0.0 && p <= 1.0, module, ": dropout must be in [0, 1], got ", p);
}

}  // namespace attn::detail
