// The public weight API: files to modules and back, all-or-nothing.

#include <attn/io/files.h>
#include <attn/io/state_dict.h>

#include "io/formats.h"
#include "io/parameter_names.h"

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <algorithm>
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

std::string join(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : separator) + s;
  return out;
}

/// The first names of a list that can be as long as a whole model's checkpoint, and how many more there are.
std::string first_of(const std::vector<std::string>& items, size_t shown = 12) {
  if (items.size() <= shown) return join(items);
  return join(std::vector<std::string>(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(shown))) +
         c10::str(" and ", items.size() - shown, " more");
}

/// The tensors of `tensors` under `prefix`, with the prefix removed.
TensorMap under_prefix(const TensorMap& tensors, const std::string& prefix) {
  if (prefix.empty()) return tensors;
  TensorMap out;
  for (const auto& [name, t] : tensors) {
    if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) out[name.substr(prefix.size())] = t;
  }
  return out;
}

/// The distinct first components of the names ("model", "optimizer"), for messages; at most 12.
std::string first_components(const TensorMap& tensors, const std::vector<std::string>& skipped) {
  std::vector<std::string> heads;
  auto add = [&](const std::string& name) {
    const std::string head = name.substr(0, name.find_first_of(". "));
    if (std::find(heads.begin(), heads.end(), head) == heads.end()) heads.push_back(head);
  };
  for (const auto& [name, t] : tensors) add(name);
  for (const auto& name : skipped) add(name);
  if (heads.size() > 12) {
    heads.resize(12);
    heads.push_back("...");
  }
  return join(heads);
}

/// The file's tensors as the module's names, or what keeps them from fitting.
struct Fit {
  TensorMap mapped;
  std::vector<std::string> missing, unexpected, misshaped;
  bool perfect() const { return missing.empty() && unexpected.empty() && misshaped.empty(); }
};

Fit fit(const TensorMap& tensors, WeightNames names, const ShapeMap& expected) {
  Fit f;
  f.mapped = detail::to_attn_names(tensors, names, expected);
  for (const auto& [name, shape] : expected) {
    const auto it = f.mapped.find(name);
    if (it == f.mapped.end()) {
      f.missing.push_back(name);
    } else if (it->second.sizes().vec() != shape) {
      f.misshaped.push_back(c10::str(name, " (file ", it->second.sizes(), ", module ", at::IntArrayRef(shape), ")"));
    } else if (!at::isFloatingType(it->second.scalar_type())) {
      f.misshaped.push_back(c10::str(name, " (file holds ", c10::toString(it->second.scalar_type()),
                                     ", expected a floating-point tensor)"));
    } else if (it->second.layout() != at::kStrided || it->second.is_meta()) {
      f.misshaped.push_back(c10::str(name, " (a ", it->second.is_meta() ? "meta" : c10::str(it->second.layout()),
                                     " tensor, which holds no values to load; expected a dense one)"));
    }
  }
  for (const auto& [name, t] : f.mapped) {
    if (expected.count(name)) continue;
    // A packed in_proj tensor kept whole, its rows not adding up to the module's q, k and v: one mis-shaped
    // tensor, not three missing and one unexpected.
    const detail::PackedProjection packed = detail::packed_projection(name, expected);
    const auto absent = [&](const std::string& part) { return !f.mapped.count(part); };
    if (packed.parts.empty() || !std::all_of(packed.parts.begin(), packed.parts.end(), absent)) {
      f.unexpected.push_back(name);
      continue;
    }
    f.misshaped.push_back(c10::str(name, " (file ", t.sizes(), ", module ", at::IntArrayRef(packed.shape), " for ",
                                   join(packed.parts, " + "), ")"));
    for (const std::string& part : packed.parts) {
      f.missing.erase(std::remove(f.missing.begin(), f.missing.end(), part), f.missing.end());
    }
  }
  return f;
}

/// When the names do not fit as they are, the prefix under which most of them are ("self_attn." for a saved
/// nn.TransformerEncoderLayer), and the module's names still missing there; an empty prefix if none holds any.
struct PrefixHint {
  std::string prefix;
  std::vector<std::string> missing;
};

