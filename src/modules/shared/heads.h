#pragma once
// What the three modules share, in named steps:
//
//   check_inputs -> lift_masks -> project -> attend -> merge_heads
//
// Each module describes itself once (a ModuleLayout: names for messages, and its widths in one vocabulary)
// and calls attend_heads(), which runs the steps in order. A later feature hooks into one step: rotary
// embeddings and a KV-cache append go between project and attend; grouped K/V heads change project's split.

#include <attn/kv_cache.h>
#include <attn/modules/rotary_embedding.h>
#include <attn/options.h>
#include <attn/paged_kv_cache.h>
#include <attn/token_tree.h>

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <tuple>
#include <vector>

namespace attn::modules {

/// The widths of a module, whatever its options call them (docs/options.md has the table).
struct ProjectionWidths {
  int64_t query_in = 0;     ///< last dimension of the query input
  int64_t key_in = 0;       ///< ... of the key input
  int64_t value_in = 0;     ///< ... of the value input
  int64_t num_heads = 1;
  int64_t head_dim_qk = 0;  ///< width of q and k per head
  int64_t head_dim_v = 0;   ///< width of v (and the output) per head
  int64_t num_kv_heads = 0; ///< key/value heads (dividing num_heads); 0 means num_heads

  int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
};

/// How a module names its inputs in error messages, and its widths.
struct ModuleLayout {
  const char* module;  ///< e.g. "attn::MultiHeadAttention"
  const char* query_name;
  const char* key_name;
  const char* value_name;
  ProjectionWidths widths;
};

/// `layout` for a call whose one input, x, gives the queries, keys and values (errors name x).
ModuleLayout one_input(const ModuleLayout& layout);

/// The module's q/k/v projections (their bias may be undefined).
struct Projections {
  const torch::nn::LinearImpl& q;
  const torch::nn::LinearImpl& k;
  const torch::nn::LinearImpl& v;
};

/// What check_inputs learned about a call.
struct CallShape {
  bool batched;  ///< [B, T, E] inputs; false for unbatched [T, E] (treated as B = 1 below)
  int64_t batch, tq, tk;
};

/// q, k, v as [B, H, T, d].
struct Heads {
  torch::Tensor q, k, v;
};

/// Step 1: ranks, widths, lengths, batch sizes, dtype and device (against `param`, a module parameter).
CallShape check_inputs(const ModuleLayout& layout, const torch::Tensor& query, const torch::Tensor& key,
                       const torch::Tensor& value, const torch::Tensor& param);
/// Step 2: checks the module-level masks and lifts them to the functional core's layout: key_padding_mask
/// [B, 1, Tk], attend/additive masks [Tq, Tk] or [B|1, H|1, Tq, Tk].
AttentionMasks lift_masks(const ModuleLayout& layout, const CallShape& shape, const AttentionMasks& masks,
                          const torch::Tensor& query);
/// Step 3: the projections, split into heads. Self-attention (query, key and value the same tensor) runs one
/// product with the three weights stacked.
Heads project(const ModuleLayout& layout, const CallShape& shape, const torch::Tensor& query,
              const torch::Tensor& key, const torch::Tensor& value, const Projections& projections);
/// Between steps 3 and 4: q and k rotated at `positions` ([T] or [B, T] integers, any device; q's and k's
/// own lengths when separate), when the module has rotary embeddings (`rotary` non-null); both at the
/// frequencies of the keys' positions.
void rotate(const RotaryEmbeddingImpl* rotary, Heads& heads, const torch::Tensor& q_positions,
            const torch::Tensor& k_positions);
/// Step 4 is backends::attention. Step 5: [B, H, Tq, d_v] -> [B, Tq, H * d_v] ([Tq, H * d_v] unbatched).
torch::Tensor merge_heads(const torch::Tensor& x, const CallShape& shape);

/// The five steps: (output [B, Tq, H * d_v], weights [B, H, Tq, Tk] or undefined), without B when unbatched.
/// With `rotary`, q and k rotate at positions 0..Tq-1 and 0..Tk-1.
std::tuple<torch::Tensor, torch::Tensor> attend_heads(const ModuleLayout& layout, const torch::Tensor& query,
                                                      const torch::Tensor& key, const torch::Tensor& value,
                                                      const Projections& projections, const AttentionMasks& masks,
                                                      const SdpaOptions& options, bool need_weights,
                                                      const RotaryEmbeddingImpl* rotary = nullptr);

/// Self-attention over a KV cache: x [B, T, E] holds the next positions of each row (its first counts[b]
/// of T when given: a right-padded ragged batch). Projects, rotates at each row's cache positions, appends
/// k and v to `layer` of the cache (nothing is written if a row would overflow), and attends over each row's
/// valid prefix. Rows beyond counts[b] are padding, their outputs unspecified until the module's own projection
/// has run and zero_padding_rows zeroes them. Returns [B, T, H * d_v].
/// `owner` (the module) claims the layer: a second module writing it is refused (KVCache::claim_layer).
torch::Tensor attend_with_cache(const ModuleLayout& layout, const torch::Tensor& x, const Projections& projections,
                                KVCache& cache, int64_t layer, const std::vector<int64_t>& counts,
                                const SdpaOptions& options, const RotaryEmbeddingImpl* rotary, const void* owner);

/// out [B, T, E] with the rows t >= counts[b] zero (out itself when counts is empty or every count is T): the
/// padding of a ragged step, zeroed after the output projection so that it gets no bias either.
torch::Tensor zero_padding_rows(const torch::Tensor& out, const std::vector<int64_t>& counts);

/// Token tree verification: x [B, N, E] holds the tree's N candidates for each row. Rotates candidate i at
/// position length + depth(i), appends all N to `layer`, and attends with the tree's mask (each candidate sees
/// the prefix, its ancestors and itself). Returns [B, N, H * d_v]; KVCache::keep_candidates commits a path.
torch::Tensor attend_with_tree(const ModuleLayout& layout, const torch::Tensor& x, const Projections& projections,
                               KVCache& cache, int64_t layer, const TokenTree& tree, const SdpaOptions& options,
                               const RotaryEmbeddingImpl* rotary, const void* owner);

/// attend_with_cache over a PagedKVCache: row b of x continues sequences[b].
torch::Tensor attend_with_paged_cache(const ModuleLayout& layout, const torch::Tensor& x,
                                      const Projections& projections, PagedKVCache& cache, int64_t layer,
                                      const std::vector<int64_t>& sequences, const SdpaOptions& options,
                                      const RotaryEmbeddingImpl* rotary, const void* owner);

/// Keys and values of a memory (an encoder's output), projected once and reused by every decoding step; with
/// `rotary`, the keys rotated at 0..Tk-1, as attend_heads rotates them.
Heads project_memory(const ModuleLayout& layout, const torch::Tensor& key, const torch::Tensor& value,
                     const Projections& projections, const RotaryEmbeddingImpl* rotary);
/// Steps 1-5 with the K/V heads already projected ([B, H_kv, Tk, d] from project_memory); with `rotary`, the
/// query rotated at 0..Tq-1: attend_heads' result on the key and value the memory was projected from.
std::tuple<torch::Tensor, torch::Tensor> attend_memory(const ModuleLayout& layout, const torch::Tensor& query,
                                                       const torch::Tensor& memory_key,
                                                       const torch::Tensor& memory_value,
                                                       const Projections& projections, const AttentionMasks& masks,
                                                       const SdpaOptions& options, bool need_weights,
                                                       const RotaryEmbeddingImpl* rotary);

/// [B, H, Tq, Tk] (or [H, Tq, Tk]) per-head weights in the form the caller asked for.
torch::Tensor select_head_weights(const torch::Tensor& per_head, HeadWeights head_weights);

}  // namespace attn::modules
