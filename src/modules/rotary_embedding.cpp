#include <attn/modules/rotary_embedding.h>

#include "common/checks.h"

#include <ATen/ATen.h>

namespace attn {
namespace {
constexpr const char* kRotaryEmbedding = "attn::RotaryEmbedding";
}  // namespace

RotaryEmbeddingImpl::RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options_) : options(options_) { reset(); }

void RotaryEmbeddingImpl::reset() {
  const RotaryFrequencies f = rotary_frequencies(options);  // validates the options
  inv_freq = register_buffer("inv_freq", f.inv_freq);
  attention_factor = f.attention_factor;
}

void RotaryEmbeddingImpl::pretty_print(std::ostream& stream) const {
  stream << "attn::RotaryEmbedding(rotary_dim=" << options.rotary_dim() << ", base=" << options.base()
         << ", pairing=" << to_string(options.pairing()) << ", scaling=" << to_string(options.scaling());
  if (options.scaling() != RotaryScaling::None) stream << ", factor=" << options.factor();
  if (options.original_max_position() > 0) stream << ", original_max_position=" << options.original_max_position();
  stream << ")";
}

RotaryFrequencies RotaryEmbeddingImpl::frequencies(int64_t seq_len) const {
  if (options.scaling() == RotaryScaling::DynamicNTK) return rotary_frequencies(options, seq_len);
  return {inv_freq, attention_factor};
}

RotaryFrequencies RotaryEmbeddingImpl::frequencies_at(const torch::Tensor& positions) const {
  if (options.scaling() != RotaryScaling::DynamicNTK || positions.numel() == 0) return {inv_freq, attention_factor};
  return rotary_frequencies(options, positions.max().item<int64_t>() + 1);
}

std::tuple<torch::Tensor, torch::Tensor> RotaryEmbeddingImpl::cos_sin(const torch::Tensor& positions,
                                                                      torch::Dtype dtype) const {
  TORCH_CHECK(positions.defined(), kRotaryEmbedding, ": positions is undefined");
  return rotary_cos_sin(frequencies_at(positions), positions, dtype);
}

torch::Tensor RotaryEmbeddingImpl::forward(const torch::Tensor& x, const torch::Tensor& positions) const {
  common::check_rotary_positions(kRotaryEmbedding, x, positions);
  return rotate(x, positions, frequencies_at(positions));
}

torch::Tensor RotaryEmbeddingImpl::rotate(const torch::Tensor& x, const torch::Tensor& positions,
                                          const RotaryFrequencies& frequencies) const {
  common::check_rotary_positions(kRotaryEmbedding, x, positions);
  TORCH_CHECK(options.rotary_dim() <= x.size(-1), kRotaryEmbedding, ": rotary_dim = ", options.rotary_dim(),
              " is more than x's head_dim = ", x.size(-1), "; x is ", x.sizes());
  return rotate_at_positions(x, positions, frequencies, options.pairing());
}

}  // namespace attn
