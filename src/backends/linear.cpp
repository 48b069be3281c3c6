#include "backends/linear.h"

#include "ops/torch_bfloat16_gemm.h"

#include <attn/ops/linear_rows.h>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/autograd.h>

#include <algorithm>
#include <vector>

namespace attn::backends {
namespace {

bool kernel_dtype(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16;
}

bool needs_grad(const torch::Tensor& t) { return t.defined() && t.requires_grad(); }

/// The kernel multiplies each weight row with every row of x, so x is read again for every weight row: above
/// this many elements (16 KiB of float, half of a 32 KiB L1) it comes from L2, and four rows of 4096 ran at
/// half the speed of one on an AMD Zen 4. One row is always taken: it streams the weight at full rate.
constexpr int64_t kLinearRowsInputElements = 4096;
/// Up to kLinearRowsMax rows are still taken while x fits in L2 (64 KiB of float): there LibTorch's GEMM
/// packs the whole weight on every call (SmolLM2's 49152 x 576 head: 14.9 ms for 13 rows against 7.0 ms for
/// one, on an AMD EPYC Zen 5, 2 threads), where this kernel reads it once.
constexpr int64_t kLinearRowsManyElements = 16384;

/// Whether x, the weight and the bias (if any) are all bfloat16 CPU tensors.
bool bfloat16_operands_on_cpu(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!x.defined() || !weight.defined() || x.scalar_type() != torch::kBFloat16 ||
      weight.scalar_type() != torch::kBFloat16 || !x.device().is_cpu() || !weight.device().is_cpu()) {
    return false;
  }
  return !bias.defined() || (bias.scalar_type() == torch::kBFloat16 && bias.device().is_cpu());
}

/// Whether x · Wᵀ + b is a bfloat16 product on the CPU that LibTorch would run in its reference loops
/// (ops/torch_bfloat16_gemm.h).
bool bfloat16_without_native_gemm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return bfloat16_operands_on_cpu(x, weight, bias) && !ops::torch_multiplies_bfloat16_natively();
}

/// Whether x · Wᵀ + b is a bfloat16 product on the CPU that LibTorch would run on oneDNN without bfloat16
/// instructions (ops/torch_bfloat16_gemm.h).
bool bfloat16_on_emulated_gemm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return bfloat16_operands_on_cpu(x, weight, bias) && ops::torch_bfloat16_gemm_is_emulated();
}

/// Float elements (4 MiB) of the weight widened at a time by widened_in_blocks, and of its block's result where
/// x has few enough rows: no float copy of a whole large weight is mapped page by page on every call (widened
/// whole, SmolLM2's 49152 x 576 head ran 0.3x-0.7x oneDNN's bfloat16 product at 32-256 rows; in blocks
/// 0.9x-1.35x), and the block stays in the caches while the GEMM reads it.
constexpr int64_t kWidenedBlockElements = int64_t{1} << 20;
/// Output features per block at least, however many rows x has (the GEMM's N).
constexpr int64_t kWidenedMinBlockFeatures = 64;
/// Float elements (64 MiB) up to which the calling thread keeps each of widened_in_blocks' three buffers (x
/// widened, the weight's block, its result) from one call to the next, grown to the largest call: allocated anew,
/// their pages faulted in on every call under glibc's defaults, and 512 rows of SmolLM2's MLP ran 1.1x-1.3x
/// oneDNN's product instead of 1.35x-1.4x (bench/RESULTS.md). Past it, a buffer of the call's own.
constexpr int64_t kKeptWideningElements = int64_t{1} << 24;

/// n float elements: the front of the buffer that `kept` (the calling thread's) holds, or of one of the call's own.
torch::Tensor widening_buffer(torch::Tensor& kept, int64_t n) {
  // A normal tensor even where a call runs under InferenceMode: a kept inference tensor could not be written
  // by a later call outside it.
  c10::InferenceMode normal(false);
  if (n > kKeptWideningElements) return at::empty({n}, at::kFloat);
  if (!kept.defined() || kept.numel() < n) kept = at::empty({n}, at::kFloat);
  return kept.narrow(0, 0, n);
}

/// Whether x · Wᵀ + b is a bfloat16 product of at least ops::kWidenedGemmMinRows rows, without a gradient, on a
/// CPU whose bfloat16 GEMM trails its float one (ops/torch_bfloat16_gemm.h).
bool widens_for_the_float_gemm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!bfloat16_operands_on_cpu(x, weight, bias) || x.dim() == 0 || weight.dim() != 2) return false;
  const auto strided = [](const torch::Tensor& t) { return !t.defined() || t.layout() == torch::kStrided; };
  if (!strided(x) || !strided(weight) || !strided(bias)) return false;  // sparse or oneDNN layouts: at::linear's
  const int64_t in = weight.size(1);
  if (in == 0 || x.size(-1) != in || x.numel() / in < ops::kWidenedGemmMinRows) return false;
  if (torch::GradMode::is_enabled() && (needs_grad(x) || needs_grad(weight) || needs_grad(bias))) return false;
  return ops::torch_bfloat16_gemm_trails_float();
}

