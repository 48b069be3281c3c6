// Attention variants: sliding windows, logit soft-capping, ALiBi and attention sinks, alone and together, with
// grouped-query heads and masks, through Backend::Math and Backend::Fused in float64, float32 and bfloat16
// (forward and gradients); rows that see no key; the packed variable-length batch (attn::varlen_attention,
// pack_padded, unpack_padded, packed_positions); attn::alibi_slopes; the errors; and the options reaching
// MultiHeadAttention.
//
// The references are written here, independently of attn's code: a float64 formula (scaled scores, the tanh
// cap, the ALiBi bias from |i + o - j|, the additive mask, the window band from arange comparisons, a softmax
// with an extra sink column, zero rows where no key is allowed) whose autograd gives the gradient references;
// central finite differences; a packed batch's per-sequence and padded forms; and values written out by hand.
// The dtype runs compare against the float64 formula on the same inputs rounded to that dtype.

#include "kernel_variants.h"
#include "ops/cpu/products/route.h"
#include "support.h"

#include <attn/functional.h>
#include <attn/ops/decode_attention.h>
#include <attn/varlen.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace attn::test {
namespace {

constexpr auto kF64 = torch::kFloat64;

// ------------------------------------------------------------------------------------------------------------
// Problems, variants and the float64 reference

struct Shape {
  int64_t batch, heads, kv_heads, tq, tk, d;
};

// Tiles are 128 query rows by 512 keys (forward) and 64 by 128 (backward): these end in partial tiles.
const Shape kOne{1, 2, 2, 1, 1, 8};
const Shape kSmall{2, 2, 2, 7, 7, 16};
const Shape kWide{1, 2, 2, 300, 513, 16};    // Tq < Tk, across both forward tiles
const Shape kTall{2, 2, 2, 70, 33, 16};      // Tq > Tk: bottom-right leaves the first rows without keys
const Shape kLong{1, 1, 1, 1100, 1100, 16};  // several tiles of every kind
const Shape kGqa{2, 4, 2, 65, 130, 16};
const Shape kGqaTall{1, 4, 2, 300, 129, 16};

/// What a case turns on. Built with chained setters: Variant("name").with_causal().with_window(3, 0).
struct Variant {
  std::string name;
  bool causal = false;
  CausalAlignment alignment = CausalAlignment::BottomRight;
  int64_t left = -1, right = -1;
  double softcap = 0.0;
  std::optional<double> scale;
  int alibi = 0;          ///< 0: none, 1: [H] slopes, 2: [B, H] (varlen: [N, H])
  bool sinks = false;     ///< [H] sink logits, differentiable
  bool padding = false;   ///< random key padding, and the last batch row fully padded
  bool additive = false;  ///< a finite random additive mask [B, H, Tq, Tk]

  explicit Variant(std::string n) : name(std::move(n)) {}
  Variant& with_causal() { causal = true; return *this; }
  Variant& top_left() { alignment = CausalAlignment::TopLeft; return *this; }
  Variant& with_window(int64_t l, int64_t r) { left = l; right = r; return *this; }
  Variant& with_softcap(double c) { softcap = c; return *this; }
  Variant& with_scale(double s) { scale = s; return *this; }
  Variant& with_alibi(int kind) { alibi = kind; return *this; }
  Variant& with_sinks() { sinks = true; return *this; }
  Variant& with_padding() { padding = true; return *this; }
  Variant& with_additive() { additive = true; return *this; }
};

/// Random float64 inputs of one case (the caller converts them).
struct Problem {
  torch::Tensor q, k, v;  ///< [B, H, Tq, d], [B, H_kv, Tk, d], [B, H_kv, Tk, d]
  torch::Tensor slopes;   ///< [H] or [B, H]: powers of two, exact in every dtype
  torch::Tensor sinks;    ///< [H]
  torch::Tensor padding;  ///< bool [B, 1, Tk], true = padding
  torch::Tensor additive; ///< [B, H, Tq, Tk]
};

/// Slopes that differ per head (and per row for [rows, H]); powers of two so that bfloat16 holds them exactly.
torch::Tensor test_slopes(int64_t heads, int64_t rows /* 0: [H] */) {
  const torch::Tensor base = torch::tensor({0.5, 0.0625, 0.25, 0.015625}, kF64).repeat({2}).narrow(0, 0, heads);
  if (rows == 0) return base;
  return base.unsqueeze(0) * torch::pow(0.5, torch::arange(rows, kF64).remainder(3)).unsqueeze(1);
}

Problem make_problem(const Shape& s, const Variant& var, uint64_t seed) {
  torch::manual_seed(seed);
  Problem p;
  p.q = torch::randn({s.batch, s.heads, s.tq, s.d}, kF64);
  p.k = torch::randn({s.batch, s.kv_heads, s.tk, s.d}, kF64);
  p.v = torch::randn({s.batch, s.kv_heads, s.tk, s.d}, kF64);
  if (var.alibi == 1) p.slopes = test_slopes(s.heads, 0);
  if (var.alibi == 2) p.slopes = test_slopes(s.heads, s.batch);
  if (var.sinks) p.sinks = torch::randn({s.heads}, kF64) * 1.5 + 0.5;
  if (var.padding) {
    p.padding = torch::rand({s.batch, 1, s.tk}) < 0.25;
    if (s.batch > 1) p.padding[s.batch - 1] = true;
  }
  if (var.additive) p.additive = torch::randn({s.batch, s.heads, s.tq, s.tk}, kF64) * 0.5;
  return p;
}

int64_t diagonal_offset(int64_t tq, int64_t tk, CausalAlignment alignment) {
  return alignment == CausalAlignment::BottomRight ? tk - tq : 0;
}

/// [Tq, Tk] bool: the pairs that causality and the window allow, written out from the band rule.
torch::Tensor band_allowed(int64_t tq, int64_t tk, const Variant& var) {
  const int64_t o = diagonal_offset(tq, tk, var.alignment);
  const torch::Tensor i = torch::arange(tq, torch::kLong).unsqueeze(1);
  const torch::Tensor j = torch::arange(tk, torch::kLong).unsqueeze(0);
  torch::Tensor allowed = torch::ones({tq, tk}, torch::kBool);
  if (var.causal) allowed = allowed.logical_and(j <= i + o);
  if (var.left >= 0) allowed = allowed.logical_and(j >= i + o - var.left);
  if (var.right >= 0) allowed = allowed.logical_and(j <= i + o + var.right);
  return allowed;
}

/// [B, H, Tq, Tk] bool: band and key padding together.
torch::Tensor allowed_pairs(const Shape& s, const Variant& var, const torch::Tensor& padding) {
  torch::Tensor allowed = band_allowed(s.tq, s.tk, var).view({1, 1, s.tq, s.tk});
  if (padding.defined()) allowed = allowed.logical_and(padding.logical_not().unsqueeze(-2));
  return allowed.expand({s.batch, s.heads, s.tq, s.tk});
}

/// The variants' definition in float64, differentiable in q, k, v and sinks. k and v may have fewer heads.
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const Variant& var, const torch::Tensor& slopes, const torch::Tensor& padding,
                                  const torch::Tensor& additive, const torch::Tensor& sinks) {
  const Shape s{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)};
  const int64_t group = s.heads / s.kv_heads;
  const torch::Tensor kk = k.repeat_interleave(group, 1), vv = v.repeat_interleave(group, 1);
  const double scale = var.scale ? *var.scale : 1.0 / std::sqrt(static_cast<double>(s.d));
  torch::Tensor scores = q.matmul(kk.transpose(-2, -1)) * scale;
  if (var.softcap > 0) scores = torch::tanh(scores / var.softcap) * var.softcap;
  if (slopes.defined()) {
    const int64_t o = diagonal_offset(s.tq, s.tk, var.alignment);
    const torch::Tensor distance =
        (torch::arange(s.tq, kF64).unsqueeze(1) + static_cast<double>(o) - torch::arange(s.tk, kF64).unsqueeze(0)).abs();
    const torch::Tensor per_head =
        slopes.dim() == 1 ? slopes.view({1, s.heads, 1, 1}) : slopes.view({slopes.size(0), s.heads, 1, 1});
    scores = scores - per_head * distance;
  }
  if (additive.defined()) scores = scores + additive;
  const torch::Tensor allowed = allowed_pairs(s, var, padding);
  torch::Tensor logits = scores.masked_fill(allowed.logical_not(), -INFINITY);
  if (sinks.defined()) {
    logits = torch::cat({logits, sinks.view({1, s.heads, 1, 1}).expand({s.batch, s.heads, s.tq, 1})}, -1);
  } else {
    // A row with no allowed key: finite logits (no NaN forward or backward); its weights are zeroed below.
    logits = logits.masked_fill(allowed.any(-1, true).logical_not(), 0.0);
  }
  torch::Tensor probs = torch::softmax(logits, -1);
  if (sinks.defined()) probs = probs.narrow(-1, 0, s.tk);
  probs = probs * allowed.to(kF64);
  return probs.matmul(vv);
}

torch::Tensor rounded(const torch::Tensor& t, torch::Dtype dtype) {
  return t.defined() ? t.to(dtype).to(kF64) : t;
}

/// The output and the gradients of q, k, v and sinks, in float64.
struct Result {
  torch::Tensor out, dq, dk, dv, dsinks;
};

double gradient_tolerance(torch::Dtype dtype) {
  // bfloat16 gradients come from float32 sums of rounded products; as test_fused.cpp and test_gqa.cpp hold them.
  return dtype == torch::kBFloat16 ? 1e-1 : tolerance(dtype) * 10;
}

/// Gradients: finite, and within tol absolutely and relatively (an exact zero gradient, e.g. d query with a single
/// key, may come out as rounding noise).
::testing::AssertionResult grad_close(const torch::Tensor& actual, const torch::Tensor& expected, double tol) {
  if (!actual.defined()) return ::testing::AssertionFailure() << "no gradient reached this input";
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure() << "shape " << actual.sizes() << " != expected " << expected.sizes();
  }
  const torch::Tensor a = actual.detach().to(kF64), e = expected.detach().to(kF64);
  if (!torch::isfinite(a).all().item<bool>()) return ::testing::AssertionFailure() << "non-finite gradient";
  if (!torch::allclose(a, e, tol, tol)) {
    return ::testing::AssertionFailure() << "max |actual - expected| = " << (a - e).abs().max().item<double>()
                                         << " (tolerance " << tol << ", max |expected| "
                                         << e.abs().max().item<double>() << ")";
  }
  return ::testing::AssertionSuccess();
}

