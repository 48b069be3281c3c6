// The modules as torch::nn::Modules: printing, parameters, options, cloning, dtype/device moves, dropout
// in train vs eval mode, and the notebook-001 form (concatenated heads, no output projection).

#include "support.h"

#include <sstream>

namespace attn::test {
namespace {

template <typename Module>
std::string printed(const Module& m) {
  std::ostringstream s;
  s << *m;
  return s.str();
}

std::vector<std::string> names(const torch::OrderedDict<std::string, torch::Tensor>& params) {
  return params.keys();
}

TEST(Modules, PrettyPrintShowsTheOptions) {
  // The options come first; the submodules follow on their own lines, as torch::nn containers print them.
  const auto first_line = [](const std::string& s) { return s.substr(0, s.find('\n')); };
  EXPECT_EQ(first_line(printed(AttentionHead(AttentionHeadOptions(16, 24).d_v(28).causal(true)))),
            "attn::AttentionHead(d_in=16, d_k=24, d_v=28, bias=false, causal=true, dropout=0)(");
  const std::string mha = printed(MultiHeadAttention(MultiHeadAttentionOptions(512, 8).kdim(256).dropout(0.1)));
  EXPECT_EQ(first_line(mha),
            "attn::MultiHeadAttention(embed_dim=512, num_heads=8, head_dim=64, kdim=256, vdim=512, bias=true, "
            "output_projection=true, causal=false, dropout=0.1)(");
  EXPECT_NE(mha.find("(out_proj): torch::nn::Linear(in_features=512, out_features=512, bias=true)"), std::string::npos);
  EXPECT_EQ(first_line(printed(CrossAttention(CrossAttentionOptions(16, 10, 8).num_heads(2)))),
            "attn::CrossAttention(d_query_in=16, d_context_in=10, d_k=8, d_v=8, num_heads=2, bias=false, causal=false, "
            "dropout=0)(");
  // Every module prints the shared attention settings the same way, the non-default ones included.
  EXPECT_EQ(first_line(printed(CrossAttention(CrossAttentionOptions(16, 10, 8)
                                                  .causal(true)
                                                  .causal_alignment(CausalAlignment::TopLeft)
                                                  .scale(0.5)
                                                  .backend(Backend::Math)))),
            "attn::CrossAttention(d_query_in=16, d_context_in=10, d_k=8, d_v=8, num_heads=1, bias=false, causal=true, "
            "causal_alignment=top_left, scale=0.5, dropout=0, backend=math)(");
}

TEST(Modules, ParametersAreNamedShapedAndOrderedLikePyTorch) {
  MultiHeadAttention mha(MultiHeadAttentionOptions(12, 3).kdim(5).vdim(7));
  EXPECT_EQ(names(mha->named_parameters()),
            (std::vector<std::string>{"q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias", "v_proj.weight",
                                      "v_proj.bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(mha->k_proj->weight.sizes(), (std::vector<int64_t>{12, 5}));
  EXPECT_EQ(mha->v_proj->weight.sizes(), (std::vector<int64_t>{12, 7}));
  EXPECT_EQ(mha->head_dim(), 4);

  AttentionHead head(AttentionHeadOptions(16, 24).d_v(28));
  EXPECT_EQ(names(head->named_parameters()), (std::vector<std::string>{"q_proj.weight", "k_proj.weight", "v_proj.weight"}));
  EXPECT_EQ(head->v_proj->weight.sizes(), (std::vector<int64_t>{28, 16}));

  CrossAttention cross(CrossAttentionOptions(16, 10, 8).d_v(6).num_heads(3).bias(true));
  EXPECT_EQ(cross->k_proj->weight.sizes(), (std::vector<int64_t>{24, 10}));
  EXPECT_EQ(cross->v_proj->weight.sizes(), (std::vector<int64_t>{18, 10}));
  EXPECT_EQ(cross->named_parameters().size(), 6u);
}

TEST(Modules, OutputShapes) {
  const torch::Tensor x = torch::randn({2, 5, 12}), ctx = torch::randn({2, 9, 7});
  EXPECT_EQ(MultiHeadAttention(12, 3)->forward(x, x, x).sizes(), (std::vector<int64_t>{2, 5, 12}));
  MultiHeadAttention concat(MultiHeadAttentionOptions(12, 2).head_dim(12).output_projection(false));
  EXPECT_TRUE(concat->out_proj.is_empty());
  EXPECT_EQ(concat->forward(x, x, x).sizes(), (std::vector<int64_t>{2, 5, 24})) << "heads concatenated";
  MultiHeadAttention mha(MultiHeadAttentionOptions(12, 3).kdim(7).vdim(7));
  auto [out, per_head] = mha->forward_with_weights(x, ctx, ctx, {}, HeadWeights::PerHead);
  EXPECT_EQ(per_head.sizes(), (std::vector<int64_t>{2, 3, 5, 9}));
  EXPECT_EQ(std::get<1>(mha->forward_with_weights(x[0], ctx[0], ctx[0])).sizes(), (std::vector<int64_t>{5, 9}));
  CrossAttention cross(CrossAttentionOptions(12, 7, 4).d_v(3).num_heads(2));
  EXPECT_EQ(cross->forward(x, ctx).sizes(), (std::vector<int64_t>{2, 5, 6}));
  EXPECT_EQ(cross->forward(x[1], ctx[1]).sizes(), (std::vector<int64_t>{5, 6}));
  AttentionHead head(AttentionHeadOptions(12, 4).d_v(3));
  EXPECT_EQ(head->forward(x).sizes(), (std::vector<int64_t>{2, 5, 3}));
  EXPECT_EQ(std::get<1>(head->forward_with_weights(x, x, x)).sizes(), (std::vector<int64_t>{2, 5, 5}));
}

TEST(Modules, PaddingIsTheSameAsLeavingTheKeysOut) {
  // Padded keys must act as if they were not there, whatever the mask's memory layout (here transposed).
  torch::manual_seed(6);
  MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2).kdim(5).vdim(3));
  mha->to(torch::kFloat64);
  const torch::Tensor q = torch::randn({2, 4, 8}, torch::kFloat64), k = torch::randn({2, 6, 5}, torch::kFloat64),
                      v = torch::randn({2, 6, 3}, torch::kFloat64);
  torch::Tensor pad_t = torch::zeros({6, 2}, torch::kBool);
  pad_t.slice(0, 4) = true;  // the last two keys of both sequences are padding
  const torch::Tensor pad = pad_t.t();
  ASSERT_FALSE(pad.is_contiguous());
  auto [out, weights] = mha->forward_with_weights(q, k, v, AttentionMasks().key_padding_mask(pad));
  auto [short_out, short_weights] = mha->forward_with_weights(q, k.slice(1, 0, 4), v.slice(1, 0, 4));
  EXPECT_CLOSE(out, short_out, 1e-12);
  EXPECT_CLOSE(weights.slice(-1, 0, 4), short_weights, 1e-12);
  EXPECT_EQ(weights.slice(-1, 4).abs().max().item<double>(), 0.0);
}

TEST(Modules, EmptyBatchesAndSequences) {
  MultiHeadAttention mha(MultiHeadAttentionOptions(12, 3).bias(false));
  const torch::Tensor x = torch::randn({2, 5, 12});
  EXPECT_EQ(mha->forward(torch::randn({0, 5, 12}), torch::randn({0, 5, 12}), torch::randn({0, 5, 12})).sizes(),
            (std::vector<int64_t>{0, 5, 12}));
  EXPECT_EQ(mha->forward(torch::randn({2, 0, 12}), x, x).sizes(), (std::vector<int64_t>{2, 0, 12}));
  // No keys at all: every query attends to nothing, so the output is exactly zero (no bias here).
  const torch::Tensor none = torch::randn({2, 0, 12});
  const torch::Tensor out = mha->forward(x, none, none);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 5, 12}));
  EXPECT_EQ(out.abs().max().item<double>(), 0.0);
  CrossAttention cross(6, 4, 3);
  EXPECT_EQ(cross->forward(torch::randn({0, 2, 6}), torch::randn({0, 3, 4})).sizes(), (std::vector<int64_t>{0, 2, 3}));
}

