// Incremental decoding: attn::KVCache, attention_with_kv_cache (the decode kernel and the general backends on
// the cache) against a float64 formula, and MultiHeadAttention::forward(x, cache, layer) against the same
// module's cache-less causal forward; ragged batches, reorder, truncate, overflow, projected memories.

#include "kernel_variants.h"
#include "support.h"

#include <attn/ops/decode_attention.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace attn::test {
namespace {

struct DecodeCase {
  int64_t heads, kv_heads, tq;
  std::vector<int64_t> lengths;  // per row; capacity is the largest + 5
  bool causal;
  int64_t dk, dv;
};

// Lengths 1, odd, not multiples of the 256-key split, and past several splits; B x H_kv from 1 (below the
// thread count) to 16 (above it); Tq 1 and a few queries with causality inside the new positions. The
// packed rows (group x Tq) run from 1 to 64, so register tiles come full and partial, and from 16 rows on
// (ops::cpu::kAmxDecodeMinRows) the bfloat16 case on AMX's tiles takes the step, in one tile row and several
// (16, 20, 24, 64); the head sizes take the kernels' two-vector, one-vector and scalar steps (128, 16, 40 = 32
// + 8, 24, 72) with d_k != d_v, and on the tiles whole and partial pair blocks and column groups (17 and 9
// odd).
const std::vector<DecodeCase> kDecodeCases = {
    {4, 1, 1, {1}, true, 16, 16},
    {8, 2, 1, {1000}, true, 128, 128},
    {6, 3, 1, {257, 3}, true, 40, 40},
    {8, 8, 3, {513, 77}, true, 64, 24},
    {4, 2, 5, {255, 256, 600}, true, 16, 16},
    {2, 2, 4, {9, 1200}, false, 128, 72},
    {16, 2, 2, {300, 41}, true, 32, 32},
    {6, 1, 1, {700}, false, 24, 40},
    {8, 2, 5, {255, 256, 600}, true, 16, 16},
    {8, 1, 8, {1000, 31}, true, 128, 128},
    {4, 1, 16, {700, 17}, false, 40, 72},
    {16, 2, 3, {300, 2}, true, 17, 9},
};

class DecodeKernel : public KernelVariantTest {};

TEST_P(DecodeKernel, MatchesFloat64FormulaOnTheCache) {
  const torch::Dtype dtype = GetParam().dtype;
  uint64_t seed = 300;
  for (const DecodeCase& c : kDecodeCases) {
    const int64_t B = static_cast<int64_t>(c.lengths.size());
    const int64_t capacity = *std::max_element(c.lengths.begin(), c.lengths.end()) + 5;
    SCOPED_TRACE(::testing::Message() << "H=" << c.heads << " H_kv=" << c.kv_heads << " Tq=" << c.tq << " B=" << B
                                      << " first length " << c.lengths[0] << " dk=" << c.dk << " dv=" << c.dv);
    torch::manual_seed(++seed);
    const torch::Tensor q = torch::randn({B, c.heads, c.tq, c.dk}, torch::kFloat64);
    const torch::Tensor kc = torch::randn({B, c.kv_heads, capacity, c.dk}, torch::kFloat64);
    const torch::Tensor vc = torch::randn({B, c.kv_heads, capacity, c.dv}, torch::kFloat64);
    std::vector<int64_t> starts;
    for (int64_t l : c.lengths) starts.push_back(std::max<int64_t>(l - c.tq, 0));
    const int64_t group = c.heads / c.kv_heads;
    const torch::Tensor expected =
        std::get<0>(float64_attention(q, kc.repeat_interleave(group, 1), vc.repeat_interleave(group, 1),
                                      cache_allowed_pairs(starts, c.lengths, c.tq, capacity, c.causal), 1.0 / std::sqrt(double(c.dk))));
    for (Backend backend : {Backend::Fused, Backend::Math}) {
      SCOPED_TRACE(to_string(backend));
      const torch::Tensor out =
          attention_with_kv_cache(q.to(dtype), kc.to(dtype), vc.to(dtype), longs(starts), longs(c.lengths),
                                  SdpaOptions().causal(c.causal).backend(backend));
      ASSERT_EQ(out.scalar_type(), dtype);
      EXPECT_CLOSE(out.to(torch::kFloat64), expected, tolerance(dtype));
    }
  }
}

// A fixed split per length and a fixed merge order: the same bits at any thread count. One query of a group of
// 4, and 4 queries of a group of 8 (32 rows: AMX's tiles in the bfloat16 case that takes them).
TEST_P(DecodeKernel, BitwiseTheSameAtOneTwoAndThreeThreads) {
  const torch::Dtype dtype = GetParam().dtype;
  for (const auto& [heads, tq] : std::vector<std::pair<int64_t, int64_t>>{{8, 1}, {16, 4}}) {
    SCOPED_TRACE(::testing::Message() << "H=" << heads << " Tq=" << tq);
    torch::manual_seed(9);
    const torch::Tensor q = torch::randn({1, heads, tq, 32}).to(dtype);
    const torch::Tensor kc = torch::randn({1, 2, 3000, 32}).to(dtype), vc = torch::randn({1, 2, 3000, 32}).to(dtype);
    const int old = at::get_num_threads();
    std::vector<torch::Tensor> outs;
    for (int threads : {1, 2, 3}) {
      at::set_num_threads(threads);
      outs.push_back(ops::decode_attention(q, kc, vc, longs({2991 - tq}), longs({2991})));
    }
    at::set_num_threads(old);
    EXPECT_TRUE(torch::equal(outs[0], outs[1]));
    EXPECT_TRUE(torch::equal(outs[0], outs[2]));
  }
}

// Heads 2 of 2 K/V heads (3 rows each), and 16 (24 rows each: AMX's tiles in the bfloat16 case that takes
// them).
TEST_P(DecodeKernel, ANonFiniteValueAtABlockedKeyContributesNothing) {
  const torch::Dtype dtype = GetParam().dtype;
  for (int64_t heads : {2, 16}) {
    SCOPED_TRACE(::testing::Message() << "H=" << heads);
    torch::manual_seed(4);
    const torch::Tensor q = torch::randn({1, heads, 3, 8}).to(dtype);
    const torch::Tensor kc = torch::randn({1, 2, 10, 8}).to(dtype);
    torch::Tensor vc = torch::randn({1, 2, 10, 8}).to(dtype);
    vc.index_put_({0, 0, 9}, INFINITY);  // the last new key: blocked for the first two of the three queries
    const torch::Tensor out = ops::decode_attention(q, kc, vc, longs({7}), longs({10}));
    EXPECT_TRUE(torch::isfinite(out.narrow(2, 0, 2)).all().item<bool>());
    EXPECT_TRUE(torch::isfinite(out.narrow(1, heads / 2, heads / 2)).all().item<bool>());  // the other K/V head
    for (int64_t h = 0; h < heads / 2; ++h) EXPECT_FALSE(torch::isfinite(out.index({0, h, 2})).all().item<bool>());
    const torch::Tensor empty = ops::decode_attention(q, kc, vc, longs({0}), longs({0}));
    EXPECT_TRUE(torch::equal(empty, torch::zeros_like(empty)));  // no key: zero rows, no NaN
  }
}

// The bfloat16 case on AMX's tiles (the decode kernel's products from ops::cpu::kAmxDecodeMinRows rows on).
INSTANTIATE_TEST_SUITE_P(Variants, DecodeKernel,
                         ::testing::ValuesIn(kernel_grid(/*blas_products=*/false, /*amx=*/true)), kernel_param_name);


// The positions may be any integer tensor: the op reads int64 CPU positions (a KVCache's lengths) in place and
// converts the others, with the same result.
TEST(DecodeKernel, TakesPositionsOfAnyIntegerType) {
  torch::manual_seed(6);
  const torch::Tensor q = torch::randn({2, 4, 1, 8}), kc = torch::randn({2, 2, 10, 8}), vc = torch::randn({2, 2, 10, 8});
  const torch::Tensor expected = ops::decode_attention(q, kc, vc, longs({4, 8}), longs({5, 9}));
  for (const torch::Dtype type : {torch::kInt, torch::kShort, torch::kByte}) {
    const torch::Tensor starts = longs({4, 8}).to(type), lengths = longs({5, 9}).to(type);
    EXPECT_TRUE(torch::equal(ops::decode_attention(q, kc, vc, starts, lengths), expected)) << c10::toString(type);
  }
  EXPECT_ERROR_CONTAINS(ops::decode_attention(q, kc, vc, longs({4, 8}).to(torch::kFloat), longs({5, 9})),
                        "query_starts must hold integers, got Float");
}

TEST(DecodeKernel, RefusesInconsistentArguments) {
  const torch::Tensor q = torch::randn({2, 4, 1, 8}), kc = torch::randn({2, 2, 10, 8});
  EXPECT_ERROR_CONTAINS(ops::decode_attention(q, kc, kc, longs({0, 0}), longs({3, 11})),
                        "key_lengths[1] = 11 must be in [0, capacity = 10]");
  EXPECT_ERROR_CONTAINS(ops::decode_attention(q, torch::randn({2, 3, 10, 8}), torch::randn({2, 3, 10, 8}),
                                              longs({0, 0}), longs({1, 1})),
                        "with H_kv dividing the query's 4 heads");
  EXPECT_ERROR_CONTAINS(ops::decode_attention(q, kc, kc, longs({0}), longs({1, 1})), "query_starts must be [B] = [2]");
  EXPECT_ERROR_CONTAINS(attention_with_kv_cache(q, kc, kc, longs({0, 0}), longs({1, 1}),
                                                SdpaOptions().masks(AttentionMasks().attend_mask(torch::ones({1, 1}, torch::kBool)))),
                        "takes no masks");
  // Over a KVCache, whose tensors the caller did not pass, a query that does not fit it is named as the query.
  const KVCache cache(KVCacheOptions(1, 2, 2, 8, 10));
  for (const torch::Tensor& query : {torch::randn({2, 4, 1, 16}), torch::randn({2, 3, 1, 8}),
                                     torch::randn({1, 4, 1, 8}), torch::randn({2, 1, 4, 8})}) {
    EXPECT_ERROR_CONTAINS(attention_with_kv_cache(query, cache, 0, longs({0, 0})),
                          "attn::attention_with_kv_cache: query must be [B, H, Tq, d_k] = [2, H, Tq, 8] (the cache's "
                          "batch, the cache's head_dim) with H a multiple of the cache's 2 key/value heads, got");
  }
}

/// A [B] int64 tensor of lengths as a vector, for comparisons.
std::vector<int64_t> values_of(const torch::Tensor& t) {
  EXPECT_EQ(t.scalar_type(), torch::kLong);
  EXPECT_TRUE(t.device().is_cpu());
  const torch::Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// ---- The cache itself -----------------------------------------------------------------------------------

TEST(KVCache, AppendWritesInPlaceAndOverflowWritesNothing) {
  KVCache cache(KVCacheOptions(2, 2, 3, 4, 8));
  const torch::Tensor buffer = cache.keys(1);
  const void* storage = buffer.data_ptr();
  const void* lengths_storage = cache.lengths(1).data_ptr();
  const torch::Tensor k = torch::randn({2, 3, 6, 4}), v = torch::randn({2, 3, 6, 4});
  cache.append(1, k, v, {6, 2});
  EXPECT_EQ(cache.lengths(1).data_ptr(), lengths_storage);  // the lengths advance in place, one tensor throughout
  EXPECT_EQ(values_of(cache.lengths(1)), (std::vector<int64_t>{6, 2}));
  EXPECT_EQ(values_of(cache.lengths(0)), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(cache.keys(1).data_ptr(), storage);  // no reallocation
  EXPECT_TRUE(torch::equal(cache.keys(1)[0].narrow(1, 0, 6), k[0]));
  EXPECT_TRUE(torch::equal(cache.values(1)[1].narrow(1, 0, 2), v[1].narrow(1, 0, 2)));

  const torch::Tensor before_k = cache.keys(1).clone(), before_v = cache.values(1).clone();
  // Row 1 has room for 3 more, row 0 for only 2: nothing is written to either.
  EXPECT_ERROR_CONTAINS(cache.append(1, torch::randn({2, 3, 3, 4}), torch::randn({2, 3, 3, 4})),
                        "row 0 holds 6 of 8 positions and cannot take 3 more; nothing was written");
  EXPECT_EQ(values_of(cache.lengths(1)), (std::vector<int64_t>{6, 2}));
  EXPECT_TRUE(torch::equal(cache.keys(1), before_k));
  EXPECT_TRUE(torch::equal(cache.values(1), before_v));

  EXPECT_ERROR_CONTAINS(cache.append(2, k, v), "attn::KVCache::append: layer must be in [0, 2) (the cache's layers), got 2");
  EXPECT_ERROR_CONTAINS(cache.append(0, k.to(torch::kFloat64), v.to(torch::kFloat64)), "but the cache holds Float");
  EXPECT_ERROR_CONTAINS(cache.append(0, torch::randn({2, 2, 1, 4}), v), "key must be [B, H_kv, T, head_dim] = [2, 3, T, 4]");
  EXPECT_ERROR_CONTAINS(KVCache{KVCacheOptions(1, 1, 1, 4, 0)}, "capacity must be positive");
  // More than any machine has (2^43 bytes), refused before the allocation, with the options that asked for it.
  EXPECT_ERROR_CONTAINS(KVCache{KVCacheOptions(1, 1, 1, 64, int64_t{1} << 34)},
                        "attn::KVCache: the buffers of 1 layer(s) of [B, H_kv, capacity, head_dim] = "
                        "[1, 1, 17179869184, 64] (value_dim 64, Float) on cpu would take 8192.0 GiB, more than this "
                        "machine's ");
  EXPECT_ERROR_CONTAINS(attn::check_kv_cache_fits_memory(KVCacheOptions(1, 1, 1, 64, int64_t{1} << 34)),
                        "of memory; a smaller capacity or batch fits");
  // A product past int64 saturates rather than wrapping to a small size that would pass.
  EXPECT_EQ(KVCacheOptions(int64_t{1} << 20, int64_t{1} << 20, 1, 64, int64_t{1} << 40).buffer_bytes(),
            std::numeric_limits<int64_t>::max());

  cache.truncate(1);
  EXPECT_EQ(values_of(cache.lengths(1)), (std::vector<int64_t>{1, 1}));
  cache.reset();
  EXPECT_EQ(values_of(cache.lengths(1)), (std::vector<int64_t>{0, 0}));
}


// The rows a step appends come in any layout: contiguous, a head split of a projection's [B, T, H_kv * d] (unit
// stride along d, rows apart), channels two apart, a position expanded along T, or the cache's own stored rows.
// Each lands after its row's length, in float32 and bfloat16, ragged and uniform; positions past the counts
// and other rows' positions stay as they were.
TEST(KVCache, AppendTakesRowsOfAnyLayout) {
  torch::manual_seed(3);
  for (torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16}) {
    const int64_t B = 2, H = 3, d = 8, T = 4;
    for (const torch::Tensor& rows : rows_of_every_layout(B, H, T, d, dtype)) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << " strides " << rows.strides());
      KVCache cache(KVCacheOptions(1, B, H, d, 12).dtype(dtype));
      const torch::Tensor first = torch::randn({B, H, T, d}).to(dtype);
      cache.append(0, first, first, {3, 1});  // ragged: rows at lengths 3 and 1
      cache.append(0, rows, rows);
      cache.append(0, cache.keys(0).narrow(2, 0, 2), cache.values(0).narrow(2, 0, 2), {2, 0});  // its own rows
      EXPECT_EQ(values_of(cache.lengths(0)), (std::vector<int64_t>{9, 5}));
      for (int64_t b = 0; b < B; ++b) {
        const int64_t n = b == 0 ? 3 : 1;
        torch::Tensor expected = torch::cat({first[b].narrow(1, 0, n), rows[b]}, 1);
        if (b == 0) expected = torch::cat({expected, first[b].narrow(1, 0, 2)}, 1);
        expected = torch::cat({expected, torch::zeros({H, 12 - expected.size(1), d}, expected.options())}, 1);
        EXPECT_TRUE(torch::equal(cache.keys(0)[b], expected));
        EXPECT_TRUE(torch::equal(cache.values(0)[b], expected));
      }
    }
  }
}
TEST(KVCache, ReorderMovesRowsAndLengths) {
  KVCache cache(KVCacheOptions(1, 3, 1, 2, 5));
  const torch::Tensor k = torch::arange(3 * 4 * 2, torch::kFloat32).view({3, 1, 4, 2});
  cache.append(0, k, k, {4, 1, 3});
  cache.reorder(torch::tensor({2, 0, 2}));
  EXPECT_EQ(values_of(cache.lengths(0)), (std::vector<int64_t>{3, 4, 3}));
  EXPECT_TRUE(torch::equal(cache.keys(0)[0].narrow(1, 0, 3), k[2].narrow(1, 0, 3)));
  EXPECT_TRUE(torch::equal(cache.keys(0)[1].narrow(1, 0, 4), k[0]));
  EXPECT_TRUE(torch::equal(cache.values(0)[2].narrow(1, 0, 3), k[2].narrow(1, 0, 3)));
  EXPECT_ERROR_CONTAINS(cache.reorder(torch::tensor({0, 1, 3})), "indices[2] = 3 is not a row in [0, 3)");
  EXPECT_ERROR_CONTAINS(cache.reorder(torch::tensor({0, 1})), "indices must be [B] = [3]");
}