void expect_results_match(const Result& actual, const Result& expected, torch::Dtype dtype) {
  EXPECT_CLOSE(actual.out, expected.out, tolerance(dtype));
  const double tol = gradient_tolerance(dtype);
  EXPECT_TRUE(grad_close(actual.dq, expected.dq, tol)) << "d query";
  EXPECT_TRUE(grad_close(actual.dk, expected.dk, tol)) << "d key";
  EXPECT_TRUE(grad_close(actual.dv, expected.dv, tol)) << "d value";
  if (expected.dsinks.defined()) {
    EXPECT_TRUE(grad_close(actual.dsinks, expected.dsinks, tol)) << "d sinks";
  }
}

/// The reference on the inputs rounded to `dtype`, forward and autograd (cotangent rounded as well).
Result run_reference(const Problem& p, const Variant& var, torch::Dtype dtype, const torch::Tensor& cotangent) {
  const auto leaf = [&](const torch::Tensor& t) { return rounded(t, dtype).detach().clone().requires_grad_(true); };
  const torch::Tensor q = leaf(p.q), k = leaf(p.k), v = leaf(p.v);
  const torch::Tensor sinks = p.sinks.defined() ? leaf(p.sinks) : torch::Tensor();
  const torch::Tensor out = reference_attention(q, k, v, var, rounded(p.slopes, dtype), p.padding,
                                                rounded(p.additive, dtype), sinks);
  (out * rounded(cotangent, dtype)).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad(), sinks.defined() ? sinks.grad() : torch::Tensor()};
}

/// The SdpaOptions of a variant (no masks, slopes or sinks).
SdpaOptions variant_options(const Variant& var, Backend backend) {
  SdpaOptions o;
  o.causal(var.causal).causal_alignment(var.alignment).window(var.left, var.right).softcap(var.softcap).backend(backend);
  if (var.scale) o.scale(var.scale);
  return o;
}

/// The variant's options with the problem's masks and slopes in `dtype`, and `sinks` (a leaf of that dtype).
SdpaOptions problem_options(const Problem& p, const Variant& var, torch::Dtype dtype, Backend backend,
                            const torch::Tensor& sinks) {
  SdpaOptions o = variant_options(var, backend);
  AttentionMasks masks;
  if (p.padding.defined()) masks.key_padding_mask(p.padding);
  if (p.additive.defined()) masks.additive_mask(p.additive.to(dtype));
  o.masks(masks);
  if (p.slopes.defined()) o.alibi_slopes(p.slopes.to(dtype));
  if (sinks.defined()) o.sinks(sinks);
  return o;
}

/// attn on the inputs in `dtype` through `backend`, forward and backward.
Result run_attn(const Problem& p, const Variant& var, torch::Dtype dtype, Backend backend,
                const torch::Tensor& cotangent) {
  // Fresh leaves (to() of the same dtype would return the problem's own tensors).
  const auto leaf = [&](const torch::Tensor& t) { return t.to(dtype).clone().requires_grad_(true); };
  const torch::Tensor q = leaf(p.q), k = leaf(p.k), v = leaf(p.v);
  const torch::Tensor sinks = p.sinks.defined() ? leaf(p.sinks) : torch::Tensor();
  const torch::Tensor out = attn::scaled_dot_product_attention(q, k, v, problem_options(p, var, dtype, backend, sinks));
  EXPECT_EQ(out.scalar_type(), dtype);
  (out * cotangent.to(dtype)).sum().backward();
  const auto f64 = [](const torch::Tensor& t) { return t.defined() ? t.to(kF64) : t; };
  return {out.detach().to(kF64), f64(q.grad()), f64(k.grad()), f64(v.grad()),
          sinks.defined() ? f64(sinks.grad()) : torch::Tensor()};
}

struct VariantCase {
  Shape shape;
  Variant variant;
};

std::string describe(const Shape& s, const Variant& var) {
  std::ostringstream os;
  os << var.name << " (B=" << s.batch << " H=" << s.heads << " H_kv=" << s.kv_heads << " Tq=" << s.tq
     << " Tk=" << s.tk << " d=" << s.d << ")";
  return os.str();
}

std::vector<VariantCase> variant_cases() {
  using V = Variant;
  return {
      // Windows alone, in both alignments and Tq != Tk both ways.
      {kOne, V("window(0, 0), T = 1").with_window(0, 0)},
      {kSmall, V("window left only").with_window(2, -1)},
      {kWide, V("window left only, Tq < Tk").with_window(40, -1)},
      {kSmall, V("window right only").with_window(-1, 1)},
      {kTall, V("window right only, Tq > Tk (rows without keys)").with_window(-1, 3)},
      {kWide, V("window both sides").with_window(16, 8)},
      {kTall, V("window both sides, Tq > Tk").with_window(4, 2)},
      {kTall, V("window top-left, Tq > Tk (last rows without keys)").top_left().with_window(2, 1)},
      {kWide, V("window top-left, Tq < Tk").top_left().with_window(5, 30)},
      {kWide, V("causal + window left").with_causal().with_window(64, -1)},
      {kTall, V("causal + window, Tq > Tk").with_causal().with_window(5, 0)},
      {kWide, V("causal top-left + window (right side capped at 0)").with_causal().top_left().with_window(10, 3)},
      {kLong, V("causal + window, T = 1100, sinks").with_causal().with_window(100, 0).with_sinks()},
      // Softcap, alone and with a window (Gemma 2).
      {kWide, V("softcap").with_softcap(5.0).with_scale(1.0)},
      {kTall, V("softcap, causal Tq > Tk").with_softcap(1.5).with_causal()},
      {kWide, V("softcap + causal window (Gemma 2)").with_causal().with_window(31, 0).with_softcap(5.0)
                  .with_scale(0.5)},
      // ALiBi.
      {kWide, V("ALiBi [H], causal").with_causal().with_alibi(1)},
      {kTall, V("ALiBi [H], not causal").with_alibi(1)},
      {kTall, V("ALiBi [B, H], causal").with_causal().with_alibi(2)},
      {kTall, V("ALiBi [B, H], not causal, top-left").top_left().with_alibi(2)},
      {kSmall, V("ALiBi [B, H], softcap").with_alibi(2).with_softcap(2.0)},
      // Sinks.
      {kOne, V("sinks, T = 1").with_sinks()},
      {kSmall, V("sinks").with_sinks()},
      {kWide, V("sinks, Tq < Tk").with_sinks()},
      {kTall, V("sinks, causal Tq > Tk (rows without keys)").with_causal().with_sinks()},
      // All four together.
      {kWide, V("window + softcap + ALiBi + sinks, causal").with_causal().with_window(50, 0).with_softcap(5.0)
                  .with_alibi(1).with_sinks()},
      {kTall, V("window + softcap + ALiBi [B, H] + sinks, causal top-left").with_causal().top_left()
                  .with_window(6, 0).with_softcap(3.0).with_alibi(2).with_sinks()},
      // Grouped-query heads with every variant.
      {kGqa, V("GQA, window").with_window(8, 8)},
      {kGqa, V("GQA, softcap").with_softcap(4.0)},
      {kGqa, V("GQA, ALiBi [B, H], causal").with_causal().with_alibi(2)},
      {kGqa, V("GQA, sinks").with_sinks()},
      {kGqaTall, V("GQA, all four, causal Tq > Tk").with_causal().with_window(20, 0).with_softcap(4.0).with_alibi(1)
                     .with_sinks()},
      // Masks with the variants.
      {kWide, V("key padding + window").with_padding().with_window(32, 32)},
      {kGqa, V("key padding + causal window + ALiBi + sinks").with_padding().with_causal().with_window(10, 0)
                 .with_alibi(1).with_sinks()},
      {kGqa, V("key padding + additive + all four").with_padding().with_additive().with_window(12, 4).with_softcap(3.0)
                 .with_alibi(2).with_sinks()},
  };
}

struct BackendDtype {
  Backend backend;
  torch::Dtype dtype;
  bool bfloat16_route = false;  // force the fused kernel's bfloat16 route (kernel_variants.h), where the CPU has it
  bool amx = false;             // that route on AMX's tiles rather than in pairs (skipped where the CPU has no AMX)
};

void PrintTo(const BackendDtype& p, std::ostream* os) {
  *os << to_string(p.backend) << " " << c10::toString(p.dtype) << (p.bfloat16_route ? " bfloat16 route" : "")
      << (p.amx ? " amx" : "");
}

std::string backend_dtype_name(const ::testing::TestParamInfo<BackendDtype>& info) {
  return std::string(to_string(info.param.backend)) + "_" + c10::toString(info.param.dtype) +
         (info.param.bfloat16_route ? "_bfloat16_route" : "") + (info.param.amx ? "_amx" : "");
}

/// The route a case runs under: one of the bfloat16 routes forced, or the one this CPU prefers. Where the CPU
/// has the forced route, the fused kernel's bfloat16 products take it (else the case would test another route).
std::unique_ptr<Bf16RouteScope> route_scope(const BackendDtype& p) {
  if (!p.bfloat16_route) return nullptr;
  auto scope = std::make_unique<Bf16RouteScope>(p.amx);
  if (ops::cpu::hardware_capability_limit() == ops::cpu::Capability::Avx512Bf16) {
    EXPECT_EQ(ops::cpu::flash_product_route(at::kBFloat16, /*pairs_fit=*/true),
              p.amx ? ops::cpu::ProductRoute::AmxTiles : ops::cpu::ProductRoute::BfloatPairs);
  }
  return scope;
}

// ------------------------------------------------------------------------------------------------------------
// Math and Fused against the float64 reference

/// A backend and dtype per case; the AMX case skips where the machine has no AMX tiles (skip_amx_case_without_tiles).
class BackendDtypeTest : public ::testing::TestWithParam<BackendDtype> {
 protected:
  void SetUp() override {
    skip_amx_case_without_tiles(GetParam().amx);
  }
};

class Variants : public BackendDtypeTest {};

