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
#include <vector>

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
  /// Where the module's own names sit in the file: "self_attn." for the attention of a saved
  /// nn.TransformerEncoderLayer, "model.layers.0.self_attn." in a decoder. Only tensors under the prefix are
  /// considered (the prefix is removed before the names are mapped); the rest of the file belongs to other
  /// modules and is ignored. A nested dict ({'model': state_dict, 'step': 5}) reads as dotted names
  /// ("model.self_attn.in_proj_weight"), so "model." selects it.
  TORCH_ARG(std::string, prefix) = "";
  /// true: every parameter must be present and nothing unexpected may sit under the prefix, or the load
  /// throws and the module is unchanged. false: missing parameters keep their values and unexpected tensors
  /// are ignored; the LoadResult lists both. A mis-shaped tensor is an error either way.
  TORCH_ARG(bool, strict) = true;
};

/// What a load used and what it ignored.
struct LoadResult {
  /// The module's parameters that the file did not have (non-strict loads only; they kept their values).
  std::vector<std::string> missing;
  /// Tensors under the prefix that fit no parameter (non-strict loads only), by their name in the file.
  std::vector<std::string> unexpected;
  /// Entries of the file that are not tensors (a checkpoint's step, epoch or config), as "name (kind)".
  std::vector<std::string> skipped;
};

struct ReadOptions {
  TORCH_ARG(WeightFormat, format) = WeightFormat::Auto;
  /// Read only the tensors under this key of a nested checkpoint ("model", "state_dict", or "a.b" deeper),
  /// with "key." removed from their names. Empty: the whole file. Throws, listing the top-level keys, if no
  /// tensor sits under it.
  TORCH_ARG(std::string, key) = "";
};

/// A weight file's tensors, and what it holds besides.
struct TensorFile {
  std::map<std::string, torch::Tensor> tensors;
  /// Entries that are not tensors, skipped, as "name (kind)": "step (int)", "config.name (str)".
  std::vector<std::string> skipped;
};

struct SaveOptions {
  TORCH_ARG(WeightFormat, format) = WeightFormat::TorchZip;
  /// Attn or TorchMultiheadAttention (MultiHeadAttention only, so Python can load the file into
  /// torch.nn.MultiheadAttention with load_state_dict).
  TORCH_ARG(WeightNames, names) = WeightNames::Attn;
};

/// Reads every tensor of a weight file, by name, onto the CPU. Touches no module. Nested dicts give dotted
/// names; entries that are not tensors are skipped (read_tensor_file reports them).
std::map<std::string, torch::Tensor> read_tensors(const std::string& path, WeightFormat format = WeightFormat::Auto);
std::map<std::string, torch::Tensor> read_tensors(const std::string& path, const ReadOptions& options);
/// read_tensors, with the entries it skipped.
TensorFile read_tensor_file(const std::string& path, const ReadOptions& options = {});

/// Writes named tensors (any device; they are copied to the CPU) as TorchZip or Safetensors, atomically: a
/// temporary file next to `path`, renamed over it once complete.
void write_tensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                   WeightFormat format = WeightFormat::TorchZip);

/// Loads a weight file into a module. Strict (the default): every parameter must be present with the right
/// shape; on any mismatch it throws one error that lists what is missing, unexpected and mis-shaped, and the
/// module is unchanged. Values are converted to the module's dtype and device. See LoadOptions for prefix
/// and strict.
LoadResult load_state_dict(MultiHeadAttentionImpl& module, const std::string& path, const LoadOptions& options = {});
LoadResult load_state_dict(AttentionHeadImpl& module, const std::string& path, const LoadOptions& options = {});
LoadResult load_state_dict(CrossAttentionImpl& module, const std::string& path, const LoadOptions& options = {});
/// The same from tensors already in memory (any device), e.g. a map built from another framework's
/// weights; options.format is not used. The tensors are copied, never modified.
LoadResult load_state_dict(MultiHeadAttentionImpl& module, const std::map<std::string, torch::Tensor>& tensors,
                           const LoadOptions& options = {});
LoadResult load_state_dict(AttentionHeadImpl& module, const std::map<std::string, torch::Tensor>& tensors,
                           const LoadOptions& options = {});
LoadResult load_state_dict(CrossAttentionImpl& module, const std::map<std::string, torch::Tensor>& tensors,
                           const LoadOptions& options = {});

/// Saves a module's parameters.
void save_state_dict(const MultiHeadAttentionImpl& module, const std::string& path, const SaveOptions& options = {});
void save_state_dict(const AttentionHeadImpl& module, const std::string& path, const SaveOptions& options = {});
void save_state_dict(const CrossAttentionImpl& module, const std::string& path, const SaveOptions& options = {});

}  // namespace attn::io
