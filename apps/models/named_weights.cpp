#include "named_weights.h"

#include <attn/io/state_dict.h>

#include <stdexcept>

namespace attn::models {

NamedWeights::NamedWeights(const std::string& path) : path_(path), tensors_(io::read_tensors(path)) {}

void NamedWeights::copy(const std::string& name, torch::Tensor& parameter) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw std::runtime_error("weights '" + path_ + "': no tensor '" + name + "'");
  if (it->second.sizes() != parameter.sizes()) {
    throw std::runtime_error("weights '" + path_ + "': '" + name + "' is " + c10::str(it->second.sizes()) +
                             ", the model expects " + c10::str(parameter.sizes()));
  }
  torch::NoGradGuard no_grad;
  parameter.copy_(it->second);
}

}  // namespace attn::models