TEST(Modules, DropoutIsOffInEvalMode) {
  torch::manual_seed(5);
  MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2).dropout(0.5));
  const torch::Tensor x = torch::randn({2, 6, 8});
  mha->eval();
  auto [out, weights] = mha->forward_with_weights(x, x, x, {}, HeadWeights::PerHead);
  // No dropout: every row of weights sums to 1.
  EXPECT_CLOSE(weights.sum(-1), torch::ones({2, 2, 6}), 1e-5);
  mha->train();
  auto [train_out, train_weights] = mha->forward_with_weights(x, x, x, {}, HeadWeights::PerHead);
  EXPECT_GT((train_weights == 0).sum().item<int64_t>(), 0) << "training mode drops weights";
  EXPECT_FALSE(torch::allclose(train_out, out));
}

TEST(Modules, CausalAlignmentOption) {
  // Two new queries against four keys: bottom-right (default) lets query i see keys j <= i + 2, top-left j <= i.
  torch::manual_seed(4);
  const torch::Tensor q = torch::randn({1, 2, 8}), kv = torch::randn({1, 4, 8});
  MultiHeadAttention bottom_right(MultiHeadAttentionOptions(8, 2).causal(true));
  MultiHeadAttention top_left(MultiHeadAttentionOptions(8, 2).causal(true).causal_alignment(CausalAlignment::TopLeft));
  const torch::Tensor br = std::get<1>(bottom_right->forward_with_weights(q, kv, kv, {}, HeadWeights::PerHead));
  const torch::Tensor tl = std::get<1>(top_left->forward_with_weights(q, kv, kv, {}, HeadWeights::PerHead));
  EXPECT_TRUE(torch::equal(br.ne(0)[0][0], torch::tensor({{1, 1, 1, 0}, {1, 1, 1, 1}}).to(torch::kBool)));
  EXPECT_TRUE(torch::equal(tl.ne(0)[0][1], torch::tensor({{1, 0, 0, 0}, {1, 1, 0, 0}}).to(torch::kBool)));
  EXPECT_NE(printed(top_left).find("causal=true, causal_alignment=top_left"), std::string::npos);

  AttentionHead head(AttentionHeadOptions(8, 4).causal(true).causal_alignment(CausalAlignment::TopLeft));
  const torch::Tensor w = std::get<1>(head->forward_with_weights(q, kv, kv));
  EXPECT_TRUE(torch::equal(w.ne(0)[0], torch::tensor({{1, 0, 0, 0}, {1, 1, 0, 0}}).to(torch::kBool)));
}

