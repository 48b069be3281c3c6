// Parity with references computed by PyTorch (tests/reference/make_references.py): outputs, attention
// weights and input gradients, for every case on every {device x dtype}.

#include "support.h"

#include <tuple>

namespace attn::test {
namespace {

using CaseParam = std::tuple<std::string, DeviceDtype>;

std::string case_param_name(const ::testing::TestParamInfo<CaseParam>& info) {
  return std::get<0>(info.param) + "_" + param_name(std::get<1>(info.param));
}

class ReferenceParity : public ::testing::TestWithParam<CaseParam> {
 protected:
  void SetUp() override {
    const auto& p = std::get<1>(GetParam());
    if (skip_without(p.device)) GTEST_SKIP() << "CUDA is not available: skipping " << param_name(p);
    ref_ = std::make_unique<ReferenceCase>(std::get<0>(GetParam()));
    options_ = torch::TensorOptions().dtype(p.dtype).device(p.device);
    // Half and bfloat16 have no PyTorch reference of their own: they are held to the float64 one.
    suffix_ = p.dtype == torch::kFloat32 ? "_float32" : "_float64";
    tol_ = tolerance(p.dtype);
  }
  const ReferenceCase& ref() const { return *ref_; }
  torch::Tensor input(const std::string& key) const { return ref_->tensor(key, options_).requires_grad_(true); }
  torch::Tensor expected(const std::string& key) const { return ref_->tensor(key + suffix_); }
  torch::Tensor cotangent() const { return ref_->tensor("cotangent", options_); }
  bool has_expected(const std::string& key) const { return ref_->has(key + suffix_); }

