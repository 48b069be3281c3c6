#include "llama.h"

#include "json_file.h"
#include "named_weights.h"
#include "read_ahead.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>

namespace attn::models {
namespace {

std::string dtype_name(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat32: return "float32";
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    case torch::kFloat64: return "float64";
    case torch::kInt8: return "int8";
    default: return c10::toString(dtype);
  }
}

/// The rows of x [..., features].
int64_t input_rows(const torch::Tensor& x) { return x.size(-1) == 0 ? 0 : x.numel() / x.size(-1); }

}  // namespace

// A function try block: nlohmann's own errors (a field of another type) name the file too.
LlamaConfig LlamaConfig::from_file(const std::string& path) try {
  const nlohmann::json j = attn_apps::read_json_file(path, "model config");
  const auto invalid = [&path](const std::string& what) {
    return attn_apps::json_file_error("model config", path, what);
  };
  if (j.value("model_type", "") != "llama") {
    throw invalid("model_type is '" + j.value("model_type", "") + "'; this runs 'llama' models");
  }
  const auto positive = [&](const char* key) { return attn_apps::positive_integer(j, key, "model config", path); };
  LlamaConfig c;
  c.hidden_size = positive("hidden_size");
  c.intermediate_size = positive("intermediate_size");
  c.num_layers = positive("num_hidden_layers");
  c.num_heads = positive("num_attention_heads");
  c.num_kv_heads =
      j.value("num_key_value_heads", nlohmann::json()).is_null() ? c.num_heads : positive("num_key_value_heads");
  if (c.num_heads % c.num_kv_heads != 0) {
    throw invalid("num_key_value_heads (" + std::to_string(c.num_kv_heads) + ") must divide num_attention_heads (" +
                  std::to_string(c.num_heads) + ")");
  }
  c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? positive("head_dim") : c.hidden_size / c.num_heads;
  c.vocab_size = positive("vocab_size");
  const bool bounded = j.contains("max_position_embeddings") && !j["max_position_embeddings"].is_null();
  c.max_position_embeddings = bounded ? positive("max_position_embeddings") : 0;
  c.rms_norm_eps = attn_apps::positive_number(j, "rms_norm_eps", std::nullopt, "model config", path);
  c.tie_word_embeddings = j.value("tie_word_embeddings", false);
  c.bos_token_id = j.value("bos_token_id", int64_t{-1});
  c.eos_token_id = j.value("eos_token_id", int64_t{-1});
  const nlohmann::json rope = j.contains("rope_parameters") ? j["rope_parameters"] : j.value("rope_scaling", nlohmann::json());
  if (!rope.is_null() && rope.value("rope_type", "default") != "default") {
    throw invalid("rope_type '" + rope.value("rope_type", "") + "' is not supported here yet");
  }
  c.rope_theta = !rope.is_null() && rope.contains("rope_theta")
                     ? attn_apps::positive_number(rope, "rope_theta", std::nullopt, "model config (rope_parameters)",
                                                  path)
                     : attn_apps::positive_number(j, "rope_theta", 10000.0, "model config", path);
  if (j.value("attention_bias", false) || j.value("mlp_bias", false)) throw invalid("biases are not supported");
  return c;
} catch (const nlohmann::json::exception& e) {
  throw attn_apps::json_file_error("model config", path, e.what());
}

void LlamaConfig::check_weights(const NamedWeights& weights) const {
  weights.check_count("model.layers.", num_layers, "num_hidden_layers");
  weights.check_shape("model.embed_tokens.weight", {vocab_size, hidden_size}, "vocab_size and hidden_size");
}

RmsNormImpl::RmsNormImpl(int64_t dim, double eps) : eps(eps) { weight = register_parameter("weight", torch::ones({dim})); }

