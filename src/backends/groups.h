#pragma once
// Grouped-query attention: H query heads share H_kv key/value heads (dimension -3), query head h using
// key/value head h / (H / H_kv), the order of repeat_interleave and of F.scaled_dot_product_attention's
// enable_gqa. The one definition of that pairing for the tensor-level backends; the fused kernel indexes
// the same head (FlashProblem::kv_head).

#include <torch/types.h>

namespace attn::backends {

/// H / H_kv: how many query heads share one key/value head (1 for inputs without a head dimension).
int64_t kv_group_size(const torch::Tensor& query, const torch::Tensor& key);

/// x [..., H, R, C] @ y [..., H_kv, C, N] -> [..., H, R, N], each y head serving its group of x heads. The
/// group's rows are stacked into one product, so y is read as it is, never repeated.
torch::Tensor grouped_matmul(const torch::Tensor& x, const torch::Tensor& y);

/// y [..., H_kv, T, d] repeated to [..., H, T, d] in the grouped order (a copy): for backends that take only
/// equal head counts.
torch::Tensor repeat_kv_heads(const torch::Tensor& y, int64_t group);

}  // namespace attn::backends
