#pragma once
// The standard ALiBi slopes, defined once: attn::alibi_slopes (the public helper) and the modules' alibi option
// both take them from here.

#include <torch/types.h>

#include <cstdint>

namespace attn::common {

/// 2^(-8i/n) for i = 1..n with n the power of two <= num_heads, then every other slope (the odd i) of the next
/// power of two's sequence for the remaining heads. [num_heads] float64, made on `device` (no host-to-device
/// copy: a module on CUDA makes them per call). `fn` names the caller in the error.
torch::Tensor standard_alibi_slopes(const char* fn, int64_t num_heads, const torch::Device& device);

}  // namespace attn::common
