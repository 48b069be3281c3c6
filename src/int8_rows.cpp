#include "int8_rows.h"

#include <attn/hadamard_rows.h>

#include "backends/cache.h"
#include "common/walsh_hadamard.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

namespace attn {

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

torch::Tensor stored_positions(const torch::Tensor& x, const std::vector<int64_t>& counts) {
  const int64_t T = x.size(2);
  if (std::all_of(counts.begin(), counts.end(), [T](int64_t n) { return n == T; })) return x;
  const torch::Tensor count = torch::tensor(counts, torch::kLong).view({-1, 1, 1, 1});
  return x.masked_fill((torch::arange(T).view({1, 1, T, 1}) >= count).to(x.device()), 0);
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
        common::hadamard_in_place(rotated.data(), d);
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