TEST_P(Variants, ForwardAndGradientsMatchFloat64Reference) {
  const auto route = route_scope(GetParam());
  const Backend backend = GetParam().backend;
  const torch::Dtype dtype = GetParam().dtype;
  uint64_t seed = 1000;
  for (const VariantCase& c : variant_cases()) {
    SCOPED_TRACE(describe(c.shape, c.variant));
    const Problem p = make_problem(c.shape, c.variant, ++seed);
    const torch::Tensor cotangent = torch::randn({c.shape.batch, c.shape.heads, c.shape.tq, c.shape.d}, kF64);
    const Result expected = run_reference(p, c.variant, dtype, cotangent);
    const Result actual = run_attn(p, c.variant, dtype, backend, cotangent);
    expect_results_match(actual, expected, dtype);
  }
}

// A query that may attend to no key (the window or causal band past the keys, or every key padded) gets an
// exactly zero output row and exactly zero d query, with or without sinks, and no gradient is NaN.
TEST_P(Variants, RowsWithoutKeysGiveZerosAndFiniteGradients) {
  const auto route = route_scope(GetParam());
  const Backend backend = GetParam().backend;
  const torch::Dtype dtype = GetParam().dtype;
  const std::vector<VariantCase> cases = {
      {kTall, Variant("causal bottom-right, Tq > Tk").with_causal()},
      {kTall, Variant("window top-left past the last key").top_left().with_window(2, 1)},
      {kTall, Variant("window right only, bottom-right, softcap").with_window(-1, 3).with_softcap(3.0)},
      {kGqaTall, Variant("GQA, causal window, ALiBi [B, H]").with_causal().with_window(7, 0).with_alibi(2)},
      {kSmall, Variant("a fully padded batch row, ALiBi, softcap").with_padding().with_alibi(1).with_softcap(2.0)},
  };
  uint64_t seed = 2000;
  for (const VariantCase& c : cases) {
    for (bool with_sinks : {false, true}) {
      Variant var = c.variant;
      var.sinks = with_sinks;
      SCOPED_TRACE(describe(c.shape, var) + (with_sinks ? ", sinks" : ", no sinks"));
      const Problem p = make_problem(c.shape, var, ++seed);
      const torch::Tensor blocked = allowed_pairs(c.shape, var, p.padding).any(-1).logical_not();  // [B, H, Tq]
      ASSERT_TRUE(blocked.any().item<bool>()) << "the case must leave some row without keys";
      ASSERT_FALSE(blocked.all().item<bool>());

      const auto leaf = [&](const torch::Tensor& t) { return t.to(dtype).clone().requires_grad_(true); };
      const torch::Tensor q = leaf(p.q), k = leaf(p.k), v = leaf(p.v);
      const torch::Tensor sinks = with_sinks ? leaf(p.sinks) : torch::Tensor();
      const torch::Tensor out =
          attn::scaled_dot_product_attention(q, k, v, problem_options(p, var, dtype, backend, sinks));
      const torch::Tensor rows = blocked.unsqueeze(-1);
      EXPECT_TRUE(out.detach().masked_select(rows.expand_as(out)).eq(0).all().item<bool>())
          << "a row without keys must be exactly zero";
      EXPECT_TRUE(torch::isfinite(out.detach()).all().item<bool>());
      const torch::Tensor cotangent = torch::randn(out.sizes(), kF64);
      (out * cotangent.to(dtype)).sum().backward();
      for (const torch::Tensor& g : {q.grad(), k.grad(), v.grad()}) {
        ASSERT_TRUE(g.defined());
        EXPECT_TRUE(torch::isfinite(g).all().item<bool>());
      }
      EXPECT_TRUE(q.grad().masked_select(rows.expand_as(q.grad())).eq(0).all().item<bool>())
          << "d query of a row without keys must be exactly zero";
      if (with_sinks) {
        ASSERT_TRUE(sinks.grad().defined());
        EXPECT_TRUE(torch::isfinite(sinks.grad()).all().item<bool>());
      }
      // And the rows that do see keys still match the reference.
      expect_results_match(run_attn(p, var, dtype, backend, cotangent), run_reference(p, var, dtype, cotangent), dtype);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Variants,
                         ::testing::Values(BackendDtype{Backend::Math, torch::kFloat64},
                                           BackendDtype{Backend::Math, torch::kFloat32},
                                           BackendDtype{Backend::Math, torch::kBFloat16},
                                           BackendDtype{Backend::Fused, torch::kFloat64},
                                           BackendDtype{Backend::Fused, torch::kFloat32},
                                           BackendDtype{Backend::Fused, torch::kBFloat16},
                                           BackendDtype{Backend::Fused, torch::kBFloat16, true},
                                           BackendDtype{Backend::Fused, torch::kBFloat16, true, true}
#if TORCH_VERSION_MAJOR >= 2  // 1.x refuses float16 on the CPU at the front door (test_errors.cpp)
                                           ,
                                           BackendDtype{Backend::Fused, torch::kHalf}
#endif
                                           ),
                         backend_dtype_name);

// Backend::Torch folds the window and ALiBi into its mask (softcap and sinks it refuses: see the errors below).
TEST(VariantsOnTorchBackend, WindowAndAlibiMatchFloat64Reference) {
  const std::vector<VariantCase> cases = {
      {kWide, Variant("causal window, ALiBi [H]").with_causal().with_window(20, 0).with_alibi(1)},
      {kTall, Variant("window, ALiBi [B, H], rows without keys").with_window(4, 2).with_alibi(2)},
      {kGqa, Variant("GQA, window, key padding").with_window(8, 8).with_padding()},
      {kTall, Variant("ALiBi [H] alone: a bias and no blocked pair").with_alibi(1)},
  };
  uint64_t seed = 3000;
  for (torch::Dtype dtype : {torch::kFloat64, torch::kFloat32}) {
    for (const VariantCase& c : cases) {
      SCOPED_TRACE(describe(c.shape, c.variant) + " " + c10::toString(dtype));
      const Problem p = make_problem(c.shape, c.variant, ++seed);
      const torch::Tensor expected = reference_attention(
          rounded(p.q, dtype), rounded(p.k, dtype), rounded(p.v, dtype), c.variant, rounded(p.slopes, dtype),
          p.padding, rounded(p.additive, dtype), torch::Tensor());
      const torch::Tensor actual = attn::scaled_dot_product_attention(
          p.q.to(dtype), p.k.to(dtype), p.v.to(dtype), problem_options(p, c.variant, dtype, Backend::Torch, {}));
      EXPECT_CLOSE(actual.to(kF64), expected, tolerance(dtype));
    }
  }
}

// ------------------------------------------------------------------------------------------------------------
// Finite differences (float64): softcap, ALiBi and sinks, the sink gradient included

torch::Tensor leaf64(at::IntArrayRef shape) { return torch::randn(shape, kF64).requires_grad_(true); }

TEST(VariantGradCheck, SoftcapAlibiAndSinksMatchFiniteDifferences) {
  for (Backend backend : {Backend::Fused, Backend::Math}) {
    const std::string on = std::string(", ") + to_string(backend);
    torch::manual_seed(31);
    {
      const torch::Tensor q = leaf64({1, 2, 5, 4}), k = leaf64({1, 2, 7, 4}), v = leaf64({1, 2, 7, 3});
      const SdpaOptions o = SdpaOptions().softcap(1.0).scale(1.0).backend(backend);
      expect_gradients_match_finite_differences([&] { return attn::scaled_dot_product_attention(q, k, v, o); },
                                                {q, k, v}, "softcap" + on);
    }
    {
      const torch::Tensor q = leaf64({2, 2, 5, 4}), k = leaf64({2, 2, 7, 4}), v = leaf64({2, 2, 7, 3});
      const torch::Tensor slopes = torch::tensor({{0.5, 0.25}, {0.125, 1.0}}, kF64);
      const SdpaOptions o = SdpaOptions().alibi_slopes(slopes).causal(true).backend(backend);
      expect_gradients_match_finite_differences([&] { return attn::scaled_dot_product_attention(q, k, v, o); },
                                                {q, k, v}, "ALiBi [B, H], causal" + on);
    }
    {
      // Top-left, Tq > Tk: query 6 sees no key.
      const torch::Tensor q = leaf64({1, 2, 7, 4}), k = leaf64({1, 2, 5, 4}), v = leaf64({1, 2, 5, 3});
      const SdpaOptions o = SdpaOptions()
                                .alibi_slopes(torch::tensor({0.75, 0.3}, kF64))
                                .window(1, 1)
                                .causal_alignment(CausalAlignment::TopLeft)
                                .backend(backend);
      expect_gradients_match_finite_differences([&] { return attn::scaled_dot_product_attention(q, k, v, o); },
                                                {q, k, v}, "ALiBi [H], window top-left" + on);
    }
    {
      // Bottom-right causal with Tq > Tk: queries 0..2 see no key (and give the sinks no gradient).
      const torch::Tensor q = leaf64({1, 2, 7, 4}), k = leaf64({1, 2, 4, 4}), v = leaf64({1, 2, 4, 3});
      const torch::Tensor sinks = leaf64({2});
      const SdpaOptions o = SdpaOptions().sinks(sinks).causal(true).backend(backend);
      expect_gradients_match_finite_differences([&] { return attn::scaled_dot_product_attention(q, k, v, o); },
                                                {q, k, v, sinks}, "sinks, causal Tq > Tk" + on);
    }
    {
      const torch::Tensor q = leaf64({2, 4, 6, 4}), k = leaf64({2, 2, 5, 4}), v = leaf64({2, 2, 5, 3});
      const torch::Tensor sinks = leaf64({4});
      torch::Tensor padding = torch::zeros({2, 1, 5}, torch::kBool);
      padding.index_put_({0, 0, 4}, true);
      const SdpaOptions o = SdpaOptions()
                                .masks(AttentionMasks().key_padding_mask(padding))
                                .causal(true)
                                .window(2, 0)
                                .softcap(2.0)
                                .alibi_slopes(torch::tensor({0.5, 0.25, 0.125, 0.0625}, kF64))
                                .sinks(sinks)
                                .backend(backend);
      expect_gradients_match_finite_differences([&] { return attn::scaled_dot_product_attention(q, k, v, o); },
                                                {q, k, v, sinks}, "GQA, all four, key padding" + on);
    }
  }
}

// Unbatched [T, d] inputs have one head: [1] sinks and slopes apply to it on every backend, the weights
// included, against the float64 definition on the same problem as [1, 1, T, d].
TEST(VariantShapes, UnbatchedInputsTakeOneSinkAndOneSlope) {
  torch::manual_seed(32);
  const Variant var = Variant("causal, ALiBi [H], sinks").with_causal().with_alibi(1).with_sinks();
  const torch::Tensor q = torch::randn({5, 8}, kF64), k = torch::randn({7, 8}, kF64), v = torch::randn({7, 3}, kF64);
  const torch::Tensor slopes = torch::tensor({0.25}, kF64), sinks = torch::tensor({0.7}, kF64);
  const auto four_d = [](const torch::Tensor& x) { return x.view({1, 1, x.size(0), x.size(1)}); };
  const torch::Tensor expected =
      reference_attention(four_d(q), four_d(k), four_d(v), var, slopes, {}, {}, sinks).view({5, 3});
  for (Backend backend : {Backend::Auto, Backend::Math, Backend::Fused}) {
    SCOPED_TRACE(to_string(backend));
    const SdpaOptions o = SdpaOptions().causal(true).alibi_slopes(slopes).sinks(sinks).backend(backend);
    EXPECT_CLOSE(attn::scaled_dot_product_attention(q, k, v, o), expected, tolerance(kF64));
  }
  const auto [out, weights] = attn::scaled_dot_product_attention_with_weights(
      q, k, v, SdpaOptions().causal(true).alibi_slopes(slopes).sinks(sinks));
  EXPECT_CLOSE(out, expected, tolerance(kF64));
  EXPECT_CLOSE(weights.matmul(v), expected, tolerance(kF64));
  // LibTorch's SDPA takes no sinks: the slope alone there.
  const Variant alibi_only = Variant("causal, ALiBi [H]").with_causal().with_alibi(1);
  EXPECT_CLOSE(attn::scaled_dot_product_attention(
                   q, k, v, SdpaOptions().causal(true).alibi_slopes(slopes).backend(Backend::Torch)),
               reference_attention(four_d(q), four_d(k), four_d(v), alibi_only, slopes, {}, {}, {}).view({5, 3}),
               tolerance(kF64));
}

// An empty batch gives an empty result with per-row ALiBi slopes too, [0, H] or [1, H].
TEST(VariantShapes, EmptyBatchWithPerRowSlopes) {
  const torch::Tensor q = torch::randn({0, 2, 5, 8}), k = torch::randn({0, 2, 6, 8}), v = torch::randn({0, 2, 6, 4});
  for (const torch::Tensor& slopes : {torch::ones({0, 2}), torch::ones({1, 2})}) {
    for (Backend backend : {Backend::Auto, Backend::Math, Backend::Fused}) {
      SCOPED_TRACE(::testing::Message() << "slopes " << slopes.sizes() << ", " << to_string(backend));
      const torch::Tensor out =
          attn::scaled_dot_product_attention(q, k, v, SdpaOptions().alibi_slopes(slopes).backend(backend));
      EXPECT_EQ(out.sizes(), (std::vector<int64_t>{0, 2, 5, 4}));
    }
  }
}

// ------------------------------------------------------------------------------------------------------------
// Packed variable-length batches

struct VarlenCase {
  Variant variant;  ///< alibi 1: [H], 2: [N, H]
  std::vector<int64_t> len_q, len_k;
  int64_t heads = 4, kv_heads = 2, d = 16;
  int64_t extra_max = 0;  ///< max_seqlen passed above the longest sequence by this much
};

std::vector<int64_t> cumulative(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> cu{0};
  for (int64_t l : lengths) cu.push_back(cu.back() + l);
  return cu;
}

int64_t longest(const std::vector<int64_t>& lengths) {
  return lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
}

torch::Tensor long_tensor(const std::vector<int64_t>& values) { return torch::tensor(values, torch::kLong); }

struct VarlenProblem {
  torch::Tensor q, k, v;  ///< float64 [total_q, H, d], [total_k, H_kv, d], [total_k, H_kv, d]
  torch::Tensor slopes;   ///< [H] or [N, H]
  torch::Tensor sinks;    ///< [H]
};

VarlenProblem make_varlen_problem(const VarlenCase& c, uint64_t seed) {
  torch::manual_seed(seed);
  const int64_t total_q = cumulative(c.len_q).back(), total_k = cumulative(c.len_k).back();
  VarlenProblem p;
  p.q = torch::randn({total_q, c.heads, c.d}, kF64);
  p.k = torch::randn({total_k, c.kv_heads, c.d}, kF64);
  p.v = torch::randn({total_k, c.kv_heads, c.d}, kF64);
  if (c.variant.alibi == 1) p.slopes = test_slopes(c.heads, 0);
  if (c.variant.alibi == 2) p.slopes = test_slopes(c.heads, static_cast<int64_t>(c.len_q.size()));
  if (c.variant.sinks) p.sinks = torch::randn({c.heads}, kF64) * 1.5 + 0.5;
  return p;
}

/// Each sequence alone through attn::scaled_dot_product_attention ([1, H, len, d] views of the packed rows),
/// concatenated back to [total_q, H, d_v]. Autograd reaches the packed tensors through the views.
torch::Tensor per_sequence(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const std::vector<int64_t>& cu_q, const std::vector<int64_t>& cu_k,
                           const SdpaOptions& base, const torch::Tensor& slopes, const torch::Tensor& sinks) {
  const auto heads_first = [](const torch::Tensor& t, int64_t start, int64_t length) {
    return t.narrow(0, start, length).transpose(0, 1).unsqueeze(0);
  };
  std::vector<torch::Tensor> rows;
  for (int64_t s = 0; s + 1 < static_cast<int64_t>(cu_q.size()); ++s) {
    const int64_t lq = cu_q[s + 1] - cu_q[s], lk = cu_k[s + 1] - cu_k[s];
    SdpaOptions o = base;
    if (slopes.defined()) o.alibi_slopes(slopes.dim() == 1 ? slopes : slopes.select(0, s));
    if (sinks.defined()) o.sinks(sinks);
    const torch::Tensor out = attn::scaled_dot_product_attention(
        heads_first(q, cu_q[s], lq), heads_first(k, cu_k[s], lk), heads_first(v, cu_k[s], lk), o);
    rows.push_back(out.squeeze(0).transpose(0, 1));
  }
  return torch::cat(rows, 0);
}

std::vector<VarlenCase> varlen_cases() {
  using V = Variant;
  const std::vector<int64_t> ragged = {1, 7, 0, 300, 513, 1};
  const std::vector<int64_t> uneven_q = {1, 7, 300, 3, 0, 2}, uneven_k = {1, 20, 130, 513, 4, 0};
  return {
      {V("no variant"), ragged, ragged},
      {V("causal").with_causal(), ragged, ragged},
      {V("causal + window").with_causal().with_window(32, 0), ragged, ragged},
      {V("window both sides, not causal").with_window(20, 5), ragged, ragged},
      {V("causal top-left + window, equal lengths").with_causal().top_left().with_window(40, -1), ragged, ragged},
      {V("causal window + softcap + ALiBi [N, H] + sinks").with_causal().with_window(64, 0).with_softcap(5.0)
           .with_alibi(2).with_sinks(),
       ragged, ragged},
      {V("ALiBi [H] + sinks, max_seqlen above the longest").with_alibi(1).with_sinks(), ragged, ragged, 4, 2, 16, 9},
      {V("len_q != len_k, causal bottom-right per sequence").with_causal(), uneven_q, uneven_k},
      {V("len_q != len_k, window + softcap + ALiBi [N, H] + sinks").with_window(10, 2).with_softcap(3.0).with_alibi(2)
           .with_sinks(),
       uneven_q, uneven_k},
      {V("T = 1100, causal window, multi-query").with_causal().with_window(128, 0), {1100, 5}, {1100, 5}, 2, 1, 16},
  };
}

class Varlen : public BackendDtypeTest {};

// (a) and (c): the packed output and the gradients of the packed q, k, v (and sinks) equal those of each sequence
// run alone (float64, Backend::Math, on the same rounded inputs).
TEST_P(Varlen, MatchesEachSequenceAlone) {
  const auto route = route_scope(GetParam());
  const Backend backend = GetParam().backend;
  const torch::Dtype dtype = GetParam().dtype;
  uint64_t seed = 4000;
  for (const VarlenCase& c : varlen_cases()) {
    SCOPED_TRACE(c.variant.name);
    const VarlenProblem p = make_varlen_problem(c, ++seed);
    const std::vector<int64_t> cu_q = cumulative(c.len_q), cu_k = cumulative(c.len_k);
    const torch::Tensor cotangent = torch::randn({cu_q.back(), c.heads, c.d}, kF64);

    Result expected;
    {
      const auto leaf = [&](const torch::Tensor& t) { return rounded(t, dtype).detach().clone().requires_grad_(true); };
      const torch::Tensor q = leaf(p.q), k = leaf(p.k), v = leaf(p.v);
      const torch::Tensor sinks = p.sinks.defined() ? leaf(p.sinks) : torch::Tensor();
      const torch::Tensor out = per_sequence(q, k, v, cu_q, cu_k, variant_options(c.variant, Backend::Math),
                                             rounded(p.slopes, dtype), sinks);
      (out * rounded(cotangent, dtype)).sum().backward();
      expected = {out.detach(), q.grad(), k.grad(), v.grad(), sinks.defined() ? sinks.grad() : torch::Tensor()};
    }
    Result actual;
    {
      const auto leaf = [&](const torch::Tensor& t) { return t.to(dtype).clone().requires_grad_(true); };
      const torch::Tensor q = leaf(p.q), k = leaf(p.k), v = leaf(p.v);
      const torch::Tensor sinks = p.sinks.defined() ? leaf(p.sinks) : torch::Tensor();
      SdpaOptions o = variant_options(c.variant, backend);
      if (p.slopes.defined()) o.alibi_slopes(p.slopes.to(dtype));
      if (sinks.defined()) o.sinks(sinks);
      const torch::Tensor out =
          attn::varlen_attention(q, k, v, long_tensor(cu_q), long_tensor(cu_k), longest(c.len_q) + c.extra_max,
                                 longest(c.len_k) + c.extra_max, o);
      ASSERT_EQ(out.scalar_type(), dtype);
      ASSERT_EQ(out.sizes(), (std::vector<int64_t>{cu_q.back(), c.heads, c.d}));
      (out * cotangent.to(dtype)).sum().backward();
      const auto f64 = [](const torch::Tensor& t) { return t.defined() ? t.to(kF64) : t; };
      actual = {out.detach().to(kF64), f64(q.grad()), f64(k.grad()), f64(v.grad()),
                sinks.defined() ? f64(sinks.grad()) : torch::Tensor()};
    }
    expect_results_match(actual, expected, dtype);
  }
}

// (b): the packed output equals the padded batch [B, H, T, d] (q and k padded on the right, the padding masked
// as keys) on the valid rows. With equal query and key lengths, bottom-right per sequence and in the padded
// batch are the same diagonal.
TEST_P(Varlen, MatchesThePaddedBatchOnTheValidRows) {
  const auto route = route_scope(GetParam());
  const Backend backend = GetParam().backend;
  const torch::Dtype dtype = GetParam().dtype;
  const std::vector<int64_t> lengths = {7, 1, 300, 0, 130};
  const int64_t batch = static_cast<int64_t>(lengths.size()), t = 300, heads = 4, kv_heads = 2, d = 16;
  const torch::Tensor length_tensor = long_tensor(lengths);
  uint64_t seed = 5000;
  for (const Variant& var :
       {Variant("causal window + softcap + ALiBi [N, H] + sinks").with_causal().with_window(20, 0).with_softcap(4.0)
            .with_alibi(2).with_sinks(),
        Variant("window both sides + ALiBi [H]").with_window(10, 10).with_alibi(1)}) {
    SCOPED_TRACE(var.name);
    torch::manual_seed(++seed);
    const torch::Tensor q = torch::randn({batch, t, heads, d}, kF64);
    const torch::Tensor k = torch::randn({batch, t, kv_heads, d}, kF64);
    const torch::Tensor v = torch::randn({batch, t, kv_heads, d}, kF64);
    const torch::Tensor slopes = var.alibi == 2 ? test_slopes(heads, batch) : test_slopes(heads, 0);
    const torch::Tensor sinks = var.sinks ? torch::randn({heads}, kF64) : torch::Tensor();

    const PackedBatch pq = attn::pack_padded(q, length_tensor), pk = attn::pack_padded(k, length_tensor),
                      pv = attn::pack_padded(v, length_tensor);
    ASSERT_EQ(pq.max_seqlen, 300);
    SdpaOptions o = variant_options(var, backend).alibi_slopes(slopes.to(dtype));
    if (sinks.defined()) o.sinks(sinks.to(dtype));
    const torch::Tensor actual = attn::varlen_attention(pq.data.to(dtype), pk.data.to(dtype), pv.data.to(dtype),
                                                        pq.cu_seqlens, pk.cu_seqlens, pq.max_seqlen, pk.max_seqlen, o);

    const torch::Tensor padding = (torch::arange(t).unsqueeze(0) >= length_tensor.unsqueeze(1)).unsqueeze(1);
    const auto heads_first = [&](const torch::Tensor& x) { return rounded(x, dtype).permute({0, 2, 1, 3}); };
    SdpaOptions padded_options = variant_options(var, Backend::Math)
                                     .masks(AttentionMasks().key_padding_mask(padding))
                                     .alibi_slopes(rounded(slopes, dtype));
    if (sinks.defined()) padded_options.sinks(rounded(sinks, dtype));
    const torch::Tensor padded = attn::scaled_dot_product_attention(heads_first(q), heads_first(k), heads_first(v),
                                                                    padded_options);  // [B, H, T, d]
    const torch::Tensor expected = attn::pack_padded(padded.permute({0, 2, 1, 3}), length_tensor).data;
    EXPECT_CLOSE(actual.to(kF64), expected, tolerance(dtype));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Varlen,
                         ::testing::Values(BackendDtype{Backend::Math, torch::kFloat64},
                                           BackendDtype{Backend::Math, torch::kFloat32},
                                           BackendDtype{Backend::Math, torch::kBFloat16},
                                           BackendDtype{Backend::Fused, torch::kFloat64},
                                           BackendDtype{Backend::Fused, torch::kFloat32},
                                           BackendDtype{Backend::Fused, torch::kBFloat16},
                                           BackendDtype{Backend::Fused, torch::kBFloat16, true},
                                           BackendDtype{Backend::Fused, torch::kBFloat16, true, true}
#if TORCH_VERSION_MAJOR >= 2
                                           ,
                                           BackendDtype{Backend::Fused, torch::kHalf}
#endif
                                           ),
                         backend_dtype_name);

// pack_padded, unpack_padded and packed_positions on a batch small enough to write out by hand.
TEST(PackPadded, PackUnpackAndPositionsByHand) {
  const torch::Tensor padded = torch::arange(18, torch::kFloat32).view({3, 3, 2});
  const torch::Tensor expected_data =
      torch::tensor({{0.f, 1.f}, {2.f, 3.f}, {12.f, 13.f}, {14.f, 15.f}, {16.f, 17.f}}, torch::kFloat32);
  for (torch::Dtype length_dtype : {torch::kLong, torch::kInt}) {
    SCOPED_TRACE(c10::toString(length_dtype));
    const PackedBatch packed = attn::pack_padded(padded, torch::tensor({2, 0, 3}, length_dtype));
    EXPECT_TRUE(packed.data.equal(expected_data)) << packed.data;
    EXPECT_EQ(packed.cu_seqlens.scalar_type(), torch::kLong);
    EXPECT_EQ(packed.cu_seqlens.device(), torch::Device(torch::kCPU));
    EXPECT_TRUE(packed.cu_seqlens.equal(torch::tensor({0, 2, 2, 5}, torch::kLong))) << packed.cu_seqlens;
    EXPECT_EQ(packed.max_seqlen, 3);
  }

  const torch::Tensor cu = torch::tensor({0, 2, 2, 5}, torch::kLong);
  const torch::Tensor expected_padded = torch::tensor({{{0.f, 1.f}, {2.f, 3.f}, {0.f, 0.f}},
                                                       {{0.f, 0.f}, {0.f, 0.f}, {0.f, 0.f}},
                                                       {{12.f, 13.f}, {14.f, 15.f}, {16.f, 17.f}}},
                                                      torch::kFloat32);
  const torch::Tensor unpacked = attn::unpack_padded(expected_data, cu);
  EXPECT_TRUE(unpacked.equal(expected_padded)) << unpacked;
  const torch::Tensor wider = attn::unpack_padded(expected_data, cu, 4);
  ASSERT_EQ(wider.sizes(), (std::vector<int64_t>{3, 4, 2}));
  EXPECT_TRUE(wider.narrow(1, 0, 3).equal(expected_padded));
  EXPECT_TRUE(wider.narrow(1, 3, 1).eq(0).all().item<bool>());

  const torch::Tensor positions = attn::packed_positions(cu);
  EXPECT_EQ(positions.scalar_type(), torch::kLong);
  EXPECT_TRUE(positions.equal(torch::tensor({0, 1, 0, 1, 2}, torch::kLong))) << positions;

  // No trailing dimensions: [B, T] -> [total].
  const torch::Tensor flat = torch::tensor({{1.0, 2.0, 3.0, 4.0}, {5.0, 6.0, 7.0, 8.0}}, kF64);
  const PackedBatch flat_packed = attn::pack_padded(flat, torch::tensor({3, 1}, torch::kLong));
  EXPECT_TRUE(flat_packed.data.equal(torch::tensor({1.0, 2.0, 3.0, 5.0}, kF64))) << flat_packed.data;
  EXPECT_TRUE(flat_packed.cu_seqlens.equal(torch::tensor({0, 3, 4}, torch::kLong)));
  EXPECT_TRUE(attn::unpack_padded(flat_packed.data, flat_packed.cu_seqlens)
                  .equal(torch::tensor({{1.0, 2.0, 3.0}, {5.0, 0.0, 0.0}}, kF64)));
  EXPECT_TRUE(attn::packed_positions(flat_packed.cu_seqlens).equal(torch::tensor({0, 1, 2, 0}, torch::kLong)));
  // A packed length no machine can hold: LibTorch's allocation error (c10::Error), not std::bad_alloc.
  EXPECT_THROW(attn::packed_positions(torch::tensor({int64_t{0}, int64_t{1} << 50}, torch::kLong)), c10::Error);
}

// ------------------------------------------------------------------------------------------------------------
// attn::alibi_slopes

/// BLOOM's build_alibi_tensor slopes (transformers), written out in double.
std::vector<double> bloom_slopes(int64_t n) {
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  std::vector<double> slopes;
  const double base = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(p)) - 3)));
  for (int64_t i = 1; i <= p; ++i) slopes.push_back(std::pow(base, static_cast<double>(i)));
  if (p != n) {
    const double extra_base = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(2 * p)) - 3)));
    const int64_t remaining = std::min(p, n - p);
    for (int64_t e = 1; e < 1 + 2 * remaining; e += 2) slopes.push_back(std::pow(extra_base, static_cast<double>(e)));
  }
  return slopes;
}

