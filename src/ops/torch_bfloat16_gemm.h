#pragma once
// Whether LibTorch's own bfloat16 matrix product is fast on this CPU, for the backend of a linear layer
// (backends/linear.cpp), which widens bfloat16 to float where it is not.

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

}  // namespace attn::ops
