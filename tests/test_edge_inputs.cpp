// Inputs that are legal but unusual get a defined result, on every backend: a table of cases, each computing
// attn's result and an independent expectation (a float64 computation, or the same attention on plain
// contiguous inputs). Empty batches and sequences, strided, transposed and stride-0 inputs, NaN and Inf,
// index arithmetic past 32 bits, and inputs that require grad under NoGradGuard.

#include "support.h"

#include <attn/ops/flash_attention.h>

#include <functional>
#include <limits>

namespace attn::test {
namespace {

struct EdgeCase {
  std::string name;
  /// Returns (attn's result, the expected result); NaN must sit in the same places in both.
  std::function<std::pair<torch::Tensor, torch::Tensor>(Backend)> run;
};

void PrintTo(const EdgeCase& c, std::ostream* os) { *os << c.name; }

torch::Tensor r(at::IntArrayRef shape) { return torch::randn(shape); }

torch::Tensor sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, Backend b,
                   SdpaOptions o = {}) {
  return scaled_dot_product_attention(q, k, v, o.backend(b));
}

/// Attention written out in float64 with every key allowed.
torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  return std::get<0>(float64_attention(q, k, v, torch::Tensor(), scale)).to(q.scalar_type());
}

std::vector<EdgeCase> edge_cases() {
  return {
      {"empty_batch",
       [](Backend b) {
         const torch::Tensor out = sdpa(r({0, 2, 5, 4}), r({0, 2, 7, 4}), r({0, 2, 7, 3}), b);
         return std::make_pair(out, torch::empty({0, 2, 5, 3}));
       }},
      {"empty_queries",
       [](Backend b) { return std::make_pair(sdpa(r({2, 0, 4}), r({2, 7, 4}), r({2, 7, 3}), b), torch::empty({2, 0, 3})); }},
      {"no_keys_gives_zeros",
       [](Backend b) { return std::make_pair(sdpa(r({2, 5, 4}), r({2, 0, 4}), r({2, 0, 3}), b), torch::zeros({2, 5, 3})); }},
      {"module_empty_batch",
       [](Backend b) {
         MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2).backend(b));
         const torch::Tensor x = r({0, 5, 8});
         return std::make_pair(mha(x, x, x), torch::empty({0, 5, 8}));
       }},
      {"transposed_inputs",
       [](Backend b) {
         const torch::Tensor q = r({2, 9, 3, 8}).transpose(1, 2), k = r({2, 11, 3, 8}).transpose(1, 2),
                             v = r({2, 11, 3, 5}).transpose(1, 2);
         return std::make_pair(sdpa(q, k, v, b), reference(q.contiguous(), k.contiguous(), v.contiguous()));
       }},
      {"stride0_expanded_keys",
       [](Backend b) {
         const torch::Tensor q = r({2, 3, 9, 8}), k = r({1, 1, 11, 8}).expand({2, 3, 11, 8}),
                             v = r({2, 3, 1, 5}).expand({2, 3, 11, 5});
         return std::make_pair(sdpa(q, k, v, b), reference(q, k.contiguous(), v.contiguous()));
       }},
      {"non_contiguous_last_dim",
       [](Backend b) {
         const torch::Tensor q = r({2, 9, 16}).slice(2, 0, 16, 2), k = r({2, 11, 16}).slice(2, 0, 16, 2),
                             v = r({2, 11, 10}).slice(2, 0, 10, 2);
         return std::make_pair(sdpa(q, k, v, b), reference(q.contiguous(), k.contiguous(), v.contiguous()));
       }},
      // A size-1 dimension may carry any stride, even one past 32 bits (BLAS's leading-dimension type).
      {"huge_stride_on_size_one_dim",
       [](Backend b) {
         const torch::Tensor storage = r({8});
         const torch::Tensor q = storage.as_strided({1, 1, 1, 8}, {1, 1, int64_t{1} << 40, 1});
         const torch::Tensor k = r({1, 1, 6, 8}), v = r({1, 1, 6, 4});
         return std::make_pair(sdpa(q, k, v, b), reference(q.contiguous(), k, v));
       }},
      // NaN in a query row: that row is NaN (as in any matrix product), the other rows are untouched.
      {"nan_in_one_query_row",
       [](Backend b) {
         torch::Tensor q = r({1, 1, 4, 8});
         const torch::Tensor k = r({1, 1, 6, 8}), v = r({1, 1, 6, 4});
         torch::Tensor expected = reference(q, k, v);
         q.index_put_({0, 0, 1, 3}, NAN);
         expected.index_put_({0, 0, 1}, NAN);
         return std::make_pair(sdpa(q, k, v, b), expected);
       }},
      // +Inf in a value at an allowed key reaches the rows that attend to it as +Inf (IEEE), nowhere else.
      {"inf_value_at_allowed_key",
       [](Backend b) {
         const torch::Tensor q = r({1, 1, 4, 8}), k = r({1, 1, 6, 8});
         torch::Tensor v = r({1, 1, 6, 4});
         torch::Tensor expected = reference(q, k, v);
         v.index_put_({0, 0, 2, 1}, INFINITY);
         expected.index_put_({0, 0, torch::indexing::Slice(), 1}, INFINITY);
         return std::make_pair(sdpa(q, k, v, b), expected);
       }},
      // NaN at a padded key and value: it never reaches the output.
      {"nan_at_padded_key",
       [](Backend b) {
         torch::Tensor k = r({1, 1, 6, 8}), v = r({1, 1, 6, 4});
         const torch::Tensor q = r({1, 1, 4, 8});
         const torch::Tensor expected = reference(q, k.slice(2, 0, 5), v.slice(2, 0, 5));
         k.index_put_({0, 0, 5}, NAN);
         v.index_put_({0, 0, 5}, NAN);
         torch::Tensor pad = torch::zeros({1, 1, 6}, torch::kBool);
         pad.index_put_({0, 0, 5}, true);
         return std::make_pair(sdpa(q, k, v, b, SdpaOptions().masks(AttentionMasks().key_padding_mask(pad))), expected);
       }},
      // The same NaN, and a NaN key that the causal mask blocks for every query, kept out of the gradients: dq,
      // dk and dv equal the float64 gradients over the other keys, and the blocked keys get zero gradients.
      {"nan_at_blocked_keys_gradients",
       [](Backend b) {
         const torch::Tensor q0 = r({1, 2, 4, 8}), k0 = r({1, 2, 7, 8}), v0 = r({1, 2, 7, 4}), grad = r({1, 2, 4, 4});
         // Keys 0..4 are real, key 5 is padding, key 6 lies past every query's diagonal (top-left: j <= i).
         const auto real = torch::indexing::Slice(0, 5);
         const torch::Tensor q64 = q0.to(torch::kDouble).requires_grad_();
         const auto real_keys = [&](const torch::Tensor& t) {
           return t.index({"...", real, torch::indexing::Slice()}).to(torch::kDouble).requires_grad_();
         };
         const torch::Tensor k64 = real_keys(k0), v64 = real_keys(v0);
         const torch::Tensor allowed = torch::ones({4, 5}, torch::kBool).tril();
         const torch::Tensor s64 = torch::matmul(q64, k64.transpose(-2, -1)) / std::sqrt(8.0);
         const torch::Tensor p64 = torch::softmax(s64.masked_fill(allowed.logical_not(), -INFINITY), -1);
         torch::matmul(p64, v64).backward(grad.to(torch::kDouble));

         torch::Tensor k = k0.clone(), v = v0.clone();
         for (int64_t j : {5, 6}) k.index_put_({0, torch::indexing::Slice(), j, 2}, NAN);
         v.index_put_({0, torch::indexing::Slice(), 5, 1}, NAN);
         k.requires_grad_(), v.requires_grad_();
         const torch::Tensor q = q0.clone().requires_grad_();
         torch::Tensor pad = torch::zeros({1, 1, 7}, torch::kBool);
         pad.index_put_({0, 0, 5}, true);
         const SdpaOptions o = SdpaOptions()
                                   .masks(AttentionMasks().key_padding_mask(pad))
                                   .causal(true)
                                   .causal_alignment(CausalAlignment::TopLeft);
         sdpa(q, k, v, b, o).backward(grad);
         const auto padded = [](const torch::Tensor& g) {  // the float64 key gradients, zero for keys 5 and 6
           return torch::cat({g, torch::zeros({1, 2, 2, g.size(-1)}, g.options())}, 2);
         };
         const torch::Tensor actual = torch::cat({q.grad().flatten(), k.grad().flatten(), v.grad().flatten()});
         const torch::Tensor expected =
             torch::cat({q64.grad().flatten(), padded(k64.grad()).flatten(), padded(v64.grad()).flatten()});
         return std::make_pair(actual, expected.to(torch::kFloat));
       }},
      // A learned additive mask and learned ALiBi slopes under NoGradGuard: constants there, as for inference.
      {"learned_bias_and_slopes_under_no_grad",
       [](Backend b) {
         const torch::Tensor q = r({1, 2, 5, 8}), k = r({1, 2, 6, 8}), v = r({1, 2, 6, 4});
         const torch::Tensor bias = r({5, 6}).requires_grad_(), slopes = torch::rand({2}).requires_grad_();
         torch::NoGradGuard no_grad;
         const torch::Tensor out =
             sdpa(q, k, v, b, SdpaOptions().masks(AttentionMasks().additive_mask(bias)).alibi_slopes(slopes));
         EXPECT_FALSE(out.requires_grad());
         // float64: s = q·k / sqrt(8) + bias - slope_h · |i + (Tk - Tq) - j| (bottom-right), softmax, · v.
         const torch::Tensor i = torch::arange(5, torch::kDouble).view({5, 1}) + 1;
         const torch::Tensor j = torch::arange(6, torch::kDouble);
         const torch::Tensor distance = (i - j).abs();
         const torch::Tensor s = torch::matmul(q.to(torch::kDouble), k.to(torch::kDouble).transpose(-2, -1)) /
                                     std::sqrt(8.0) +
                                 bias.to(torch::kDouble) - slopes.to(torch::kDouble).view({2, 1, 1}) * distance;
         return std::make_pair(out, torch::matmul(torch::softmax(s, -1), v.to(torch::kDouble)).to(torch::kFloat));
       }},
      // Requires-grad inputs under NoGradGuard: a plain result that records no graph.
      {"requires_grad_under_no_grad",
       [](Backend b) {
         const torch::Tensor q = r({2, 5, 8}).requires_grad_(), k = r({2, 7, 8}).requires_grad_(),
                             v = r({2, 7, 4}).requires_grad_();
         torch::NoGradGuard no_grad;
         const torch::Tensor out = sdpa(q, k, v, b);
         EXPECT_FALSE(out.requires_grad());
         return std::make_pair(out, reference(q.detach(), k.detach(), v.detach()));
       }},
  };
}

