#pragma once
// Copying a checkpoint's tensors into a model's parameters by name, for the models whose names do not map onto
// attn's own (io::load_state_dict serves the attention modules): a missing or mis-shaped tensor is an error
// that names the file, the tensor and both shapes.

#include <torch/torch.h>

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
  const std::map<std::string, torch::Tensor>& tensors() const { return tensors_; }

 private:
  std::string path_;
  std::map<std::string, torch::Tensor> tensors_;
};

}  // namespace attn::models
