#pragma once
// Whether LibTorch's own bfloat16 matrix product is fast on this CPU, for the backend of a linear layer
// (backends/linear.cpp), which widens bfloat16 to float where it is not.

#include <cstdint>

namespace attn::ops {

/// Whether at::linear and at::mm multiply bfloat16 CPU tensors on oneDNN's bfloat16 kernels here. LibTorch
/// sends them there on an x86 CPU with AVX-512's core set (F, BW, VL, DQ; ATen's mkldnn_bf16_device_check;
/// 2.x also on AVX2 CPUs with AVX-NE-CONVERT, which this counts as not native: unmeasured). Elsewhere on x86
/// it runs its own reference loops: on an AMD Zen 3, 5x to 7x (2.15) and 75x to 115x (1.13) slower than
/// widening to float for the float GEMM (bench/RESULTS.md). True off x86, where attn has not measured it.
bool torch_multiplies_bfloat16_natively();

/// Whether that oneDNN product runs without bfloat16 instructions under it: AVX-512's core set without
/// AVX512-BF16 (Skylake, Cascade Lake and Ice Lake Xeons), where oneDNN converts every element itself. On an
/// Intel Xeon Cascade Lake it multiplied 2 to 16 rows by 4096 x 4096, 11008 x 4096 and 4096 x 11008 weights
/// 1.3x to 4x slower than attn::ops::linear_rows (bench/RESULTS.md).
bool torch_bfloat16_gemm_is_emulated();

/// Whether that oneDNN product runs on AVX512-BF16's pair products that are slower than the float FMA here: the
/// CPU has AVX512-BF16 but no AMX tiles enabled (which oneDNN takes where they are), and vdpbf16ps measured below
/// kBfloat16GemmTrailsBelow of the FMA's FLOP rate (the bfloat16 route's probe, products/route.h; it does not run
/// where ATTN_CPU_CAPABILITY pins the variant, and then this is false). Then the float GEMM on widened operands is
/// faster from kWidenedGemmMinRows rows on. On an Intel Xeon whose KVM guest hides AMX (model 207: vdpbf16ps at
/// 0.5x, a 2048³ GEMM at 137-157 GFLOP/s in bfloat16 and 246-259 in float32), widening made SmolLM2's products
/// of 512 rows 1.33x-1.64x faster (bench/RESULTS.md). ATTN_BF16_GEMM=native or =widen forces it.
bool torch_bfloat16_gemm_trails_float();
/// Forces torch_bfloat16_gemm_trails_float() (tests run both); `reset_torch_bfloat16_gemm_trails_float()` undoes it.
void force_torch_bfloat16_gemm_trails_float(bool trails);
void reset_torch_bfloat16_gemm_trails_float();

/// The pair products' speed over the FMA's below which LibTorch's bfloat16 GEMM counts as trailing the float one:
/// widening costs a pass over both operands and the result, and the float GEMM then runs at the FMA's rate.
inline constexpr double kBfloat16GemmTrailsBelow = 1.0;
/// Rows of x from which a bfloat16 product widens where torch_bfloat16_gemm_trails_float(): at 64 rows, widening
/// and oneDNN's bfloat16 kernel ran alike on that Xeon (0.9x-1.05x), from 128 widening led (1.04x-1.36x).
inline constexpr int64_t kWidenedGemmMinRows = 128;

}  // namespace attn::ops
