#pragma once
// Multi-head attention (notebooks 002-004; torch.nn.MultiheadAttention with batch_first=True).

#include <attn/kv_cache.h>
#include <attn/modules/rotary_embedding.h>
#include <attn/options.h>
#include <attn/paged_kv_cache.h>
#include <attn/token_tree.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <ostream>
#include <tuple>
#include <vector>

namespace attn {
namespace modules {
struct ModuleLayout;
struct ScoreTerms;
}

/// query [B, Tq, embed_dim], key [B, Tk, kdim], value [B, Tk, vdim] (or unbatched, without B)
///   -> [B, Tq, embed_dim]  (or [B, Tq, num_heads * head_dim] without an output projection).
///
/// Parameters, created in this order with torch::nn::Linear's default init (as the notebooks do):
///   q_proj [H*hd, embed_dim], k_proj [H_kv*hd, kdim], v_proj [H_kv*hd, vdim], out_proj [embed_dim, H*hd]
/// (H_kv = options.num_kv_heads, default H), the layout of Llama-style decoders' q/k/v/o_proj; and with
/// options.sinks, sinks [H] (zeros).
/// Note that torch.nn.MultiheadAttention initialises differently (xavier); load its weights to match it.
///
/// Incremental decoding: forward_with_cache(x, cache, layer) appends to a caller-owned KVCache and attends over it
/// (prefill and decode alike); rotary embeddings (options.rotary) then use each row's cache positions. As
/// cross-attention, project_memory(key, value) projects an encoder output once for every step.
/// The module holds no per-call state: threads may share it, each with its own cache.
class MultiHeadAttentionImpl : public torch::nn::Cloneable<MultiHeadAttentionImpl> {
 public:
  MultiHeadAttentionImpl(int64_t embed_dim, int64_t num_heads)
      : MultiHeadAttentionImpl(MultiHeadAttentionOptions(embed_dim, num_heads)) {}
  explicit MultiHeadAttentionImpl(const MultiHeadAttentionOptions& options);

  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                        const AttentionMasks& masks = {});
  /// Also returns the weights: [B, Tq, Tk] averaged over heads, or [B, H, Tq, Tk] per head.
  std::tuple<torch::Tensor, torch::Tensor> forward_with_weights(const torch::Tensor& query,
                                                                const torch::Tensor& key,
                                                                const torch::Tensor& value,
                                                                const AttentionMasks& masks = {},
                                                                HeadWeights head_weights = HeadWeights::Averaged);

  /// Self-attention over a KV cache: x [B, T, embed_dim] holds the next T positions of every row, or of row b
  /// only its first new_lengths[b] (a right-padded ragged batch; outputs past them are zero). Rotates q and k
  /// at each row's positions, appends k and v to `layer` of the cache (refused, with nothing written, if a row
  /// would overflow), then attends causally (when options.causal) over each row's cached prefix.
  /// Returns [B, T, embed_dim]. For inference: k and v reach the attention through the cache, without a
  /// gradient. The decode kernel serves T <= 16 on the CPU.
  /// (Not an overload of forward: LibTorch's ModuleHolder::operator() needs forward to be unique.)
  torch::Tensor forward_with_cache(const torch::Tensor& x, KVCache& cache, int64_t layer,
                                   const std::vector<int64_t>& new_lengths = {});
  /// The same over a PagedKVCache: row b of x [B, T, embed_dim] continues sequences[b] (ids from
  /// add_sequence or fork). The decode kernel serves any T (CPU, no gradient).
  torch::Tensor forward_with_cache(const torch::Tensor& x, PagedKVCache& cache, int64_t layer,
                                   const std::vector<int64_t>& sequences);
  /// Token tree verification (speculative decoding): x [B, N, embed_dim] holds a TokenTree's N candidates for
  /// every row. Candidate i is rotated at position length + depth(i), all N are appended to `layer`, and each
  /// attends to the cached prefix, its ancestors and itself. Returns [B, N, embed_dim]; after the model's last
  /// layer, cache.keep_candidates(N, accepted) keeps the accepted path. CPU, no gradient, options.causal.
  torch::Tensor forward_with_tree(const torch::Tensor& x, KVCache& cache, int64_t layer, const TokenTree& tree);

  /// A KVCache's options for this module: its K/V heads, head sizes, and the dtype and device of its
  /// parameters, for num_layers layers of `batch` rows of `capacity` positions. Chain .dtype(torch::kInt8) for
  /// an int8 cache.
  KVCacheOptions cache_options(int64_t num_layers, int64_t batch, int64_t capacity) const;
  /// A PagedKVCache's options for this module, in its parameters' dtype.
  PagedKVCacheOptions paged_cache_options(int64_t num_layers, int64_t num_blocks, int64_t block_size) const;

  /// key [B, Tk, kdim], value [B, Tk, vdim] (or unbatched) projected into K/V heads once.
  ProjectedMemory project_memory(const torch::Tensor& key, const torch::Tensor& value) const;
  /// Cross-attention of query [B, Tq, embed_dim] over a memory from project_memory(); equal to
  /// forward(query, key, value, masks) with the key and value it was projected from. With options.rotary, as
  /// there: project_memory rotates the keys at positions 0..Tk-1, and this the query at 0..Tq-1.
  torch::Tensor forward_with_memory(const torch::Tensor& query, const ProjectedMemory& memory,
                                    const AttentionMasks& masks = {});

  /// Width of one head (options.head_dim, or embed_dim / num_heads).
  int64_t head_dim() const;
  /// Key/value heads (options.num_kv_heads, or num_heads).
  int64_t num_kv_heads() const;

  MultiHeadAttentionOptions options;
  torch::nn::Linear q_proj{nullptr};
  torch::nn::Linear k_proj{nullptr};
  torch::nn::Linear v_proj{nullptr};
  /// Null when options.output_projection() is false.
  torch::nn::Linear out_proj{nullptr};
  /// The rotary embedding of options.rotary, or null. Not a registered submodule: its frequencies are derived
  /// from the options, so they stay out of the state_dict (as in transformers' checkpoints).
  RotaryEmbedding rotary{nullptr};
  /// The learned attention sinks [num_heads] when options.sinks(), else undefined.
  torch::Tensor sinks;

 private:
  modules::ModuleLayout layout() const;
  void check_self_attention(const char* method) const;
  modules::ScoreTerms score_terms() const;
  std::tuple<torch::Tensor, torch::Tensor> attend(const torch::Tensor& query, const torch::Tensor& key,
                                                  const torch::Tensor& value, const AttentionMasks& masks,
                                                  bool need_weights);

  int64_t built_heads_ = 0, built_kv_heads_ = 0;  // the heads reset() laid the parameters out for
};

TORCH_MODULE(MultiHeadAttention);

}  // namespace attn
