#pragma once
// Weights in and out: PyTorch `torch.save` files (zip, and the legacy format of
// `_use_new_zipfile_serialization=False`), including a real `model.state_dict()` (an OrderedDict with
// `_metadata`), and safetensors files. Names from torch.nn.MultiheadAttention and from the notebooks' classes
// are mapped onto attn's.

#include <attn/modules/attention_head.h>
#include <attn/modules/cross_attention.h>
#include <attn/modules/multi_head_attention.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <map>
#include <string>

namespace attn::io {

/// A weight file's format. Loading detects it from the file's first bytes with Auto.
enum class WeightFormat {
  Auto,
  TorchZip,     ///< torch.save's default (zip archive with data.pkl)
  TorchLegacy,  ///< torch.save(..., _use_new_zipfile_serialization=False); read only
  Safetensors,  ///< https://github.com/huggingface/safetensors: 8-byte header length, JSON header, raw data
};

/// Whose parameter names a file uses. Loading detects them with Auto.
enum class WeightNames {
  Auto,
  /// attn's own: q_proj.weight, q_proj.bias, k_proj.*, v_proj.*, out_proj.*
  Attn,
  /// torch.nn.MultiheadAttention: in_proj_weight/in_proj_bias (or q_proj_weight, k_proj_weight,
  /// v_proj_weight when kdim/vdim differ), out_proj.weight/bias
  TorchMultiheadAttention,
  /// The notebooks' classes: W_q/W_k/W_v (001 Attention), heads.N.W_q... (001 MultiHeadedAttention),
  /// w_q/w_k/w_v/w_combine (003), query/key/value/fc_out (004)
  Notebook,
  /// Decoder-only models (Llama, Mistral, Qwen, SmolLM in transformers): q_proj, k_proj, v_proj and o_proj,
  /// with k_proj/v_proj num_kv_heads * head_dim wide (options.num_kv_heads)
  Decoder,
};

struct LoadOptions {
  TORCH_ARG(WeightFormat, format) = WeightFormat::Auto;
  TORCH_ARG(WeightNames, names) = WeightNames::Auto;
};

struct SaveOptions {
  TORCH_ARG(WeightFormat, format) = WeightFormat::TorchZip;
  /// Attn or TorchMultiheadAttention (MultiHeadAttention only, so Python can load the file into
  /// torch.nn.MultiheadAttention with load_state_dict).
  TORCH_ARG(WeightNames, names) = WeightNames::Attn;
};

/// Reads every tensor of a weight file, by name, onto the CPU. Touches no module.
std::map<std::string, torch::Tensor> read_tensors(const std::string& path, WeightFormat format = WeightFormat::Auto);

/// Writes named tensors (any device; they are copied to the CPU) as TorchZip or Safetensors, atomically: a
/// temporary file next to `path`, renamed over it once complete.
void write_tensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                   WeightFormat format = WeightFormat::TorchZip);

/// Loads a weight file into a module. Every parameter must be present with the right shape; on any mismatch
/// it throws one error that lists what is missing, unexpected and mis-shaped, and the module is unchanged.
/// Values are converted to the module's dtype and device.
void load_state_dict(MultiHeadAttentionImpl& module, const std::string& path, const LoadOptions& options = {});
void load_state_dict(AttentionHeadImpl& module, const std::string& path, const LoadOptions& options = {});
void load_state_dict(CrossAttentionImpl& module, const std::string& path, const LoadOptions& options = {});

/// Saves a module's parameters.
void save_state_dict(const MultiHeadAttentionImpl& module, const std::string& path, const SaveOptions& options = {});
void save_state_dict(const AttentionHeadImpl& module, const std::string& path, const SaveOptions& options = {});
void save_state_dict(const CrossAttentionImpl& module, const std::string& path, const SaveOptions& options = {});

}  // namespace attn::io