// ---- MultiHeadAttention with a cache ------------------------------------------------------------------

/// A Llama-style attention block: grouped K/V heads, rotary embeddings, no bias, causal.
MultiHeadAttention decoder_attention(torch::Dtype dtype) {
  torch::manual_seed(21);
  auto m = MultiHeadAttention(MultiHeadAttentionOptions(48, 6)
                                  .num_kv_heads(2)
                                  .bias(false)
                                  .causal(true)
                                  .rotary(RotaryEmbeddingOptions(8).base(500.0)));
  m->to(dtype);
  return m;
}

KVCache cache_for(const MultiHeadAttention& m, int64_t batch, int64_t capacity, torch::Dtype dtype) {
  return KVCache(KVCacheOptions(1, batch, m->num_kv_heads(), m->head_dim(), capacity).dtype(dtype));
}

class CachedDecoding : public ::testing::TestWithParam<torch::Dtype> {};

// Prefill, then one token at a time: the same as one causal forward over the whole sequence.
TEST_P(CachedDecoding, TokenByTokenEqualsOneCausalForward) {
  const torch::Dtype dtype = GetParam();
  torch::NoGradGuard no_grad;
  auto m = decoder_attention(dtype);
  const torch::Tensor x = torch::randn({2, 41, 48}).to(dtype);
  const torch::Tensor expected = m(x, x, x);
  KVCache cache = cache_for(m, 2, 64, dtype);
  std::vector<torch::Tensor> steps{m->forward_with_cache(x.narrow(1, 0, 20), cache, 0)};  // prefill 20
  for (int64_t t = 20; t < 41; ++t) steps.push_back(m->forward_with_cache(x.narrow(1, t, 1), cache, 0));
  EXPECT_EQ(values_of(cache.lengths(0)), (std::vector<int64_t>{41, 41}));
  EXPECT_CLOSE(torch::cat(steps, 1).to(torch::kFloat64), expected.to(torch::kFloat64),
               dtype == torch::kBFloat16 ? 3e-2 : tolerance(dtype) * 10);
}

