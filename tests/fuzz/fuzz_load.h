#pragma once
// What the three fuzz targets share: the harness around one reader of attn::io::detail.
//
// The reader gets the fuzzer's bytes. A c10::Error is a clean rejection (the readers' documented way to
// refuse a file); anything else (another exception, a crash, a sanitizer report, a leak) is a finding, so
// it is left to escape and libFuzzer stops with the input saved. When the file parses, its tensors go through
// the rest of attn::io::load_state_dict's path, without a temporary file: every naming convention's mapping
// onto a small MultiHeadAttention's parameters and, when they fit, the copy into them.

#include "io/formats.h"
#include "io/parameter_names.h"

#include <attn/attn.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace attn::fuzz {

using Reader = io::detail::TensorMap (*)(const std::vector<uint8_t>&, const std::string&);

inline void load_into_module(const io::detail::TensorMap& file) {
  // embed_dim 4, 2 heads, biases: small, and its packed in_proj split (torch.nn.MultiheadAttention's names) is
  // [4, 4, 4] rows.
  static MultiHeadAttention module(MultiHeadAttentionOptions(4, 2));
  static const io::detail::ShapeMap expected = [] {
    io::detail::ShapeMap shapes;
    for (const auto& p : module->named_parameters()) shapes[p.key()] = p.value().sizes().vec();
    return shapes;
  }();
  for (io::WeightNames names : {io::WeightNames::Auto, io::WeightNames::Attn, io::WeightNames::TorchMultiheadAttention,
                                io::WeightNames::Notebook}) {
    const io::detail::TensorMap mapped = io::detail::to_attn_names(file, names, expected);
    bool fits = mapped.size() == expected.size();
    for (const auto& [name, shape] : expected) {
      const auto it = mapped.find(name);
      fits = fits && it != mapped.end() && it->second.sizes().vec() == shape &&
             at::isFloatingType(it->second.scalar_type());
    }
    if (!fits) continue;
    torch::NoGradGuard no_grad;
    for (auto& p : module->named_parameters()) p.value().copy_(mapped.at(p.key()));
  }
}

inline int run_one(Reader read, const uint8_t* data, size_t size) {
  static const bool once = [] {
    at::set_num_threads(1);  // one input at a time; no thread pool to start per run
    return true;
  }();
  (void)once;
  const std::vector<uint8_t> bytes(data, data + size);
  io::detail::TensorMap tensors;
  try {
    tensors = read(bytes, "fuzz-input");
  } catch (const c10::Error&) {
    return 0;  // refused cleanly
  }
  try {
    load_into_module(tensors);
  } catch (const c10::Error&) {
    // e.g. notebook per-head tensors that skip a head, or that cannot be joined: refused cleanly
  }
  return 0;
}

}  // namespace attn::fuzz
