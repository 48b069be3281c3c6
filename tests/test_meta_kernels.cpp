// The Meta kernels of attn::flash_attention, attn::decode_attention, attn::linear_rows and
// attn::rotary_positions (what torch.compile
// and torch.export trace with) promise the results the CPU kernels produce: same shapes, dtypes and strides, and
// the same argument errors.

#include "support.h"

#include <attn/ops/decode_attention.h>
#include <attn/ops/flash_attention.h>
#include <attn/ops/linear_rows.h>
#include <attn/ops/rotary_positions.h>

namespace attn::test {
namespace {

torch::Tensor meta(const torch::Tensor& t) { return t.to(torch::kMeta); }

void expect_same_layout(const torch::Tensor& traced, const torch::Tensor& cpu, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_TRUE(traced.is_meta());
  EXPECT_EQ(traced.sizes(), cpu.sizes());
  EXPECT_EQ(traced.strides(), cpu.strides());
  EXPECT_EQ(traced.scalar_type(), cpu.scalar_type());
}

TEST(MetaKernels, ForwardAndBackwardMatchTheCpuKernelsLayout) {
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kHalf}) {
    for (bool causal : {false, true}) {
      torch::manual_seed(3);
      const torch::Tensor q = torch::randn({2, 3, 5, 8}).to(dtype), k = torch::randn({2, 3, 7, 8}).to(dtype),
                          v = torch::randn({2, 3, 7, 4}).to(dtype);
      const torch::Tensor pad = torch::rand({2, 1, 7}) < 0.2;
      const std::string name = std::string(c10::toString(dtype)) + (causal ? " causal" : "");

      ops::FlashArguments a;
      a.key_padding_mask = pad, a.is_causal = causal, a.causal_offset = 2, a.scale = 0.3;
      ops::FlashArguments meta_a = a;
      meta_a.key_padding_mask = meta(pad);
      auto [out, lse] = ops::flash_attention(q, k, v, a);
      auto [meta_out, meta_lse] = ops::flash_attention(meta(q), meta(k), meta(v), meta_a);
      expect_same_layout(meta_out, out, name + " output");
      expect_same_layout(meta_lse, lse, name + " logsumexp");

      const torch::Tensor grad = torch::randn(out.sizes()).to(dtype);
      auto [dq, dk, dv, dsinks] = ops::flash_attention_backward(grad, q, k, v, out, lse, a);
      auto [meta_dq, meta_dk, meta_dv, meta_dsinks] =
          ops::flash_attention_backward(meta(grad), meta(q), meta(k), meta(v), meta(out), meta(lse), meta_a);
      expect_same_layout(meta_dq, dq, name + " grad query");
      expect_same_layout(meta_dk, dk, name + " grad key");
      expect_same_layout(meta_dv, dv, name + " grad value");
    }
  }
}

TEST(MetaKernels, RefuseWhatTheCpuKernelsRefuse) {
  const torch::Tensor q = torch::randn({1, 2, 3, 4}, torch::kMeta), k = torch::randn({1, 2, 5, 4}, torch::kMeta);
  EXPECT_ERROR_CONTAINS(ops::flash_attention(q, k, torch::randn({1, 2, 6, 4}, torch::kMeta)),
                        "attn::flash_attention: value must be [B, H_kv, Tk, d_v] = [1, 2, 5, d_v] to match key");
  ops::FlashArguments padded;
  padded.key_padding_mask = torch::zeros({1, 2, 4}, torch::dtype(torch::kBool).device(torch::kMeta));
  EXPECT_ERROR_CONTAINS(ops::flash_attention(q, k, k, padded),
                        "attn::flash_attention: key_padding_mask must broadcast to [B, H, Tk] = [1, 2, 5]");
  EXPECT_ERROR_CONTAINS(ops::flash_attention(q.to(torch::kInt), k.to(torch::kInt), k.to(torch::kInt)),
                        "attn::flash_attention: query must be float32, float64, bfloat16 or float16, got Int");
  ops::FlashArguments infinite;
  infinite.scale = INFINITY;
  EXPECT_ERROR_CONTAINS(ops::flash_attention(q, k, k, infinite),
                        "attn::flash_attention: scale must be finite, got inf");
}

