#pragma once
// The fast Walsh–Hadamard transform of one row, which attn::hadamard_rows applies to every row and an int8
// cache's quantization applies to each row it stores.

#include <cmath>
#include <cstdint>

namespace attn::common {

/// The orthonormal Walsh–Hadamard transform of one row of d elements, in place (attn::hadamard_rows per row):
/// the fast transform's butterflies (natural order, H[i][j] = (-1)^popcount(i & j)) on each block of
/// n = d & -d, then 1 / sqrt(n). The first two stages run as one 4-point transform per group of 4, so that every
/// later stage's inner loop is at least 4 adjacent elements long, which the compiler vectorises. d = 0 does nothing.
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

}  // namespace attn::common