// Prompts of different lengths in one (right-padded) batch, then decode steps: each row equals that row run
// alone.
TEST_P(CachedDecoding, RaggedBatchEqualsItsRowsRunOneByOne) {
  const torch::Dtype dtype = GetParam();
  const double tol = dtype == torch::kBFloat16 ? 3e-2 : tolerance(dtype) * 10;
  torch::NoGradGuard no_grad;
  auto m = decoder_attention(dtype);
  const std::vector<int64_t> prompt = {5, 9, 1};
  const torch::Tensor x = torch::randn({3, 9 + 4, 48}).to(dtype);  // 9 prompt positions, then 4 decode steps
  KVCache cache = cache_for(m, 3, 16, dtype);
  const torch::Tensor prefill = m->forward_with_cache(x.narrow(1, 0, 9), cache, 0, prompt);
  EXPECT_EQ(values_of(cache.lengths(0)), prompt);
  std::vector<torch::Tensor> decoded;
  for (int64_t s = 0; s < 4; ++s) decoded.push_back(m->forward_with_cache(x.narrow(1, 9 + s, 1), cache, 0));
  for (int64_t b = 0; b < 3; ++b) {
    SCOPED_TRACE(::testing::Message() << "row " << b);
    // Alone: its prompt, then the same 4 tokens.
    const torch::Tensor row = torch::cat({x[b].narrow(0, 0, prompt[b]), x[b].narrow(0, 9, 4)}).unsqueeze(0);
    const torch::Tensor alone = m(row, row, row);
    EXPECT_CLOSE(prefill[b].narrow(0, 0, prompt[b]).to(torch::kFloat64),
                 alone[0].narrow(0, 0, prompt[b]).to(torch::kFloat64), tol);
    EXPECT_TRUE(torch::equal(prefill[b].narrow(0, prompt[b], 9 - prompt[b]),
                             torch::zeros({9 - prompt[b], 48}, prefill.options())));  // padding rows are zero
    for (int64_t s = 0; s < 4; ++s) {
      EXPECT_CLOSE(decoded[s][b][0].to(torch::kFloat64), alone[0][prompt[b] + s].to(torch::kFloat64), tol);
    }
  }
}

