#include "int8_rows.h"

#include <attn/kv_cache.h>

#include "backends/cache.h"
#include "common/checks.h"
#include "common/dtypes.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace attn {
namespace {

/// hadamard_rows on one row of d elements, in place: the butterflies of the fast Walsh–Hadamard transform
/// (natural order, H[i][j] = (-1)^popcount(i & j)) on each block of n = d & -d, then 1 / sqrt(n). The first two
/// stages run as one 4-point transform per group of 4, so that every later stage's inner loop is at least 4
/// adjacent elements long, which the compiler vectorises.
template <typename T>
void hadamard_in_place(T* row, int64_t d) {
  const int64_t n = d & -d;
  const T norm = static_cast<T>(1.0 / std::sqrt(static_cast<double>(n)));
  for (T* block = row; block < row + d; block += n) {
    int64_t half = 1;
    if (n >= 4) {
      for (int64_t i = 0; i < n; i += 4) {
        const T a = block[i] + block[i + 1], b = block[i] - block[i + 1];
        const T c = block[i + 2] + block[i + 3], e = block[i + 2] - block[i + 3];
        block[i] = a + c, block[i + 1] = b + e, block[i + 2] = a - c, block[i + 3] = b - e;
      }
      half = 4;
    }
    for (; half < n; half *= 2) {
      for (int64_t i = 0; i < n; i += 2 * half) {
        T* __restrict low = block + i;
        T* __restrict high = block + i + half;
        for (int64_t j = 0; j < half; ++j) {
          const T a = low[j], b = high[j];
          low[j] = a + b, high[j] = a - b;
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) block[i] *= norm;
  }
}

}  // namespace

torch::Tensor hadamard_rows(const torch::Tensor& x) {
  TORCH_CHECK(x.defined() && x.dim() >= 1 && common::is_attention_dtype(x.scalar_type()) && x.device().is_cpu(),
              "attn::hadamard_rows: x must be a float32, float64, bfloat16 or float16 CPU tensor [..., d], got ",
              x.defined() ? std::string(common::dtype_name(x)) + " " + c10::str(x.sizes()) + " on " + c10::str(x.device())
                          : std::string("an undefined tensor"));
  TORCH_CHECK(!(x.requires_grad() && at::GradMode::is_enabled()),
              "attn::hadamard_rows computes no gradient, but x requires one: call it under torch::NoGradGuard");
  // One pass per row (widen into the output, then the butterflies): a decoding step rotates a few rows, where a
  // chain of tensor operations would cost more than the transform.
  const torch::Tensor src = x.contiguous();
  torch::Tensor out = at::empty(src.sizes(), src.options().dtype(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
  const int64_t d = x.size(-1), count = d > 0 ? out.numel() / d : 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, src.scalar_type(), "attn::hadamard_rows", [&] {
    using out_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const scalar_t* in = src.data_ptr<scalar_t>();
    out_t* rows = out.data_ptr<out_t>();
    at::parallel_for(0, count, 256, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        out_t* row = rows + r * d;
        for (int64_t i = 0; i < d; ++i) row[i] = static_cast<out_t>(in[r * d + i]);
        hadamard_in_place(row, d);
      }
    });
  });
  return out;
}

torch::Tensor attend_stored_rows(const char* fn, const torch::Tensor& query, const torch::Tensor& key_cache,
                                 const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                                 const torch::Tensor& key_lengths, const SdpaOptions& options,
                                 const ops::DecodeOnlyInputs& decode_only) {
  if (!decode_only.key_scales.defined()) {
    return backends::cache_attention(fn, query, key_cache, value_cache, query_starts, key_lengths, options,
                                     decode_only);
  }
  const torch::Tensor out = backends::cache_attention(fn, hadamard_rows(query), key_cache, value_cache, query_starts,
                                                      key_lengths, options, decode_only);
  return hadamard_rows(out).to(query.scalar_type());
}

StoredRows quantize_rows(const char* fn, const char* arg, const torch::Tensor& x) {
  // One pass per row (its largest magnitude, then its elements), not a chain of whole-tensor operations: a
  // decoding step quantizes a few rows per layer, where each operation's own cost would be most of the time.
  const torch::Tensor rows = x.contiguous();
  const int64_t d = rows.size(-1), count = d > 0 ? rows.numel() / d : 0;
  StoredRows out{at::empty(rows.sizes(), rows.options().dtype(torch::kInt8)),
                 at::empty(rows.sizes().slice(0, rows.dim() - 1), rows.options().dtype(torch::kFloat32))};
  std::atomic<bool> finite{true};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, rows.scalar_type(), "attn::quantize_rows", [&] {
    const scalar_t* src = rows.data_ptr<scalar_t>();
    int8_t* dst = out.rows.data_ptr<int8_t>();
    float* scales = out.scales.data_ptr<float>();
    at::parallel_for(0, count, 256, [&](int64_t begin, int64_t end) {
      // In double: a float64 row is judged in its own range, and 127 / max|r| stays finite for the smallest
      // (subnormal) float rows.
      std::vector<double> rotated(static_cast<size_t>(d));
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* row = src + r * d;
        bool row_finite = true;
        for (int64_t i = 0; i < d; ++i) {
          rotated[i] = static_cast<double>(row[i]);
          row_finite = row_finite && std::isfinite(rotated[i]);
        }
        hadamard_in_place(rotated.data(), d);
        double amax = 0.0;
        for (int64_t i = 0; i < d; ++i) amax = std::max(amax, std::abs(rotated[i]));
        if (!row_finite || amax > static_cast<double>(std::numeric_limits<float>::max())) {
          finite = false;
          continue;
        }
        const double inverse = amax > 0.0 ? 127.0 / amax : 0.0;
        for (int64_t i = 0; i < d; ++i) {
          // Nearest, ties to even (the default rounding mode), as torch.round.
          const double q = std::nearbyint(rotated[i] * inverse);
          dst[r * d + i] = static_cast<int8_t>(std::clamp(q, -127.0, 127.0));
        }
        scales[r] = static_cast<float>(amax / 127.0);
      }
    });
  });
  TORCH_CHECK(finite, fn, ": ", arg, " holds a non-finite value, or a row whose rotation (hadamard_rows) has an "
              "element beyond float32's range, which an int8 cache (float32 scales) cannot store; nothing was written");
  return out;
}

}  // namespace attn
