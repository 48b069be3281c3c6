#include "int8_rows.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

namespace attn {

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
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* row = src + r * d;
        // In double: a float64 row is judged in its own range, and 127 / max|x| stays finite for the smallest
        // (subnormal) float rows.
        double amax = 0.0;
        bool row_finite = true;
        for (int64_t i = 0; i < d; ++i) {
          const double v = static_cast<double>(row[i]);
          row_finite = row_finite && std::isfinite(v);
          amax = std::max(amax, std::abs(v));
        }
        if (!row_finite || amax > static_cast<double>(std::numeric_limits<float>::max())) {
          finite = false;
          continue;
        }
        const double inverse = amax > 0.0 ? 127.0 / amax : 0.0;
        for (int64_t i = 0; i < d; ++i) {
          // Nearest, ties to even (the default rounding mode), as torch.round.
          const double q = std::nearbyint(static_cast<double>(row[i]) * inverse);
          dst[r * d + i] = static_cast<int8_t>(std::clamp(q, -127.0, 127.0));
        }
        scales[r] = static_cast<float>(amax / 127.0);
      }
    });
  });
  TORCH_CHECK(finite, fn, ": ", arg, " holds a non-finite value or one beyond float32's range, which an int8 cache "
              "(float32 scales) cannot store; nothing was written");
  return out;
}

}  // namespace attn
