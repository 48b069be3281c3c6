// Semantics of attn::scaled_dot_product_attention that the field keeps getting wrong: fully masked rows,
// NaN at masked keys, causal alignment, dropout, empty and strided inputs. References are float64
// computations from the definition (support.h: float64_attention) or exact expected values.

#include "support.h"

#include <torch/version.h>

#include <cmath>

namespace attn::test {
namespace {

class Functional : public ::testing::TestWithParam<DeviceDtype> {
 protected:
  void SetUp() override {
    if (skip_without(GetParam().device)) GTEST_SKIP() << "CUDA is not available: skipping " << param_name(GetParam());
    torch::manual_seed(7);
    options_ = torch::TensorOptions().dtype(GetParam().dtype).device(GetParam().device);
    tol_ = tolerance(GetParam().dtype);
  }
  torch::Tensor randn(at::IntArrayRef shape) const { return torch::randn(shape, torch::kFloat64).to(options_); }
  torch::Tensor on_device(const torch::Tensor& t) const { return t.to(options_.device()); }
  torch::TensorOptions options_;
  double tol_ = 0;
};

TEST_P(Functional, FullyMaskedRowsAreZeroWithFiniteGradients) {
  const torch::Tensor q = randn({2, 3, 5, 8}).requires_grad_(), k = randn({2, 3, 6, 8}).requires_grad_(),
                      v = randn({2, 3, 6, 4}).requires_grad_();
  torch::Tensor attend = torch::rand({5, 6}) < 0.7;
  attend.index_put_({torch::indexing::Slice(), 0}, true);
  attend[2] = false;  // query 2 may attend to nothing
  torch::Tensor padding = torch::zeros({2, 1, 6}, torch::kBool);
  padding[1] = true;  // batch 1: every key is padding
  const auto opts = SdpaOptions().masks(AttentionMasks().attend_mask(on_device(attend)).key_padding_mask(on_device(padding)));
  auto [out, weights] = scaled_dot_product_attention_with_weights(q, k, v, opts);

  const torch::Tensor allowed = attend.logical_and(padding.logical_not().unsqueeze(-2));
  auto [expected, expected_weights] = float64_attention(q, k, v, allowed, 1.0 / std::sqrt(8.0));
  EXPECT_CLOSE(out, expected, tol_);
  EXPECT_CLOSE(weights, expected_weights, tol_);
  EXPECT_EQ(out.select(2, 2).abs().max().item<double>(), 0.0) << "fully masked query row must be exactly 0";
  EXPECT_EQ(out[1].abs().max().item<double>(), 0.0) << "all-padding batch must be exactly 0";

  (out * randn(out.sizes())).sum().backward();
  for (const auto* g : {&q, &k, &v}) EXPECT_TRUE(g->grad().isfinite().all().item<bool>());
  EXPECT_EQ(q.grad()[1].abs().max().item<double>(), 0.0) << "no gradient flows through empty rows";
}

TEST_P(Functional, NonFiniteValuesAtPaddedKeysDoNotLeak) {
  const torch::Tensor q = randn({2, 2, 4, 8}), k = randn({2, 2, 7, 8}).clone(), v = randn({2, 2, 7, 5}).clone();
  torch::Tensor padding = torch::zeros({2, 1, 7}, torch::kBool);
  padding.index_put_({torch::indexing::Slice(), 0, torch::indexing::Slice(5, 7)}, true);
  torch::Tensor k_bad = k.clone(), v_bad = v.clone();
  k_bad.index_put_({torch::indexing::Slice(), torch::indexing::Slice(), 5}, NAN);
  v_bad.index_put_({torch::indexing::Slice(), torch::indexing::Slice(), 5}, NAN);
  v_bad.index_put_({torch::indexing::Slice(), torch::indexing::Slice(), 6}, INFINITY);
  const auto opts = SdpaOptions().masks(AttentionMasks().key_padding_mask(on_device(padding)));
  const torch::Tensor out = scaled_dot_product_attention(q, k_bad, v_bad, opts);
  EXPECT_TRUE(out.isfinite().all().item<bool>());
  EXPECT_CLOSE(out, std::get<0>(float64_attention(q, k, v, padding.logical_not().unsqueeze(-2), 1.0 / std::sqrt(8.0))), tol_);
}

TEST_P(Functional, NonFiniteValueReachesOnlyTheQueriesAllowedToSeeIt) {
  // Causal: the last key is hidden from every query but the last. A NaN/Inf there must reach only that one
  // (IEEE: an attended NaN gives NaN), whether masking is causal, a bool mask or an additive -inf. On CUDA,
  // Backend::Auto runs LibTorch's kernels, which multiply a masked key's zero weight with its value (so a NaN
  // there reaches the queries of its tile, as docs/backends.md says): the guarantee is Backend::Math's there.
  const Backend backend = GetParam().device == torch::kCUDA ? Backend::Math : Backend::Auto;
  const int64_t t = 5;
  const torch::Tensor q = randn({t, 4}), k = randn({t, 4}), v = randn({t, 3});
  torch::Tensor v_bad = v.clone(), k_bad = k.clone();
  v_bad[t - 1][0] = NAN;
  v_bad[t - 1][1] = INFINITY;
  k_bad[t - 1][2] = NAN;
  const torch::Tensor allowed = torch::ones({t, t}, torch::kBool).tril();
  const torch::Tensor additive = torch::zeros({t, t}, torch::kFloat64).masked_fill(allowed.logical_not(), -INFINITY);
  for (const auto& opts : {SdpaOptions().causal(true).backend(backend),
                           SdpaOptions().masks(AttentionMasks().attend_mask(on_device(allowed))).backend(backend),
                           SdpaOptions().masks(AttentionMasks().additive_mask(additive.to(options_))).backend(backend)}) {
    const torch::Tensor out = scaled_dot_product_attention(q, k_bad, v_bad, opts).to(torch::kCPU);
    const auto early = torch::indexing::Slice(0, t - 1);
    EXPECT_CLOSE(out.index({early}), std::get<0>(float64_attention(q, k, v, allowed, 0.5)).index({early}), tol_);
    EXPECT_TRUE(out[t - 1].isnan().all().item<bool>()) << "the last query attends to a NaN key: " << out[t - 1];
  }
}

TEST_P(Functional, CausalAlignmentWhenQueriesAndKeysDiffer) {
  // Tq = 2 new queries against Tk = 4 cached keys.
  const torch::Tensor q = randn({2, 8}), k = randn({4, 8}), v = randn({4, 3});
  const auto bottom_right = std::get<1>(scaled_dot_product_attention_with_weights(q, k, v, SdpaOptions().causal(true)));
  const auto top_left = std::get<1>(scaled_dot_product_attention_with_weights(
      q, k, v, SdpaOptions().causal(true).causal_alignment(CausalAlignment::TopLeft)));
  // BottomRight (default): query i sees keys j <= i + 2. TopLeft: keys j <= i.
  const torch::Tensor br_allowed = torch::tensor({{1, 1, 1, 0}, {1, 1, 1, 1}}).to(torch::kBool);
  const torch::Tensor tl_allowed = torch::tensor({{1, 0, 0, 0}, {1, 1, 0, 0}}).to(torch::kBool);
  EXPECT_CLOSE(bottom_right, std::get<1>(float64_attention(q, k, v, br_allowed, 1.0 / std::sqrt(8.0))), tol_);
  EXPECT_CLOSE(top_left, std::get<1>(float64_attention(q, k, v, tl_allowed, 1.0 / std::sqrt(8.0))), tol_);

  // Tq > Tk, bottom-right: the first Tq - Tk queries see no key and give zeros.
  const torch::Tensor out = scaled_dot_product_attention(randn({5, 8}), k, v, SdpaOptions().causal(true));
  EXPECT_EQ(out.slice(0, 0, 1).abs().max().item<double>(), 0.0);
  EXPECT_GT(out.slice(0, 1).abs().max().item<double>(), 0.0);
}

TEST_P(Functional, DropoutOnlyWhenAskedAndRescaled) {
  const torch::Tensor q = randn({2, 16, 8}), k = randn({2, 16, 8}), v = randn({2, 16, 8});
  auto [expected, expected_weights] = float64_attention(q, k, v, {}, 1.0 / std::sqrt(8.0));
  // A call with three tensors names attn::: ADL also finds LibTorch 2.x's at::scaled_dot_product_attention.
  EXPECT_CLOSE(attn::scaled_dot_product_attention(q, k, v), expected, tol_) << "no dropout unless asked";
  const double p = 0.25;
  auto [dropped, dropped_weights] = scaled_dot_product_attention_with_weights(q, k, v, SdpaOptions().dropout(p));
  // Each weight is either dropped (0) or kept and scaled by 1 / (1 - p); the output applies exactly those.
  const torch::Tensor kept = (dropped_weights != 0).to(torch::kCPU);
  EXPECT_CLOSE(dropped_weights.to(torch::kCPU).masked_select(kept), expected_weights.masked_select(kept) / (1 - p), tol_);
  EXPECT_NEAR(kept.to(torch::kFloat64).mean().item<double>(), 1 - p, 0.08);
  const torch::Tensor applied = expected_weights.masked_fill(kept.logical_not(), 0) / (1 - p);
  EXPECT_CLOSE(dropped, applied.matmul(v.to(torch::kCPU, torch::kFloat64)), tol_);
}

TEST_P(Functional, EmptySequencesGiveEmptyOrZeroResults) {
  EXPECT_EQ(attn::scaled_dot_product_attention(randn({2, 0, 4}), randn({2, 3, 4}), randn({2, 3, 5})).sizes(),
            (std::vector<int64_t>{2, 0, 5}));
  EXPECT_EQ(attn::scaled_dot_product_attention(randn({0, 3, 4}), randn({0, 3, 4}), randn({0, 3, 5})).sizes(),
            (std::vector<int64_t>{0, 3, 5}));
  EXPECT_EQ(attn::scaled_dot_product_attention(randn({2, 0, 3, 4}), randn({2, 0, 3, 4}), randn({2, 0, 3, 5})).sizes(),
            (std::vector<int64_t>{2, 0, 3, 5}));  // no heads
  const torch::Tensor no_keys =
      attn::scaled_dot_product_attention(randn({2, 3, 4}), randn({2, 0, 4}), randn({2, 0, 5}));
  EXPECT_EQ(no_keys.sizes(), (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(no_keys.abs().sum().item<double>(), 0.0) << "attending to no key gives zeros";
}

TEST_P(Functional, StridedInputsGiveTheSameResults) {
  const torch::Tensor base = randn({3, 8, 6});
  const torch::Tensor q = base.transpose(1, 2);                       // [3, 6, 8], transposed
  const torch::Tensor k = randn({1, 8, 5}).expand({3, 8, 5}).transpose(1, 2);  // stride-0 batch
  const torch::Tensor v = randn({3, 5, 14}).slice(2, 0, 14, 2);       // every other column
  const torch::Tensor out = scaled_dot_product_attention(q, k, v, SdpaOptions().scale(0.2));
  EXPECT_CLOSE(out, std::get<0>(float64_attention(q, k, v, {}, 0.2)), tol_);
}

TEST_P(Functional, MasksCombineAndBroadcast) {
  const torch::Tensor q = randn({2, 3, 4, 8}), k = randn({2, 3, 6, 8}), v = randn({2, 3, 6, 8});
  torch::Tensor padding = torch::zeros({2, 1, 6}, torch::kBool);
  padding.index_put_({0, 0, 5}, true);
  torch::Tensor attend = torch::ones({4, 6}, torch::kBool);
  attend.index_put_({1, 2}, false);
  torch::Tensor additive = torch::zeros({1, 3, 1, 6}, torch::kFloat64);
  additive.index_put_({0, 1, 0, 3}, -INFINITY);
  const auto opts = SdpaOptions().masks(AttentionMasks().key_padding_mask(on_device(padding))
                                            .attend_mask(on_device(attend))
                                            .additive_mask(additive.to(options_)));
  const torch::Tensor allowed =
      attend.logical_and(padding.logical_not().unsqueeze(-2)).logical_and(additive.isneginf().logical_not());
  EXPECT_CLOSE(scaled_dot_product_attention(q, k, v, opts),
               std::get<0>(float64_attention(q, k, v, allowed, 1.0 / std::sqrt(8.0))), tol_);
}

INSTANTIATE_TEST_SUITE_P(Grid, Functional, ::testing::ValuesIn(device_dtype_grid()),
                         [](const auto& info) { return param_name(info.param); });

#if TORCH_VERSION_MAJOR >= 2
// LibTorch 2.x multiplies float16 on the CPU, so attn runs it there (1.x refuses it: test_errors.cpp), on the fused
// kernel in float32; held to the float64 definition with float16's tolerance, as the parity tests hold it on CUDA.
// test_variants.cpp holds every variant, forward and backward, to it.
TEST(Float16, RunsOnTheCpuOnTheFusedKernel) {
  torch::manual_seed(5);
  const torch::Tensor q = torch::randn({2, 5, 8}), k = torch::randn({2, 7, 8}), v = torch::randn({2, 7, 6});
  EXPECT_EQ(attn::resolved_backend(q.to(torch::kHalf), SdpaOptions()), Backend::Fused);
  const torch::Tensor out =
      attn::scaled_dot_product_attention(q.to(torch::kHalf), k.to(torch::kHalf), v.to(torch::kHalf));
  EXPECT_EQ(out.scalar_type(), torch::kHalf);
  EXPECT_CLOSE(out, std::get<0>(float64_attention(q, k, v, {}, 1.0 / std::sqrt(8.0))), 1e-2);
}
#endif

}  // namespace
}  // namespace attn::test