  std::unique_ptr<ReferenceCase> ref_;
  torch::TensorOptions options_;
  std::string suffix_;
  double tol_ = 0;
};

// The parity suites are registered from the manifest: if it went missing or short they would silently
// shrink, so the set of cases is checked too.
TEST(ReferenceCases, EveryKindIsGenerated) {
  EXPECT_GE(reference_cases("sdpa_").size(), 15u);
  EXPECT_GE(reference_cases("mha_").size(), 10u);
  EXPECT_GE(reference_cases("head_").size(), 4u);
  EXPECT_GE(reference_cases("cross_").size(), 3u);
  for (const char* nb : {"nb000", "nb001_self", "nb001_masked", "nb001_mha", "nb003", "nb003_masked", "nb004_self",
                         "nb004_mhsa"}) {
    EXPECT_EQ(reference_cases(nb).empty(), false) << nb;
  }
}

// ---- functional: attn::scaled_dot_product_attention vs F.scaled_dot_product_attention / explicit formula
class SdpaParity : public ReferenceParity {};

TEST_P(SdpaParity, OutputWeightsAndGradients) {
  const torch::Tensor q = input("q"), k = input("k"), v = input("v");
  AttentionMasks masks;
  masks.key_padding_mask(ref().maybe("key_padding_mask", options_))
      .attend_mask(ref().maybe("attend_mask", options_))
      .additive_mask(ref().maybe("additive_mask", options_));
  SdpaOptions opts;
  opts.masks(masks).causal(ref().boolean("causal"));
  opts.causal_alignment(ref().text("alignment") == "top_left" ? CausalAlignment::TopLeft
                                                              : CausalAlignment::BottomRight);
  if (ref().has("scale")) opts.scale(ref().real("scale"));

  auto [out, weights] = scaled_dot_product_attention_with_weights(q, k, v, opts);
  EXPECT_CLOSE(out, expected("out"), tol_) << "source: " << ref().text("source");
  EXPECT_CLOSE(weights, expected("weights"), tol_);
  EXPECT_CLOSE(scaled_dot_product_attention(q, k, v, opts), expected("out"), tol_) << "without weights";

  if (has_expected("grad_q")) {
    (out * cotangent()).sum().backward();
    EXPECT_CLOSE(q.grad(), expected("grad_q"), tol_);
    EXPECT_CLOSE(k.grad(), expected("grad_k"), tol_);
    EXPECT_CLOSE(v.grad(), expected("grad_v"), tol_);
  }
}

INSTANTIATE_TEST_SUITE_P(PyTorch, SdpaParity,
                         ::testing::Combine(::testing::ValuesIn(reference_cases("sdpa_")),
                                            ::testing::ValuesIn(device_dtype_grid())),
                         case_param_name);

// ---- attn::MultiHeadAttention vs torch.nn.MultiheadAttention(batch_first=True) with the same weights
class MhaParity : public ReferenceParity {};

TEST_P(MhaParity, OutputWeightsAndGradients) {
  const int64_t heads = ref().integer("num_heads");
  MultiHeadAttention mha(MultiHeadAttentionOptions(ref().integer("embed_dim"), heads)
                             .bias(ref().boolean("bias"))
                             .kdim(ref().integer("kdim"))
                             .vdim(ref().integer("vdim"))
                             .causal(ref().boolean("causal")));
  mha->to(options_.device(), options_.dtype().toScalarType());
  const auto param = [&](const char* key) { return ref().maybe(key, options_); };
  load_linear(mha->q_proj, param("w_q"), param("b_q"));
  load_linear(mha->k_proj, param("w_k"), param("b_k"));
  load_linear(mha->v_proj, param("w_v"), param("b_v"));
  load_linear(mha->out_proj, param("w_o"), param("b_o"));

  const torch::Tensor query = input("query"), key = input("key"), value = input("value");
  // PyTorch's conventions, translated as the README documents: key_padding_mask is the same (true =
  // padding); a bool attn_mask means true = blocked, so it becomes attend_mask(!mask); a float attn_mask is
  // additive; a 3-D [B*H, Tq, Tk] mask is viewed as [B, H, Tq, Tk].
  AttentionMasks masks;
  masks.key_padding_mask(ref().maybe("torch_key_padding_mask", options_));
  if (ref().has("torch_attn_mask")) {
    torch::Tensor m = ref().tensor("torch_attn_mask", options_);
    if (m.dim() == 3) m = m.view({-1, heads, m.size(-2), m.size(-1)});
    if (m.scalar_type() == torch::kBool) {
      masks.attend_mask(m.logical_not());
    } else {
      masks.additive_mask(m);
    }
  }

  auto [out, averaged] = mha->forward_with_weights(query, key, value, masks, HeadWeights::Averaged);
  EXPECT_CLOSE(out, expected("out"), tol_);
  EXPECT_CLOSE(averaged, expected("weights_avg"), tol_);
  EXPECT_CLOSE(std::get<1>(mha->forward_with_weights(query, key, value, masks, HeadWeights::PerHead)),
               expected("weights_per_head"), tol_);
  EXPECT_CLOSE(mha->forward(query, key, value, masks), expected("out"), tol_) << "without weights";

  (out * cotangent()).sum().backward();
  EXPECT_CLOSE(query.grad(), expected("grad_query"), tol_);
  EXPECT_CLOSE(key.grad(), expected("grad_key"), tol_);
  EXPECT_CLOSE(value.grad(), expected("grad_value"), tol_);
}

INSTANTIATE_TEST_SUITE_P(PyTorch, MhaParity,
                         ::testing::Combine(::testing::ValuesIn(reference_cases("mha_")),
                                            ::testing::ValuesIn(device_dtype_grid())),
                         case_param_name);

// ---- attn::AttentionHead and attn::CrossAttention vs explicit PyTorch projections + attention
class ProjectedParity : public ReferenceParity {
 protected:
  template <typename Module>
  void load(Module& m) {
    const auto param = [&](const char* key) { return ref().maybe(key, options_); };
    m->to(options_.device(), options_.dtype().toScalarType());
    load_linear(m->q_proj, param("w_q"), param("b_q"));
    load_linear(m->k_proj, param("w_k"), param("b_k"));
    load_linear(m->v_proj, param("w_v"), param("b_v"));
  }
  AttentionMasks masks() const {
    return AttentionMasks().key_padding_mask(ref().maybe("key_padding_mask", options_));
  }
  void check_gradients(const torch::Tensor& out, const torch::Tensor& x, const torch::Tensor& context) {
    (out * cotangent()).sum().backward();
    if (ref().boolean("self_attention")) {  // x fed queries, keys and values: its gradient is the sum
      EXPECT_CLOSE(x.grad(), expected("grad_x") + expected("grad_context"), tol_);
    } else {
      EXPECT_CLOSE(x.grad(), expected("grad_x"), tol_);
      EXPECT_CLOSE(context.grad(), expected("grad_context"), tol_);
    }
  }
};

class HeadParity : public ProjectedParity {};

TEST_P(HeadParity, OutputWeightsAndGradients) {
  AttentionHead head(AttentionHeadOptions(ref().integer("d_q_in"), ref().integer("d_k"))
                         .d_v(ref().integer("d_v"))
                         .bias(ref().boolean("bias"))
                         .causal(ref().boolean("causal")));
  load(head);
  const torch::Tensor x = input("x");
  const torch::Tensor context = ref().boolean("self_attention") ? x : input("context");
  auto [out, weights] = head->forward_with_weights(x, context, context, masks());
  EXPECT_CLOSE(out, expected("out"), tol_);
  EXPECT_CLOSE(weights, expected("weights_per_head").squeeze(-3), tol_);
  const torch::Tensor plain = ref().boolean("self_attention") ? head->forward(x)
                                                              : head->forward(x, context, context, masks());
  EXPECT_CLOSE(plain, expected("out"), tol_) << "without weights";
  check_gradients(out, x, context);
}

INSTANTIATE_TEST_SUITE_P(PyTorch, HeadParity,
                         ::testing::Combine(::testing::ValuesIn(reference_cases("head_")),
                                            ::testing::ValuesIn(device_dtype_grid())),
                         case_param_name);

class CrossParity : public ProjectedParity {};

TEST_P(CrossParity, OutputWeightsAndGradients) {
  CrossAttention cross(CrossAttentionOptions(ref().integer("d_q_in"), ref().integer("d_kv_in"), ref().integer("d_k"))
                           .d_v(ref().integer("d_v"))
                           .num_heads(ref().integer("num_heads"))
                           .bias(ref().boolean("bias")));
  load(cross);
  const torch::Tensor x = input("x"), context = input("context");
  auto [out, weights] = cross->forward_with_weights(x, context, masks(), HeadWeights::PerHead);
  EXPECT_CLOSE(out, expected("out"), tol_);
  EXPECT_CLOSE(weights, expected("weights_per_head"), tol_);
  EXPECT_CLOSE(std::get<1>(cross->forward_with_weights(x, context, masks())), expected("weights_per_head").mean(-3),
               tol_);
  EXPECT_CLOSE(cross->forward(x, context, masks()), expected("out"), tol_) << "without weights";
  check_gradients(out, x, context);
}

INSTANTIATE_TEST_SUITE_P(PyTorch, CrossParity,
                         ::testing::Combine(::testing::ValuesIn(reference_cases("cross_")),
                                            ::testing::ValuesIn(device_dtype_grid())),
                         case_param_name);

}  // namespace
}  // namespace attn::test