TEST(AlibiSlopes, StandardSlopes) {
  // 8 heads: 2^(-8i/8) = 2^-i.
  const torch::Tensor eight =
      torch::tensor({0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625}, kF64);
  // 12 heads: those 8, then 16 heads' slopes 2^(-i/2) at the odd i = 1, 3, 5, 7.
  const torch::Tensor twelve = torch::cat(
      {eight, torch::tensor({std::pow(2.0, -0.5), std::pow(2.0, -1.5), std::pow(2.0, -2.5), std::pow(2.0, -3.5)}, kF64)});
  for (const auto& [n, expected] : {std::make_pair(int64_t{8}, eight), std::make_pair(int64_t{12}, twelve)}) {
    SCOPED_TRACE(n);
    const torch::Tensor slopes = attn::alibi_slopes(n);
    EXPECT_EQ(slopes.scalar_type(), torch::kFloat32);
    EXPECT_EQ(slopes.device(), torch::Device(torch::kCPU));
    ASSERT_EQ(slopes.sizes(), (std::vector<int64_t>{n}));
    EXPECT_TRUE(torch::allclose(slopes.to(kF64), expected, 1e-6, 0)) << slopes;
  }
  for (int64_t n = 1; n <= 40; ++n) {
    SCOPED_TRACE(n);
    const torch::Tensor slopes = attn::alibi_slopes(n);
    ASSERT_EQ(slopes.sizes(), (std::vector<int64_t>{n}));
    EXPECT_TRUE(torch::allclose(slopes.to(kF64), torch::tensor(bloom_slopes(n), kF64), 1e-6, 0)) << slopes;
  }
}

