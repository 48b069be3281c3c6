#pragma once
// A Llama-architecture decoder (Llama 2/3, SmolLM, Mistral without sliding windows) built from
// attn::MultiHeadAttention (grouped-query heads, rotary embeddings, a caller-owned KVCache), an RMSNorm and
// weight tables, read from the folder scripts/convert-gguf.py writes: config.json and model.safetensors in
// transformers' names. For inference.

#include "named_weights.h"

#include <attn/attn.h>

#include <torch/torch.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attn::models {

/// The fields of a transformers LlamaConfig that the model needs.
struct LlamaConfig {
  int64_t hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t vocab_size = 0, max_position_embeddings = 0;
  double rope_theta = 10000.0, rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  int64_t bos_token_id = -1, eos_token_id = -1;

  /// Reads config.json; throws std::runtime_error naming the file and the field that is missing or unsupported.
  static LlamaConfig from_file(const std::string& path);
  /// Throws std::runtime_error unless `weights` hold this config's layers and token embedding: checked before the
  /// model allocates them, so a config that disagrees with its weights is an error, not gigabytes of zeros.
  void check_weights(const NamedWeights& weights) const;
  /// The options of this model's KV cache: `batch` rows of up to `capacity` positions in `dtype` on `device`
  /// (LlamaImpl::make_cache builds one; attn::check_kv_cache_fits_memory checks them before the load).
  KVCacheOptions cache_options(int64_t batch, int64_t capacity, torch::Dtype dtype, torch::Device device) const;
};

/// x · rsqrt(mean(x²) + eps) · weight, in float32 whatever x's dtype (as transformers' LlamaRMSNorm). On the CPU
/// without a gradient to record (float32 or bfloat16, the weight in x's dtype), one pass per row.
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RmsNorm);

/// A weight that load() fills: a [rows, cols] parameter named "weight", zero until then. The MLP's and the LM
/// head's matrices (multiplied by attn::linear) and the token embedding table (rows looked up by embed()).
/// torch::nn::Linear and Embedding would draw random values first, for load() to overwrite: SmolLM2-135M's
/// load took 1.7x as long that way (bench/RESULTS.md).
class WeightImpl : public torch::nn::Module {
 public:
  WeightImpl(int64_t rows, int64_t cols);
  /// Rows `ids` of the weight: [..., cols] for ids [...] (an embedding lookup).
  torch::Tensor embed(const torch::Tensor& ids) const;
  torch::Tensor weight;
};
TORCH_MODULE(Weight);

/// One decoder layer: x + attention(norm(x)), then + mlp(norm(·)) with SwiGLU.
class LlamaBlockImpl : public torch::nn::Module {
 public:
  explicit LlamaBlockImpl(const LlamaConfig& config);
  /// The layer's two residual branches for x, whose input_norm is `normed`: h = x + attention(normed), and
  /// mlp(post_attention_norm(h)). The layer's output is their sum, which LlamaImpl adds beside the next layer's
  /// norm while the next weights are read ahead (read_ahead_while).
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x, const torch::Tensor& normed, KVCache& cache,
                                                  int64_t layer, const std::vector<int64_t>& new_lengths);
  /// The weights of the layer's first product (q, k and v), which the work before it reads ahead.
  std::vector<torch::Tensor> first_weights() const;
  /// The layer's output for a TokenTree's candidates x: both branches, summed
  /// (MultiHeadAttentionImpl::forward_with_tree).
  torch::Tensor forward_tree(const torch::Tensor& x, KVCache& cache, int64_t layer, const TokenTree& tree);
  /// down(silu(gate(n)) · up(n)) of the normed n.
  torch::Tensor mlp(const torch::Tensor& n);
  RmsNorm input_norm{nullptr}, post_attention_norm{nullptr};
  MultiHeadAttention self_attn{nullptr};
  Weight gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};  // [out, in]
};
TORCH_MODULE(LlamaBlock);

class LlamaImpl : public torch::nn::Module {
 public:
  explicit LlamaImpl(const LlamaConfig& config);
  /// Logits [B, T, vocab] for token ids [B, T] (row b's first new_lengths[b] are real, the rest padding),
  /// appending their keys and values to `cache`.
  torch::Tensor forward(const torch::Tensor& ids, KVCache& cache, const std::vector<int64_t>& new_lengths = {});
  /// forward() in two halves, so that a generator computes logits only for the positions it samples from:
  /// the final-normed hidden states [B, T, hidden], then logits [..., vocab] for any of them.
  torch::Tensor hidden_states(const torch::Tensor& ids, KVCache& cache, const std::vector<int64_t>& new_lengths = {});
  torch::Tensor logits(const torch::Tensor& hidden);
  /// The LM head's weight [vocab, hidden]: lm_head's, or the embedding's where they are tied.
  const torch::Tensor& head_weight() const;
  /// hidden_states() of a TokenTree's candidates, ids [B, N] in the tree's order: each candidate attends the
  /// cache, its ancestors and itself, and all N are appended (KVCache::keep_candidates keeps one path).
  torch::Tensor tree_hidden_states(const torch::Tensor& ids, KVCache& cache, const TokenTree& tree);
  /// A cache for `batch` rows of up to `capacity` positions on the model's device, in `cache_dtype`: by default
  /// the model's dtype, or torch::kInt8 for int8 rows with a float32 scale each (a float32 or bfloat16 model on
  /// the CPU; <attn/kv_cache.h>). A floating cache_dtype other than the model's is refused
  /// (std::invalid_argument): the layers append keys and values in the model's dtype.
  KVCache make_cache(int64_t batch, int64_t capacity, std::optional<torch::Dtype> cache_dtype = std::nullopt) const;
  /// Loads model.safetensors (transformers' names); throws listing what is missing or mis-shaped.
  void load(const std::string& safetensors_path);
  void load(const NamedWeights& weights);

  LlamaConfig config;
  Weight embed_tokens{nullptr};  // [vocab, hidden]
  torch::nn::ModuleList layers;
  RmsNorm norm{nullptr};
  Weight lm_head{nullptr};  // [vocab, hidden]; unset when the embedding is tied
};
TORCH_MODULE(Llama);

}  // namespace attn::models
