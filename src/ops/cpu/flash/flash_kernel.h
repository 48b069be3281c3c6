// The fused kernels of one instruction-set variant: the including file (ops/cpu/variant_*.cpp) defines
// ATTN_KERNEL_NAMESPACE and ATTN_KERNEL_VARIANT, and CMake CPU_CAPABILITY, which selects at::vec's
// implementation. Each entry point takes its call's product route (products/flash_products.h) and runs the
// pass's loop on it.

#ifndef ATTN_KERNEL_NAMESPACE
#error "define ATTN_KERNEL_NAMESPACE and ATTN_KERNEL_VARIANT before including flash/flash_kernel.h"
#endif

#include "ops/cpu/flash/backward.h"
#include "ops/cpu/flash/forward.h"
#include "ops/cpu/isa/variants.h"
#include "ops/cpu/math/score_terms.h"
#include "ops/cpu/products/flash_products.h"

namespace attn::ops::cpu {
namespace ATTN_KERNEL_NAMESPACE {
namespace {

template <typename T, typename In>
void run_forward(const FlashForward<T, In>& args) {
  with_products<false>(args.problem, static_cast<const View4<const In>*>(nullptr),
                [&](const auto& products) { forward(args, products); });
}

template <typename T, typename In>
void run_backward(const FlashBackward<T, In>& args) {
  with_products<true>(args.problem, &args.grad_out, [&](const auto& products) { backward(args, products); });
}

}  // namespace
}  // namespace ATTN_KERNEL_NAMESPACE

void ATTN_KERNEL_VARIANT::flash_forward(const FlashForward<float>& args) { ATTN_KERNEL_NAMESPACE::run_forward(args); }
void ATTN_KERNEL_VARIANT::flash_forward(const FlashForward<double>& args) { ATTN_KERNEL_NAMESPACE::run_forward(args); }
void ATTN_KERNEL_VARIANT::flash_forward(const FlashForward<float, c10::BFloat16>& args) {
  ATTN_KERNEL_NAMESPACE::run_forward(args);
}
void ATTN_KERNEL_VARIANT::flash_backward(const FlashBackward<float>& args) {
  ATTN_KERNEL_NAMESPACE::run_backward(args);
}
void ATTN_KERNEL_VARIANT::flash_backward(const FlashBackward<double>& args) {
  ATTN_KERNEL_NAMESPACE::run_backward(args);
}
void ATTN_KERNEL_VARIANT::flash_backward(const FlashBackward<float, c10::BFloat16>& args) {
  ATTN_KERNEL_NAMESPACE::run_backward(args);
}
void ATTN_KERNEL_VARIANT::softcap_values(float* x, int64_t n, float cap, float* tanh_out) {
  ATTN_KERNEL_NAMESPACE::softcap_row(x, n, cap, tanh_out);
}

}  // namespace attn::ops::cpu