// ------------------------------------------------------------------------------------------------------------
// The soft-cap's tanh: an approximation of ours, checked on every instruction set against std::tanh in double

TEST(SoftcapTanh, WithinFourHundredNanoRelativeOfTanhAndNeverPastOne) {
  // A dense grid over the approximation's whole range and past its clamp at 9, an odd count so that the scalar
  // tail runs too, and the special values.
  std::vector<float> inputs;
  for (int64_t i = -240001; i <= 240001; ++i) inputs.push_back(static_cast<float>(i) * 5e-5f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {inf, -inf, 0.0f, -0.0f, 1e-40f, -1e-40f, 1e-20f, std::numeric_limits<float>::max(),
                  -std::numeric_limits<float>::max(), 8.94f, -8.94f, 9.0f, 9.011f}) {
    inputs.push_back(v);
  }
  const size_t special = inputs.size();
  inputs.push_back(std::numeric_limits<float>::quiet_NaN());
  for (auto capability : {ops::cpu::Capability::Default, ops::cpu::Capability::Avx2, ops::cpu::Capability::Avx512}) {
    CapabilityScope scope(capability);
    SCOPED_TRACE(ops::cpu::capability_name(ops::cpu::active_capability()));
    for (float cap : {1.0f, 30.0f}) {
      SCOPED_TRACE(cap);
      std::vector<float> x(inputs.size()), t(inputs.size());
      for (size_t i = 0; i < inputs.size(); ++i) x[i] = inputs[i] * cap;
      const std::vector<float> scores = x;
      ops::cpu::softcap_values(x.data(), static_cast<int64_t>(x.size()), cap, t.data());
      double worst = 0;
      int64_t failures = 0;
      for (size_t i = 0; i < special; ++i) {
        const double expected = std::tanh(static_cast<double>(scores[i]) / cap);
        // Relative error, absolute below FLT_MIN (a subnormal's own spacing is coarser than 5e-7 of it).
        const double error = std::abs(t[i] - expected) / std::max(std::abs(expected), 1.1754944e-38);
        worst = std::max(worst, error);
        const bool bad = !(error <= 5e-7) || std::abs(t[i]) > 1.0f || x[i] != cap * t[i] ||
                         std::signbit(t[i]) != std::signbit(scores[i]);
        if (bad && ++failures <= 5) {
          ADD_FAILURE() << "tanh(" << static_cast<double>(scores[i]) / cap << ") = " << t[i] << ", expected "
                        << expected << " (capped " << x[i] << ")";
        }
      }
      EXPECT_EQ(failures, 0);
      EXPECT_LE(worst, 5e-7);
      EXPECT_TRUE(std::isnan(t.back()) && std::isnan(x.back())) << "NaN in, " << t.back() << " out";
    }
  }
}