namespace {

/// Rows per task at least: a decoding step's one row runs on the calling thread.
constexpr int64_t kNormTaskRows = 16;

/// float from bfloat16 by its bits, and back with c10::BFloat16's rounding (to nearest even, NaN kept quiet):
/// the same values as c10's conversions, in shifts and adds that the compiler vectorises (c10's it does not).
inline float widened(float v) { return v; }
inline float widened(at::BFloat16 v) {
  const uint32_t bits = static_cast<uint32_t>(v.x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
template <typename T>
T round_to(float v);
template <>
inline float round_to<float>(float v) {
  return v;
}
template <>
inline at::BFloat16 round_to<at::BFloat16>(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  at::BFloat16 out;
  out.x = static_cast<uint16_t>(v != v ? 0x7FC0u : (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
  return out;
}
/// v rounded to T and widened again.
template <typename T>
float rounded_to(float v) {
  return widened(round_to<T>(v));
}

/// RmsNormImpl::forward's formula in one pass per row, rounded where the tensor form rounds: x · r in float,
/// rounded to T, times the weight, rounded to T. The squares are summed in float across kSquareLanes lanes, which
/// the compiler keeps in vector registers (a sum in double it would not vectorise; the norm was most of what a
/// bfloat16 prefill spent outside ATen and attn ops, bench/RESULTS.md), and the lanes are added in double.
template <typename T>
inline __attribute__((always_inline)) void rms_norm_row_range(const T* x, const T* weight, T* y, int64_t begin,
                                                              int64_t end, int64_t dim, float eps) {
  constexpr int64_t kSquareLanes = 16;
  for (int64_t row = begin; row < end; ++row) {
    const T* in = x + row * dim;
    T* out = y + row * dim;
    float lanes[kSquareLanes] = {};
    int64_t i = 0;
    for (; i + kSquareLanes <= dim; i += kSquareLanes) {
      for (int64_t k = 0; k < kSquareLanes; ++k) {
        const float v = widened(in[i + k]);
        lanes[k] += v * v;
      }
    }
    double sum = 0.0;
    for (; i < dim; ++i) {
      const double v = static_cast<float>(in[i]);
      sum += v * v;
    }
    for (const float lane : lanes) sum += lane;
    const float r = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(dim)) + eps);
    for (int64_t i = 0; i < dim; ++i) {
      const float normed = rounded_to<T>(widened(in[i]) * r);
      out[i] = round_to<T>(widened(weight[i]) * normed);
    }
  }
}

// The loop compiled for AVX-512 and AVX2 too, the CPU's chosen when the program loads (target clones): built for
// x86-64's SSE2 alone it took 1.9x as long at 542 rows (bench/RESULTS.md). The sums keep their order; with
// AVX-512 (which brings FMA) a square's multiply and add may fuse, a last-bit difference in the sum.
#if defined(__x86_64__) && defined(__GNUC__)
#define ATTN_NORM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ATTN_NORM_CLONES
#endif
ATTN_NORM_CLONES void rms_norm_row_range_of(const float* x, const float* weight, float* y, int64_t begin,
                                            int64_t end, int64_t dim, float eps) {
  rms_norm_row_range(x, weight, y, begin, end, dim, eps);
}
ATTN_NORM_CLONES void rms_norm_row_range_of(const at::BFloat16* x, const at::BFloat16* weight, at::BFloat16* y,
                                            int64_t begin, int64_t end, int64_t dim, float eps) {
  rms_norm_row_range(x, weight, y, begin, end, dim, eps);
}
#undef ATTN_NORM_CLONES

template <typename T>
void rms_norm_rows(const T* x, const T* weight, T* y, int64_t rows, int64_t dim, float eps) {
  at::parallel_for(0, rows, kNormTaskRows, [&](int64_t begin, int64_t end) {
    rms_norm_row_range_of(x, weight, y, begin, end, dim, eps);
  });
}

}  // namespace

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
  // LibTorch has no fused RMSNorm on the CPU in either lane (2.x's rms_norm is the same tensor operations); on a
  // decoding step's one row, eight tensor operations cost far more than the arithmetic (bench/RESULTS.md).
  const bool records_grad = torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
  const auto dtype = x.scalar_type();
  if (x.is_cpu() && weight.is_cpu() && !records_grad && weight.scalar_type() == dtype && x.dim() >= 1 &&
      x.size(-1) == weight.numel() && (dtype == torch::kFloat32 || dtype == torch::kBFloat16)) {
    const torch::Tensor in = x.contiguous();
    const torch::Tensor w = weight.contiguous();
    torch::Tensor out = torch::empty_like(in);
    const int64_t dim = in.size(-1), rows = dim == 0 ? 0 : in.numel() / dim;
    if (dtype == torch::kFloat32) {
      rms_norm_rows(in.data_ptr<float>(), w.data_ptr<float>(), out.data_ptr<float>(), rows, dim,
                    static_cast<float>(eps));
    } else {
      rms_norm_rows(in.data_ptr<at::BFloat16>(), w.data_ptr<at::BFloat16>(), out.data_ptr<at::BFloat16>(), rows,
                    dim, static_cast<float>(eps));
    }
    return out;
  }
  const torch::Tensor x32 = x.to(torch::kFloat32);
  const torch::Tensor normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

WeightImpl::WeightImpl(int64_t rows, int64_t cols) { weight = register_parameter("weight", torch::zeros({rows, cols})); }

torch::Tensor WeightImpl::embed(const torch::Tensor& ids) const { return torch::embedding(weight, ids); }

LlamaBlockImpl::LlamaBlockImpl(const LlamaConfig& c) {
  input_norm = register_module("input_layernorm", RmsNorm(c.hidden_size, c.rms_norm_eps));
  self_attn = register_module(
      "self_attn", MultiHeadAttention(MultiHeadAttentionOptions(c.hidden_size, c.num_heads)
                                          .num_kv_heads(c.num_kv_heads)
                                          .head_dim(c.head_dim)
                                          .bias(false)
                                          .causal(true)
                                          .rotary(RotaryEmbeddingOptions(c.head_dim).base(c.rope_theta))));
  post_attention_norm = register_module("post_attention_layernorm", RmsNorm(c.hidden_size, c.rms_norm_eps));
  gate_proj = register_module("gate_proj", Weight(c.intermediate_size, c.hidden_size));
  up_proj = register_module("up_proj", Weight(c.intermediate_size, c.hidden_size));
  down_proj = register_module("down_proj", Weight(c.hidden_size, c.intermediate_size));
}

std::pair<torch::Tensor, torch::Tensor> LlamaBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& normed,
                                                                KVCache& cache, int64_t layer,
                                                                const std::vector<int64_t>& new_lengths) {
  const torch::Tensor attended = self_attn->forward_with_cache(normed, cache, layer, new_lengths);
  torch::Tensor h, n;
  read_ahead_while({gate_proj->weight, up_proj->weight}, input_rows(x), [&] {
    h = x + attended;
    n = post_attention_norm(h);
  });
  return {h, mlp(n)};
}

std::vector<torch::Tensor> LlamaBlockImpl::first_weights() const {
  return {self_attn->q_proj->weight, self_attn->k_proj->weight, self_attn->v_proj->weight};
}

torch::Tensor LlamaBlockImpl::forward_tree(const torch::Tensor& x, KVCache& cache, int64_t layer,
                                           const TokenTree& tree) {
  const torch::Tensor h = x + self_attn->forward_with_tree(input_norm(x), cache, layer, tree);
  return h + mlp(post_attention_norm(h));
}

torch::Tensor LlamaBlockImpl::mlp(const torch::Tensor& n) {
  // gate and up share their input: one pass over both weights on a decoding step (attn::linear_many).
  const std::vector<torch::Tensor> gate_up = attn::linear_many(n, {gate_proj->weight, up_proj->weight});
  torch::Tensor activated;
  read_ahead_while({down_proj->weight}, input_rows(n), [&] { activated = torch::silu(gate_up[0]) * gate_up[1]; });
  return attn::linear(activated, down_proj->weight);
}

LlamaImpl::LlamaImpl(const LlamaConfig& c) : config(c) {
  embed_tokens = register_module("embed_tokens", Weight(c.vocab_size, c.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) layers->push_back(LlamaBlock(c));
  norm = register_module("norm", RmsNorm(c.hidden_size, c.rms_norm_eps));
  if (!c.tie_word_embeddings) {
    lm_head = register_module("lm_head", Weight(c.vocab_size, c.hidden_size));
  }
}

torch::Tensor LlamaImpl::forward(const torch::Tensor& ids, KVCache& cache, const std::vector<int64_t>& new_lengths) {
  return logits(hidden_states(ids, cache, new_lengths));
}

torch::Tensor LlamaImpl::hidden_states(const torch::Tensor& ids, KVCache& cache, const std::vector<int64_t>& new_lengths) {
  torch::Tensor x = embed_tokens->embed(ids);
  const int64_t rows = input_rows(x);
  const auto block = [&](size_t i) { return layers[i]->as<LlamaBlock>(); };
  torch::Tensor normed;
  read_ahead_while(block(0)->first_weights(), rows, [&] { normed = block(0)->input_norm(x); });
  for (size_t i = 0; i < layers->size(); ++i) {
    torch::Tensor h, m;  // not a structured binding: C++17 lambdas cannot capture one (Clang refuses)
    std::tie(h, m) = block(i)->forward(x, normed, cache, static_cast<int64_t>(i), new_lengths);
    const bool last = i + 1 == layers->size();
    // The layer's sum and the next norm, while the other threads read the next product's weights: the next
    // layer's q, k and v, or the LM head.
    read_ahead_while(last ? std::vector<torch::Tensor>{head_weight()} : block(i + 1)->first_weights(), rows, [&] {
      x = h + m;
      normed = last ? norm(x) : block(i + 1)->input_norm(x);
    });
  }
  return normed;
}

torch::Tensor LlamaImpl::tree_hidden_states(const torch::Tensor& ids, KVCache& cache, const TokenTree& tree) {
  torch::Tensor x = embed_tokens->embed(ids);
  for (size_t i = 0; i < layers->size(); ++i) {
    x = layers[i]->as<LlamaBlock>()->forward_tree(x, cache, static_cast<int64_t>(i), tree);
  }
  return norm(x);
}

torch::Tensor LlamaImpl::logits(const torch::Tensor& hidden) {
  return attn::linear(hidden, head_weight());
}

const torch::Tensor& LlamaImpl::head_weight() const { return lm_head ? lm_head->weight : embed_tokens->weight; }

KVCache LlamaImpl::make_cache(int64_t batch, int64_t capacity, std::optional<torch::Dtype> cache_dtype) const {
  const torch::Tensor w = embed_tokens->weight;
  const torch::Dtype model_dtype = w.scalar_type();
  const torch::Dtype dtype = cache_dtype.value_or(model_dtype);
  if (dtype != model_dtype && dtype != torch::kInt8) {
    throw std::invalid_argument("Llama::make_cache: a " + dtype_name(dtype) + " cache for a " + dtype_name(model_dtype) +
                                " model; the cache holds the model's dtype (" + dtype_name(model_dtype) + ") or int8");
  }
  return KVCache(config.cache_options(batch, capacity, dtype, w.device()));
}

KVCacheOptions LlamaConfig::cache_options(int64_t batch, int64_t capacity, torch::Dtype dtype,
                                          torch::Device device) const {
  return KVCacheOptions(num_layers, batch, num_kv_heads, head_dim, capacity).dtype(dtype).device(device);
}

void LlamaImpl::load(const std::string& path) { load(NamedWeights(path)); }

void LlamaImpl::load(const NamedWeights& weights) {
  const auto take = [&](const std::string& name, torch::Tensor& into) { weights.copy(name, into); };
  take("model.embed_tokens.weight", embed_tokens->weight);
  take("model.norm.weight", norm->weight);
  if (lm_head) take("lm_head.weight", lm_head->weight);
  for (size_t i = 0; i < layers->size(); ++i) {
    auto block = layers[i]->as<LlamaBlock>();
    const std::string p = "model.layers." + std::to_string(i) + ".";
    io::load_state_dict(*block->self_attn, weights.tensors(), io::LoadOptions().prefix(p + "self_attn.").names(io::WeightNames::Decoder));
    take(p + "input_layernorm.weight", block->input_norm->weight);
    take(p + "post_attention_layernorm.weight", block->post_attention_norm->weight);
    take(p + "mlp.gate_proj.weight", block->gate_proj->weight);
    take(p + "mlp.up_proj.weight", block->up_proj->weight);
    take(p + "mlp.down_proj.weight", block->down_proj->weight);
  }
}

}  // namespace attn::models