PrefixHint prefix_that_fits(const TensorMap& tensors, WeightNames names, const ShapeMap& expected) {
  std::vector<std::string> candidates;
  for (const auto& [name, t] : tensors) {
    for (size_t dot = name.find('.'); dot != std::string::npos && candidates.size() < 64; dot = name.find('.', dot + 1)) {
      const std::string prefix = name.substr(0, dot + 1);
      if (std::find(candidates.begin(), candidates.end(), prefix) == candidates.end()) candidates.push_back(prefix);
    }
  }
  PrefixHint best;
  size_t fewest_missing = expected.size();
  for (const std::string& prefix : candidates) {
    try {
      // The names alone, whatever the shapes: a load under that prefix then says which shapes differ.
      const Fit f = fit(under_prefix(tensors, prefix), names, expected);
      if (f.missing.size() < fewest_missing) {
        best = {prefix, f.missing};
        fewest_missing = f.missing.size();
      }
    } catch (const c10::Error&) {  // names that no convention explains under this prefix
    }
  }
  return best;
}

LoadResult load_into(torch::nn::Module& module, const TensorMap& all, std::vector<std::string> skipped,
                     const std::string& source, const LoadOptions& options) {
  const std::string& prefix = options.prefix();
  const TensorMap tensors = under_prefix(all, prefix);
  TORCH_CHECK(prefix.empty() || !tensors.empty(), "attn::io::load_state_dict: ", source, " has no tensor under the ",
              "prefix '", prefix, "'; its names start with: ", first_components(all, skipped));
  auto params = module.named_parameters();
  ShapeMap expected;
  for (const auto& p : params) expected[p.key()] = p.value().sizes().vec();
  const Fit f = fit(tensors, options.names(), expected);

  // Check everything before touching the module, so that a bad file leaves it exactly as it was.
  const bool refused = !f.misshaped.empty() || (options.strict() && !f.perfect());
  if (refused) {
    std::string message = c10::str("attn::io::load_state_dict: ", source, " does not fit ", module_description(module),
                                   "; the module is unchanged.");
    if (options.strict() && !f.missing.empty()) message += " Missing: " + join(f.missing) + ".";
    if (options.strict() && !f.unexpected.empty()) message += " Unexpected: " + first_of(f.unexpected) + ".";
    if (!f.misshaped.empty()) message += " Mis-shaped: " + join(f.misshaped) + ".";
    if (!f.missing.empty()) {
      const PrefixHint hint = prefix_that_fits(tensors, options.names(), expected);
      if (!hint.prefix.empty() && hint.missing.empty()) {
        message += c10::str(" The module's weights are there under the prefix '", prefix + hint.prefix,
                            "': pass LoadOptions().prefix(\"", prefix + hint.prefix, "\").");
      } else if (!hint.prefix.empty()) {
        message += c10::str(" Most of the module's weights are under the prefix '", prefix + hint.prefix,
                            "'; the file has no ", join(hint.missing), " there: build the module without them and ",
                            "pass LoadOptions().prefix(\"", prefix + hint.prefix, "\").");
      }
    }
    TORCH_CHECK(false, message);
  }
  // Every tensor in the parameter's dtype and on its device first: a conversion that fails (memory, a device)
  // does so before the first parameter changes.
  torch::NoGradGuard no_grad;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
  for (auto& p : params) {
    const auto it = f.mapped.find(p.key());
    if (it != f.mapped.end()) {
      copies.emplace_back(p.value(), it->second.to(p.value().device(), p.value().scalar_type()));
    }
  }
  for (auto& [parameter, value] : copies) parameter.copy_(value);
  LoadResult result;
  result.missing = f.missing;
  result.unexpected = f.unexpected;
  result.skipped = std::move(skipped);
  return result;
}

LoadResult load_file(torch::nn::Module& module, const std::string& path, const LoadOptions& options) {
  TensorFile file = read_tensor_file(path, ReadOptions().format(options.format()));
  return load_into(module, file.tensors, std::move(file.skipped), "'" + path + "'", options);
}

