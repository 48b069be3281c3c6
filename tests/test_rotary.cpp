// Rotary embeddings against a float64 reference written out here in scalar loops: the frequencies of each
// scaling from transformers' formulas (modeling_rope_utils.py), then the rotation pair by pair.

#include <attn/attn.h>
#include <attn/ops/rotary_positions.h>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <string>
#include <vector>

namespace attn::test {
namespace {

constexpr double kPi = 3.14159265358979323846;

struct Config {
  std::string name;
  RotaryScaling scaling;
  RotaryPairing pairing;
  int64_t rotary_dim;  // of head_dim 10
};

RotaryEmbeddingOptions options_of(const Config& c) {
  return RotaryEmbeddingOptions(c.rotary_dim)
      .base(500.0)  // a small base: the low frequencies still turn within the test's positions
      .pairing(c.pairing)
      .scaling(c.scaling)
      .factor(4.0)
      .original_max_position(32);
}

// ---- the reference: plain doubles -------------------------------------------------------------------------

std::vector<double> inv_freq_default(double base, int64_t dim) {
  std::vector<double> f;
  for (int64_t i = 0; i < dim; i += 2) f.push_back(1.0 / std::pow(base, static_cast<double>(i) / dim));
  return f;
}

/// inv_freq and the factor on cos/sin, for sequences of seq_len positions.
std::pair<std::vector<double>, double> reference_frequencies(const RotaryEmbeddingOptions& o, int64_t seq_len) {
  const int64_t dim = o.rotary_dim();
  const double factor = o.factor(), base = o.base();
  const double context = static_cast<double>(o.original_max_position());
  std::vector<double> f = inv_freq_default(base, dim);
  switch (o.scaling()) {
    case RotaryScaling::None:
      return {f, 1.0};
    case RotaryScaling::Linear:
      for (double& x : f) x /= factor;
      return {f, 1.0};
    case RotaryScaling::DynamicNTK: {
      const double len = std::max<double>(seq_len, context);
      const double grown = base * std::pow(factor * len / context - (factor - 1), double(dim) / (dim - 2));
      return {inv_freq_default(grown, dim), 1.0};
    }
    case RotaryScaling::YaRN: {
      auto correction = [&](double rotations) { return dim * std::log(context / (rotations * 2 * kPi)) / (2 * std::log(base)); };
      const double low = std::max(std::floor(correction(o.beta_fast())), 0.0);
      double high = std::min(std::ceil(correction(o.beta_slow())), double(dim - 1));
      if (low == high) high += 0.001;
      for (size_t i = 0; i < f.size(); ++i) {
        const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
        const double extrapolate = 1.0 - ramp;
        f[i] = f[i] / factor * (1.0 - extrapolate) + f[i] * extrapolate;
      }
      return {f, 0.1 * std::log(factor) + 1.0};
    }
    case RotaryScaling::Llama3: {
      const double low_wavelen = context / o.low_freq_factor(), high_wavelen = context / o.high_freq_factor();
      for (double& x : f) {
        const double wavelen = 2 * kPi / x;
        if (wavelen < high_wavelen) continue;               // high frequency: unchanged
        if (wavelen > low_wavelen) { x /= factor; continue; }  // low frequency: interpolated
        const double smooth = (context / wavelen - o.low_freq_factor()) / (o.high_freq_factor() - o.low_freq_factor());
        x = (1 - smooth) * x / factor + smooth * x;
      }
      return {f, 1.0};
    }
  }
  return {f, 1.0};
}

/// x [B, H, T, D] float64 rotated at positions [B, T], element by element, with the frequencies of a sequence
/// of seq_len positions (by default as long as the furthest position).
torch::Tensor reference_rotate(const torch::Tensor& x, const torch::Tensor& positions, const RotaryEmbeddingOptions& o,
                               int64_t seq_len = -1) {
  if (seq_len < 0) seq_len = positions.max().item<int64_t>() + 1;
  const auto [freq, attention] = reference_frequencies(o, seq_len);
  const auto X = x.accessor<double, 4>();
  const auto P = positions.accessor<int64_t, 2>();
  torch::Tensor out = x.clone();
  auto Y = out.accessor<double, 4>();
  const int64_t half = o.rotary_dim() / 2;
  for (int64_t b = 0; b < x.size(0); ++b)
    for (int64_t h = 0; h < x.size(1); ++h)
      for (int64_t t = 0; t < x.size(2); ++t)
        for (int64_t i = 0; i < half; ++i) {
          const double angle = static_cast<double>(P[b][t]) * freq[i];
          const double c = std::cos(angle) * attention, s = std::sin(angle) * attention;
          const int64_t ia = o.pairing() == RotaryPairing::HalfSplit ? i : 2 * i;
          const int64_t ib = o.pairing() == RotaryPairing::HalfSplit ? i + half : 2 * i + 1;
          const double a = X[b][h][t][ia], bb = X[b][h][t][ib];
          Y[b][h][t][ia] = a * c - bb * s;
          Y[b][h][t][ib] = bb * c + a * s;
        }
  return out;
}

// ---- the tests ---------------------------------------------------------------------------------------------

torch::Tensor test_positions() {
  // Row 0 starts at 0, row 1 at 40 (past original_max_position = 32, so DynamicNTK changes its frequencies).
  return torch::stack({torch::arange(0, 7), torch::arange(40, 47)}).to(torch::kLong);
}

class Rotary : public ::testing::TestWithParam<Config> {};

TEST_P(Rotary, MatchesTheFloat64FormulaPairByPair) {
  const RotaryEmbeddingOptions o = options_of(GetParam());
  RotaryEmbedding rope(o);
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({2, 3, 7, 10}, torch::kDouble);
  const torch::Tensor positions = test_positions();
  const torch::Tensor expected = reference_rotate(x, positions, o);
  const torch::Tensor before = x.clone();

  EXPECT_LE((rope->forward(x, positions) - expected).abs().max().item<double>(), 1e-12);
  EXPECT_TRUE(torch::equal(x, before)) << "x was modified";
  const torch::Tensor y32 = rope->forward(x.to(torch::kFloat), positions);
  EXPECT_EQ(y32.scalar_type(), torch::kFloat);
  EXPECT_LE((y32.to(torch::kDouble) - expected).abs().max().item<double>(), 2e-6);
  // The channels past rotary_dim pass through untouched.
  const int64_t r = o.rotary_dim();
  if (r < 10) EXPECT_TRUE(torch::equal(rope->forward(x, positions).narrow(-1, r, 10 - r), x.narrow(-1, r, 10 - r)));
}

TEST_P(Rotary, GradientIsTheInverseRotation) {
  // y = R(θ) x per pair, so dL/dx = R(θ)ᵀ g = R(-θ) g, with R(-θ)'s frequencies taken at the same lengths.
  const RotaryEmbeddingOptions o = options_of(GetParam());
  RotaryEmbedding rope(o);
  torch::manual_seed(6);
  const torch::Tensor x = torch::randn({2, 3, 7, 10}, torch::kDouble).requires_grad_();
  const torch::Tensor g = torch::randn({2, 3, 7, 10}, torch::kDouble);
  const torch::Tensor positions = test_positions();
  (rope->forward(x, positions) * g).sum().backward();
  // The reference at the same frequencies, rotated backwards: attention factor a gives R(θ)·a, so the
  // transpose is R(-θ)·a too.
  const auto [freq, attention] = reference_frequencies(o, positions.max().item<int64_t>() + 1);
  RotaryEmbeddingOptions back = o;
  torch::Tensor expected = g.clone();
  auto E = expected.accessor<double, 4>();
  const auto G = g.accessor<double, 4>();
  const auto P = positions.accessor<int64_t, 2>();
  const int64_t half = o.rotary_dim() / 2;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t t = 0; t < 7; ++t)
        for (int64_t i = 0; i < half; ++i) {
          const double angle = -static_cast<double>(P[b][t]) * freq[i];
          const double c = std::cos(angle) * attention, s = std::sin(angle) * attention;
          const int64_t ia = o.pairing() == RotaryPairing::HalfSplit ? i : 2 * i;
          const int64_t ib = o.pairing() == RotaryPairing::HalfSplit ? i + half : 2 * i + 1;
          E[b][h][t][ia] = G[b][h][t][ia] * c - G[b][h][t][ib] * s;
          E[b][h][t][ib] = G[b][h][t][ib] * c + G[b][h][t][ia] * s;
        }
  EXPECT_LE((x.grad() - expected).abs().max().item<double>(), 1e-12);
}

std::vector<Config> configs() {
  std::vector<Config> out;
  const std::pair<RotaryScaling, const char*> scalings[] = {{RotaryScaling::None, "none"},
                                                           {RotaryScaling::Linear, "linear"},
                                                           {RotaryScaling::DynamicNTK, "dynamic"},
                                                           {RotaryScaling::YaRN, "yarn"},
                                                           {RotaryScaling::Llama3, "llama3"}};
  for (const auto& [scaling, name] : scalings)
    for (const auto pairing : {RotaryPairing::HalfSplit, RotaryPairing::Interleaved})
      for (const int64_t dim : {10, 6})
        out.push_back({std::string(name) + (pairing == RotaryPairing::HalfSplit ? "_half" : "_interleaved") +
                           (dim == 10 ? "_full" : "_partial"),
                       scaling, pairing, dim});
  return out;
}

TEST_P(Rotary, BothRoutesMatchTheFloat64FormulaInEveryDtype) {
  // Without a gradient to record, the CPU takes the fused op (attn::ops::rotary_positions); with one,
  // rotary_cos_sin and apply_rotary. Each against the float64 formula, for x as a head split from
  // [B, T, H, D] (a strided view) and for x whose channels are not contiguous.
  const RotaryEmbeddingOptions o = options_of(GetParam());
  RotaryEmbedding rope(o);
  torch::manual_seed(11);
  const torch::Tensor x = torch::randn({2, 7, 3, 10}, torch::kDouble).transpose(1, 2);
  const torch::Tensor positions = test_positions();
  const torch::Tensor expected = reference_rotate(x.contiguous(), positions, o);
  struct Case {
    torch::Dtype dtype;
    double tolerance;  // a few roundings in the dtype (cos, sin, the result) of values up to about 6
  };
  std::vector<Case> cases = {{torch::kDouble, 1e-12}, {torch::kFloat, 2e-6}, {torch::kBFloat16, 0.04}};
  // float16 on the CPU from LibTorch 2 on; 1.x refuses it on both routes, as every attn function does there.
  if (TORCH_VERSION_MAJOR >= 2) {
    cases.push_back({torch::kHalf, 0.01});
  } else {
    for (bool records_grad : {false, true}) {
      const torch::Tensor half = x.to(torch::kHalf).requires_grad_(records_grad);
      EXPECT_THROW(
          {
            try {
              rope->forward(half, positions);
            } catch (const c10::Error& e) {
              EXPECT_NE(std::string(e.what()).find("float16 on the CPU"), std::string::npos) << e.what();
              throw;
            }
          },
          c10::Error);
    }
  }
  for (const Case& c : cases) {
    for (bool records_grad : {false, true}) {
      for (bool channels_strided : {false, true}) {
        SCOPED_TRACE(std::string(c10::toString(c.dtype)) + (records_grad ? ", recording a gradient" : ", inference") +
                     (channels_strided ? ", channels strided" : ""));
        torch::Tensor input = x.to(c.dtype);
        if (channels_strided) input = torch::stack({input, input}, -1).select(-1, 0);
        if (channels_strided) ASSERT_NE(input.stride(-1), 1);
        if (records_grad) input = input.detach().requires_grad_();
        const torch::Tensor before = input.detach().clone();
        const torch::Tensor y = rope->forward(input, positions);
        EXPECT_EQ(y.scalar_type(), c.dtype);
        EXPECT_EQ(y.requires_grad(), records_grad);
        EXPECT_LE((y.detach().to(torch::kDouble) - expected).abs().max().item<double>(), c.tolerance);
        EXPECT_TRUE(torch::equal(input.detach(), before)) << "x was modified";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Scalings, Rotary, ::testing::ValuesIn(configs()),
                         [](const ::testing::TestParamInfo<Config>& info) { return info.param.name; });

TEST(RotaryProperties, ScoresDependOnlyOnTheDistance) {
  // RoPE's point: <R(m) q, R(n) k> depends on m - n only.
  RotaryEmbedding rope(RotaryEmbeddingOptions(8));
  torch::manual_seed(7);
  const torch::Tensor q = torch::randn({1, 1, 1, 8}, torch::kDouble), k = torch::randn({1, 1, 1, 8}, torch::kDouble);
  const auto score = [&](int64_t m, int64_t n) {
    return (rope->forward(q, torch::tensor({m})) * rope->forward(k, torch::tensor({n}))).sum().item<double>();
  };
  EXPECT_NEAR(score(5, 2), score(1005, 1002), 1e-10);
  EXPECT_NEAR(score(0, 9), score(300, 309), 1e-10);
  EXPECT_GT(std::abs(score(5, 2) - score(5, 3)), 1e-6);  // and it does depend on the distance
}

// A module call rotates its queries at the keys' frequencies: with dynamic NTK, the queries' own length would
// give them other frequencies than the keys', and scores would no longer depend on the distance alone.
TEST(RotaryModules, DynamicNtkRotatesQueriesAtTheKeysFrequencies) {
  const RotaryEmbeddingOptions rope = RotaryEmbeddingOptions(8).scaling(RotaryScaling::DynamicNTK).factor(4)
                                          .original_max_position(4);
  const int64_t E = 16, H = 2, tq = 3, tk = 12;
  MultiHeadAttention mha(MultiHeadAttentionOptions(E, H).rotary(rope).backend(Backend::Math));
  mha->to(torch::kDouble);
  torch::manual_seed(5);
  const torch::Tensor query = torch::randn({1, tq, E}, torch::kDouble), memory = torch::randn({1, tk, E}, torch::kDouble);
  const auto heads = [&](const torch::Tensor& x, const torch::nn::Linear& proj) {
    return torch::nn::functional::linear(x, proj->weight, proj->bias).view({1, x.size(1), H, E / H}).transpose(1, 2);
  };
  const torch::Tensor q = reference_rotate(heads(query, mha->q_proj), torch::arange(tq).unsqueeze(0), rope, tk);
  const torch::Tensor k = reference_rotate(heads(memory, mha->k_proj), torch::arange(tk).unsqueeze(0), rope, tk);
  const torch::Tensor v = heads(memory, mha->v_proj);
  const torch::Tensor probs = torch::softmax(q.matmul(k.transpose(-1, -2)) / std::sqrt(E / H), -1);
  const torch::Tensor merged = probs.matmul(v).transpose(1, 2).reshape({1, tq, E});
  const torch::Tensor expected = torch::nn::functional::linear(merged, mha->out_proj->weight, mha->out_proj->bias);
  torch::NoGradGuard no_grad;
  const torch::Tensor actual = mha->forward(query, memory, memory);
  EXPECT_LT((actual - expected).abs().max().item<double>(), 1e-12);
  // The memory's keys, projected and rotated once, then attended by the query: the same frequencies.
  const torch::Tensor from_memory = mha->forward_with_memory(query, mha->project_memory(memory, memory));
  EXPECT_LT((from_memory - expected).abs().max().item<double>(), 1e-12);
}

TEST(RotaryProperties, SharedPositionsEqualRepeatedRows) {
  RotaryEmbedding rope(RotaryEmbeddingOptions(10).pairing(RotaryPairing::Interleaved));
  const torch::Tensor x = torch::randn({2, 3, 4, 10});
  const torch::Tensor shared = torch::arange(3, 7);
  EXPECT_TRUE(torch::allclose(rope->forward(x, shared), rope->forward(x, torch::stack({shared, shared})), 0, 0));
  // Unbatched [H, T, D] with [T] positions, and bfloat16 stays bfloat16.
  EXPECT_TRUE(torch::equal(rope->forward(x[1], shared), rope->forward(x, shared)[1]));
  EXPECT_EQ(rope->forward(x.to(torch::kBFloat16), shared).scalar_type(), torch::kBFloat16);
}

TEST(RotaryPositionsOp, MatchesTheFloat64FormulaAndRefusesAGradient) {
  // The op itself, unbatched [H, T, D] with [T] positions and a factor on cos and sin, both pairings.
  RotaryEmbeddingOptions o = RotaryEmbeddingOptions(6).base(500.0);
  const RotaryFrequencies f = rotary_frequencies(o);
  torch::manual_seed(13);
  const torch::Tensor x = torch::randn({3, 5, 8}, torch::kDouble);
  const torch::Tensor positions = torch::arange(20, 25);
  for (RotaryPairing pairing : {RotaryPairing::HalfSplit, RotaryPairing::Interleaved}) {
    SCOPED_TRACE(to_string(pairing));
    o.pairing(pairing);
    const torch::Tensor expected = reference_rotate(x.unsqueeze(0), positions.unsqueeze(0), o).squeeze(0);
    const torch::Tensor y = ops::rotary_positions(x.to(torch::kFloat), positions.to(torch::kInt), f.inv_freq, 1.0,
                                                  pairing == RotaryPairing::Interleaved);
    EXPECT_LE((y.to(torch::kDouble) - expected).abs().max().item<double>(), 2e-6);
    // The factor scales cos and sin, so the rotated channels and only they.
    const torch::Tensor scaled = ops::rotary_positions(x, positions, f.inv_freq, 0.5,
                                                       pairing == RotaryPairing::Interleaved);
    EXPECT_LE((scaled.narrow(-1, 0, 6) - expected.narrow(-1, 0, 6) * 0.5).abs().max().item<double>(), 1e-12);
    EXPECT_TRUE(torch::equal(scaled.narrow(-1, 6, 2), x.narrow(-1, 6, 2)));
  }
  // A prompt's table, 2 x 300 positions x 3 frequencies, comes from ATen's vectorised cos and sin rather than
  // the scalar loop of a decoding step's few positions.
  o.pairing(RotaryPairing::HalfSplit);
  const torch::Tensor long_x = torch::randn({2, 2, 300, 8}, torch::kDouble);
  const torch::Tensor long_positions = torch::arange(1000, 1600).reshape({2, 300});
  const torch::Tensor long_expected = reference_rotate(long_x, long_positions, o);
  EXPECT_LE((ops::rotary_positions(long_x, long_positions, f.inv_freq) - long_expected).abs().max().item<double>(),
            1e-12);
  EXPECT_LE((ops::rotary_positions(long_x.to(torch::kFloat), long_positions, f.inv_freq).to(torch::kDouble) -
             long_expected).abs().max().item<double>(),
            2e-6);

  const torch::Tensor trained = x.clone().requires_grad_();
  try {
    ops::rotary_positions(trained, positions, f.inv_freq);
    ADD_FAILURE() << "a gradient was asked of the inference op";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("attn::rotary_positions is an inference kernel"), std::string::npos) << e.what();
  }
  torch::NoGradGuard no_grad;
  EXPECT_FALSE(ops::rotary_positions(trained, positions, f.inv_freq).requires_grad());
}

TEST(RotaryPositionsOp, AKeptTableFollowsItsInputsChangedInPlace) {
  // The op keeps the calling thread's last angle table for calls at the same positions, frequencies and factor,
  // as a model's layers make them. Positions or frequencies changed in place, or another factor, must give the
  // new rotation; a prompt's table (ATen's form) and a step's (the scalar loop) take turns.
  const RotaryEmbeddingOptions a = RotaryEmbeddingOptions(6).base(500.0), b = RotaryEmbeddingOptions(6).base(900.0);
  torch::manual_seed(14);
  const torch::Tensor x = torch::randn({1, 2, 400, 8}, torch::kDouble);
  torch::Tensor positions = torch::arange(0, 400).unsqueeze(0);
  torch::Tensor inv_freq = rotary_frequencies(a).inv_freq.clone();
  const auto error = [](const torch::Tensor& y, const torch::Tensor& expected) {
    return (y - expected).abs().max().item<double>();
  };
  for (int call = 0; call < 2; ++call) {  // the second finds the first's table
    EXPECT_LE(error(ops::rotary_positions(x, positions, inv_freq), reference_rotate(x, positions, a)), 1e-12);
  }
  positions.add_(7);
  EXPECT_LE(error(ops::rotary_positions(x, positions, inv_freq), reference_rotate(x, positions, a)), 1e-12);
  inv_freq.copy_(rotary_frequencies(b).inv_freq);
  EXPECT_LE(error(ops::rotary_positions(x, positions, inv_freq), reference_rotate(x, positions, b)), 1e-12);
  EXPECT_LE(error(ops::rotary_positions(x, positions, inv_freq, 0.5).narrow(-1, 0, 6),
                  reference_rotate(x, positions, b).narrow(-1, 0, 6) * 0.5),
            1e-12);
  const torch::Tensor step = x.narrow(2, 0, 1), step_position = torch::full({1, 1}, 407, torch::kLong);
  for (int call = 0; call < 2; ++call) {
    EXPECT_LE(error(ops::rotary_positions(step, step_position, inv_freq), reference_rotate(step, step_position, b)),
              1e-12);
  }
  EXPECT_LE(error(ops::rotary_positions(x, positions, inv_freq), reference_rotate(x, positions, b)), 1e-12);
}

TEST(RotaryErrors, NameTheArgumentAndTheShapes) {
  const auto throws_with = [](const std::function<void()>& f, const std::string& text) {
    try {
      f();
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "no error; expected one mentioning: " << text;
  };
  throws_with([] { RotaryEmbedding(RotaryEmbeddingOptions(7)); }, "rotary_dim must be a positive even number, got 7");
  throws_with([] { RotaryEmbedding(RotaryEmbeddingOptions(8).scaling(RotaryScaling::YaRN).factor(4)); },
              "YaRN scaling needs original_max_position");
  throws_with([] { RotaryEmbedding(RotaryEmbeddingOptions(8).base(1.0)); }, "base must be finite and greater than 1");
  RotaryEmbedding rope(RotaryEmbeddingOptions(8));
  const torch::Tensor x = torch::randn({2, 3, 5, 6});
  throws_with([&] { rope->forward(x, torch::arange(5)); }, "rotary_dim = 8 is more than x's head_dim = 6");
  const torch::Tensor x8 = torch::randn({2, 3, 5, 8});
  throws_with([&] { rope->forward(x8, torch::arange(4)); }, "positions must be [T] = [5] for x");
  throws_with([&] { rope->forward(x8, torch::arange(5).to(torch::kFloat)); }, "positions must be an integer tensor");
  throws_with([&] { rope->forward(x8, torch::zeros({3, 5}, torch::kLong)); }, "positions must be [B, T] = [2, 5] for x");
  throws_with([&] { rope->forward(torch::randn({5, 8}), torch::arange(5)); }, "x must be [B, H, T, head_dim]");
  throws_with([&] { rope->forward(torch::randn({2, 5, 3, 8}), torch::arange(5)); },
              "positions must be [T] = [3] for x [2, 5, 3, 8] (heads first: T is x's dimension -2), got [5]");
  const RotaryFrequencies frequencies = rotary_frequencies(RotaryEmbeddingOptions(8), 5);
  throws_with([&] { rotary_cos_sin(frequencies, torch::arange(5), torch::kInt); },
              "attn::rotary_cos_sin: dtype must be a floating type (cos and sin are in it), got Int");
}

}  // namespace
}  // namespace attn::test
