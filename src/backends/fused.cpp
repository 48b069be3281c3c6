// Backend::Fused: brings [..., T, d] inputs and their masks, or packed [total, H, d] sequences, to the
// [B, H, T, d] layout of the attn::flash_attention op, without copying (views only, except for inputs of rank 5
// and more).

#include "backends/dispatch.h"
#include "backends/implementations.h"
#include "backends/masks.h"
#include "backends/op_arguments.h"

#include <attn/ops/flash_attention.h>

#include <ATen/ATen.h>

#include <vector>

namespace attn::backends {
namespace {

/// Leading dimensions folded into the op's two, the last being the heads (dimension -3, where ALiBi's slopes,
/// the sinks and grouped-query heads apply): rank 2 -> [1, 1], rank 3 [H] -> [1, H], rank 4 as is, and rank > 4
/// [A, ..., Z] -> [A*...*Y, Z].
std::vector<int64_t> folded_lead(at::IntArrayRef lead) {
  switch (lead.size()) {
    case 0: return {1, 1};
    case 1: return {1, lead[0]};
    case 2: return {lead[0], lead[1]};
    default: {
      int64_t outer = 1;
      for (size_t i = 0; i + 1 < lead.size(); ++i) outer *= lead[i];
      return {outer, lead.back()};
    }
  }
}

/// An input or mask [lead..., trailing...] as [B, H, trailing...] on the folded leading dimensions. A mask
/// with only its trailing dimensions ([Tk], [Tq, Tk]) broadcasts from the right as it is.
torch::Tensor fold(const torch::Tensor& x, at::IntArrayRef lead, const std::vector<int64_t>& folded,
                   int64_t trailing) {
  if (x.dim() == trailing) return lead.empty() && trailing == 2 ? x.view({1, 1, x.size(0), x.size(1)}) : x;
  switch (lead.size()) {
    case 1: return x.unsqueeze(0);  // [H|1, ...] -> [1, H|1, ...]
    case 2: return x;
    default: {
      // Rank > 4: broadcast to the full leading shape, then merge; reshape copies only when it must.
      std::vector<int64_t> shape(lead.begin(), lead.end());
      std::vector<int64_t> target = folded;
      for (int64_t i = x.dim() - trailing; i < x.dim(); ++i) {
        shape.push_back(x.size(i));
        target.push_back(x.size(i));
      }
      return x.expand(shape).reshape(target);
    }
  }
}

}  // namespace

torch::Tensor fused_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                              const SdpaOptions& options) {
  const at::IntArrayRef lead = query.sizes().slice(0, query.dim() - 2);
  const std::vector<int64_t> folded = folded_lead(lead);
  // Key and value keep their own leading shape: with grouped heads it differs from the query's in the last.
  const auto fold_input = [&](const torch::Tensor& x) {
    const at::IntArrayRef own = x.sizes().slice(0, x.dim() - 2);
    return fold(x, own, folded_lead(own), 2);
  };

  ops::FlashArguments arguments = flash_arguments(query, key, options, /*packed=*/false);
  const auto fold_mask = [&](c10::optional<torch::Tensor>& m, int64_t trailing) {
    if (m) m = fold(*m, lead, folded, trailing);
  };
  fold_mask(arguments.key_padding_mask, 1);
  fold_mask(arguments.attend_mask, 2);
  fold_mask(arguments.additive_mask, 2);
  const torch::Tensor& slopes = options.alibi_slopes();
  if (slopes.defined() && slopes.dim() == 2 && lead.size() > 2) {
    std::vector<int64_t> lead_shape(lead.begin(), lead.end());
    arguments.alibi_slopes = slopes.expand(lead_shape).reshape({folded[0], folded[1]});
  }
  const torch::Tensor out =
      std::get<0>(ops::flash_attention(fold_input(query), fold_input(key), fold_input(value), arguments));
  std::vector<int64_t> shape(lead.begin(), lead.end());
  shape.push_back(query.size(-2));
  shape.push_back(value.size(-1));
  return out.reshape(shape);
}

torch::Tensor fused_varlen_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                                     const torch::Tensor& cu_seqlens_q, const torch::Tensor& cu_seqlens_k,
                                     const SdpaOptions& options) {
  const torch::Tensor q = packed_heads_first(query), k = packed_heads_first(key);
  ops::FlashArguments arguments = flash_arguments(q, k, options, /*packed=*/true);
  arguments.cu_seqlens_q = cu_seqlens_q.to(torch::kCPU, torch::kLong);
  arguments.cu_seqlens_k = cu_seqlens_k.to(torch::kCPU, torch::kLong);
  const torch::Tensor out = std::get<0>(ops::flash_attention(q, k, packed_heads_first(value), arguments));
  return out.squeeze(0).transpose(0, 1);  // [total_q, H, d_v]: the op's output is laid out so, a free view
}

}  // namespace attn::backends
