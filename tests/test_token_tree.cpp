// Token tree verification (speculative decoding): TokenTree, attention_over_token_tree,
// MultiHeadAttention::forward_with_tree and KVCache::keep_candidates. References: attention in float64 over
// each candidate's own path, and the module run over that path alone (the layout a tree must reproduce).

#include "kernel_variants.h"
#include "support.h"

#include <attn/attn.h>
#include <attn/ops/decode_attention.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace attn::test {
namespace {

// Two roots, branches and a chain: 0 <- 1 <- 3, 0 <- 2 <- 5, 1 <- 4, and 6 <- 7.
const std::vector<int64_t> kParents = {-1, 0, 0, 1, 1, 2, -1, 6};

TEST(TokenTree, DepthsMaskPathsAndChildren) {
  const TokenTree tree(kParents);
  EXPECT_EQ(tree.size(), 8);
  EXPECT_EQ(tree.depths(), (std::vector<int64_t>{0, 1, 1, 2, 2, 2, 0, 1}));
  EXPECT_EQ(tree.path_to(4), (std::vector<int64_t>{0, 1, 4}));
  EXPECT_EQ(tree.path_to(7), (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(tree.children(-1), (std::vector<int64_t>{0, 6}));
  EXPECT_EQ(tree.children(1), (std::vector<int64_t>{3, 4}));
  const torch::Tensor mask = tree.ancestor_mask();
  for (int64_t i = 0; i < 8; ++i) {
    const std::vector<int64_t> path = tree.path_to(i);
    for (int64_t j = 0; j < 8; ++j) {
      const bool on_path = std::find(path.begin(), path.end(), j) != path.end();
      EXPECT_EQ(mask[i][j].item<bool>(), on_path) << i << " " << j;
    }
  }
  EXPECT_EQ(TokenTree::chain(3).parents(), (std::vector<int64_t>{-1, 0, 1}));
}

TEST(TokenTree, RefusesAParentThatPointsForwardOrBelowMinusOne) {
  EXPECT_ERROR_CONTAINS(TokenTree({-1, 2, 0}), "parents[1] = 2 points forward");
  EXPECT_ERROR_CONTAINS(TokenTree({-1, 1}), "parents[1] = 1 points forward");
  EXPECT_ERROR_CONTAINS(TokenTree({-2}), "parents[0] = -2 must be -1");
  EXPECT_ERROR_CONTAINS(TokenTree(std::vector<int64_t>{}), "needs at least one candidate");
  EXPECT_ERROR_CONTAINS(TokenTree(kParents).path_to(8), "node must be in [0, 8)");
}

// Each candidate's output equals attention over its own path in float64: the prefix, then its ancestors and
// itself, as if that path alone had been decoded. Float32, int8 and bfloat16 caches; GQA (24 rows per K/V head:
// bfloat16 on AMX's tiles where the CPU has them, and with them off).
TEST(TokenTreeAttention, EachCandidateMatchesItsPathAloneInFloat64) {
  torch::NoGradGuard no_grad;
  const TokenTree tree(kParents);
  const int64_t B = 2, H = 6, H_kv = 2, d = 40, N = tree.size(), group = H / H_kv;
  const std::vector<int64_t> prefix = {300, 7};
  std::vector<std::pair<torch::Dtype, bool>> routes{
      {torch::kFloat32, false}, {torch::kBFloat16, false}, {torch::kInt8, false}};
  if (amx_runs_here("the tree's AMX case was left out")) routes.emplace_back(torch::kBFloat16, true);
  for (const auto& [dtype, amx] : routes) {
    SCOPED_TRACE(std::string(c10::toString(dtype)) + (amx ? " on AMX's tiles" : ""));
    const AmxTilesScope tiles(amx);
    const torch::Dtype model = dtype == torch::kInt8 ? torch::kFloat32 : dtype;
    torch::manual_seed(17);
    KVCache cache(KVCacheOptions(1, B, H_kv, d, 400).dtype(dtype));
    const torch::Tensor pk = torch::randn({B, H_kv, 300, d}).to(model), pv = torch::randn({B, H_kv, 300, d}).to(model);
    cache.append(0, pk, pv, prefix);
    const torch::Tensor ck = torch::randn({B, H_kv, N, d}).to(model), cv = torch::randn({B, H_kv, N, d}).to(model);
    cache.append(0, ck, cv);
    const torch::Tensor q = torch::randn({B, H, N, d}).to(model);
    const torch::Tensor out = attention_over_token_tree(q, cache, 0, tree).to(torch::kFloat64);

    // What the cache holds, in float64 (an int8 cache's rows times their scales, rotated back).
    const bool int8 = dtype == torch::kInt8;
    const torch::Tensor keys = int8 ? int8_rows_in_model_basis(cache.keys(0), cache.key_scales(0))
                                    : cache.keys(0).to(torch::kFloat64);
    const torch::Tensor values = int8 ? int8_rows_in_model_basis(cache.values(0), cache.value_scales(0))
                                      : cache.values(0).to(torch::kFloat64);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < N; ++i) {
        std::vector<int64_t> rows(prefix[b]);
        std::iota(rows.begin(), rows.end(), 0);
        for (int64_t j : tree.path_to(i)) rows.push_back(prefix[b] + j);
        const torch::Tensor index = longs(rows);
        const torch::Tensor k = keys[b].index_select(1, index).repeat_interleave(group, 0).unsqueeze(0);
        const torch::Tensor v = values[b].index_select(1, index).repeat_interleave(group, 0).unsqueeze(0);
        const torch::Tensor qi = q[b].narrow(1, i, 1).to(torch::kFloat64).unsqueeze(0);  // [1, H, 1, d]
        const torch::Tensor expected = std::get<0>(float64_attention(
            qi, k, v, torch::ones({1, 1, 1, k.size(2)}, torch::kBool), 1.0 / std::sqrt(double(d))));
        EXPECT_CLOSE(out[b].narrow(1, i, 1).unsqueeze(0), expected,
                     model == torch::kBFloat16 ? tolerance(torch::kBFloat16) : 1e-5)
            << "row " << b << " candidate " << i;
      }
    }
  }
}

TEST(TokenTreeAttention, RefusesWhatATreeCannotTake) {
  KVCache cache(KVCacheOptions(1, 1, 2, 8, 32));
  cache.append(0, torch::randn({1, 2, 6, 8}), torch::randn({1, 2, 6, 8}));
  const TokenTree tree({-1, 0, 0});
  const torch::Tensor q = torch::randn({1, 4, 3, 8});
  torch::NoGradGuard no_grad;
  EXPECT_ERROR_CONTAINS(attention_over_token_tree(q, cache, 0, tree, SdpaOptions().causal(true).window(4, 0)),
                        "tree_mask takes no window and no ALiBi");
  EXPECT_ERROR_CONTAINS(attention_over_token_tree(q, cache, 0, tree, SdpaOptions()), "tree_mask needs is_causal");
  EXPECT_ERROR_CONTAINS(attention_over_token_tree(torch::randn({1, 4, 2, 8}), cache, 0, tree),
                        "query must be [B, H, N, d_k] with N = 3 candidates");
  KVCache short_cache(KVCacheOptions(1, 1, 2, 8, 32));
  short_cache.append(0, torch::randn({1, 2, 2, 8}), torch::randn({1, 2, 2, 8}));
  EXPECT_ERROR_CONTAINS(attention_over_token_tree(q, short_cache, 0, tree), "fewer than the 3 candidates");
  // The op refuses a mask that lets a candidate see a later one.
  torch::Tensor forward = TokenTree({-1, 0, 0}).ancestor_mask();
  forward[1][2] = true;
  EXPECT_ERROR_CONTAINS(ops::decode_attention(q, cache.keys(0), cache.values(0), longs({3}), longs({6}), true,
                                              c10::nullopt, -1, -1, 0.0, c10::nullopt, c10::nullopt, c10::nullopt,
                                              c10::nullopt, c10::nullopt, forward),
                        "lets a candidate attend a later one");
}

// The module over a tree, rotary included: every candidate's output is what the module gives for the last
// position of its path run alone; keeping a path leaves the cache as decoding that path would. Float32 and int8
// caches (an int8 prefix is made again by the same prompt, whose rows round alike).
TEST(TokenTreeModule, ForwardWithTreeMatchesEachPathAloneAndKeepsOne) {
  torch::NoGradGuard no_grad;
  for (torch::Dtype dtype : {torch::kFloat32, torch::kInt8}) {
    SCOPED_TRACE(c10::toString(dtype));
    torch::manual_seed(23);
    const int64_t E = 64, B = 2;
    MultiHeadAttention mha(
        MultiHeadAttentionOptions(E, 4).num_kv_heads(2).causal(true).rotary(RotaryEmbeddingOptions(16)));
    const TokenTree tree(kParents);
    const int64_t N = tree.size();
    const torch::Tensor prompt = torch::randn({B, 9, E}), candidates = torch::randn({B, N, E});

    KVCache cache(mha->cache_options(1, B, 40).dtype(dtype));
    mha->forward_with_cache(prompt, cache, 0);
    // The prefix alone, in a cache of its own (a KVCache copy would share the tensors).
    const auto detached = [&] {
      KVCache copy(mha->cache_options(1, B, 40).dtype(dtype));
      if (dtype == torch::kInt8) {
        mha->forward_with_cache(prompt, copy, 0);
      } else {
        copy.append(0, cache.keys(0).narrow(2, 0, 9), cache.values(0).narrow(2, 0, 9));
      }
      return copy;
    };
    const torch::Tensor out = mha->forward_with_tree(candidates, cache, 0, tree);
    ASSERT_EQ(out.sizes(), (std::vector<int64_t>{B, N, E}));
    for (int64_t i = 0; i < N; ++i) {
      const std::vector<int64_t> path = tree.path_to(i);
      KVCache alone = detached();
      const torch::Tensor steps = mha->forward_with_cache(candidates.index_select(1, longs(path)), alone, 0);
      EXPECT_CLOSE(out.narrow(1, i, 1), steps.narrow(1, steps.size(1) - 1, 1), 1e-5) << "candidate " << i;
    }
    // Row 0 keeps the path to candidate 4, row 1 the one to candidate 7.
    const std::vector<std::vector<int64_t>> accepted = {tree.path_to(4), tree.path_to(7)};
    cache.keep_candidates(N, accepted);
    for (int64_t b = 0; b < B; ++b) {
      KVCache alone = detached();
      mha->forward_with_cache(candidates.index_select(1, longs(accepted[b])), alone, 0);
      const int64_t length = 9 + static_cast<int64_t>(accepted[b].size());
      EXPECT_EQ(cache.lengths(0)[b].item<int64_t>(), length);
      EXPECT_CLOSE(cache.keys(0)[b].narrow(1, 0, length).to(torch::kFloat64),
                   alone.keys(0)[b].narrow(1, 0, length).to(torch::kFloat64), 1e-5);
      EXPECT_CLOSE(cache.values(0)[b].narrow(1, 0, length).to(torch::kFloat64),
                   alone.values(0)[b].narrow(1, 0, length).to(torch::kFloat64), 1e-5);
    }
  }
}

TEST(TokenTreeModule, KeepCandidatesChecksBeforeItChangesAnything) {
  KVCache cache(KVCacheOptions(2, 2, 1, 4, 16));
  for (int64_t l = 0; l < 2; ++l) cache.append(l, torch::randn({2, 1, 5, 4}), torch::randn({2, 1, 5, 4}));
  const torch::Tensor keys = cache.keys(1).clone();
  EXPECT_ERROR_CONTAINS(cache.keep_candidates(3, {{0, 2}, {1, 1}}), "accepted[1] must hold increasing candidate indices");
  EXPECT_ERROR_CONTAINS(cache.keep_candidates(3, {{0, 3}, {}}), "in [0, 3), got 3");
  EXPECT_ERROR_CONTAINS(cache.keep_candidates(6, {{0}, {}}), "holds 5 positions, fewer than the 6 candidates");
  EXPECT_ERROR_CONTAINS(cache.keep_candidates(3, {{0}}), "one list per batch row (2)");
  EXPECT_EQ(cache.lengths(0)[0].item<int64_t>(), 5);
  EXPECT_TRUE(torch::equal(cache.keys(1), keys));
  cache.keep_candidates(3, {{0, 2}, {}});
  EXPECT_EQ(cache.lengths(1)[0].item<int64_t>(), 4);
  EXPECT_EQ(cache.lengths(1)[1].item<int64_t>(), 2);
  EXPECT_TRUE(torch::equal(cache.keys(1)[0].narrow(1, 2, 1), keys[0].narrow(1, 2, 1)));  // candidate 0 stays
  EXPECT_TRUE(torch::equal(cache.keys(1)[0].narrow(1, 3, 1), keys[0].narrow(1, 4, 1)));  // candidate 2 moves up

  // keep_path takes the deepest accepted node of each row and keeps its path from the root.
  KVCache tree_cache(KVCacheOptions(1, 2, 1, 4, 16));
  tree_cache.append(0, torch::randn({2, 1, 6, 4}), torch::randn({2, 1, 6, 4}));
  const torch::Tensor before = tree_cache.keys(0).clone();
  const TokenTree tree({-1, 0, 0, 2});  // the last 4 positions of each row
  EXPECT_ERROR_CONTAINS(tree_cache.keep_path(tree, {3, 4}), "last[1] must be -1 or a candidate in [0, 4)");
  tree_cache.keep_path(tree, {3, -1});
  EXPECT_EQ(tree_cache.lengths(0)[0].item<int64_t>(), 2 + 3);  // 0, 2, 3
  EXPECT_EQ(tree_cache.lengths(0)[1].item<int64_t>(), 2);
  EXPECT_TRUE(torch::equal(tree_cache.keys(0)[0].narrow(1, 3, 2), before[0].narrow(1, 4, 2)));
}

}  // namespace
}  // namespace attn::test