// ------------------------------------------------------------------------------------------------------------
// Errors

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// Expects `call` to throw a c10::Error whose message names one of `needles` (case-insensitive).
void expect_error_naming(const std::string& what, const std::function<void()>& call,
                         const std::vector<std::string>& needles) {
  SCOPED_TRACE(what);
  try {
    call();
  } catch (const c10::Error& error) {
    const std::string message = error.what_without_backtrace();
    for (const std::string& needle : needles) {
      if (lowercase(message).find(lowercase(needle)) != std::string::npos) return;
    }
    ADD_FAILURE() << "the error names none of the expected words (first: \"" << needles.front()
                  << "\"); message: " << message;
    return;
  }
  ADD_FAILURE() << "expected an error";
}

TEST(VariantErrors, OptionsAreChecked) {
  torch::manual_seed(1);
  const torch::Tensor q = torch::randn({2, 4, 5, 8}), k = torch::randn({2, 2, 6, 8}), v = torch::randn({2, 2, 6, 8});
  const auto sdpa = [=](const SdpaOptions& o) { attn::scaled_dot_product_attention(q, k, v, o); };
  for (Backend b : {Backend::Math, Backend::Fused}) {
    const std::string on = std::string(" (") + to_string(b) + ")";
    expect_error_naming("window_left = -2" + on, [&] { sdpa(SdpaOptions().window_left(-2).backend(b)); }, {"window_left"});
    expect_error_naming("window_right = -3" + on, [&] { sdpa(SdpaOptions().window(2, -3).backend(b)); }, {"window_right"});
    expect_error_naming("softcap = -1" + on, [&] { sdpa(SdpaOptions().softcap(-1.0).backend(b)); }, {"softcap"});
    expect_error_naming("softcap = inf" + on, [&] { sdpa(SdpaOptions().softcap(INFINITY).backend(b)); }, {"softcap"});
    expect_error_naming("softcap = nan" + on, [&] { sdpa(SdpaOptions().softcap(NAN).backend(b)); }, {"softcap"});
    expect_error_naming("alibi_slopes [H + 1]" + on, [&] { sdpa(SdpaOptions().alibi_slopes(torch::ones({5})).backend(b)); },
                        {"alibi_slopes"});
    expect_error_naming("alibi_slopes [B + 1, H]" + on,
                        [&] { sdpa(SdpaOptions().alibi_slopes(torch::ones({3, 4})).backend(b)); }, {"alibi_slopes"});
    expect_error_naming("alibi_slopes [B, H, 1]" + on,
                        [&] { sdpa(SdpaOptions().alibi_slopes(torch::ones({2, 4, 1})).backend(b)); }, {"alibi_slopes"});
    expect_error_naming("alibi_slopes integer" + on,
                        [&] { sdpa(SdpaOptions().alibi_slopes(torch::ones({4}, torch::kLong)).backend(b)); },
                        {"alibi_slopes"});
    expect_error_naming("sinks [H + 1]" + on, [&] { sdpa(SdpaOptions().sinks(torch::zeros({5})).backend(b)); }, {"sinks"});
    expect_error_naming("sinks [H_kv]" + on, [&] { sdpa(SdpaOptions().sinks(torch::zeros({2})).backend(b)); }, {"sinks"});
    expect_error_naming("sinks [B, H]" + on, [&] { sdpa(SdpaOptions().sinks(torch::zeros({2, 4})).backend(b)); }, {"sinks"});
  }
  expect_error_naming("Backend::Torch with softcap", [&] { sdpa(SdpaOptions().softcap(5.0).backend(Backend::Torch)); },
                      {"softcap"});
  expect_error_naming("Backend::Torch with sinks",
                      [&] { sdpa(SdpaOptions().sinks(torch::zeros({4})).backend(Backend::Torch)); }, {"sinks"});
}

TEST(VariantErrors, VarlenArgumentsAreChecked) {
  torch::manual_seed(2);
  const torch::Tensor q = torch::randn({10, 4, 8}), k = torch::randn({12, 2, 8}), v = torch::randn({12, 2, 8});
  const torch::Tensor cu_q = long_tensor({0, 4, 10}), cu_k = long_tensor({0, 5, 12});
  const auto varlen = [=](const torch::Tensor& cq, const torch::Tensor& ck, int64_t mq, int64_t mk,
                          const SdpaOptions& o = {}) { attn::varlen_attention(q, k, v, cq, ck, mq, mk, o); };
  // The valid call runs.
  EXPECT_NO_THROW(varlen(cu_q, cu_k, 6, 7));
  for (Backend b : {Backend::Math, Backend::Fused}) {
    const std::string on = std::string(" (") + to_string(b) + ")";
    const SdpaOptions base = SdpaOptions().backend(b);
    expect_error_naming("a key padding mask" + on, [&] {
      varlen(cu_q, cu_k, 6, 7, SdpaOptions(base).masks(AttentionMasks().key_padding_mask(torch::zeros({12}, torch::kBool))));
    }, {"mask"});
    expect_error_naming("an attend mask" + on, [&] {
      varlen(cu_q, cu_k, 6, 7, SdpaOptions(base).masks(AttentionMasks().attend_mask(torch::ones({10, 12}, torch::kBool))));
    }, {"mask"});
    expect_error_naming("cu_seqlens_q not starting at 0" + on, [&] { varlen(long_tensor({1, 4, 10}), cu_k, 6, 7, base); },
                        {"cu_seqlens_q"});
    expect_error_naming("cu_seqlens_q decreasing" + on,
                        [&] { varlen(long_tensor({0, 7, 5, 10}), long_tensor({0, 4, 8, 12}), 7, 7, base); },
                        {"cu_seqlens_q"});
    expect_error_naming("cu_seqlens_q last != total_q" + on, [&] { varlen(long_tensor({0, 4, 9}), cu_k, 6, 7, base); },
                        {"cu_seqlens_q"});
    expect_error_naming("cu_seqlens_k last != total_k" + on, [&] { varlen(cu_q, long_tensor({0, 5, 13}), 6, 8, base); },
                        {"cu_seqlens_k"});
    expect_error_naming("cu_seqlens_k decreasing" + on,
                        [&] { varlen(long_tensor({0, 4, 6, 10}), long_tensor({0, 6, 5, 12}), 6, 7, base); },
                        {"cu_seqlens_k"});
    expect_error_naming("cu_seqlens of different sizes" + on,
                        [&] { varlen(cu_q, long_tensor({0, 5, 8, 12}), 6, 7, base); }, {"cu_seqlens"});
    expect_error_naming("cu_seqlens_q floating" + on,
                        [&] { varlen(torch::tensor({0.0, 4.0, 10.0}), cu_k, 6, 7, base); }, {"cu_seqlens_q"});
    expect_error_naming("max_seqlen_q too small" + on, [&] { varlen(cu_q, cu_k, 5, 7, base); }, {"max_seqlen_q"});
    expect_error_naming("max_seqlen_k too small" + on, [&] { varlen(cu_q, cu_k, 6, 6, base); }, {"max_seqlen_k"});
    expect_error_naming("top-left with len_q != len_k, causal" + on, [&] {
      varlen(cu_q, cu_k, 6, 7, SdpaOptions(base).causal(true).causal_alignment(CausalAlignment::TopLeft));
    }, {"TopLeft", "top-left", "top left"});
    expect_error_naming("alibi_slopes [N + 1, H]" + on,
                        [&] { varlen(cu_q, cu_k, 6, 7, SdpaOptions(base).alibi_slopes(torch::ones({3, 4}))); },
                        {"alibi_slopes"});
    expect_error_naming("sinks [H + 1]" + on,
                        [&] { varlen(cu_q, cu_k, 6, 7, SdpaOptions(base).sinks(torch::zeros({5}))); }, {"sinks"});
    expect_error_naming("query [1, total, H, d]" + on, [&] {
      attn::varlen_attention(q.unsqueeze(0), k, v, cu_q, cu_k, 6, 7, base);
    }, {"query"});
  }
  expect_error_naming("unpack_padded max_len below the longest",
                      [&] { attn::unpack_padded(q, cu_q, 5); }, {"max_len"});
  expect_error_naming("pack_padded lengths above T",
                      [&] { attn::pack_padded(torch::randn({2, 3, 4}), long_tensor({2, 4})); }, {"lengths"});
  expect_error_naming("pack_padded lengths of the wrong size",
                      [&] { attn::pack_padded(torch::randn({2, 3, 4}), long_tensor({2, 1, 1})); }, {"lengths"});
}

