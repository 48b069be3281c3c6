// The public weight API: files to modules and back, all-or-nothing.

#include <attn/io/files.h>
#include <attn/io/state_dict.h>

#include "io/formats.h"
#include "io/names.h"

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <sstream>

namespace attn::io {
namespace {

using detail::ShapeMap;
using detail::TensorMap;

const char* format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::Auto: return "auto";
    case WeightFormat::TorchZip: return "torch zip";
    case WeightFormat::TorchLegacy: return "torch legacy";
    case WeightFormat::Safetensors: return "safetensors";
  }
  return "?";
}

std::string module_description(const torch::nn::Module& module) {
  std::ostringstream s;
  module.pretty_print(s);
  return s.str();
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

void load_into(torch::nn::Module& module, const std::string& path, const LoadOptions& options) {
  const TensorMap file = read_tensors(path, options.format());
  auto params = module.named_parameters();
  ShapeMap expected;
  for (const auto& p : params) expected[p.key()] = p.value().sizes().vec();
  const TensorMap mapped = detail::to_attn_names(file, options.names(), expected);

  // Check everything before touching the module, so that a bad file leaves it exactly as it was.
  std::vector<std::string> missing, unexpected, misshaped;
  for (const auto& [name, shape] : expected) {
    const auto it = mapped.find(name);
    if (it == mapped.end()) {
      missing.push_back(name);
    } else if (it->second.sizes().vec() != shape) {
      misshaped.push_back(c10::str(name, " (file ", it->second.sizes(), ", module ", at::IntArrayRef(shape), ")"));
    } else if (!at::isFloatingType(it->second.scalar_type())) {
      misshaped.push_back(c10::str(name, " (file holds ", c10::toString(it->second.scalar_type()),
                                   ", expected a floating-point tensor)"));
    }
  }
  for (const auto& [name, t] : mapped) {
    if (!expected.count(name)) unexpected.push_back(name);
  }
  if (!missing.empty() || !unexpected.empty() || !misshaped.empty()) {
    std::string message = c10::str("attn::io::load_state_dict: '", path, "' does not fit ", module_description(module),
                                   "; the module is unchanged.");
    if (!missing.empty()) message += " Missing: " + join(missing) + ".";
    if (!unexpected.empty()) message += " Unexpected: " + join(unexpected) + ".";
    if (!misshaped.empty()) message += " Mis-shaped: " + join(misshaped) + ".";
    TORCH_CHECK(false, message);
  }
  torch::NoGradGuard no_grad;
  for (auto& p : params) p.value().copy_(mapped.at(p.key()));  // converts dtype and device
}

TensorMap parameters_of(const torch::nn::Module& module) {
  TensorMap out;
  for (const auto& p : module.named_parameters()) out[p.key()] = p.value();
  return out;
}

void check_save_names(const SaveOptions& options, const char* module) {
  TORCH_CHECK(options.names() == WeightNames::Attn, "attn::io::save_state_dict: ", module,
              " saves under attn's names only (WeightNames::Attn); torch.nn.MultiheadAttention's names are for "
              "attn::MultiHeadAttention");
}

}  // namespace

std::map<std::string, torch::Tensor> read_tensors(const std::string& path, WeightFormat format) {
  const std::vector<uint8_t> bytes = detail::read_file(path);
  const WeightFormat actual = format == WeightFormat::Auto ? detail::detect_format(bytes, path) : format;
  switch (actual) {
    case WeightFormat::TorchZip: return detail::read_torch_zip(bytes, path);
    case WeightFormat::TorchLegacy: return detail::read_torch_legacy(bytes, path);
    case WeightFormat::Safetensors: return detail::read_safetensors(bytes, path);
    case WeightFormat::Auto: break;
  }
  TORCH_CHECK(false, "attn::io: unknown weight format for '", path, "'");
}

void write_tensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                   WeightFormat format) {
  for (const auto& [name, t] : tensors) {
    TORCH_CHECK(t.defined(), "attn::io::write_tensors: tensor '", name, "' is undefined");
  }
  switch (format) {
    case WeightFormat::TorchZip: return write_file_atomically(path, detail::torch_zip_bytes(tensors));
    case WeightFormat::Safetensors: return write_file_atomically(path, detail::safetensors_bytes(tensors));
    default:
      TORCH_CHECK(false, "attn::io::write_tensors: cannot write the ", format_name(format),
                  " format; use WeightFormat::TorchZip or WeightFormat::Safetensors");
  }
}

void load_state_dict(MultiHeadAttentionImpl& module, const std::string& path, const LoadOptions& options) {
  load_into(module, path, options);
}
void load_state_dict(AttentionHeadImpl& module, const std::string& path, const LoadOptions& options) {
  load_into(module, path, options);
}
void load_state_dict(CrossAttentionImpl& module, const std::string& path, const LoadOptions& options) {
  load_into(module, path, options);
}

void save_state_dict(const MultiHeadAttentionImpl& module, const std::string& path, const SaveOptions& options) {
  TensorMap tensors = parameters_of(module);
  if (options.names() == WeightNames::TorchMultiheadAttention) {
    const auto& o = module.options;
    TORCH_CHECK(o.output_projection() && module.head_dim() * o.num_heads() == o.embed_dim(),
                "attn::io::save_state_dict: torch.nn.MultiheadAttention needs an output projection and "
                "num_heads * head_dim == embed_dim; this module has ",
                module_description(module));
    tensors = detail::to_torch_multihead_names(tensors, o.kdim() == o.embed_dim() && o.vdim() == o.embed_dim());
  } else {
    check_save_names(options, "attn::MultiHeadAttention");
  }
  write_tensors(path, tensors, options.format());
}

void save_state_dict(const AttentionHeadImpl& module, const std::string& path, const SaveOptions& options) {
  check_save_names(options, "attn::AttentionHead");
  write_tensors(path, parameters_of(module), options.format());
}

void save_state_dict(const CrossAttentionImpl& module, const std::string& path, const SaveOptions& options) {
  check_save_names(options, "attn::CrossAttention");
  write_tensors(path, parameters_of(module), options.format());
}

}  // namespace attn::io