class EdgeInputs : public ::testing::TestWithParam<std::tuple<EdgeCase, Backend>> {};

TEST_P(EdgeInputs, DefinedResult) {
  const auto& [c, backend] = GetParam();
  torch::manual_seed(12);
  const auto [actual, expected] = c.run(backend);
  ASSERT_EQ(actual.sizes(), expected.sizes());
  if (actual.numel() > 0) EXPECT_CLOSE(actual, expected, tolerance(torch::kFloat32));
}

std::string edge_name(const ::testing::TestParamInfo<std::tuple<EdgeCase, Backend>>& info) {
  const Backend b = std::get<1>(info.param);
  return std::get<0>(info.param).name + (b == Backend::Fused ? "_fused" : b == Backend::Math ? "_math" : "_torch");
}

// Backend::Torch follows LibTorch for non-finite inputs (documented), so it runs the finite cases only.
INSTANTIATE_TEST_SUITE_P(Table, EdgeInputs,
                         ::testing::Combine(::testing::ValuesIn(edge_cases()),
                                            ::testing::Values(Backend::Math, Backend::Fused)),
                         edge_name);

// Index arithmetic past 32 bits: Tq·Tk = 2.5e9 score positions (more than INT32_MAX) in the fused kernel,
// with a padding mask and causal masking indexed across the whole range. Checked on a few rows against
// float64 attention over the same keys.
TEST(EdgeInputsLarge, ScorePositionsPast32Bits) {
  torch::manual_seed(13);
  const int64_t t = 50000, d = 8;
  const torch::Tensor q = r({1, 1, t, d}), k = r({1, 1, t, d}), v = r({1, 1, t, 4});
  torch::Tensor pad = torch::zeros({1, 1, t}, torch::kBool);
  pad.index_put_({0, 0, torch::indexing::Slice(t - 100, t)}, true);  // the last 100 keys are padding
  const torch::Tensor out = scaled_dot_product_attention(
      q, k, v, SdpaOptions().masks(AttentionMasks().key_padding_mask(pad)).causal(true).backend(Backend::Fused));
  for (const int64_t row : {int64_t{0}, int64_t{31337}, t - 1}) {
    SCOPED_TRACE(row);
    const int64_t keys = std::min(row + 1, t - 100);  // causal limit, then the padding
    const torch::Tensor expected =
        reference(q.slice(2, row, row + 1), k.slice(2, 0, keys), v.slice(2, 0, keys));
    EXPECT_CLOSE(out.slice(2, row, row + 1), expected, tolerance(torch::kFloat32));
  }
}

}  // namespace
}  // namespace attn::test