TEST(Modules, OptionsHoldOneAttentionOptions) {
  // The shared settings chain with the module's own setters, and travel as one struct.
  const auto options = MultiHeadAttentionOptions(8, 2).causal(true).bias(false).dropout(0.25).backend(Backend::Math);
  EXPECT_TRUE(options.attention().causal());
  EXPECT_EQ(options.attention().dropout(), 0.25);
  EXPECT_EQ(options.attention().backend(), Backend::Math);
  EXPECT_FALSE(options.bias());
  const auto cross = CrossAttentionOptions(4, 4, 2).attention(options.attention()).num_heads(2);
  EXPECT_TRUE(cross.causal());
  EXPECT_EQ(cross.backend(), Backend::Math);
  EXPECT_EQ(cross.num_heads(), 2);
  EXPECT_STREQ(to_string(Backend::Auto), "Auto");
  EXPECT_STREQ(to_string(Backend::Fused), "Fused");
}

TEST(Modules, CrossAttentionTakesTheSharedAttentionSettings) {
  // causal, its alignment and scale reach CrossAttention's attention: checked against attention written out in
  // float64 from its definition, on q, k and v projected by hand from the module's weights.
  torch::manual_seed(8);
  const int64_t batch = 2, tq = 3, tc = 5, heads = 2, d_k = 4, d_v = 3;
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor x = torch::randn({batch, tq, 6}, f64), context = torch::randn({batch, tc, 7}, f64);
  for (CausalAlignment alignment : {CausalAlignment::BottomRight, CausalAlignment::TopLeft}) {
    CrossAttention cross(CrossAttentionOptions(6, 7, d_k).d_v(d_v).num_heads(heads).bias(true).causal(true)
                             .causal_alignment(alignment).scale(0.4));
    cross->to(torch::kFloat64);
    const auto split = [&](const torch::Tensor& t, int64_t d) { return t.view({batch, -1, heads, d}).transpose(1, 2); };
    const torch::Tensor q = split(torch::addmm(cross->q_proj->bias, x.reshape({-1, 6}), cross->q_proj->weight.t()), d_k);
    const torch::Tensor k =
        split(torch::addmm(cross->k_proj->bias, context.reshape({-1, 7}), cross->k_proj->weight.t()), d_k);
    const torch::Tensor v =
        split(torch::addmm(cross->v_proj->bias, context.reshape({-1, 7}), cross->v_proj->weight.t()), d_v);
    const int64_t offset = alignment == CausalAlignment::BottomRight ? tc - tq : 0;
    torch::Tensor allowed = torch::zeros({tq, tc}, torch::kBool);
    for (int64_t i = 0; i < tq; ++i) {
      for (int64_t j = 0; j < tc; ++j) allowed[i][j] = j <= i + offset;
    }
    const torch::Tensor expected =
        std::get<0>(float64_attention(q, k, v, allowed, 0.4)).transpose(1, 2).reshape({batch, tq, heads * d_v});
    EXPECT_CLOSE(cross->forward(x, context), expected, tolerance(torch::kFloat64));
  }
  EXPECT_ERROR_CONTAINS(CrossAttention(CrossAttentionOptions(6, 7, 4).scale(INFINITY)),
                        "attn::CrossAttention: scale must be finite, got inf");
}