LoadResult load_map(torch::nn::Module& module, const TensorMap& tensors, const LoadOptions& options) {
  for (const auto& [name, t] : tensors) {
    TORCH_CHECK(t.defined(), "attn::io::load_state_dict: tensor '", name, "' is undefined");
  }
  return load_into(module, tensors, {}, "the tensor map", options);
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

TensorFile read_tensor_file(const std::string& path, const ReadOptions& options) {
  // The format from the file's first bytes; safetensors is then read tensor by tensor from the file (a model's
  // weights without a copy of the whole file), the torch.save formats from the whole file.
  const WeightFormat actual = options.format() == WeightFormat::Auto
                                  ? detail::detect_format(detail::read_file_start(path, 9), path)
                                  : options.format();
  TensorFile file;
  switch (actual) {
    case WeightFormat::TorchZip:
      file.tensors = detail::read_torch_zip(detail::read_file(path), path, &file.skipped);
      break;
    case WeightFormat::TorchLegacy:
      file.tensors = detail::read_torch_legacy(detail::read_file(path), path, &file.skipped);
      break;
    case WeightFormat::Safetensors: file.tensors = detail::read_safetensors_file(path); break;
    case WeightFormat::Auto: TORCH_CHECK(false, "attn::io: unknown weight format for '", path, "'");
  }
  if (options.key().empty()) return file;
  const std::string prefix = options.key() + ".";
  TensorFile selected;
  selected.tensors = under_prefix(file.tensors, prefix);
  TORCH_CHECK(!selected.tensors.empty(), "attn::io::read_tensors: '", path, "' has no tensor under the key '",
              options.key(), "'; its top-level keys: ", first_components(file.tensors, file.skipped));
  for (const std::string& name : file.skipped) {
    if (name.compare(0, prefix.size(), prefix) == 0) selected.skipped.push_back(name.substr(prefix.size()));
  }
  return selected;
}

std::map<std::string, torch::Tensor> read_tensors(const std::string& path, const ReadOptions& options) {
  return read_tensor_file(path, options).tensors;
}

std::map<std::string, torch::Tensor> read_tensors(const std::string& path, WeightFormat format) {
  return read_tensor_file(path, ReadOptions().format(format)).tensors;
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

LoadResult load_state_dict(MultiHeadAttentionImpl& module, const std::string& path, const LoadOptions& options) {
  return load_file(module, path, options);
}
LoadResult load_state_dict(AttentionHeadImpl& module, const std::string& path, const LoadOptions& options) {
  return load_file(module, path, options);
}
LoadResult load_state_dict(CrossAttentionImpl& module, const std::string& path, const LoadOptions& options) {
  return load_file(module, path, options);
}
LoadResult load_state_dict(MultiHeadAttentionImpl& module, const std::map<std::string, torch::Tensor>& tensors,
                           const LoadOptions& options) {
  return load_map(module, tensors, options);
}
LoadResult load_state_dict(AttentionHeadImpl& module, const std::map<std::string, torch::Tensor>& tensors,
                           const LoadOptions& options) {
  return load_map(module, tensors, options);
}
LoadResult load_state_dict(CrossAttentionImpl& module, const std::map<std::string, torch::Tensor>& tensors,
                           const LoadOptions& options) {
  return load_map(module, tensors, options);
}

void save_state_dict(const MultiHeadAttentionImpl& module, const std::string& path, const SaveOptions& options) {
  TensorMap tensors = parameters_of(module);
  if (options.names() == WeightNames::TorchMultiheadAttention) {
    const auto& o = module.options;
    TORCH_CHECK(o.output_projection() && module.head_dim() * o.num_heads() == o.embed_dim(),
                "attn::io::save_state_dict: torch.nn.MultiheadAttention needs an output projection and "
                "num_heads * head_dim == embed_dim; this module has ",
                module_description(module));
    TORCH_CHECK(!o.alibi() && !o.sinks() && !o.rotary() && module.num_kv_heads() == o.num_heads(),
                "attn::io::save_state_dict: torch.nn.MultiheadAttention has no ALiBi, no attention sinks, no rotary "
                "embeddings and no grouped K/V heads, so its names cannot hold this module (alibi=", o.alibi(),
                ", sinks=", o.sinks(), ", rotary=", o.rotary().has_value(), ", num_kv_heads=", module.num_kv_heads(),
                " of num_heads=", o.num_heads(), "); save with attn's own names");
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
