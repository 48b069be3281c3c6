#include "io/parameter_names.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <map>
#include <regex>

namespace attn::io::detail {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Prefix renames from the notebooks' classes: 001 Attention (W_q...), 003 (w_q..., w_combine),
// 004 (query..., fc_out). 000's bare Parameters W_query... are [d_out, d_in] like a Linear weight.
const std::pair<const char*, const char*> kNotebookPrefixes[] = {
    {"W_q.", "q_proj."}, {"W_k.", "k_proj."}, {"W_v.", "v_proj."},  {"w_q.", "q_proj."},
    {"w_k.", "k_proj."}, {"w_v.", "v_proj."}, {"w_combine.", "out_proj."}, {"query.", "q_proj."},
    {"key.", "k_proj."}, {"value.", "v_proj."}, {"fc_out.", "out_proj."},
};
const std::pair<const char*, const char*> kNotebookWhole[] = {
    {"W_query", "q_proj.weight"}, {"W_key", "k_proj.weight"}, {"W_value", "v_proj.weight"}};

/// The renamed tensors, each name given once: a file that holds one of the module's parameters under two names
/// (q_proj.weight and W_q.weight) is refused, not loaded with whichever came last.
class Renamed {
 public:
  void put(const std::string& to, const at::Tensor& t, const std::string& from) {
    const auto [it, fresh] = sources_.emplace(to, from);
    TORCH_CHECK(fresh, "attn::io: '", it->second, "' and '", from, "' both give the module's ", to,
                "; keep one of them");
    tensors_[to] = t;
  }
  TensorMap take() { return std::move(tensors_); }

 private:
  TensorMap tensors_;
  std::map<std::string, std::string> sources_;
};

/// 001's MultiHeadedAttention: heads.N.W_q.weight for N = 0..H-1, joined along the output rows.
void join_heads(Renamed& out, const TensorMap& in) {
  static const std::regex pattern(R"(heads\.(\d{1,9})\.W_([qkv])\.weight)");  // 9 digits: fits a long
  std::map<char, std::map<long, at::Tensor>> parts;
  for (const auto& [name, t] : in) {
    std::smatch m;
    if (std::regex_match(name, m, pattern)) parts[m[2].str()[0]][std::stol(m[1].str())] = t;
  }
  for (const auto& [which, heads] : parts) {
    std::vector<at::Tensor> rows;
    long expected = 0;
    for (const auto& [index, t] : heads) {
      TORCH_CHECK(index == expected, "attn::io: the per-head tensors heads.N.W_", which,
                  ".weight skip head ", expected);
      rows.push_back(t);
      ++expected;
    }
    out.put(std::string(1, which) + "_proj.weight", at::cat(rows, 0), c10::str("heads.N.W_", which, ".weight"));
  }
}

}  // namespace

WeightNames detect_names(const TensorMap& tensors) {
  for (const auto& [name, t] : tensors) {
    if (name == "in_proj_weight" || name == "in_proj_bias" || name == "q_proj_weight") {
      return WeightNames::TorchMultiheadAttention;
    }
  }
  for (const auto& [name, t] : tensors) {
    if (starts_with(name, "o_proj.")) return WeightNames::Decoder;
  }
  for (const auto& [name, t] : tensors) {
    if (starts_with(name, "heads.")) return WeightNames::Notebook;
    for (const auto& [from, to] : kNotebookPrefixes) {
      if (starts_with(name, from)) return WeightNames::Notebook;
    }
    for (const auto& [from, to] : kNotebookWhole) {
      if (name == from) return WeightNames::Notebook;
    }
  }
  return WeightNames::Attn;
}

PackedProjection packed_projection(const std::string& name, const ShapeMap& expected) {
  PackedProjection out;
  if (name != "in_proj_weight" && name != "in_proj_bias") return out;
  const std::string suffix = name == "in_proj_weight" ? ".weight" : ".bias";
  for (const char* p : {"q_proj", "k_proj", "v_proj"}) {
    const auto it = expected.find(p + suffix);
    if (it == expected.end() || it->second.empty()) return {};
    if (out.shape.empty()) out.shape = it->second;
    else out.shape[0] += it->second[0];
    out.parts.push_back(p + suffix);
    out.rows.push_back(it->second[0]);
  }
  return out;
}

TensorMap to_attn_names(const TensorMap& tensors, WeightNames names, const ShapeMap& expected) {
  if (names == WeightNames::Auto) names = detect_names(tensors);
  Renamed out;
  switch (names) {
    case WeightNames::Auto:
    case WeightNames::Attn:
      return tensors;
    case WeightNames::TorchMultiheadAttention:
      for (const auto& [name, t] : tensors) {
        if (name == "in_proj_weight" || name == "in_proj_bias") {
          // Packed [q; k; v] rows: split at attn's q/k/v widths. A size that does not add up is kept whole, so
          // that it is reported as mis-shaped against the module instead of split wrongly.
          const PackedProjection packed = packed_projection(name, expected);
          if (!packed.parts.empty() && t.dim() >= 1 && t.size(0) == packed.shape[0]) {
            const auto chunks = t.split_with_sizes(packed.rows, 0);
            for (size_t i = 0; i < packed.parts.size(); ++i) out.put(packed.parts[i], chunks[i], name);
          } else {
            out.put(name, t, name);
          }
        } else if (name == "q_proj_weight" || name == "k_proj_weight" || name == "v_proj_weight") {
          out.put(name.substr(0, 6) + ".weight", t, name);
        } else {
          out.put(name, t, name);  // out_proj.weight, out_proj.bias; anything else stays unexpected
        }
      }
      return out.take();
    case WeightNames::Notebook:
      join_heads(out, tensors);
      for (const auto& [name, t] : tensors) {
        if (starts_with(name, "heads.") && name.find(".W_") != std::string::npos) continue;  // joined above
        std::string renamed = name;
        for (const auto& [from, to] : kNotebookPrefixes) {
          if (starts_with(name, from)) renamed = to + name.substr(std::string(from).size());
        }
        for (const auto& [from, to] : kNotebookWhole) {
          if (name == from) renamed = to;
        }
        out.put(renamed, t, name);
      }
      return out.take();
    case WeightNames::Decoder:
      for (const auto& [name, t] : tensors) {
        out.put(starts_with(name, "o_proj.") ? "out_proj." + name.substr(7) : name, t, name);
      }
      return out.take();
  }
  return out.take();
}

TensorMap to_torch_multihead_names(const TensorMap& tensors, bool packed) {
  TensorMap out;
  const auto get = [&](const std::string& name) {
    const auto it = tensors.find(name);
    return it == tensors.end() ? at::Tensor() : it->second;
  };
  if (packed) {
    out["in_proj_weight"] = at::cat({get("q_proj.weight"), get("k_proj.weight"), get("v_proj.weight")}, 0);
  } else {
    out["q_proj_weight"] = get("q_proj.weight");
    out["k_proj_weight"] = get("k_proj.weight");
    out["v_proj_weight"] = get("v_proj.weight");
  }
  if (get("q_proj.bias").defined()) {
    out["in_proj_bias"] = at::cat({get("q_proj.bias"), get("k_proj.bias"), get("v_proj.bias")}, 0);
  }
  out["out_proj.weight"] = get("out_proj.weight");
  if (get("out_proj.bias").defined()) out["out_proj.bias"] = get("out_proj.bias");
  return out;
}

}  // namespace attn::io::detail
