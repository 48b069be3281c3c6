#pragma once
// The kernels of each instruction-set variant: one type per variant whose static members are its kernels.
// ops/cpu/variant_<name>.cpp compiles the kernels' headers with that instruction set's flags, and they define
// the members there; isa/dispatch.h picks the variant. Every variant has every kernel: a product route a
// variant lacks fails an internal assertion (products/flash_products.h), which products/route.h never lets
// happen. The arguments' types are only named here (flash/, decode/, linear/ define them).

#include <c10/util/BFloat16.h>

#include <cstdint>

namespace attn::ops::cpu {

template <typename T, typename In>
struct FlashForward;
template <typename T, typename In>
struct FlashBackward;
template <typename T>
struct DecodeArgs;
template <typename W>
struct LinearRowsArgs;

#define ATTN_VARIANT_KERNELS                                               \
  static void flash_forward(const FlashForward<float, float>& args);       \
  static void flash_forward(const FlashForward<double, double>& args);     \
  static void flash_forward(const FlashForward<float, c10::BFloat16>& args); \
  static void flash_backward(const FlashBackward<float, float>& args);     \
  static void flash_backward(const FlashBackward<double, double>& args);   \
  static void flash_backward(const FlashBackward<float, c10::BFloat16>& args); \
  static void decode_forward(const DecodeArgs<float>& args);               \
  static void decode_forward(const DecodeArgs<double>& args);              \
  static void linear_rows(const LinearRowsArgs<float>& args);              \
  static void linear_rows(const LinearRowsArgs<c10::BFloat16>& args);      \
  static void softcap_values(float* x, int64_t n, float cap, float* tanh_out);

struct DefaultVariant {
  ATTN_VARIANT_KERNELS
};
struct Avx2Variant {
  ATTN_VARIANT_KERNELS
};
struct Avx512Variant {
  ATTN_VARIANT_KERNELS
};

#undef ATTN_VARIANT_KERNELS

}  // namespace attn::ops::cpu