// float16 (LibTorch 2.x; 1.x refuses it on the CPU): its steps take the fused kernel, which the decode kernel's
// dtypes leave it to.
INSTANTIATE_TEST_SUITE_P(Dtypes, CachedDecoding,
                         ::testing::Values(torch::kFloat32, torch::kFloat64, torch::kBFloat16
#if TORCH_VERSION_MAJOR >= 2
                                           ,
                                           torch::kHalf
#endif
                                           ),
                         [](const ::testing::TestParamInfo<torch::Dtype>& info) { return c10::toString(info.param); });

// Beam search: after reorder, a step equals running the selected rows' histories.
TEST(CachedDecoding, ReorderEqualsRunningTheSelectedRows) {
  torch::NoGradGuard no_grad;
  auto m = decoder_attention(torch::kFloat64);
  const torch::Tensor x = torch::randn({3, 6, 48}, torch::kFloat64);
  KVCache cache = cache_for(m, 3, 8, torch::kFloat64);
  m->forward_with_cache(x.narrow(1, 0, 5), cache, 0);
  cache.reorder(torch::tensor({1, 1, 0}));
  const torch::Tensor next = torch::randn({3, 1, 48}, torch::kFloat64);
  const torch::Tensor out = m->forward_with_cache(next, cache, 0);
  const int64_t source[] = {1, 1, 0};
  for (int64_t b = 0; b < 3; ++b) {
    const torch::Tensor row = torch::cat({x[source[b]].narrow(0, 0, 5), next[b]}).unsqueeze(0);
    EXPECT_CLOSE(out[b][0], m(row, row, row)[0][5], 1e-9);
  }
}