TEST(MetaKernels, DecodeMatchesTheCpuKernelsLayoutForEveryCache) {
  const torch::Tensor starts = torch::tensor({3, 0}, torch::kLong), lengths = torch::tensor({5, 2}, torch::kLong);
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    torch::manual_seed(5);
    const auto opts = torch::TensorOptions().dtype(dtype);
    // GQA: 4 query heads over 2 cached heads, d_v != d_k, two queries per row.
    const torch::Tensor q = torch::randn({2, 4, 2, 8}, opts);
    const torch::Tensor kc = torch::randn({2, 2, 6, 8}, opts), vc = torch::randn({2, 2, 6, 4}, opts);
    const torch::Tensor out = ops::decode_attention(q, kc, vc, starts, lengths);
    expect_same_layout(ops::decode_attention(meta(q), meta(kc), meta(vc), meta(starts), meta(lengths)), out,
                       "contiguous cache");
    // A paged cache: blocks of 4, two blocks per row, given in the pool's [num_blocks, H_kv, block, d] form.
    const torch::Tensor pool_k = torch::randn({5, 2, 4, 8}, opts), pool_v = torch::randn({5, 2, 4, 4}, opts);
    const torch::Tensor table = torch::tensor({{4, 1}, {0, 2}}, torch::kLong);
    const torch::Tensor paged = ops::decode_attention(q, pool_k, pool_v, starts, lengths, true, c10::nullopt, -1, -1,
                                                      0.0, c10::nullopt, c10::nullopt, c10::nullopt, c10::nullopt, table);
    expect_same_layout(ops::decode_attention(meta(q), meta(pool_k), meta(pool_v), meta(starts), meta(lengths), true,
                                             c10::nullopt, -1, -1, 0.0, c10::nullopt, c10::nullopt, c10::nullopt,
                                             c10::nullopt, meta(table)),
                       paged, "paged cache");
    if (dtype == torch::kFloat64) continue;
    // An int8 cache with its row scales.
    const torch::Tensor k8 = torch::randint(-127, 128, {2, 2, 6, 8}, torch::kChar);
    const torch::Tensor v8 = torch::randint(-127, 128, {2, 2, 6, 4}, torch::kChar);
    const torch::Tensor ks = torch::rand({2, 2, 6}), vs = torch::rand({2, 2, 6});
    const torch::Tensor int8 = ops::decode_attention(q, k8, v8, starts, lengths, true, c10::nullopt, -1, -1, 0.0,
                                                     c10::nullopt, c10::nullopt, ks, vs);
    expect_same_layout(ops::decode_attention(meta(q), meta(k8), meta(v8), meta(starts), meta(lengths), true,
                                             c10::nullopt, -1, -1, 0.0, c10::nullopt, c10::nullopt, meta(ks), meta(vs)),
                       int8, "int8 cache");
  }
}

TEST(MetaKernels, DecodeRefusesWhatTheCpuKernelRefuses) {
  const torch::Tensor q = torch::randn({2, 4, 1, 8}, torch::kMeta), kc = torch::randn({2, 3, 6, 8}, torch::kMeta);
  const torch::Tensor positions = torch::zeros({2}, torch::dtype(torch::kLong).device(torch::kMeta));
  EXPECT_ERROR_CONTAINS(ops::decode_attention(q, kc, kc, positions, positions),
                        "attn::decode_attention: key_cache must be [B, H_kv, capacity, d_k] = [2, H_kv, capacity, 8] "
                        "with H_kv dividing the query's 4 heads");
  const torch::Tensor k2 = torch::randn({2, 2, 6, 8}, torch::kMeta);
  EXPECT_ERROR_CONTAINS(ops::decode_attention(q, k2, k2, positions.narrow(0, 0, 1), positions),
                        "attn::decode_attention: query_starts must be [B] = [2], got [1]");
  const torch::Tensor k8 = torch::zeros({2, 2, 6, 8}, torch::dtype(torch::kChar).device(torch::kMeta));
  EXPECT_ERROR_CONTAINS(ops::decode_attention(q, k8, k8, positions, positions),
                        "attn::decode_attention: an int8 cache needs key_scales [B, H_kv, capacity] = [2, 2, 6]");
  EXPECT_ERROR_CONTAINS(ops::decode_attention(q, k2, k2, positions, positions, true, c10::nullopt, -2),
                        "attn::decode_attention: window_left and window_right must be >= 0, or -1");
  // float16 runs on the fused kernel (flash_attention), not on the decode kernel.
  EXPECT_ERROR_CONTAINS(ops::decode_attention(q.to(torch::kHalf), k2.to(torch::kHalf), k2.to(torch::kHalf), positions,
                                              positions),
                        "attn::decode_attention: query must be float32, float64 or bfloat16 (the decode kernel's "
                        "dtypes), got Half");
}

