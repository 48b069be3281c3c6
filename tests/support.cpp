#include "support.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <utility>

#ifndef ATTN_REFERENCE_DIR
#error "ATTN_REFERENCE_DIR must name the directory make_references.py writes"
#endif

namespace attn::test {

std::vector<DeviceDtype> device_dtype_grid() {
  return {{torch::kCPU, torch::kFloat32},  {torch::kCPU, torch::kFloat64},  {torch::kCPU, torch::kBFloat16},
          {torch::kCUDA, torch::kFloat32}, {torch::kCUDA, torch::kFloat64}, {torch::kCUDA, torch::kFloat16},
          {torch::kCUDA, torch::kBFloat16}};
}

std::string param_name(const DeviceDtype& p) {
  std::string dtype = c10::toString(p.dtype);
  return std::string(p.device == torch::kCUDA ? "cuda_" : "cpu_") + dtype;
}

double tolerance(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat64: return 1e-10;
    case torch::kFloat32: return 1e-5;
    case torch::kFloat16: return 1e-2;
    case torch::kBFloat16: return 5e-2;
    default: return 0.0;
  }
}

bool skip_without(torch::DeviceType device) {
  return device == torch::kCUDA && !attn::cuda_available();
}

torch::Tensor longs(const std::vector<int64_t>& values) {
  return torch::tensor(at::ArrayRef<int64_t>(values), torch::kLong);
}

::testing::AssertionResult close(const torch::Tensor& actual, const torch::Tensor& expected, double tol) {
  if (!actual.defined() || !expected.defined()) {
    return ::testing::AssertionFailure() << "undefined tensor (actual " << actual.defined() << ", expected "
                                         << expected.defined() << ")";
  }
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure() << "shape " << actual.sizes() << " != expected " << expected.sizes();
  }
  const torch::Tensor a = actual.detach().to(torch::kCPU, torch::kFloat64);
  const torch::Tensor e = expected.detach().to(torch::kCPU, torch::kFloat64);
  const torch::Tensor a_nan = a.isnan(), e_nan = e.isnan();
  if (!a_nan.equal(e_nan)) {
    return ::testing::AssertionFailure() << "NaN at different places: actual has " << a_nan.sum().item<int64_t>()
                                         << ", expected " << e_nan.sum().item<int64_t>();
  }
  if (a.numel() == 0) return ::testing::AssertionSuccess();
  const torch::Tensor a0 = a.masked_fill(a_nan, 0), e0 = e.masked_fill(e_nan, 0);
  const double scale = e0.abs().max().item<double>();
  const torch::Tensor err = (a0 - e0).abs();
  const torch::Tensor bound = (e0.abs() + scale) * tol;
  const torch::Tensor over = err > bound;
  if (over.any().item<bool>()) {
    const int64_t at = (err - bound).argmax().item<int64_t>();
    return ::testing::AssertionFailure()
           << over.sum().item<int64_t>() << " of " << a.numel() << " elements differ beyond tol " << tol
           << "; worst at flat index " << at << ": actual " << a0.flatten()[at].item<double>() << ", expected "
           << e0.flatten()[at].item<double>() << " (max abs err " << err.max().item<double>() << ", scale " << scale
           << ")";
  }
  return ::testing::AssertionSuccess();
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path + " (run the build: it generates the references)");
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

ReferenceCase::ReferenceCase(const std::string& name, const std::string& dir)
    : name_(name), dict_(torch::pickle_load(read_file(dir + "/" + name + ".pt")).toGenericDict()) {}

bool ReferenceCase::has(const std::string& key) const { return dict_.contains(key); }

torch::Tensor ReferenceCase::tensor(const std::string& key) const {
  TORCH_CHECK(has(key), "reference case ", name_, " has no entry ", key);
  return dict_.at(key).toTensor();
}

torch::Tensor ReferenceCase::tensor(const std::string& key, const torch::TensorOptions& options) const {
  const torch::Tensor t = tensor(key);
  return t.is_floating_point() ? t.to(options) : t.to(options.device());
}

torch::Tensor ReferenceCase::maybe(const std::string& key, const torch::TensorOptions& options) const {
  return has(key) ? tensor(key, options) : torch::Tensor();
}

