#pragma once
// A BERT encoder (all-MiniLM-L6-v2, BERT-base and the like) built from attn::MultiHeadAttention with key-padding
// masks and stock LibTorch layers (post-norm LayerNorm, GELU), read from a Hugging Face folder: config.json
// and model.safetensors in transformers' names. For inference; sentence embeddings by mean pooling.

#include "named_weights.h"

#include <attn/attn.h>

#include <torch/torch.h>

#include <string>

namespace attn::models {

/// The fields of a transformers BertConfig that the encoder needs.
struct BertConfig {
  int64_t hidden_size = 0, num_layers = 0, num_heads = 0, intermediate_size = 0;
  int64_t vocab_size = 0, max_position_embeddings = 0, type_vocab_size = 0;
  double layer_norm_eps = 1e-12;

  /// Reads config.json; throws std::runtime_error naming the file and the field that is missing or unsupported.
  static BertConfig from_file(const std::string& path);
  /// Throws std::runtime_error unless `weights` hold this config's layers and word embedding (before the model
  /// allocates them).
  void check_weights(const NamedWeights& weights) const;
};

/// One encoder layer: x = norm(x + attention(x)), then norm(x + W2 · gelu(W1 · x)).
class BertLayerImpl : public torch::nn::Module {
 public:
  explicit BertLayerImpl(const BertConfig& config);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_padding_mask);
  MultiHeadAttention attention{nullptr};
  torch::nn::LayerNorm attention_norm{nullptr}, output_norm{nullptr};
  torch::nn::Linear intermediate{nullptr}, output{nullptr};
};
TORCH_MODULE(BertLayer);

class BertImpl : public torch::nn::Module {
 public:
  explicit BertImpl(const BertConfig& config);
  /// Hidden states [B, T, hidden] for token ids [B, T]; attention_mask [B, T] is 1 (or true) for real tokens and
  /// 0 for padding, as transformers takes it. Token types are all 0 (single sentences).
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& attention_mask);
  /// Loads model.safetensors (transformers' names, with or without a "bert." prefix); throws naming what is
  /// missing or mis-shaped.
  void load(const std::string& safetensors_path);
  void load(const NamedWeights& weights);

  BertConfig config;
  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  torch::nn::LayerNorm embedding_norm{nullptr};
  torch::nn::ModuleList layers;
};
TORCH_MODULE(Bert);

/// Sentence embeddings as sentence-transformers' Pooling(mean) + Normalize: the mean of the real tokens' hidden
/// states [B, T, H] under attention_mask [B, T], scaled to unit length. Returns [B, H] in float32.
torch::Tensor mean_pooled_unit_embeddings(const torch::Tensor& hidden, const torch::Tensor& attention_mask);

}  // namespace attn::models