// The module's rotary option against the pieces: projections, attn::RotaryEmbedding at 0..T-1 (tested against
// a float64 formula in test_rotary.cpp) and a float64 softmax on the grouped heads.
TEST(CachedDecoding, RotaryOptionRotatesQueriesAndKeysAfterTheProjections) {
  torch::NoGradGuard no_grad;
  auto m = decoder_attention(torch::kFloat64);
  const torch::Tensor x = torch::randn({2, 7, 48}, torch::kFloat64);
  const auto heads = [](const torch::Tensor& t, int64_t h) { return t.view({2, 7, h, 8}).transpose(1, 2); };
  RotaryEmbedding rope(RotaryEmbeddingOptions(8).base(500.0));
  const torch::Tensor pos = torch::arange(7);
  const torch::Tensor q = rope(heads(m->q_proj(x), 6), pos), k = rope(heads(m->k_proj(x), 2), pos);
  const torch::Tensor v = heads(m->v_proj(x), 2);
  const torch::Tensor causal = torch::ones({7, 7}, torch::kBool).tril();
  const torch::Tensor attended = std::get<0>(
      float64_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), causal, 1.0 / std::sqrt(8.0)));
  const torch::Tensor expected = m->out_proj(attended.transpose(1, 2).reshape({2, 7, 48}));
  EXPECT_CLOSE(m(x, x, x), expected, 1e-10);
  std::ostringstream printed;
  m->pretty_print(printed);
  EXPECT_NE(printed.str().find("num_kv_heads=2, rotary=attn::RotaryEmbedding(rotary_dim=8"), std::string::npos)
      << printed.str();
}