TEST(MetaKernels, LinearRowsMatchesTheCpuKernelsLayoutAndRefusals) {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto opts = torch::TensorOptions().dtype(dtype);
    const torch::Tensor x = torch::randn({3, 2, 12}, opts), w = torch::randn({5, 12}, opts), b = torch::randn({5}, opts);
    expect_same_layout(ops::linear_rows(meta(x), meta(w), meta(b)), ops::linear_rows(x, w, b), "with bias");
    expect_same_layout(ops::linear_rows(meta(x), meta(w)), ops::linear_rows(x, w), "without bias");
  }
  const torch::Tensor w = torch::randn({5, 12}, torch::kMeta);
  EXPECT_ERROR_CONTAINS(ops::linear_rows(torch::randn({3, 11}, torch::kMeta), w),
                        "attn::linear_rows: input must be [..., in_features] = [..., 12] to match weight [5, 12]");
  EXPECT_ERROR_CONTAINS(ops::linear_rows(torch::randn({17, 12}, torch::kMeta), w),
                        "attn::linear_rows: input must hold at most 16 rows (the leading dimensions' product), got 17");
  EXPECT_ERROR_CONTAINS(ops::linear_rows(torch::randn({2, 12}, torch::kMeta), w, torch::randn({4}, torch::kMeta)),
                        "attn::linear_rows: bias must be [out_features] = [5], got [4]");
  // linear_rows_many: one result per weight, each as linear_rows would lay it out.
  {
    const torch::Tensor x = torch::randn({2, 3, 12}), w1 = torch::randn({5, 12}), w2 = torch::randn({7, 12});
    c10::List<c10::optional<torch::Tensor>> biases;
    biases.push_back(c10::nullopt);
    biases.push_back(torch::randn({7}));
    c10::List<c10::optional<torch::Tensor>> meta_biases;
    meta_biases.push_back(c10::nullopt);
    meta_biases.push_back(meta(*biases.get(1)));
    const std::vector<torch::Tensor> on_meta = ops::linear_rows_many(meta(x), {meta(w1), meta(w2)}, meta_biases);
    const std::vector<torch::Tensor> on_cpu = ops::linear_rows_many(x, {w1, w2}, biases);
    ASSERT_EQ(on_meta.size(), 2u);
    for (size_t k = 0; k < 2; ++k) expect_same_layout(on_meta[k], on_cpu[k], "linear_rows_many");
    EXPECT_ERROR_CONTAINS(ops::linear_rows_many(meta(x), {w, torch::randn({7, 11}, torch::kMeta)}),
                          "attn::linear_rows_many: input must be [..., in_features] = [..., 11] to match weights[1]");
  }
}