int64_t ReferenceCase::integer(const std::string& key) const { return dict_.at(key).toInt(); }
bool ReferenceCase::boolean(const std::string& key) const { return dict_.at(key).toBool(); }
double ReferenceCase::real(const std::string& key) const { return dict_.at(key).toDouble(); }
std::string ReferenceCase::text(const std::string& key) const { return dict_.at(key).toStringRef(); }

std::vector<std::string> reference_cases(const std::string& prefix, const std::string& dir) {
  std::ifstream in(dir + "/manifest.txt");
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.rfind(prefix, 0) == 0) names.push_back(line);
  }
  return names;
}

void load_linear(torch::nn::Linear& linear, const torch::Tensor& w, const torch::Tensor& b) {
  torch::NoGradGuard no_grad;
  linear->weight.copy_(w);
  if (b.defined()) linear->bias.copy_(b);
}

/// Compares d(sum(fn() * cotangent))/d(t) from autograd with central differences, for every tensor in
/// `wrt` (float64 leaves that fn reads).
void expect_gradients_match_finite_differences(const std::function<torch::Tensor()>& fn, const std::vector<torch::Tensor>& wrt, const std::string& what) {
  SCOPED_TRACE(what);
  torch::manual_seed(3);
  const torch::Tensor cotangent = torch::randn(fn().sizes(), torch::kFloat64);
  for (const auto& t : wrt) {
    if (t.grad().defined()) t.grad().zero_();
  }
  (fn() * cotangent).sum().backward();
  constexpr double eps = 1e-6;
  for (size_t i = 0; i < wrt.size(); ++i) {
    torch::Tensor t = wrt[i];
    ASSERT_TRUE(t.grad().defined()) << "no gradient reached input " << i;
    const torch::Tensor analytic = t.grad().clone();
    torch::Tensor numeric = torch::zeros_like(t);
    torch::NoGradGuard no_grad;
    auto flat = t.view(-1);
    auto numeric_flat = numeric.view(-1);
    for (int64_t j = 0; j < flat.numel(); ++j) {
      const double saved = flat[j].item<double>();
      flat[j] = saved + eps;
      const double plus = (fn() * cotangent).sum().item<double>();
      flat[j] = saved - eps;
      const double minus = (fn() * cotangent).sum().item<double>();
      flat[j] = saved;
      numeric_flat[j] = (plus - minus) / (2 * eps);
    }
    EXPECT_TRUE(torch::isfinite(analytic).all().item<bool>()) << "input " << i;
    EXPECT_TRUE(torch::allclose(analytic, numeric, 1e-5, 1e-6))
        << "input " << i << ": max |autograd - finite difference| = " << (analytic - numeric).abs().max().item<double>();
  }
}

}  // namespace attn::test

