#pragma once
// Whether LibTorch's own bfloat16 matrix product is fast on this CPU, for the backend of a linear layer
// (backends/linear.cpp), which widens bfloat16 to float where it is not.

namespace attn::ops {

/// Whether at::linear and at::mm multiply bfloat16 CPU tensors on oneDNN's bfloat16 kernels here. LibTorch,
/// 1.13 and 2.x alike, sends them there only on an x86 CPU with AVX-512's core set (F, BW, VL, DQ; ATen's
/// mkldnn_bf16_device_check). Elsewhere on x86 it runs its own reference loops: on an AMD Zen 3, 7x (2.x) to
/// 90x (1.13) slower than widening to float for the float GEMM (bench/RESULTS.md). True off x86, where attn
/// has not measured it.
bool torch_multiplies_bfloat16_natively();

}  // namespace attn::ops
