#pragma once
// Copying a checkpoint's tensors into a model's parameters by name, for the models whose names do not map onto
// attn's own (io::load_state_dict serves the attention modules): a missing or mis-shaped tensor is an error
// that names the file, the tensor and both shapes.

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>

namespace attn::models {

class NamedWeights {
 public:
  /// Reads `path` (safetensors or torch.save) through attn::io::read_tensors.
  explicit NamedWeights(const std::string& path);
  /// Copies tensor `name` into `parameter`; throws std::runtime_error if it is missing or of another shape.
  void copy(const std::string& name, torch::Tensor& parameter) const;
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  /// How many numbered blocks the file holds under `prefix` ("model.layers." for model.layers.0., ...), counted
  /// from 0 up to the first number missing.
  int64_t count_numbered(const std::string& prefix) const;
  /// Throws std::runtime_error unless the file holds `count` numbered blocks under `prefix`; `field` names the
  /// config field that says so. A model checks this before it allocates its layers.
  void check_count(const std::string& prefix, int64_t count, const std::string& field) const;
  /// Throws std::runtime_error unless tensor `name` is there with shape `sizes`; `fields` names the config fields
  /// the shape comes from.
  void check_shape(const std::string& name, at::IntArrayRef sizes, const std::string& fields) const;
  const std::map<std::string, torch::Tensor>& tensors() const { return tensors_; }

 private:
  std::string path_;
  std::map<std::string, torch::Tensor> tensors_;
};

}  // namespace attn::models
