#pragma once
// Matrix products of bfloat16 operands accumulated and returned in float32, on AVX512-BF16's pairwise dot
// product (vdpbf16ps: each of 16 lanes adds a0·b0 + a1·b1 for one pair of bfloat16 from each operand). The
// right operand is packed once into "pairs" (two consecutive rows interleaved), so the micro-kernel reads it
// as whole vectors; the left operand is read where it lies, one pair broadcast at a time, so a query tile or
// a probability row needs no copy. Only bf16_pairs_avx512bf16.cpp is compiled with AVX512-BF16 enabled: call
// these only where the CPU has it (Capability::Avx512Bf16).

#include <c10/util/BFloat16.h>

#include <cstdint>

namespace attn::ops::cpu {

/// Columns per vector of the micro-kernel; a pairs layout pads each row to a multiple of this.
inline constexpr int64_t kPairLanes = 16;

/// The smallest row length of a pairs layout for n columns.
inline int64_t pairs_row_length(int64_t n) { return (n + kPairLanes - 1) / kPairLanes * kPairLanes; }

/// A right operand B[k, n] in pairs layout: pair p of column j, (B[2p, j], B[2p+1, j]), is data[p * ld + j]
/// (low half first), with a zero high half past an odd k. Reads run up to the next multiple of kPairLanes
/// past column n, so those words must exist (pairs_row_length); their values never reach a result.
struct PairsOperand {
  const uint32_t* data = nullptr;
  int64_t ld = 0;
};

/// A left operand A[m, k]: pair p of row i, (A[i, 2p], A[i, 2p+1]), is the two bfloat16 at data + i·si + p·sp.
/// A row-major A has si = lda, sp = 2 (its k must then be even, or its pad element zero); the pairs layout of
/// Aᵀ (from pack_rows_in_pairs) has si = 2, sp = 2 · ld.
struct LeftOperand {
  const c10::BFloat16* data = nullptr;
  int64_t si = 0, sp = 2;
  /// Its rows from row i on.
  LeftOperand from_row(int64_t i) const { return {data + i * si, si, sp}; }
};

/// dst[p * ld + j] = (src[2p, j], src[2p+1, j]) for p < ceil(k / 2), j < n; zero past row k and in the columns
/// n .. ld. Row r of src is src + r * ld_src.
void pack_rows_in_pairs(const c10::BFloat16* src, int64_t ld_src, int64_t k, int64_t n, uint32_t* dst, int64_t ld);

/// The pairs layout of Bᵀ for a row-major B[n, k] (keys as stored, for Q·Kᵀ): dst[p * ld + j] =
/// (src[j, 2p], src[j, 2p+1]), zero high half past an odd k, zero in the columns n .. ld.
void pack_transposed_in_pairs(const c10::BFloat16* src, int64_t ld_src, int64_t n, int64_t k, uint32_t* dst,
                              int64_t ld);

/// C[m, n] = alpha · A · B + beta · C over `pairs` pairs of k, row-major C. beta is 0 (C is only written, so
/// NaN in it is harmless) or 1. With lane_max ([m, kPairLanes]), also lane_max[i, l] = the maximum of C[i, j]
/// over the columns j ≡ l (mod kPairLanes), -inf where there is none: the row maxima, reduced over 16 lanes by
/// the caller. A NaN in C may or may not reach lane_max (vmaxps keeps one operand).
void bf16_gemm(int64_t m, int64_t n, int64_t pairs, float alpha, LeftOperand a, PairsOperand b, float beta,
               float* c, int64_t ldc, float* lane_max = nullptr);

/// s[r] = Σ_i x[r · in + i] · w[i] for r < rows (1 to 4): the dot products of up to four contiguous bfloat16
/// rows of x with one bfloat16 weight row, as pair products summed in float (the bfloat16 linear_rows on a CPU
/// with AVX512-BF16: one load and one vdpbf16ps per 32 weights and row, where widening takes four
/// instructions). bfloat16 products are exact in float, so only the order of the float sums differs from
/// widening first. With `prefetch`, the weights are prefetched ahead (products/weight_prefetch.h).
void bf16_dot_rows(int rows, const c10::BFloat16* x, int64_t in, const c10::BFloat16* w, bool prefetch, float* s);

/// The FLOP rate of vdpbf16ps over that of the float FMA (vfmadd231ps), both on 512-bit registers, measured on
/// the calling thread in register-only loops (under a millisecond; the median of 21 rounds). About 2 where the
/// pair product issues at the FMA's rate (AMD Zen 4), about 0.5 where it issues at half of it (the Intel Xeon
/// of bench/RESULTS.md).
double pair_product_speed();

}  // namespace attn::ops::cpu
