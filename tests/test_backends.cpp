// Backend choice: what Auto picks, what an explicit backend refuses (with a message that says what to use),
// and Backend::Torch (LibTorch's own SDPA) against the math path under attn's mask conventions.

#include "support.h"

#include <cmath>
#include <sstream>

namespace attn::test {
namespace {

TEST(Backends, AutoPicksFusedOnTheCpuUnlessItCannot) {
  const torch::Tensor q = torch::randn({1, 2, 4, 8});
  EXPECT_EQ(resolved_backend(q), Backend::Fused);
  EXPECT_EQ(resolved_backend(q.to(torch::kFloat64)), Backend::Fused);
  EXPECT_EQ(resolved_backend(q.to(torch::kBFloat16)), Backend::Fused);
  EXPECT_EQ(resolved_backend(q, {}, /*need_weights=*/true), Backend::Math);
  EXPECT_EQ(resolved_backend(q, SdpaOptions().dropout(0.1)), Backend::Math);
  const torch::Tensor learned_bias = torch::zeros({4, 4}).requires_grad_();
  EXPECT_EQ(resolved_backend(q, SdpaOptions().masks(AttentionMasks().additive_mask(learned_bias))), Backend::Math);
  {
    torch::NoGradGuard no_grad;  // no gradient will be taken, so the fused kernel is fine
    EXPECT_EQ(resolved_backend(q, SdpaOptions().masks(AttentionMasks().additive_mask(learned_bias))),
              Backend::Fused);
  }
  const torch::Tensor learned_slopes = torch::rand({2}).requires_grad_();
  EXPECT_EQ(resolved_backend(q, SdpaOptions().alibi_slopes(learned_slopes)), Backend::Math);
  {
    torch::NoGradGuard no_grad;
    EXPECT_EQ(resolved_backend(q, SdpaOptions().alibi_slopes(learned_slopes)), Backend::Fused);
  }
  EXPECT_EQ(resolved_backend(q, SdpaOptions().backend(Backend::Math)), Backend::Math);
  EXPECT_EQ(resolved_backend(q, SdpaOptions().backend(Backend::Torch)), Backend::Torch);
}

// Learned ALiBi slopes under Auto: Math differentiates them, and their gradient is the float64 one.
TEST(Backends, AutoGivesLearnedSlopesTheirGradient) {
  torch::manual_seed(4);
  const torch::Tensor q = torch::randn({1, 2, 5, 8}), k = torch::randn({1, 2, 6, 8}), v = torch::randn({1, 2, 6, 4});
  const torch::Tensor slopes = torch::rand({2}).requires_grad_(), grad = torch::randn({1, 2, 5, 4});
  scaled_dot_product_attention(q, k, v, SdpaOptions().alibi_slopes(slopes)).backward(grad);

  // float64: s = q·k / sqrt(8) - slope_h · |i + (Tk - Tq) - j| (bottom-right), softmax, · v.
  const torch::Tensor slopes64 = slopes.detach().to(torch::kDouble).requires_grad_();
  const torch::Tensor i = torch::arange(5, torch::kDouble).view({5, 1}) + 1, j = torch::arange(6, torch::kDouble);
  const torch::Tensor s = torch::matmul(q.to(torch::kDouble), k.to(torch::kDouble).transpose(-2, -1)) / std::sqrt(8.0) -
                          slopes64.view({2, 1, 1}) * (i - j).abs();
  torch::matmul(torch::softmax(s, -1), v.to(torch::kDouble)).backward(grad.to(torch::kDouble));
  ASSERT_TRUE(slopes.grad().defined());
  EXPECT_CLOSE(slopes.grad(), slopes64.grad().to(torch::kFloat), tolerance(torch::kFloat32));
}

TEST(Backends, ExplicitFusedRefusesWhatItCannotDo) {
  const torch::Tensor q = torch::randn({1, 2, 4, 8});
  const auto fused = SdpaOptions().backend(Backend::Fused);
  EXPECT_ERROR_CONTAINS(scaled_dot_product_attention_with_weights(q, q, q, fused),
                        "Backend::Fused does not return attention weights; use Backend::Math");
  EXPECT_ERROR_CONTAINS(scaled_dot_product_attention(q, q, q, SdpaOptions(fused).dropout(0.5)),
                        "Backend::Fused does not apply dropout");
  const torch::Tensor bias = torch::zeros({4, 4}).requires_grad_();
  EXPECT_ERROR_CONTAINS(
      scaled_dot_product_attention(q, q, q, SdpaOptions(fused).masks(AttentionMasks().additive_mask(bias))),
      "does not differentiate with respect to additive_mask");
  const torch::Tensor slopes = torch::rand({2}).requires_grad_();
  EXPECT_ERROR_CONTAINS(scaled_dot_product_attention(q, q, q, SdpaOptions(fused).alibi_slopes(slopes)),
                        "Backend::Fused does not differentiate with respect to alibi_slopes, which requires grad");
  const torch::Tensor meta = torch::empty({1, 2, 4, 8}, torch::TensorOptions().device(torch::kMeta));
  EXPECT_ERROR_CONTAINS(scaled_dot_product_attention(meta, meta, meta, fused),
                        "Backend::Fused has no kernel for these inputs on meta: no attn kernel runs on meta");
  EXPECT_ERROR_CONTAINS(scaled_dot_product_attention_with_weights(q, q, q, SdpaOptions().backend(Backend::Torch)),
                        "Backend::Torch does not return attention weights");
}

// A module's backend option reaches its attention: Math and Fused agree, and Fused refuses weights.
TEST(Backends, ModulesHonourTheirBackendOption) {
  torch::manual_seed(2);  // the same seed draws the same parameters
  auto fused = MultiHeadAttention(MultiHeadAttentionOptions(32, 4).causal(true).backend(Backend::Fused));
  torch::manual_seed(2);
  auto math = MultiHeadAttention(MultiHeadAttentionOptions(32, 4).causal(true).backend(Backend::Math));
  const torch::Tensor x = torch::randn({2, 70, 32});
  const torch::Tensor padding = torch::rand({2, 70}) < 0.2;
  EXPECT_CLOSE(fused(x, x, x, AttentionMasks().key_padding_mask(padding)),
               math(x, x, x, AttentionMasks().key_padding_mask(padding)), tolerance(torch::kFloat32));
  std::ostringstream printed;
  fused->pretty_print(printed);
  EXPECT_EQ(printed.str(),
            "attn::MultiHeadAttention(embed_dim=32, num_heads=4, head_dim=8, bias=true, output_projection=true, "
            "causal=true, dropout=0, backend=fused)");
  EXPECT_ERROR_CONTAINS(fused->forward_with_weights(x, x, x), "attn::MultiHeadAttention: Backend::Fused does not "
                                                              "return attention weights");
}

struct TorchCase {
  const char* name;
  bool padding, attend, additive, causal;
  CausalAlignment alignment;
  int64_t tq, tk;
};

// Backend::Torch must keep attn's conventions: bool meanings, bottom-right causal, zero rows.
TEST(Backends, TorchBackendMatchesMath) {
  const std::vector<TorchCase> cases = {
      {"no masks", false, false, false, false, CausalAlignment::BottomRight, 9, 9},
      {"causal top-left Tq<Tk", false, false, false, true, CausalAlignment::TopLeft, 5, 9},
      {"causal bottom-right Tq>Tk (empty rows)", false, false, false, true, CausalAlignment::BottomRight, 9, 5},
      {"padding + attend", true, true, false, false, CausalAlignment::BottomRight, 7, 8},
      {"additive + padding + causal", true, false, true, true, CausalAlignment::BottomRight, 8, 8},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    torch::manual_seed(5);
    const torch::Tensor q = torch::randn({2, 2, c.tq, 8}), k = torch::randn({2, 2, c.tk, 8}),
                        v = torch::randn({2, 2, c.tk, 8});
    AttentionMasks masks;
    if (c.padding) {
      torch::Tensor pad = torch::rand({2, 1, c.tk}) < 0.3;
      pad.index_put_({0}, true);  // batch 0: every key padded, so every row is empty
      masks.key_padding_mask(pad);
    }
    if (c.attend) masks.attend_mask(torch::rand({c.tq, c.tk}) < 0.7);
    if (c.additive) masks.additive_mask(torch::randn({c.tq, c.tk}).masked_fill(torch::rand({c.tq, c.tk}) < 0.2, -INFINITY));
    const auto opts = SdpaOptions().masks(masks).causal(c.causal).causal_alignment(c.alignment).scale(0.4);
    const torch::Tensor expected = scaled_dot_product_attention(q, k, v, SdpaOptions(opts).backend(Backend::Math));
    const torch::Tensor actual = scaled_dot_product_attention(q, k, v, SdpaOptions(opts).backend(Backend::Torch));
    EXPECT_CLOSE(actual, expected, tolerance(torch::kFloat32));
  }
}

// LibTorch's SDPA as the backend of an empty batch of 3-D inputs, where no dimension holds heads (CUDA's
// Backend::Auto takes it there): an empty result, not a division of zero heads by zero.
TEST(Backends, TorchBackendTakesAnEmptyBatch) {
  const auto torch_sdpa = SdpaOptions().backend(Backend::Torch);
  EXPECT_EQ(scaled_dot_product_attention(torch::randn({0, 3, 4}), torch::randn({0, 3, 4}), torch::randn({0, 3, 5}),
                                         torch_sdpa)
                .sizes(),
            (std::vector<int64_t>{0, 3, 5}));
  torch::Tensor padding = torch::zeros({0, 3}, torch::kBool);
  EXPECT_EQ(scaled_dot_product_attention(torch::randn({0, 2, 4}), torch::randn({0, 3, 4}), torch::randn({0, 3, 5}),
                                         SdpaOptions(torch_sdpa).masks(AttentionMasks().key_padding_mask(padding)))
                .sizes(),
            (std::vector<int64_t>{0, 2, 5}));
}

// LibTorch 1.13's CPU matrix products in bfloat16 accumulate in bfloat16 unless oneDNN has AVX-512 kernels
// for them (on an AVX2 CPU a 2048-term product is several percent off), so Backend::Math widens reduced
// precision to float32 on the CPU. Against float64 from the same rounded inputs, the output and the
// gradients must be within a few bfloat16 roundings, not the error of a bfloat16 accumulator.
TEST(Backends, MathComputesReducedPrecisionInFloatOnTheCpu) {
  std::vector<torch::Dtype> dtypes = {torch::kBFloat16};
#if TORCH_VERSION_MAJOR >= 2  // 1.13 refuses float16 on the CPU
  dtypes.push_back(torch::kHalf);
#endif
  for (torch::Dtype dtype : dtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    torch::manual_seed(11);
    // Grouped heads (4 query heads on 1 K/V head) so that dK and dV also sum over the group.
    const torch::Tensor q = torch::randn({1, 4, 512, 64}).to(dtype), k = torch::randn({1, 1, 2048, 64}).to(dtype),
                        v = torch::randn({1, 1, 2048, 64}).to(dtype);
    const torch::Tensor cotangent = torch::randn({1, 4, 512, 64}).to(dtype);
    const auto run = [&](torch::Dtype dt) {
      torch::Tensor qq = q.to(dt).requires_grad_(), kk = k.to(dt).requires_grad_(), vv = v.to(dt).requires_grad_();
      const torch::Tensor out = scaled_dot_product_attention(qq, kk, vv, SdpaOptions().backend(Backend::Math));
      (out * cotangent.to(dt)).sum().backward();
      EXPECT_EQ(out.scalar_type(), dt);
      EXPECT_EQ(kk.grad().scalar_type(), dt);
      return std::vector<torch::Tensor>{out.detach().to(torch::kFloat64), qq.grad().to(torch::kFloat64),
                                        kk.grad().to(torch::kFloat64), vv.grad().to(torch::kFloat64)};
    };
    const auto expected = run(torch::kFloat64);
    const auto actual = run(dtype);
    const char* names[] = {"output", "d query", "d key", "d value"};
    for (int i = 0; i < 4; ++i) {
      SCOPED_TRACE(names[i]);
      // Relative to the largest entry: a handful of roundings at 2^-8 (bfloat16) is under 2%.
      const double scale = expected[i].abs().max().item<double>();
      const double error = (actual[i] - expected[i]).abs().max().item<double>();
      EXPECT_LT(error, 0.02 * scale) << "max |actual - expected| = " << error << " of max |expected| = " << scale;
    }
  }
}

}  // namespace
}  // namespace attn::test