// The padding of a ragged step is zero after the output projection too, not out_proj's bias.
TEST(CachedDecoding, PaddingRowsAreZeroWithAnOutputBias) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  auto m = MultiHeadAttention(MultiHeadAttentionOptions(32, 4).num_kv_heads(2).causal(true));
  m->out_proj->bias.fill_(0.5f);
  KVCache cache(m->cache_options(/*num_layers=*/1, /*batch=*/2, /*capacity=*/16));
  const torch::Tensor x = torch::randn({2, 4, 32});
  const torch::Tensor y = m->forward_with_cache(x, cache, 0, {4, 1});
  EXPECT_TRUE(torch::equal(y[1].narrow(0, 1, 3), torch::zeros({3, 32})));
  // The rows that are not padding keep the bias: row 1's first position is its token run alone.
  const torch::Tensor alone = m(x[1].narrow(0, 0, 1).unsqueeze(0), x[1].narrow(0, 0, 1).unsqueeze(0),
                                x[1].narrow(0, 0, 1).unsqueeze(0));
  EXPECT_CLOSE(y[1][0].to(torch::kFloat64), alone[0][0].to(torch::kFloat64), 1e-5);
}

TEST(CachedDecoding, RefusesAMismatchedCache) {
  auto m = decoder_attention(torch::kFloat32);
  const torch::Tensor x = torch::randn({2, 3, 48});
  KVCache wrong_heads(KVCacheOptions(1, 2, 6, 8, 10));
  EXPECT_ERROR_CONTAINS(m->forward_with_cache(x, wrong_heads, 0), "the cache holds [B, H_kv, capacity, head_dim] = [2, 6, 10, 8]");
  KVCache wrong_dtype(KVCacheOptions(1, 2, 2, 8, 10).dtype(torch::kFloat64));
  EXPECT_ERROR_CONTAINS(m->forward_with_cache(x, wrong_dtype, 0), "the cache holds Double");
  KVCache small(KVCacheOptions(1, 2, 2, 8, 2));
  EXPECT_ERROR_CONTAINS(m->forward_with_cache(x, small, 0), "cannot take 3 more; nothing was written");
  EXPECT_EQ(values_of(small.lengths(0)), (std::vector<int64_t>{0, 0}));
  KVCache ok(KVCacheOptions(1, 2, 2, 8, 10));
  EXPECT_ERROR_CONTAINS(m->forward_with_cache(x, ok, 0, {1}), "new_lengths must have one entry per batch row (2)");
  EXPECT_ERROR_CONTAINS(m->forward_with_cache(x, ok, 0, {2, 4}),
                        "attn::MultiHeadAttention: new_lengths[1] must be in [0, T = 3], got 4");
  EXPECT_ERROR_CONTAINS(m->forward_with_cache(torch::randn({2, 3, 40}), ok, 0),
                        "attn::MultiHeadAttention: x must have last dimension 48, got shape [2, 3, 40]");
  EXPECT_ERROR_CONTAINS(ok.append(0, torch::randn({2, 2, 3, 8}), torch::randn({2, 2, 3, 8}), {1, -1}),
                        "attn::KVCache::append: counts[1] must be in [0, T = 3], got -1");
  EXPECT_EQ(values_of(ok.lengths(0)), (std::vector<int64_t>{0, 0}));
  EXPECT_ERROR_CONTAINS(m->forward_with_cache(x[0], ok, 0), "with a KV cache, x must be batched [B, T, 48]");
  EXPECT_ERROR_CONTAINS(MultiHeadAttention(MultiHeadAttentionOptions(48, 6).num_kv_heads(4)),
                        "num_kv_heads (4) must divide num_heads (6)");
  EXPECT_ERROR_CONTAINS(MultiHeadAttention(MultiHeadAttentionOptions(48, 6).rotary(RotaryEmbeddingOptions(10))),
                        "rotary.rotary_dim (10) must be at most head_dim (8)");
}

