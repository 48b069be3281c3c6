// The CPU implementation of the attn::rotary_positions op: a table of cos and sin per position row, then one
// pass over x's rows. Elementwise work on a few thousand channels, so it is plain C++ compiled once (the
// compiler vectorises the pair loops), not a kernel per instruction set.

#include "ops/rotary_angles.h"
#include "ops/rotary_positions_contract.h"

#include <attn/ops/rotary_positions.h>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace attn::ops::cpu {
namespace {

/// Elements per task at least: a decoding step's few rows run on the calling thread.
constexpr int64_t kRotaryTaskElements = int64_t{1} << 15;

/// Bytes of cos and sin up to which the calling thread keeps its last table of each dtype (a 32k-token prompt's,
/// 32 frequencies in float32, is 8 MiB).
constexpr int64_t kKeptAngleBytes = int64_t{16} << 20;

/// Whether two contiguous tensors of one dtype hold the same bytes.
bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.numel() == b.numel() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0;
}

/// The angle table for these positions, frequencies and factor (compared by their bits): the calling thread's last
/// one of this dtype when they are the same. A model's layers rotate q and k at the same positions, twice a layer
/// each step, and a prompt's table is most of a call (at 542 positions, 180 of 190 us; bench/RESULTS.md). A table
/// past kKeptAngleBytes is the call's own.
template <typename T>
std::shared_ptr<const RotaryAngleRows<T>> angle_rows(const at::Tensor& positions, const at::Tensor& inv_freq,
                                                     double factor) {
  struct Kept {
    at::Tensor positions, inv_freq;  // the table's key, as copies: the caller may change its tensors in place
    double factor = 0.0;
    std::shared_ptr<const RotaryAngleRows<T>> table;
  };
  thread_local Kept kept;
  const at::Tensor p = positions.to(at::kLong).contiguous(), f = inv_freq.contiguous();
  if (kept.table && std::memcmp(&kept.factor, &factor, sizeof factor) == 0 && same_bytes(kept.positions, p) &&
      same_bytes(kept.inv_freq, f)) {
    return kept.table;
  }
  auto table = std::make_shared<const RotaryAngleRows<T>>(p, f, factor);
  kept = Kept{};
  if (2 * p.numel() * f.numel() * static_cast<int64_t>(sizeof(T)) <= kKeptAngleBytes) {
    c10::InferenceMode normal(false);  // the key stays a normal tensor whatever mode this call runs in
    kept = Kept{p.clone(), f.clone(), factor, table};
  }
  return table;
}

template <typename T>
void rotate_rows(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& inv_freq, double factor,
                 bool interleaved, at::Tensor& out) {
  using Acc = at::opmath_type<T>;
  // Rounded to T as the differentiable route's; widened to Acc in the loop.
  const std::shared_ptr<const RotaryAngleRows<T>> table = angle_rows<T>(positions, inv_freq, factor);
  const T* cos = table->cos();
  const T* sin = table->sin();
  const bool batched = x.dim() == 4;
  const int64_t B = batched ? x.size(0) : 1, H = x.size(-3), Tn = x.size(-2), D = x.size(-1);
  const int64_t half = inv_freq.numel();
  const int64_t sb = batched ? x.stride(0) : 0, sh = x.stride(-3), st = x.stride(-2);
  const bool per_batch_row = positions.dim() == 2;
  const T* src = x.data_ptr<T>();
  T* dst = out.data_ptr<T>();
  const int64_t grain = std::max<int64_t>(1, kRotaryTaskElements / std::max<int64_t>(D, 1));
  at::parallel_for(0, B * H * Tn, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t t = row % Tn, h = (row / Tn) % H, b = row / (Tn * H);
      const T* in = src + b * sb + h * sh + t * st;
      T* y = dst + row * D;
      const int64_t angles = (per_batch_row ? b * Tn + t : t) * half;
      const T* c = cos + angles;
      const T* s = sin + angles;
      if (interleaved) {
        for (int64_t i = 0; i < half; ++i) {
          const Acc a = static_cast<Acc>(in[2 * i]), o = static_cast<Acc>(in[2 * i + 1]);
          y[2 * i] = static_cast<T>(a * static_cast<Acc>(c[i]) - o * static_cast<Acc>(s[i]));
          y[2 * i + 1] = static_cast<T>(o * static_cast<Acc>(c[i]) + a * static_cast<Acc>(s[i]));
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const Acc a = static_cast<Acc>(in[i]), o = static_cast<Acc>(in[i + half]);
          y[i] = static_cast<T>(a * static_cast<Acc>(c[i]) - o * static_cast<Acc>(s[i]));
          y[i + half] = static_cast<T>(o * static_cast<Acc>(c[i]) + a * static_cast<Acc>(s[i]));
        }
      }
      std::copy(in + 2 * half, in + D, y + 2 * half);
    }
  });
}

at::Tensor rotary_positions_cpu(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& inv_freq,
                                double attention_factor, bool interleaved) {
  check_rotary_positions_args(x, positions, inv_freq, attention_factor);
  // The rows are read through their strides (a head split from [B, T, H, D] is a view); the channels must be
  // contiguous.
  const at::Tensor source = x.stride(-1) == 1 ? x : x.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options());
  if (out.numel() == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "attn::rotary_positions", [&] {
    rotate_rows<scalar_t>(source, positions, inv_freq, attention_factor, interleaved, out);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, CPU, m) { m.impl("rotary_positions", TORCH_FN(rotary_positions_cpu)); }

}  // namespace attn::ops::cpu
