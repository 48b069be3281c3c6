#include "bert.h"

#include "json_file.h"
#include "named_weights.h"

#include <stdexcept>

namespace attn::models {
// A function try block: nlohmann's own errors (a field of another type) name the file too.
BertConfig BertConfig::from_file(const std::string& path) try {
  const nlohmann::json j = attn_apps::read_json_file(path, "model config");
  const auto invalid = [&path](const std::string& what) {
    return attn_apps::json_file_error("model config", path, what);
  };
  if (j.value("model_type", "") != "bert") {
    throw invalid("model_type is '" + j.value("model_type", "") + "'; this runs 'bert' models");
  }
  if (j.value("hidden_act", "gelu") != "gelu") {
    throw invalid("hidden_act '" + j.value("hidden_act", "") + "' is not supported (only gelu)");
  }
  if (j.value("position_embedding_type", "absolute") != "absolute") {
    throw invalid("position_embedding_type '" + j.value("position_embedding_type", "") +
                                 "' is not supported (only absolute)");
  }
  const auto positive = [&](const char* key) { return attn_apps::positive_integer(j, key, "model config", path); };
  BertConfig c;
  c.hidden_size = positive("hidden_size");
  c.num_layers = positive("num_hidden_layers");
  c.num_heads = positive("num_attention_heads");
  c.intermediate_size = positive("intermediate_size");
  c.vocab_size = positive("vocab_size");
  c.max_position_embeddings = positive("max_position_embeddings");
  c.type_vocab_size = j.value("type_vocab_size", nlohmann::json()).is_null() ? 2 : positive("type_vocab_size");
  c.layer_norm_eps = attn_apps::positive_number(j, "layer_norm_eps", 1e-12, "model config", path);
  if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0) {
    throw invalid("hidden_size " + std::to_string(c.hidden_size) + " is not divisible by num_attention_heads " +
                                 std::to_string(c.num_heads));
  }
  return c;
} catch (const nlohmann::json::exception& e) {
  throw attn_apps::json_file_error("model config", path, e.what());
}

namespace {

/// sentence-transformers folders store BertModel's names bare; BertFor* checkpoints put "bert." in front.
std::string name_prefix(const NamedWeights& weights) {
  return weights.contains("embeddings.word_embeddings.weight") ? "" : "bert.";
}

}  // namespace

void BertConfig::check_weights(const NamedWeights& weights) const {
  const std::string prefix = name_prefix(weights);
  weights.check_count(prefix + "encoder.layer.", num_layers, "num_hidden_layers");
  weights.check_shape(prefix + "embeddings.word_embeddings.weight", {vocab_size, hidden_size},
                      "vocab_size and hidden_size");
}

BertLayerImpl::BertLayerImpl(const BertConfig& c) {
  attention = register_module("attention", MultiHeadAttention(MultiHeadAttentionOptions(c.hidden_size, c.num_heads)));
  const auto norm = torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps);
  attention_norm = register_module("attention_norm", torch::nn::LayerNorm(norm));
  intermediate = register_module("intermediate", torch::nn::Linear(c.hidden_size, c.intermediate_size));
  output = register_module("output", torch::nn::Linear(c.intermediate_size, c.hidden_size));
  output_norm = register_module("output_norm", torch::nn::LayerNorm(norm));
}

torch::Tensor BertLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& key_padding_mask) {
  const torch::Tensor attended = attention_norm(x + attention(x, x, x, AttentionMasks().key_padding_mask(key_padding_mask)));
  return output_norm(attended + output(torch::gelu(intermediate(attended))));  // erf GELU, BERT's "gelu"
}

BertImpl::BertImpl(const BertConfig& c) : config(c) {
  word_embeddings = register_module("word_embeddings", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  position_embeddings = register_module("position_embeddings", torch::nn::Embedding(c.max_position_embeddings, c.hidden_size));
  token_type_embeddings = register_module("token_type_embeddings", torch::nn::Embedding(c.type_vocab_size, c.hidden_size));
  embedding_norm = register_module("embedding_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps)));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) layers->push_back(BertLayer(c));
}

torch::Tensor BertImpl::forward(const torch::Tensor& ids, const torch::Tensor& attention_mask) {
  TORCH_CHECK(ids.dim() == 2, "Bert: ids must be [B, T], got ", ids.sizes());
  TORCH_CHECK(attention_mask.sizes() == ids.sizes(), "Bert: attention_mask must be ", ids.sizes(), " like ids, got ",
              attention_mask.sizes());
  const int64_t length = ids.size(1);
  TORCH_CHECK(length <= config.max_position_embeddings, "Bert: ", length, " tokens, but the model has ",
              config.max_position_embeddings, " positions");
  const torch::Tensor positions = torch::arange(length, ids.options().dtype(torch::kLong));
  torch::Tensor x = word_embeddings(ids) + position_embeddings(positions) +
                    token_type_embeddings(torch::zeros_like(ids, ids.options().dtype(torch::kLong)));
  x = embedding_norm(x);
  const torch::Tensor padding = attention_mask.eq(0);
  for (const auto& layer : *layers) x = layer->as<BertLayer>()->forward(x, padding);
  return x;
}

void BertImpl::load(const std::string& path) { load(NamedWeights(path)); }

void BertImpl::load(const NamedWeights& weights) {
  const std::string prefix = name_prefix(weights);
  const auto take = [&](const std::string& name, torch::Tensor& into) { weights.copy(prefix + name, into); };
  const auto take_linear = [&](const std::string& name, torch::nn::Linear& linear) {
    take(name + ".weight", linear->weight);
    take(name + ".bias", linear->bias);
  };
  const auto take_norm = [&](const std::string& name, torch::nn::LayerNorm& norm) {
    take(name + ".weight", norm->weight);
    take(name + ".bias", norm->bias);
  };
  take("embeddings.word_embeddings.weight", word_embeddings->weight);
  take("embeddings.position_embeddings.weight", position_embeddings->weight);
  take("embeddings.token_type_embeddings.weight", token_type_embeddings->weight);
  take_norm("embeddings.LayerNorm", embedding_norm);
  for (size_t i = 0; i < layers->size(); ++i) {
    auto layer = layers[i]->as<BertLayer>();
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    take_linear(p + "attention.self.query", layer->attention->q_proj);
    take_linear(p + "attention.self.key", layer->attention->k_proj);
    take_linear(p + "attention.self.value", layer->attention->v_proj);
    take_linear(p + "attention.output.dense", layer->attention->out_proj);
    take_norm(p + "attention.output.LayerNorm", layer->attention_norm);
    take_linear(p + "intermediate.dense", layer->intermediate);
    take_linear(p + "output.dense", layer->output);
    take_norm(p + "output.LayerNorm", layer->output_norm);
  }
}

torch::Tensor mean_pooled_unit_embeddings(const torch::Tensor& hidden, const torch::Tensor& attention_mask) {
  const torch::Tensor weights = attention_mask.to(torch::kFloat32).unsqueeze(-1);
  const torch::Tensor summed = (hidden.to(torch::kFloat32) * weights).sum(1);
  // sentence-transformers clamps the count at 1e-9 and normalises with eps 1e-12 (torch.nn.functional.normalize).
  const torch::Tensor mean = summed / weights.sum(1).clamp_min(1e-9);
  return mean / mean.norm(2, -1, /*keepdim=*/true).clamp_min(1e-12);
}

}  // namespace attn::models
