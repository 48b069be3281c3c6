// The notebooks in shared/seeds/, reproduced through attn's public modules with the notebooks' seeds:
// (1) the numbers the notebooks print, (2) the same parameters as the notebooks' classes draw from the same
// seed, and (3) the same outputs as those classes (run by tests/reference/make_references.py).

#include "support.h"

namespace attn::test {
namespace {

// seeds/001 prints these for Attention(d_model=2) and MultiHeadedAttention(num_heads=2), seed 42.
const std::vector<std::vector<double>> kNb001Self = {{1.0100, 1.0641}, {0.2040, 0.7057}, {3.4989, 2.2427}};
const std::vector<std::vector<double>> kNb001Masked = {{0.6038, 0.7434}, {-0.0062, 0.6072}, {3.4989, 2.2427}};
const std::vector<std::vector<double>> kNb001TwoHeads = {{1.0100, 1.0641, -0.7081, -0.8268},
                                                         {0.2040, 0.7057, -0.7417, -0.9193},
                                                         {3.4989, 2.2427, -0.7190, -0.8447}};
// seeds/000 prints these for "Life is short, eat dessert first", seed 123, d_q = d_k = 24, d_v = 28.
constexpr double kOmega24 = -98.1709;
const std::vector<double> kOmega2 = {83.1533, 95.5014, -100.8583, 63.5880, -98.1709, 9.3997};
const std::vector<double> kAttentionWeights2 = {7.4329e-02, 9.2430e-01, 3.6185e-18, 1.3699e-03, 6.2628e-18, 2.1523e-08};

torch::Tensor printed(const std::vector<std::vector<double>>& rows) {
  std::vector<torch::Tensor> r;
  for (const auto& row : rows) r.push_back(torch::tensor(row, torch::kFloat64));
  return torch::stack(r);
}

/// The notebook printed 4 decimals (or 5 significant digits): equal up to that rounding.
::testing::AssertionResult matches_print(const torch::Tensor& actual, const torch::Tensor& printed_values,
                                         double abs_tol, double rel_tol) {
  const torch::Tensor a = actual.detach().to(torch::kCPU, torch::kFloat64);
  const torch::Tensor bad = (a - printed_values).abs() > printed_values.abs() * rel_tol + abs_tol;
  if (bad.any().item<bool>()) {
    return ::testing::AssertionFailure() << "got\n" << a << "\nnotebook printed\n" << printed_values;
  }
  return ::testing::AssertionSuccess();
}

torch::Tensor nb001_input() { return torch::tensor({{1.16, 0.23}, {0.57, 1.36}, {4.41, -2.16}}); }

class Notebooks : public ::testing::TestWithParam<DeviceDtype> {
 protected:
  void SetUp() override {
    if (skip_without(GetParam().device)) GTEST_SKIP() << "CUDA is not available: skipping " << param_name(GetParam());
    options_ = torch::TensorOptions().dtype(GetParam().dtype).device(GetParam().device);
    suffix_ = GetParam().dtype == torch::kFloat32 ? "_float32" : "_float64";
    tol_ = tolerance(GetParam().dtype);
  }
  /// The notebooks build in float32 on the CPU from the seed; other dtypes/devices convert afterwards.
  template <typename Module>
  Module moved(Module m) {
    m->to(options_.device(), options_.dtype().toScalarType());
    return m;
  }
  /// Parameters drawn by C++ from the seed equal those the notebook's Python class drew.
  template <typename Module>
  void expect_same_init(const Module& m, const ReferenceCase& ref,
                        const std::vector<std::pair<std::string, std::string>>& ours_to_theirs) {
    const auto params = m->named_parameters();
    for (const auto& [ours, theirs] : ours_to_theirs) {
      ASSERT_TRUE(params.contains(ours)) << ours;
      EXPECT_TRUE(torch::equal(params[ours].to(torch::kCPU, torch::kFloat32), ref.tensor("param_" + theirs)))
          << ours << " differs from the notebook's " << theirs;
    }
  }
  torch::TensorOptions options_;
  std::string suffix_;
  double tol_ = 0;
};

// ---- seeds/001 --------------------------------------------------------------------------------------

TEST_P(Notebooks, Nb001SelfAttentionPrintedNumbers) {
  const ReferenceCase ref("nb001_self");
  torch::manual_seed(42);
  AttentionHead head(2, 2);  // Attention(d_model=2): bias-free W_q, W_k, W_v
  expect_same_init(head, ref, {{"q_proj.weight", "W_q_weight"}, {"k_proj.weight", "W_k_weight"},
                               {"v_proj.weight", "W_v_weight"}});
  head = moved(head);
  const torch::Tensor out = head->forward(nb001_input().to(options_));
  EXPECT_TRUE(matches_print(out, printed(kNb001Self), 6e-5 + tol_, 1e-2));
  EXPECT_CLOSE(out, ref.tensor("out" + suffix_), tol_);
}

TEST_P(Notebooks, Nb001MaskedSelfAttentionPrintedNumbers) {
  const torch::Tensor x = nb001_input().to(options_);
  // The notebook's mask is true = masked out (filled with -1e9): that is attend_mask's negation.
  const torch::Tensor notebook_mask = torch::tril(torch::ones({3, 3})) == 0;
  torch::manual_seed(42);
  AttentionHead head = moved(AttentionHead(2, 2));
  const torch::Tensor out = head->forward(x, x, x, AttentionMasks().attend_mask(notebook_mask.logical_not().to(options_.device())));
  EXPECT_TRUE(matches_print(out, printed(kNb001Masked), 6e-5 + tol_, 1e-2));
  EXPECT_CLOSE(out, ReferenceCase("nb001_masked").tensor("out" + suffix_), tol_);

  // The same mask is the causal option.
  torch::manual_seed(42);
  AttentionHead causal = moved(AttentionHead(AttentionHeadOptions(2, 2).causal(true)));
  EXPECT_TRUE(matches_print(causal->forward(x), printed(kNb001Masked), 6e-5 + tol_, 1e-2));
}

TEST_P(Notebooks, Nb001IndependentHeadsConcatenatedPrintedNumbers) {
  // MultiHeadedAttention(d_model=2, num_heads=2): two full-width heads drawn one after the other, outputs
  // concatenated, no output projection. The same form as one MultiHeadAttention holding both heads.
  torch::manual_seed(42);
  AttentionHead first(2, 2), second(2, 2);
  MultiHeadAttention mha(MultiHeadAttentionOptions(2, 2).head_dim(2).bias(false).output_projection(false));
  load_linear(mha->q_proj, torch::cat({first->q_proj->weight, second->q_proj->weight}));
  load_linear(mha->k_proj, torch::cat({first->k_proj->weight, second->k_proj->weight}));
  load_linear(mha->v_proj, torch::cat({first->v_proj->weight, second->v_proj->weight}));
  mha = moved(mha);
  const torch::Tensor x = nb001_input().to(options_);
  const torch::Tensor out = mha->forward(x, x, x);
  EXPECT_TRUE(matches_print(out, printed(kNb001TwoHeads), 6e-5 + tol_, 1e-2));
  EXPECT_CLOSE(out, ReferenceCase("nb001_mha").tensor("out" + suffix_), tol_);
  EXPECT_EQ(mha->out_proj.is_empty(), true);
}

// ---- seeds/000 --------------------------------------------------------------------------------------

TEST_P(Notebooks, Nb000StepByStepPrintedNumbers) {
  const ReferenceCase ref("nb000");
  // dict = sorted words -> ids: Life 0, dessert 1, eat 2, first 3, is 4, short 5.
  const torch::Tensor ids = torch::tensor({0, 4, 5, 2, 1, 3}, torch::kLong);
  EXPECT_TRUE(torch::equal(ids, ref.tensor("token_ids")));
  torch::manual_seed(123);
  torch::nn::Embedding embed(6, 16);
  const torch::Tensor embedded = embed(ids).detach();
  EXPECT_TRUE(torch::equal(embedded, ref.tensor("embedded"))) << "torch::nn::Embedding drew other numbers";

  torch::manual_seed(123);
  const torch::Tensor w_query = torch::randn({24, 16}), w_key = torch::randn({24, 16}), w_value = torch::randn({28, 16});
  AttentionHead head(AttentionHeadOptions(16, 24).d_v(28));
  load_linear(head->q_proj, w_query);
  load_linear(head->k_proj, w_key);
  load_linear(head->v_proj, w_value);
  head = moved(head);
  const torch::Tensor x = embedded.to(options_);

  const torch::Tensor omega = head->q_proj(x).matmul(head->k_proj(x).t());  // unscaled q·k, as printed
  auto [out, weights] = head->forward_with_weights(x, x, x);
  // The notebook printed float32 results to 5 significant digits, which float16/bfloat16 cannot hold (bfloat16
  // rounds -98.1709 to -98.0, float16 flushes 3.6e-18 to 0): those dtypes are held to the reference alone.
  if (GetParam().dtype == torch::kFloat32 || GetParam().dtype == torch::kFloat64) {
    EXPECT_TRUE(matches_print(omega[1][4], torch::tensor(kOmega24, torch::kFloat64), 6e-5, 1e-3)) << "omega_24";
    EXPECT_TRUE(matches_print(omega[1], torch::tensor(kOmega2, torch::kFloat64), 6e-5, 1e-3)) << "omega_2";
    EXPECT_TRUE(matches_print(weights[1], torch::tensor(kAttentionWeights2, torch::kFloat64), 1e-20, 1e-3))
        << "attention_weights_2";
  }
  EXPECT_CLOSE(omega, ref.tensor("omega" + suffix_), tol_);
  EXPECT_CLOSE(weights, ref.tensor("weights" + suffix_), tol_);
  EXPECT_CLOSE(out, ref.tensor("out" + suffix_), tol_);  // context vectors, [6, 28]
}

TEST_P(Notebooks, Nb000CalcAttnSwapsQueryAndKeyWeights) {
  // The notebook's calc_attn/cross_attn compute Q with W_K and K with W_Q (and scale by an undefined d_k).
  // attn implements the step-by-step maths the notebook prints, softmax(x W_qᵀ (x W_kᵀ)ᵀ / sqrt(d_k)): the
  // swapped form gives the transposed score matrix, hence other weights. This pins which one we compute.
  const ReferenceCase ref("nb000");
  const torch::Tensor x = ref.tensor("embedded").to(options_);
  const torch::Tensor wq = ref.tensor("w_q").to(options_), wk = ref.tensor("w_k").to(options_);
  AttentionHead head(AttentionHeadOptions(16, 24).d_v(28));
  head = moved(head);
  load_linear(head->q_proj, wq);
  load_linear(head->k_proj, wk);
  const torch::Tensor ours = std::get<1>(head->forward_with_weights(x, x, x));
  const torch::Tensor swapped = torch::softmax(x.matmul(wk.t()).matmul(x.matmul(wq.t()).t()) / std::sqrt(24.0), 1);
  EXPECT_CLOSE(ours, ref.tensor("weights" + suffix_), tol_);
  EXPECT_FALSE(torch::allclose(ours.to(torch::kFloat64), swapped.to(torch::kFloat64), 1e-2, 1e-3));
}

// ---- seeds/003 and seeds/004: same outputs as the notebook classes from the same seed and input -----

TEST_P(Notebooks, Nb003MultiHeadAttentionSameOutputs) {
  for (const char* name : {"nb003", "nb003_masked"}) {
    SCOPED_TRACE(name);
    const ReferenceCase ref(name);
    torch::manual_seed(ref.integer("seed"));
    const torch::Tensor x = torch::randn({ref.integer("batch"), ref.integer("time"), ref.integer("d_model")});
    MultiHeadAttention mha(ref.integer("d_model"), ref.integer("n_head"));  // w_q, w_k, w_v, w_combine
    expect_same_init(mha, ref, {{"q_proj.weight", "w_q_weight"}, {"q_proj.bias", "w_q_bias"},
                                {"k_proj.weight", "w_k_weight"}, {"v_proj.bias", "w_v_bias"},
                                {"out_proj.weight", "w_combine_weight"}, {"out_proj.bias", "w_combine_bias"}});
    mha = moved(mha);
    const torch::Tensor xs = x.to(options_);
    AttentionMasks masks;
    if (ref.has("notebook_mask")) {  // the notebook keeps where mask != 0 (fills mask == 0 with -10000)
      masks.attend_mask(ref.tensor("notebook_mask").ne(0).to(options_.device()));
    }
    torch::NoGradGuard no_grad;
    EXPECT_CLOSE(mha->forward(xs, xs, xs, masks), ref.tensor("out" + suffix_), tol_);
  }
}

TEST_P(Notebooks, Nb004SelfAttentionSameOutputs) {
  const ReferenceCase ref("nb004_self");
  torch::manual_seed(ref.integer("seed"));
  const int64_t e = ref.integer("embed_size");
  const torch::Tensor x = torch::randn({ref.integer("batch"), ref.integer("time"), e});
  AttentionHead head(AttentionHeadOptions(e, e).bias(true));  // query, key, value: Linear with bias
  expect_same_init(head, ref, {{"q_proj.weight", "query_weight"}, {"q_proj.bias", "query_bias"},
                               {"k_proj.weight", "key_weight"}, {"v_proj.weight", "value_weight"},
                               {"v_proj.bias", "value_bias"}});
  head = moved(head);
  EXPECT_CLOSE(head->forward(x.to(options_)), ref.tensor("out" + suffix_), tol_);
}

TEST_P(Notebooks, Nb004MultiHeadSelfAttentionSameOutputs) {
  const ReferenceCase ref("nb004_mhsa");
  torch::manual_seed(ref.integer("seed"));
  const int64_t e = ref.integer("embed_size");
  const torch::Tensor x = torch::randn({ref.integer("batch"), ref.integer("time"), e});
  MultiHeadAttention mha(e, ref.integer("num_heads"));  // query, key, value, fc_out
  expect_same_init(mha, ref, {{"q_proj.weight", "query_weight"}, {"k_proj.bias", "key_bias"},
                              {"v_proj.weight", "value_weight"}, {"out_proj.weight", "fc_out_weight"},
                              {"out_proj.bias", "fc_out_bias"}});
  mha = moved(mha);
  const torch::Tensor xs = x.to(options_);
  EXPECT_CLOSE(mha->forward(xs, xs, xs), ref.tensor("out" + suffix_), tol_);
}

INSTANTIATE_TEST_SUITE_P(Seeds, Notebooks, ::testing::ValuesIn(device_dtype_grid()),
                         [](const auto& info) { return param_name(info.param); });

}  // namespace
}  // namespace attn::test