// A step that the asked backend refuses (dropout on Backend::Fused in training mode, softcap on Backend::Torch)
// leaves the cache as it was: nothing appended, the layer not claimed; the same step then succeeds in eval mode
// or on another backend and equals the cache-less forward.
TEST(CachedDecoding, ARefusedStepLeavesTheCacheAsItWas) {
  torch::manual_seed(22);
  const torch::Tensor x = torch::randn({2, 3, 48}, torch::kFloat64);
  {
    auto m = MultiHeadAttention(MultiHeadAttentionOptions(48, 6).num_kv_heads(2).causal(true).dropout(0.1)
                                    .backend(Backend::Fused));
    m->to(torch::kFloat64);
    KVCache cache = cache_for(m, 2, 8, torch::kFloat64);
    EXPECT_ERROR_CONTAINS(m->forward_with_cache(x, cache, 0), "Backend::Fused does not apply dropout");
    EXPECT_EQ(values_of(cache.lengths(0)), (std::vector<int64_t>{0, 0}));
    m->eval();
    torch::NoGradGuard no_grad;
    EXPECT_CLOSE(m->forward_with_cache(x, cache, 0), m(x, x, x), 1e-12);
    EXPECT_EQ(values_of(cache.lengths(0)), (std::vector<int64_t>{3, 3}));
  }
  {
    torch::NoGradGuard no_grad;
    auto torch_sdpa = MultiHeadAttention(MultiHeadAttentionOptions(48, 6).num_kv_heads(2).causal(true).softcap(5.0)
                                             .backend(Backend::Torch));
    torch_sdpa->to(torch::kFloat64);
    KVCache cache = cache_for(torch_sdpa, 2, 8, torch::kFloat64);
    EXPECT_ERROR_CONTAINS(torch_sdpa->forward_with_cache(x, cache, 0), "Backend::Torch (LibTorch's SDPA) has no softcap");
    EXPECT_EQ(values_of(cache.lengths(0)), (std::vector<int64_t>{0, 0}));
    auto other = decoder_attention(torch::kFloat64);  // the layer is not claimed: another module may write it
    EXPECT_CLOSE(other->forward_with_cache(x, cache, 0), other(x, x, x), 1e-12);
  }
}

// Dynamic NTK scales the frequencies by the furthest position: right padding must not count as a position. A
// ragged prefill padded far past original_max_position equals the same rows padded to the longest prompt and
// each row run alone.
TEST(CachedDecoding, RightPaddingDoesNotLengthenDynamicNtk) {
  torch::manual_seed(23);
  torch::NoGradGuard no_grad;
  auto m = MultiHeadAttention(MultiHeadAttentionOptions(48, 6).num_kv_heads(2).bias(false).causal(true).rotary(
      RotaryEmbeddingOptions(8).scaling(RotaryScaling::DynamicNTK).factor(2.0).original_max_position(8)));
  m->to(torch::kFloat64);
  const std::vector<int64_t> prompt = {6, 4};
  const torch::Tensor x = torch::randn({2, 16, 48}, torch::kFloat64);
  KVCache cache = cache_for(m, 2, 16, torch::kFloat64);
  const torch::Tensor padded = m->forward_with_cache(x, cache, 0, prompt);
  for (int64_t b = 0; b < 2; ++b) {
    SCOPED_TRACE(::testing::Message() << "row " << b);
    const torch::Tensor row = x[b].narrow(0, 0, prompt[b]).unsqueeze(0);
    EXPECT_CLOSE(padded[b].narrow(0, 0, prompt[b]), m(row, row, row)[0], 1e-12);
  }
}

// Positions that truncate, keep_candidates and reset drop are zeroed: LibTorch's kernels (Backend::Torch) weight
// positions past a row's length by zero, and a NaN kept there would reach the row.
TEST(KVCache, DroppedPositionsAreZeroedSoNoStaleNaNReachesARow) {
  torch::manual_seed(24);
  torch::NoGradGuard no_grad;
  KVCache cache(KVCacheOptions(1, 2, 1, 4, 8).dtype(torch::kFloat64));
  torch::Tensor k = torch::randn({2, 1, 5, 4}, torch::kFloat64), v = torch::randn({2, 1, 5, 4}, torch::kFloat64);
  k[0].narrow(1, 3, 2).fill_(NAN);
  v[0].narrow(1, 3, 2).fill_(INFINITY);
  cache.append(0, k, v);
  cache.truncate(3);
  EXPECT_TRUE(torch::equal(cache.keys(0)[0].narrow(1, 3, 5), torch::zeros({1, 5, 4}, torch::kFloat64)));
  EXPECT_TRUE(torch::equal(cache.values(0)[0].narrow(1, 3, 5), torch::zeros({1, 5, 4}, torch::kFloat64)));
  cache.append(0, torch::randn({2, 1, 2, 4}, torch::kFloat64), torch::randn({2, 1, 2, 4}, torch::kFloat64), {0, 2});
  EXPECT_EQ(values_of(cache.lengths(0)), (std::vector<int64_t>{3, 5}));
  // Row 0's last query over its 3 keys, as the float64 formula gives it, while row 1 reads 5.
  const torch::Tensor q = torch::randn({2, 1, 1, 4}, torch::kFloat64);
  const torch::Tensor out = attention_with_kv_cache(q, cache, 0, torch::tensor({2, 4}),
                                                    SdpaOptions().causal(true).backend(Backend::Torch));
  const torch::Tensor keys = cache.keys(0)[0][0].narrow(0, 0, 3), values = cache.values(0)[0][0].narrow(0, 0, 3);
  const torch::Tensor expected = torch::softmax(q[0][0].matmul(keys.t()) / 2.0, -1).matmul(values);
  EXPECT_CLOSE(out[0][0], expected, 1e-12);
  // keep_candidates drops the rejected candidates; reset drops everything.
  torch::Tensor candidates = torch::randn({2, 1, 3, 4}, torch::kFloat64);
  candidates.narrow(2, 1, 2).fill_(NAN);
  cache.append(0, candidates, candidates);
  cache.keep_candidates(3, {{0}, {0}});
  EXPECT_EQ(values_of(cache.lengths(0)), (std::vector<int64_t>{4, 6}));
  EXPECT_FALSE(cache.keys(0).isnan().any().item<bool>());
  cache.reset();
  EXPECT_TRUE(torch::equal(cache.keys(0), torch::zeros_like(cache.keys(0))));
  EXPECT_TRUE(torch::equal(cache.values(0), torch::zeros_like(cache.values(0))));
}