TEST(Modules, CloneIsADeepCopy) {
  MultiHeadAttention mha(8, 2);
  auto copy = std::dynamic_pointer_cast<MultiHeadAttentionImpl>(mha->clone());
  ASSERT_TRUE(copy);
  EXPECT_TRUE(torch::equal(copy->q_proj->weight, mha->q_proj->weight));
  {
    torch::NoGradGuard no_grad;
    copy->q_proj->weight.add_(1);
  }
  EXPECT_FALSE(torch::equal(copy->q_proj->weight, mha->q_proj->weight));
  EXPECT_EQ(copy->options.num_heads(), 2);
}

// LibTorch registers each parameter once, so reset() builds a module once; changing the heads a module's weights
// are laid out for is refused at the next call, not split into other heads without an error.
TEST(Modules, ResetRunsOnceAndChangedHeadsAreRefused) {
  AttentionHead head(AttentionHeadOptions(8, 4));
  MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2).sinks(true));
  CrossAttention cross(CrossAttentionOptions(8, 6, 4).num_heads(2));
  const torch::Tensor before = mha->q_proj->weight.clone();
  EXPECT_ERROR_CONTAINS(head->reset(), "attn::AttentionHead: reset() builds the module once");
  EXPECT_ERROR_CONTAINS(mha->reset(), "attn::MultiHeadAttention: reset() builds the module once");
  EXPECT_ERROR_CONTAINS(cross->reset(), "attn::CrossAttention: reset() builds the module once");
  EXPECT_TRUE(torch::equal(mha->q_proj->weight, before));
  // clone() builds its copy with reset() and still works.
  auto copy = std::dynamic_pointer_cast<MultiHeadAttentionImpl>(mha->clone());
  ASSERT_TRUE(copy);
  EXPECT_TRUE(torch::equal(copy->q_proj->weight, before));

  const torch::Tensor x = torch::randn({1, 3, 8}), context = torch::randn({1, 5, 6});
  mha->options.num_heads(4);  // the same 8 rows of q_proj would become 4 heads of 2
  EXPECT_ERROR_CONTAINS(mha->forward(x, x, x), "options.num_heads is 4 but the module was built with 2");
  mha->options.num_heads(2).num_kv_heads(1);
  EXPECT_ERROR_CONTAINS(mha->forward(x, x, x), "options.num_kv_heads is 1 but the module was built with 2");
  mha->options.num_kv_heads(std::nullopt);
  EXPECT_EQ(mha->forward(x, x, x).sizes(), x.sizes());  // as built again
  cross->options.num_heads(1).d_k(8).d_v(8);
  EXPECT_ERROR_CONTAINS(cross->forward(x, context), "options.num_heads is 1 but the module was built with 2");
}

TEST(Modules, ConvertToFloat64) {
  torch::manual_seed(9);
  MultiHeadAttention mha(8, 2);
  const torch::Tensor x = torch::randn({1, 4, 8}, torch::kFloat64);
  mha->to(torch::kFloat64);
  EXPECT_EQ(mha->forward(x, x, x).scalar_type(), torch::kFloat64);
}

}  // namespace
}  // namespace attn::test
