// Gradient checks in float64: autograd's gradients of the functional core and of every module (inputs and
// parameters) against central finite differences.

#include "support.h"

#include <functional>

namespace attn::test {
namespace {

torch::Tensor leaf(at::IntArrayRef shape) { return torch::randn(shape, torch::kFloat64).requires_grad_(true); }

template <typename Module>
std::vector<torch::Tensor> with_parameters(Module& m, std::vector<torch::Tensor> inputs) {
  for (auto& p : m->parameters()) inputs.push_back(p);
  return inputs;
}

TEST(GradCheck, FunctionalWithEveryMaskKind) {
  torch::manual_seed(11);
  const torch::Tensor q = leaf({2, 2, 4, 3}), k = leaf({2, 2, 5, 3}), v = leaf({2, 2, 5, 2});
  torch::Tensor padding = torch::zeros({2, 1, 5}, torch::kBool);
  padding.index_put_({0, 0, 4}, true);
  torch::Tensor attend = torch::ones({4, 5}, torch::kBool);
  attend.index_put_({1, 0}, false);
  attend[3] = false;  // a fully masked row: its gradient must be exactly zero, not NaN
  const torch::Tensor additive = torch::randn({4, 5}, torch::kFloat64);
  const auto masks = AttentionMasks().key_padding_mask(padding).attend_mask(attend).additive_mask(additive);
  expect_gradients_match_finite_differences([&] { return scaled_dot_product_attention(q, k, v, SdpaOptions().masks(masks)); }, {q, k, v},
                         "masks");
  expect_gradients_match_finite_differences([&] { return scaled_dot_product_attention(q, k, v, SdpaOptions().causal(true).scale(0.7)); },
                         {q, k, v}, "causal, Tq < Tk, scale");
}

// Grouped-query attention: each shared K/V head's gradient gathers its whole group, on the math path and
// through the fused kernel's backward.
TEST(GradCheck, GroupedQueryAttention) {
  torch::manual_seed(12);
  const torch::Tensor q = leaf({1, 4, 3, 3}), k = leaf({1, 2, 5, 3}), v = leaf({1, 2, 5, 2});
  for (Backend backend : {Backend::Math, Backend::Fused}) {
    expect_gradients_match_finite_differences(
        [&] { return scaled_dot_product_attention(q, k, v, SdpaOptions().causal(true).backend(backend)); }, {q, k, v},
        std::string("grouped, causal, ") + to_string(backend));
  }
}

TEST(GradCheck, AttentionHead) {
  torch::manual_seed(12);
  AttentionHead head(AttentionHeadOptions(4, 3).d_v(5).bias(true).causal(true));
  head->to(torch::kFloat64);
  const torch::Tensor x = leaf({2, 4, 4});
  expect_gradients_match_finite_differences([&] { return head->forward(x); }, with_parameters(head, {x}), "self-attention");
}

TEST(GradCheck, MultiHeadAttention) {
  torch::manual_seed(13);
  MultiHeadAttention mha(MultiHeadAttentionOptions(6, 2).kdim(4).vdim(5));
  mha->to(torch::kFloat64);
  const torch::Tensor query = leaf({2, 3, 6}), key = leaf({2, 4, 4}), value = leaf({2, 4, 5});
  torch::Tensor padding = torch::zeros({2, 4}, torch::kBool);
  padding.index_put_({1, 3}, true);
  const auto masks = AttentionMasks().key_padding_mask(padding);
  expect_gradients_match_finite_differences([&] { return mha->forward(query, key, value, masks); },
                         with_parameters(mha, {query, key, value}), "kdim/vdim, key padding");
}

TEST(GradCheck, CrossAttention) {
  torch::manual_seed(14);
  CrossAttention cross(CrossAttentionOptions(5, 3, 2).d_v(4).num_heads(2));
  cross->to(torch::kFloat64);
  const torch::Tensor x = leaf({2, 3, 5}), context = leaf({2, 6, 3});
  torch::Tensor padding = torch::zeros({2, 6}, torch::kBool);
  padding[1] = true;  // batch 1 has no context at all
  expect_gradients_match_finite_differences([&] { return cross->forward(x, context, AttentionMasks().key_padding_mask(padding)); },
                         with_parameters(cross, {x, context}), "context padding");
}

}  // namespace
}  // namespace attn::test