// ---- Memories projected once ----------------------------------------------------------------------------

TEST(ProjectedMemory, CrossAttentionReusesTheProjectedContext) {
  torch::manual_seed(8);
  auto cross = CrossAttention(CrossAttentionOptions(16, 24, 8).num_heads(2).bias(true));
  const torch::Tensor x = torch::randn({2, 5, 16}), context = torch::randn({2, 9, 24});
  const torch::Tensor padding = torch::rand({2, 9}) < 0.3;
  const ProjectedMemory memory = cross->project_memory(context);
  EXPECT_EQ(memory.key.sizes(), (std::vector<int64_t>{2, 2, 9, 8}));
  const auto masks = AttentionMasks().key_padding_mask(padding);
  EXPECT_CLOSE(cross->forward_with_memory(x, memory, masks), cross(x, context, masks), 1e-6);
  // One step of a decoder: a single query against the same memory.
  EXPECT_CLOSE(cross->forward_with_memory(x.narrow(1, 4, 1), memory, masks), cross(x, context, masks).narrow(1, 4, 1), 1e-6);
  EXPECT_ERROR_CONTAINS(cross->forward_with_memory(x.narrow(0, 0, 1), memory), "memory must come from this module's project_memory");
}

TEST(ProjectedMemory, MultiHeadAttentionAsCrossAttention) {
  torch::manual_seed(9);
  auto mha = MultiHeadAttention(MultiHeadAttentionOptions(32, 4).kdim(12).vdim(20).num_kv_heads(2));
  const torch::Tensor q = torch::randn({3, 4, 32}), k = torch::randn({3, 7, 12}), v = torch::randn({3, 7, 20});
  const ProjectedMemory memory = mha->project_memory(k, v);
  EXPECT_CLOSE(mha->forward_with_memory(q, memory), mha(q, k, v), 1e-6);
  EXPECT_ERROR_CONTAINS(mha->project_memory(v, v), "key must have last dimension 12");

  // With rotary, forward rotates the keys at 0..Tk-1 and the queries at 0..Tq-1; the memory's form does the same.
  auto rotary = MultiHeadAttention(MultiHeadAttentionOptions(32, 4).kdim(12).vdim(20).num_kv_heads(2)
                                       .rotary(RotaryEmbeddingOptions(8)));
  const ProjectedMemory rotated = rotary->project_memory(k, v);
  EXPECT_CLOSE(rotary->forward_with_memory(q, rotated), rotary(q, k, v), 1e-6);
  EXPECT_CLOSE(rotary->forward_with_memory(q[0], rotary->project_memory(k[0], v[0])), rotary(q[0], k[0], v[0]), 1e-6);
}

// buffer_bytes() against the bytes of the tensors a cache allocates: keys, values, and an int8 cache's scales.
TEST(KVCache, BufferBytesAreWhatTheCacheAllocates) {
  for (const torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16, torch::kInt8}) {
    const KVCacheOptions options = KVCacheOptions(3, 2, 4, 16, 10).value_dim(8).dtype(dtype);
    const KVCache cache(options);
    int64_t allocated = 0;
    for (int64_t l = 0; l < cache.num_layers(); ++l) {
      allocated += cache.keys(l).nbytes() + cache.values(l).nbytes();
      if (cache.quantized()) allocated += cache.key_scales(l).nbytes() + cache.value_scales(l).nbytes();
    }
    EXPECT_EQ(options.buffer_bytes(), allocated) << c10::toString(dtype);
  }
}

}  // namespace
}  // namespace attn::test