// ------------------------------------------------------------------------------------------------------------
// The decode kernel (a KV cache, few queries per row) with every variant

// Each row's newest Tq queries against its own cached keys: bottom-right, so the float64 formula on the row's
// used prefix is the reference. Lengths cross the decode kernel's 256-key splits, and a window of 63 leaves
// whole splits unread. The decode op is called directly (so the kernel runs), and attention_with_kv_cache with
// Backend::Math takes the general route on the same cache. Groups of 4 query heads: 4, 12 and 20 rows per K/V
// head, the last on AMX's tiles in bfloat16 where the CPU has them (and once with them off).
TEST(VariantDecode, DecodeKernelAndCacheRouteMatchFloat64Reference) {
  const std::vector<int64_t> lengths{600, 5};
  const int64_t B = 2, H = 8, H_kv = 2, capacity = 700, d = 16;
  struct Route {
    torch::Dtype dtype;
    bool amx;  // bfloat16: AMX's tiles on (where the CPU has them) or off
  };
  std::vector<Route> routes{{torch::kFloat64, false}, {torch::kFloat32, false}, {torch::kBFloat16, false}};
  if (amx_runs_here("the decode kernel's AMX case was left out")) routes.push_back({torch::kBFloat16, true});
  const std::vector<Variant> variants{
      Variant("causal window 63").with_causal().with_window(63, 0),
      Variant("softcap").with_causal().with_softcap(2.0),
      Variant("alibi [H]").with_causal().with_alibi(1),
      Variant("alibi [B, H] window").with_causal().with_alibi(2).with_window(100, 0),
      Variant("sinks").with_causal().with_sinks(),
      Variant("everything, not causal").with_window(40, 2).with_softcap(3.0).with_alibi(1).with_sinks(),
  };
  torch::NoGradGuard no_grad;
  for (const Variant& var : variants) {
    for (int64_t tq : {1, 3, 5}) {
      for (const Route& route : routes) {
        const torch::Dtype dtype = route.dtype;
        const AmxTilesScope tiles(route.amx);
        torch::manual_seed(7);
        const torch::Tensor q = torch::randn({B, H, tq, d}, kF64);
        const torch::Tensor kc = torch::randn({B, H_kv, capacity, d}, kF64);
        const torch::Tensor vc = torch::randn({B, H_kv, capacity, d}, kF64);
        const torch::Tensor slopes = var.alibi == 1 ? test_slopes(H, 0) : var.alibi == 2 ? test_slopes(H, B) : torch::Tensor();
        const torch::Tensor sinks = var.sinks ? torch::randn({H}, kF64) + 1.0 : torch::Tensor();
        const torch::Tensor key_lengths = torch::tensor(lengths, torch::kLong);
        const torch::Tensor query_starts = key_lengths - tq;
        SdpaOptions options = variant_options(var, Backend::Auto);
        if (slopes.defined()) options.alibi_slopes(slopes.to(dtype));
        if (sinks.defined()) options.sinks(sinks.to(dtype));
        const auto optional = [](const torch::Tensor& t) {
          return t.defined() ? c10::optional<torch::Tensor>(t) : c10::nullopt;
        };
        const torch::Tensor kernel = ops::decode_attention(
            q.to(dtype), kc.to(dtype), vc.to(dtype), query_starts, key_lengths, var.causal, c10::nullopt, var.left,
            var.right, var.softcap, optional(options.alibi_slopes()), optional(options.sinks()));
        const torch::Tensor general = attention_with_kv_cache(q.to(dtype), kc.to(dtype), vc.to(dtype), query_starts,
                                                              key_lengths, SdpaOptions(options).backend(Backend::Math));
        for (int64_t b = 0; b < B; ++b) {
          const int64_t L = lengths[b];
          const torch::Tensor row_slopes = !slopes.defined() ? slopes : slopes.dim() == 1 ? slopes : slopes.narrow(0, b, 1);
          const torch::Tensor expected = reference_attention(
              rounded(q.narrow(0, b, 1), dtype), rounded(kc.narrow(0, b, 1).narrow(2, 0, L), dtype),
              rounded(vc.narrow(0, b, 1).narrow(2, 0, L), dtype), var, rounded(row_slopes, dtype), {}, {},
              rounded(sinks, dtype));
          const std::string what = var.name + " tq=" + std::to_string(tq) + " " + c10::toString(dtype) +
                                   (route.amx ? " on AMX's tiles" : "") + " row " + std::to_string(b);
          EXPECT_CLOSE(kernel.narrow(0, b, 1).to(kF64), expected, tolerance(dtype)) << "decode kernel, " << what;
          EXPECT_CLOSE(general.narrow(0, b, 1).to(kF64), expected, tolerance(dtype)) << "general route, " << what;
        }
      }
    }
  }
}

// ------------------------------------------------------------------------------------------------------------
// The options reach the modules

/// Copies `from`'s parameters into `to` by name.
void copy_parameters(const MultiHeadAttention& from, MultiHeadAttention& to) {
  torch::NoGradGuard no_grad;
  const auto source = from->named_parameters();
  for (auto& item : to->named_parameters()) item.value().copy_(source[item.key()]);
}

/// [Tq, Tk] bool, true = may attend: causal with a window of `left` keys back, bottom-right, written out.
torch::Tensor causal_band(int64_t tq, int64_t tk, int64_t left) {
  torch::Tensor band = torch::zeros({tq, tk}, torch::kBool);
  for (int64_t i = 0; i < tq; ++i) {
    for (int64_t j = 0; j < tk; ++j) {
      const int64_t diagonal = i + tk - tq;
      if (j <= diagonal && j >= diagonal - left) band.index_put_({i, j}, true);
    }
  }
  return band;
}

TEST(VariantModules, WindowInMultiHeadAttentionOptionsEqualsAnExplicitBand) {
  torch::manual_seed(5);
  MultiHeadAttention windowed(MultiHeadAttentionOptions(16, 4).causal(true).window(3, 0));
  MultiHeadAttention causal_only(MultiHeadAttentionOptions(16, 4).causal(true));
  MultiHeadAttention plain(MultiHeadAttentionOptions(16, 4));
  copy_parameters(windowed, causal_only);
  copy_parameters(windowed, plain);
  const double tol = tolerance(torch::kFloat32);

  const torch::Tensor x = torch::randn({2, 12, 16});
  const torch::Tensor out = windowed->forward(x, x, x);
  EXPECT_CLOSE(out, plain->forward(x, x, x, AttentionMasks().attend_mask(causal_band(12, 12, 3))), tol);
  // The window matters here: causal alone differs.
  EXPECT_FALSE(torch::allclose(out, causal_only->forward(x, x, x), 1e-3, 1e-3));

  // Fewer queries than keys: the band sits on the bottom-right diagonal.
  const torch::Tensor xq = torch::randn({2, 5, 16});
  EXPECT_CLOSE(windowed->forward(xq, x, x), plain->forward(xq, x, x, AttentionMasks().attend_mask(causal_band(5, 12, 3))),
               tol);
}

TEST(VariantModules, SoftcapAndWindowInMultiHeadAttentionOptionsReachTheAttention) {
  torch::manual_seed(6);
  const int64_t batch = 2, t = 9, heads = 4, head_dim = 4;
  MultiHeadAttention mha(MultiHeadAttentionOptions(16, heads).softcap(2.0).scale(1.0).window(4, 4));
  const torch::Tensor x = torch::randn({batch, t, 16});
  // The module's own projections, by hand, around the functional attention.
  const auto split = [&](const torch::Tensor& y) { return y.view({batch, t, heads, head_dim}).transpose(1, 2); };
  const torch::Tensor q = split(mha->q_proj(x)), k = split(mha->k_proj(x)), v = split(mha->v_proj(x));
  const auto by_hand = [&](const SdpaOptions& o) {
    return mha->out_proj(attn::scaled_dot_product_attention(q, k, v, o).transpose(1, 2).reshape({batch, t, 16}));
  };
  const torch::Tensor expected = by_hand(SdpaOptions().softcap(2.0).scale(1.0).window(4, 4).backend(Backend::Math));
  const torch::Tensor out = mha->forward(x, x, x);
  EXPECT_CLOSE(out, expected, tolerance(torch::kFloat32));
  // Softcap and window both change the result here.
  EXPECT_FALSE(torch::allclose(out, by_hand(SdpaOptions().scale(1.0).window(4, 4)), 1e-3, 1e-3));
  EXPECT_FALSE(torch::allclose(out, by_hand(SdpaOptions().softcap(2.0).scale(1.0)), 1e-3, 1e-3));
}

/// The standard ALiBi slopes of 4 heads (2^-2, 2^-4, 2^-6, 2^-8), written out from the formula.
torch::Tensor four_head_slopes() { return torch::tensor({0.25, 0.0625, 0.015625, 0.00390625}, kF64); }

