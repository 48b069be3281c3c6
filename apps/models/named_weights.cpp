#include "named_weights.h"

#include <attn/io/state_dict.h>

#include <set>
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

int64_t NamedWeights::count_numbered(const std::string& prefix) const {
  std::set<int64_t> numbers;
  for (auto it = tensors_.lower_bound(prefix); it != tensors_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
       ++it) {
    const std::string rest = it->first.substr(prefix.size());
    const size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos || dot > 9) continue;
    if (rest.find_first_not_of("0123456789") != dot) continue;
    numbers.insert(std::stoll(rest.substr(0, dot)));
  }
  int64_t count = 0;
  while (numbers.count(count) != 0) ++count;
  return count;
}

void NamedWeights::check_count(const std::string& prefix, int64_t count, const std::string& field) const {
  const int64_t held = count_numbered(prefix);
  if (held != count) {
    const std::string blocks = held == 0 ? "no blocks " + prefix + "N"
                                         : std::to_string(held) + " blocks " + prefix + "0.." +
                                               std::to_string(held - 1);
    throw std::runtime_error("weights '" + path_ + "' hold " + blocks + ", but the model config's " + field + " is " +
                             std::to_string(count));
  }
}

void NamedWeights::check_shape(const std::string& name, at::IntArrayRef sizes, const std::string& fields) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw std::runtime_error("weights '" + path_ + "': no tensor '" + name + "'");
  if (it->second.sizes() != sizes) {
    throw std::runtime_error("weights '" + path_ + "': '" + name + "' is " + c10::str(it->second.sizes()) +
                             ", but the model config's " + fields + " make it " + c10::str(sizes));
  }
}

}  // namespace attn::models
