#include <attn/token_tree.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <exception>
#include <utility>

namespace attn {

TokenTree::TokenTree(std::vector<int64_t> parents) : parents_(std::move(parents)) {
  TORCH_CHECK(!parents_.empty(), "attn::TokenTree: needs at least one candidate");
  depths_.reserve(parents_.size());
  for (int64_t i = 0; i < size(); ++i) {
    const int64_t p = parents_[i];
    TORCH_CHECK(p >= -1, "attn::TokenTree: parents[", i, "] = ", p, " must be -1 (a root) or a candidate index");
    TORCH_CHECK(p < i, "attn::TokenTree: parents[", i, "] = ", p,
                " points forward: list each candidate after its parent (parents[i] < i)");
    depths_.push_back(p < 0 ? 0 : depths_[p] + 1);
  }
}

TokenTree TokenTree::chain(int64_t n) {
  TORCH_CHECK(n >= 1, "attn::TokenTree::chain: n must be >= 1, got ", n);
  std::vector<int64_t> parents;
  try {
    parents.resize(static_cast<size_t>(n));
  } catch (const std::exception& e) {  // std::length_error or std::bad_alloc: a c10::Error like every other
    TORCH_CHECK(false, "attn::TokenTree::chain: cannot hold ", n, " candidates: ", e.what());
  }
  for (int64_t i = 0; i < n; ++i) parents[i] = i - 1;
  return TokenTree(std::move(parents));
}

torch::Tensor TokenTree::ancestor_mask() const {
  const int64_t n = size();
  torch::Tensor mask = torch::zeros({n, n}, torch::kBool);
  bool* m = mask.data_ptr<bool>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i; j >= 0; j = parents_[j]) m[i * n + j] = true;
  }
  return mask;
}

std::vector<int64_t> TokenTree::path_to(int64_t node) const {
  TORCH_CHECK(node >= 0 && node < size(), "attn::TokenTree::path_to: node must be in [0, ", size(), "), got ", node);
  std::vector<int64_t> path;
  for (int64_t j = node; j >= 0; j = parents_[j]) path.push_back(j);
  std::reverse(path.begin(), path.end());
  return path;
}

std::vector<int64_t> TokenTree::children(int64_t node) const {
  TORCH_CHECK(node >= -1 && node < size(), "attn::TokenTree::children: node must be in [-1, ", size(), "), got ", node);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < size(); ++i) {
    if (parents_[i] == node) out.push_back(i);
  }
  return out;
}

}  // namespace attn