/// A float64 module's projections, by hand: [B, T, E] -> [B, heads, T, E_out / heads].
torch::Tensor project_heads(const torch::nn::Linear& linear, const torch::Tensor& x, int64_t heads) {
  const torch::Tensor y = torch::nn::functional::linear(x, linear->weight, linear->bias);
  return y.view({y.size(0), y.size(1), heads, -1}).transpose(1, 2);
}

/// [B, H, T, d] -> [B, T, H * d]
torch::Tensor merge(const torch::Tensor& heads) {
  return heads.transpose(1, 2).reshape({heads.size(0), heads.size(2), -1});
}

TEST(VariantModules, AlibiAndSinksInMultiHeadAttentionMatchFloat64Reference) {
  torch::manual_seed(7);
  const int64_t batch = 2, t = 9, heads = 4, kv_heads = 2, embed = 16;
  MultiHeadAttention mha(
      MultiHeadAttentionOptions(embed, heads).num_kv_heads(kv_heads).causal(true).alibi(true).sinks(true));
  mha->to(kF64);
  // The slopes are derived, not stored; the sinks are the module's parameter, named as GPT-OSS names it.
  const auto params = mha->named_parameters();
  EXPECT_EQ(params.keys(), (std::vector<std::string>{"sinks", "q_proj.weight", "q_proj.bias", "k_proj.weight",
                                                      "k_proj.bias", "v_proj.weight", "v_proj.bias",
                                                      "out_proj.weight", "out_proj.bias"}));
  EXPECT_TRUE(mha->named_buffers().is_empty());
  EXPECT_EQ(params["sinks"].sizes(), torch::IntArrayRef({heads}));
  EXPECT_TRUE(torch::equal(params["sinks"], torch::zeros({heads}, kF64)));  // zeros until trained or loaded
  {
    torch::NoGradGuard no_grad;
    mha->sinks.copy_(torch::tensor({1.5, -0.5, 0.25, 2.0}, kF64));
  }
  std::ostringstream printed;
  mha->pretty_print(printed);
  EXPECT_NE(printed.str().find("alibi=true, sinks=true"), std::string::npos) << printed.str();

  const torch::Tensor x = torch::randn({batch, t, embed}, kF64);
  const auto expected_for = [&](const torch::Tensor& xq, const torch::Tensor& xkv, const torch::Tensor& sinks) {
    const torch::Tensor q = project_heads(mha->q_proj, xq, heads);
    const torch::Tensor k = project_heads(mha->k_proj, xkv, kv_heads), v = project_heads(mha->v_proj, xkv, kv_heads);
    const torch::Tensor heads_out = reference_attention(q, k, v, Variant("module").with_causal(), four_head_slopes(),
                                                        {}, {}, sinks);
    return torch::nn::functional::linear(merge(heads_out), mha->out_proj->weight, mha->out_proj->bias);
  };
  const torch::Tensor reference_sinks = mha->sinks.detach().clone().requires_grad_(true);
  const torch::Tensor expected = expected_for(x, x, reference_sinks);
  const double tol = tolerance(kF64);

  // forward (the fused kernel), forward_with_weights (Math), and the sinks' gradient.
  const torch::Tensor out = mha->forward(x, x, x);
  EXPECT_CLOSE(out, expected, tol);
  EXPECT_CLOSE(std::get<0>(mha->forward_with_weights(x, x, x)), expected, tol);
  const torch::Tensor upstream = torch::randn_like(out);
  (out * upstream).sum().backward();
  (expected * upstream).sum().backward();
  EXPECT_TRUE(grad_close(mha->sinks.grad(), reference_sinks.grad(), 1e-10)) << "d sinks";
  // Both terms matter here: the module without either one differs.
  MultiHeadAttention no_alibi(MultiHeadAttentionOptions(embed, heads).num_kv_heads(kv_heads).causal(true).sinks(true));
  MultiHeadAttention no_sinks(MultiHeadAttentionOptions(embed, heads).num_kv_heads(kv_heads).causal(true).alibi(true));
  no_alibi->to(kF64);
  no_sinks->to(kF64);
  copy_parameters(mha, no_alibi);
  copy_parameters(mha, no_sinks);
  EXPECT_FALSE(torch::allclose(no_alibi->forward(x, x, x), expected, 1e-4, 1e-4)) << "ALiBi changes nothing";
  EXPECT_FALSE(torch::allclose(no_sinks->forward(x, x, x), expected, 1e-4, 1e-4)) << "the sinks change nothing";

  // forward_with_cache: a prefill of 5 positions, then one position at a time (the decode kernel).
  {
    torch::NoGradGuard no_grad;
    KVCache cache(KVCacheOptions(1, batch, kv_heads, mha->head_dim(), t).dtype(kF64));
    std::vector<torch::Tensor> steps{mha->forward_with_cache(x.narrow(1, 0, 5), cache, 0)};
    for (int64_t p = 5; p < t; ++p) steps.push_back(mha->forward_with_cache(x.narrow(1, p, 1), cache, 0));
    EXPECT_CLOSE(torch::cat(steps, 1), expected, tol);

    // forward_with_memory: 4 queries over the 9 projected positions, causal bottom-right (the last 4 rows).
    const torch::Tensor memory_out = mha->forward_with_memory(x.narrow(1, 5, 4), mha->project_memory(x, x));
    EXPECT_CLOSE(memory_out, expected_for(x.narrow(1, 5, 4), x, mha->sinks.detach()), tol);
  }
}

TEST(VariantModules, AlibiAndSinksInCrossAttentionMatchFloat64Reference) {
  torch::manual_seed(8);
  // 12 heads: 8 heads' slopes 2^-1 .. 2^-8, then 16 heads' slopes 2^(-i/2) at the odd i, which float32 rounds
  // (a float64 module must attend with them unrounded).
  const int64_t heads = 12;
  std::vector<double> slopes;
  for (int i = 1; i <= 8; ++i) slopes.push_back(std::pow(2.0, -i));
  for (int i = 1; i <= 7; i += 2) slopes.push_back(std::pow(2.0, -i / 2.0));
  CrossAttention cross(CrossAttentionOptions(6, 10, 5).d_v(3).num_heads(heads).alibi(true).sinks(true));
  cross->to(kF64);
  {
    torch::NoGradGuard no_grad;
    cross->sinks.normal_(0.0, 1.5);
  }
  const torch::Tensor x = torch::randn({2, 5, 6}, kF64), context = torch::randn({2, 8, 10}, kF64);
  const torch::Tensor heads_out =
      reference_attention(project_heads(cross->q_proj, x, heads), project_heads(cross->k_proj, context, heads),
                          project_heads(cross->v_proj, context, heads), Variant("cross"),
                          torch::tensor(slopes, kF64), {}, {}, cross->sinks.detach());
  EXPECT_CLOSE(cross->forward(x, context), merge(heads_out), tolerance(kF64));
  EXPECT_CLOSE(cross->forward_with_memory(x, cross->project_memory(context)), merge(heads_out), tolerance(kF64));
}

TEST(VariantModules, SinksLoadCloneAndConvertLikeTheOtherParameters) {
  torch::manual_seed(9);
  const int64_t heads = 4, kv_heads = 2, head_dim = 4, embed = 16;
  const auto options = MultiHeadAttentionOptions(embed, heads).num_kv_heads(kv_heads).causal(true).sinks(true);
  // A GPT-OSS layer's names (q/k/v/o_proj with biases, sinks) under a decoder's prefix.
  const std::string prefix = "model.layers.0.self_attn.";
  std::map<std::string, torch::Tensor> file;
  for (const char* p : {"q_proj", "o_proj"}) {
    const bool q = std::string(p) == "q_proj";
    file[prefix + p + ".weight"] = q ? torch::randn({heads * head_dim, embed}) : torch::randn({embed, heads * head_dim});
    file[prefix + p + ".bias"] = torch::randn({q ? heads * head_dim : embed});
  }
  for (const char* p : {"k_proj", "v_proj"}) {
    file[prefix + p + ".weight"] = torch::randn({kv_heads * head_dim, embed});
    file[prefix + p + ".bias"] = torch::randn({kv_heads * head_dim});
  }
  file[prefix + "sinks"] = torch::tensor({0.5f, -1.0f, 2.0f, 0.25f});
  file["model.layers.0.mlp.router.weight"] = torch::randn({3, 3});  // outside the prefix: not ours

  MultiHeadAttention mha(options);
  io::load_state_dict(*mha, file, io::LoadOptions().prefix(prefix));
  EXPECT_TRUE(torch::equal(mha->sinks, file[prefix + "sinks"]));
  EXPECT_TRUE(torch::equal(mha->out_proj->weight, file[prefix + "o_proj.weight"]));
  // A module without the option refuses the file's sinks by name.
  MultiHeadAttention without(MultiHeadAttentionOptions(embed, heads).num_kv_heads(kv_heads).causal(true));
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*without, file, io::LoadOptions().prefix(prefix)), "sinks");
  // torch.nn.MultiheadAttention's names have no place for them.
  EXPECT_ERROR_CONTAINS(io::save_state_dict(*mha, "/nonexistent/never-written.pt",
                                            io::SaveOptions().names(io::WeightNames::TorchMultiheadAttention)),
                        "no ALiBi, no attention sinks");

  // clone() copies the sinks (a copy of their own); to() converts them with the rest.
  auto copy = std::dynamic_pointer_cast<MultiHeadAttentionImpl>(mha->clone());
  ASSERT_TRUE(copy);
  EXPECT_TRUE(torch::equal(copy->sinks, mha->sinks));
  EXPECT_TRUE(torch::equal(copy->named_parameters()["sinks"], mha->sinks));
  {
    torch::NoGradGuard no_grad;
    copy->sinks.add_(1.0);
  }
  EXPECT_TRUE(torch::equal(mha->sinks, file[prefix + "sinks"]));
  const torch::Tensor x = torch::randn({2, 7, embed});
  const torch::Tensor expected = mha->forward(x, x, x);
  mha->to(torch::kBFloat16);
  EXPECT_EQ(mha->sinks.scalar_type(), torch::kBFloat16);
  EXPECT_CLOSE(mha->forward(x.to(torch::kBFloat16), x.to(torch::kBFloat16), x.to(torch::kBFloat16)).to(torch::kFloat32),
               expected, 5e-2);
}

}  // namespace
}  // namespace attn::test