/// x · Wᵀ + b on the float GEMM, the weight widened a block of output features at a time, each block's float
/// result rounded to bfloat16 once into its columns of the result.
torch::Tensor widened_in_blocks(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  thread_local torch::Tensor kept_x, kept_weight, kept_result;
  const int64_t in = weight.size(1), features = weight.size(0), rows = x.numel() / in;
  const int64_t fit = std::min(kWidenedBlockElements / in, kWidenedBlockElements / rows);
  const int64_t block = std::min(features, std::max(kWidenedMinBlockFeatures, fit));
  torch::Tensor x32 = widening_buffer(kept_x, rows * in).view({rows, in});
  x32.view(x.sizes()).copy_(x);  // widened where it lies, whatever x's strides
  const torch::Tensor b32 = bias.defined() ? bias.to(torch::kFloat32) : torch::Tensor();
  torch::Tensor out = at::empty({rows, features}, x.options().dtype(torch::kBFloat16));
  const torch::Tensor w32 = widening_buffer(kept_weight, block * in);
  const torch::Tensor y32 = widening_buffer(kept_result, rows * block);
  for (int64_t first = 0; first < features; first += block) {
    const int64_t n = std::min(block, features - first);
    const torch::Tensor w = w32.narrow(0, 0, n * in).view({n, in});
    torch::Tensor y = y32.narrow(0, 0, rows * n).view({rows, n});
    w.copy_(weight.narrow(0, first, n));
    if (b32.defined()) {
      at::addmm_out(y, b32.narrow(0, first, n), x32, w.t());
    } else {
      at::mm_out(y, x32, w.t());
    }
    out.narrow(1, first, n).copy_(y);
  }
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = features;
  return out.view(sizes);
}

}  // namespace

bool takes_linear_rows(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!x.defined() || !weight.defined() || x.dim() == 0 || weight.dim() != 2) return false;
  const int64_t in = weight.size(1);
  if (!x.device().is_cpu() || !weight.device().is_cpu() || x.size(-1) != in || in == 0) return false;
  const int64_t rows = x.numel() / in;
  if (rows > ops::kLinearRowsMax) return false;
  // Where LibTorch has no bfloat16 GEMM, or one that emulates bfloat16, every row count the kernel takes runs
  // faster on it than on the alternatives, with x in L2 or not (bench/RESULTS.md, 2026-11-27 and 2026-11-28).
  const bool any_width =
      bfloat16_without_native_gemm(x, weight, bias) || bfloat16_on_emulated_gemm(x, weight, bias);
  if (!any_width && rows > 1 && rows * in > (rows <= 4 ? kLinearRowsInputElements : kLinearRowsManyElements)) {
    return false;
  }
  if (!kernel_dtype(x) || weight.scalar_type() != x.scalar_type()) return false;
  if (bias.defined() && (bias.scalar_type() != x.scalar_type() || !bias.device().is_cpu())) return false;
  return !(torch::GradMode::is_enabled() && (needs_grad(x) || needs_grad(weight) || needs_grad(bias)));
}

torch::Tensor project_rows(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (takes_linear_rows(x, weight, bias)) {
    return ops::linear_rows(x, weight, bias.defined() ? c10::optional<torch::Tensor>(bias) : c10::nullopt);
  }
  if (widens_for_the_float_gemm(x, weight, bias)) return widened_in_blocks(x, weight, bias);
  if (bfloat16_without_native_gemm(x, weight, bias) && x.dim() > 0 && weight.dim() == 2 &&
      x.size(-1) == weight.size(1)) {
    // Widened, the product runs on the float GEMM; the sums were in float either way, and the result is
    // rounded to bfloat16 once. Differentiable: the gradients come back through the casts in bfloat16.
    const torch::Tensor y = at::linear(x.to(torch::kFloat32), weight.to(torch::kFloat32),
                                       bias.defined() ? bias.to(torch::kFloat32) : torch::Tensor());
    return y.to(torch::kBFloat16);
  }
  const int64_t in = weight.size(1);
  if (!x.device().is_cpu() || x.dim() == 0 || x.size(-1) != in || x.numel() != in) return at::linear(x, weight, bias);
  const torch::Tensor row = x.reshape({in});
  const torch::Tensor y = bias.defined() ? at::addmv(bias, weight, row) : at::mv(weight, row);
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  return y.view(sizes);
}

std::vector<torch::Tensor> project_rows_many(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                             const std::vector<torch::Tensor>& biases) {
  TORCH_INTERNAL_ASSERT(weights.size() == biases.size(), "project_rows_many: a bias (or none) per weight");
  bool together = weights.size() > 1;
  for (size_t k = 0; together && k < weights.size(); ++k) together = takes_linear_rows(x, weights[k], biases[k]);
  if (together) {
    c10::List<c10::optional<torch::Tensor>> b;
    for (const torch::Tensor& bias : biases) {
      b.push_back(bias.defined() ? c10::optional<torch::Tensor>(bias) : c10::nullopt);
    }
    return ops::linear_rows_many(x, weights, b);
  }
  std::vector<torch::Tensor> outs;
  for (size_t k = 0; k < weights.size(); ++k) outs.push_back(project_rows(x, weights[k], biases[k]));
  return outs;
}

}  // namespace attn::backends
