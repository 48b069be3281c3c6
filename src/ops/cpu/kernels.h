#pragma once
// The CPU kernels' entry points, which the op wrappers (*_cpu.cpp) call: each runs the instruction-set variant
// that isa/capability.h names (isa/dispatch.h). The arguments' types are in flash/, decode/ and linear/, and
// a fused call's product route in products/route.h.
#include "ops/cpu/decode/decode_args.h"
#include "ops/cpu/flash/problem.h"
#include "ops/cpu/isa/capability.h"
#include "ops/cpu/linear/linear_rows_args.h"
#include "ops/cpu/products/route.h"

#include <c10/util/BFloat16.h>

#include <cstdint>

namespace attn::ops::cpu {

/// The fused forward and backward passes. bfloat16 inputs (T = float) come only on the pairs route.
void flash_forward(const FlashForward<float>& args);
void flash_forward(const FlashForward<double>& args);
void flash_forward(const FlashForward<float, c10::BFloat16>& args);
void flash_backward(const FlashBackward<float>& args);
void flash_backward(const FlashBackward<double>& args);
void flash_backward(const FlashBackward<float, c10::BFloat16>& args);
/// The decode kernel, in float for float and bfloat16 caches, in float64 for float64 ones.
void decode_forward(const DecodeArgs<float>& args);
void decode_forward(const DecodeArgs<double>& args);
void linear_rows(const LinearRowsArgs<float>& args);
void linear_rows(const LinearRowsArgs<c10::BFloat16>& args);
/// x = cap · tanh(x / cap) over n floats, exactly as the active variant's kernels soft-cap a score row, with
/// tanh(x / cap) in tanh_out when it is non-null. The tanh is an approximation of ours; tests check it here.
void softcap_values(float* x, int64_t n, float cap, float* tanh_out);

}  // namespace attn::ops::cpu