// A meta tensor beside real ones sends the call to the Meta kernel, whose result is an uninitialised tensor of the
// real inputs' device: every such mix is an error naming the argument, never that result.
TEST(MetaKernels, AMetaArgumentBesideRealInputsIsRefused) {
  torch::manual_seed(9);
  const torch::Tensor q = torch::randn({1, 2, 5, 8}), k = torch::randn({1, 2, 7, 8});
  ops::FlashArguments packed;
  packed.cu_seqlens_q = meta(torch::tensor({0, 5}, torch::kLong));
  packed.cu_seqlens_k = torch::tensor({0, 7}, torch::kLong);
  EXPECT_ERROR_CONTAINS(ops::flash_attention(q, k, k, packed),
                        "attn::flash_attention: cu_seqlens_q is on meta but query is on cpu");

  const torch::Tensor qd = torch::randn({2, 4, 1, 8}), kc = torch::randn({2, 2, 12, 8});
  const torch::Tensor starts = torch::tensor({11, 11}, torch::kLong), lengths = torch::tensor({12, 12}, torch::kLong);
  EXPECT_ERROR_CONTAINS(ops::decode_attention(qd, kc, kc, meta(starts), lengths),
                        "attn::decode_attention: query_starts is on meta but query is on cpu");
  EXPECT_ERROR_CONTAINS(ops::decode_attention(qd, kc, kc, starts, meta(lengths)),
                        "attn::decode_attention: key_lengths is on meta but query is on cpu");
  const torch::Tensor blocks = torch::randn({6, 2, 4, 8}), table = torch::tensor({0, 1, 2, 3, 4, 5}).view({2, 3});
  EXPECT_ERROR_CONTAINS(ops::decode_attention(qd, blocks, blocks, starts, lengths, true, c10::nullopt, -1, -1, 0.0,
                                              c10::nullopt, c10::nullopt, {}, {}, meta(table)),
                        "attn::decode_attention: block_table is on meta but query is on cpu");
  const torch::Tensor tree = torch::ones({2, 2}, torch::kBool).tril();
  EXPECT_ERROR_CONTAINS(ops::decode_attention(torch::randn({2, 4, 2, 8}), kc, kc, torch::tensor({10, 10}), lengths,
                                              true, c10::nullopt, -1, -1, 0.0, c10::nullopt, c10::nullopt, {}, {}, {},
                                              meta(tree)),
                        "attn::decode_attention: tree_mask is on meta but query is on cpu");

  const torch::Tensor x = torch::randn({2, 8}), w = torch::randn({4, 8}), b = torch::randn({4});
  EXPECT_ERROR_CONTAINS(ops::linear_rows(x, meta(w)), "attn::linear_rows: weight is on meta but input is on cpu");
  EXPECT_ERROR_CONTAINS(ops::linear_rows(x, w, meta(b)), "attn::linear_rows: bias is on meta but input is on cpu");
  EXPECT_ERROR_CONTAINS(ops::linear_rows(meta(x), w), "attn::linear_rows: weight is on cpu but input is on meta");
  EXPECT_ERROR_CONTAINS(ops::linear_rows_many(x, {w, meta(w)}),
                        "attn::linear_rows_many: weights[1] is on meta but input is on cpu");
}

TEST(MetaKernels, RotaryPositionsMatchesTheCpuKernelsLayoutAndRefusals) {
  const torch::Tensor f = torch::rand({3}, torch::kDouble);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    // A head split from [B, T, H, D]: a strided view, and the result is contiguous on both.
    const torch::Tensor x = torch::randn({2, 5, 3, 8}, torch::dtype(dtype)).transpose(1, 2);
    const torch::Tensor p = torch::arange(10).reshape({2, 5});
    expect_same_layout(ops::rotary_positions(meta(x), meta(p), meta(f)), ops::rotary_positions(x, p, f), "[B, T]");
    expect_same_layout(ops::rotary_positions(meta(x[0]), meta(p[0]), meta(f), 1.0, true),
                       ops::rotary_positions(x[0], p[0], f, 1.0, true), "unbatched, interleaved");
  }
  const torch::Tensor x = torch::randn({2, 3, 5, 8}, torch::kMeta);
  EXPECT_ERROR_CONTAINS(ops::rotary_positions(x, torch::zeros({2, 4}, torch::dtype(torch::kLong).device(torch::kMeta)),
                                              meta(f)),
                        "attn::rotary_positions: positions must be [B, T] = [2, 5] for x [2, 3, 5, 8], got [2, 4]");
  EXPECT_ERROR_CONTAINS(ops::rotary_positions(x, torch::zeros({5}, torch::dtype(torch::kLong).device(torch::kMeta)),
                                              torch::rand({5}, torch::kMeta)),
                        "attn::rotary_positions: inv_freq [5] rotates 10 channels, more than x's head_dim = 8");
}

}  // namespace
}  // namespace attn::test