namespace attn::test {

std::vector<ErrorOfResult> errors_against_float64(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& cotangent,
    const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>& attend) {
  const auto leaf = [](const torch::Tensor& t, torch::Dtype dtype) { return t.to(dtype).clone().requires_grad_(); };
  torch::Tensor q64 = leaf(q, torch::kFloat64), k64 = leaf(k, torch::kFloat64), v64 = leaf(v, torch::kFloat64);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const torch::Tensor expected = torch::softmax(torch::matmul(q64, k64.transpose(-2, -1)) * scale, -1).matmul(v64);
  (expected * cotangent.to(torch::kFloat64)).sum().backward();
  const torch::Dtype dtype = q.scalar_type();
  torch::Tensor ql = leaf(q, dtype), kl = leaf(k, dtype), vl = leaf(v, dtype);
  const torch::Tensor out = attend(ql, kl, vl);
  (out * cotangent).sum().backward();
  const std::vector<std::pair<const char*, std::pair<torch::Tensor, torch::Tensor>>> results = {
      {"output", {out, expected}},
      {"d query", {ql.grad(), q64.grad()}},
      {"d key", {kl.grad(), k64.grad()}},
      {"d value", {vl.grad(), v64.grad()}}};
  std::vector<ErrorOfResult> errors;
  for (const auto& [what, pair] : results) {
    const torch::Tensor error = pair.first.detach().to(torch::kFloat64) - pair.second.detach();
    const double size = pair.second.abs().mean().item<double>();
    errors.push_back({what, error.abs().mean().item<double>() / size, error.abs().max().item<double>() / size});
  }
  return errors;
}

std::tuple<torch::Tensor, torch::Tensor> float64_attention(const torch::Tensor& q, const torch::Tensor& k,
                                                           const torch::Tensor& v, const torch::Tensor& allowed,
                                                           double scale) {
  const auto cpu64 = [](const torch::Tensor& t) { return t.detach().to(torch::kCPU, torch::kFloat64); };
  const torch::Tensor qq = cpu64(q), kk = cpu64(k), vv = cpu64(v);
  torch::Tensor scores = qq.matmul(kk.transpose(-2, -1)) * scale;
  const torch::Tensor ok = allowed.defined() ? allowed.to(torch::kCPU).expand_as(scores) : torch::ones_like(scores).to(torch::kBool);
  // Sum over the allowed keys only, element by element, so that nothing at a blocked key can reach the result.
  const torch::Tensor shifted = scores.masked_fill(ok.logical_not(), -INFINITY);
  const torch::Tensor row_max = std::get<0>(shifted.max(-1, true)).masked_fill(ok.any(-1, true).logical_not(), 0);
  const torch::Tensor e = (shifted - row_max).exp().masked_fill(ok.logical_not(), 0);
  const torch::Tensor denom = e.sum(-1, true);
  const torch::Tensor weights = torch::where(denom > 0, e / denom, torch::zeros_like(e));
  // weights[..., i, j] * v[..., j, :] summed over allowed j only.
  const torch::Tensor terms = weights.unsqueeze(-1) * vv.unsqueeze(-3);  // [..., Tq, Tk, dv]
  const torch::Tensor out = terms.masked_fill(ok.unsqueeze(-1).logical_not(), 0).sum(-2);
  return {out, weights};
}

torch::Tensor cache_allowed_pairs(const std::vector<int64_t>& starts, const std::vector<int64_t>& lengths, int64_t tq,
                                  int64_t tk, bool causal) {
  const int64_t B = static_cast<int64_t>(lengths.size());
  torch::Tensor allowed = torch::zeros({B, 1, tq, tk}, torch::kBool);
  auto a = allowed.accessor<bool, 4>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < tq; ++t) {
      for (int64_t j = 0; j < tk; ++j) a[b][0][t][j] = j < lengths[b] && (!causal || j <= starts[b] + t);
    }
  }
  return allowed;
}

torch::Tensor float64_hadamard(int64_t d) {
  const int64_t n = d & -d;
  torch::Tensor h = torch::zeros({d, d}, torch::kFloat64);
  auto a = h.accessor<double, 2>();
  for (int64_t block = 0; block < d; block += n) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        a[block + i][block + j] = (__builtin_popcountll(static_cast<uint64_t>(i & j)) % 2 ? -1.0 : 1.0) /
                                  std::sqrt(static_cast<double>(n));
      }
    }
  }
  return h;
}

std::vector<torch::Tensor> rows_of_every_layout(int64_t B, int64_t H, int64_t T, int64_t d, torch::Dtype dtype) {
  return {torch::randn({B, H, T, d}).to(dtype),
          torch::randn({B, T, H * d}).to(dtype).view({B, T, H, d}).transpose(1, 2),
          torch::randn({B, H, T, 2 * d}).to(dtype).slice(3, 0, 2 * d, 2),
          torch::randn({B, H, 1, d}).to(dtype).expand({B, H, T, d})};
}

torch::Tensor dequantized(const torch::Tensor& rows, const torch::Tensor& scales) {
  return rows.to(torch::kFloat64) * scales.to(torch::kFloat64).unsqueeze(-1);
}

torch::Tensor int8_rows_in_model_basis(const torch::Tensor& rows, const torch::Tensor& scales) {
  return torch::matmul(dequantized(rows, scales), float64_hadamard(rows.size(-1)));
}

}  // namespace attn::test
