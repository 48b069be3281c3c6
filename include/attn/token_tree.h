#pragma once
// The candidate tokens of speculative decoding, as a tree: a draft proposes several continuations, and the
// model scores them all in one step, each candidate attending to the cache and to its own ancestors
// (MultiHeadAttentionImpl::forward_with_tree, attn::attention_over_token_tree), then keeps one path
// (KVCache::keep_candidates).

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace attn {

/// parents[i] is candidate i's parent among the candidates, or -1 for a candidate that directly follows the
/// cache's last position. A parent comes before its child (parents[i] < i), so candidates are in the order a
/// breadth- or depth-first walk lists them; a chain of n drafted tokens is TokenTree::chain(n).
class TokenTree {
 public:
  /// Throws a c10::Error naming the entry when a parent index is below -1 or not before its child.
  explicit TokenTree(std::vector<int64_t> parents);
  /// 0 <- 1 <- ... <- n-1: a single drafted continuation.
  static TokenTree chain(int64_t n);

  int64_t size() const { return static_cast<int64_t>(parents_.size()); }
  const std::vector<int64_t>& parents() const { return parents_; }
  /// Ancestors of each candidate (0 for a root): candidate i sits at position cache length + depths()[i].
  const std::vector<int64_t>& depths() const { return depths_; }
  /// [N, N] bool on the CPU: candidate i may attend candidate j iff j is i or one of its ancestors.
  torch::Tensor ancestor_mask() const;
  /// The candidates from a root down to `node`, in that order (what KVCache::keep_candidates takes).
  std::vector<int64_t> path_to(int64_t node) const;
  /// The children of `node` (-1: the roots), in order.
  std::vector<int64_t> children(int64_t node) const;

 private:
  std::vector<int64_t> parents_, depths_;
};

}  // namespace attn
