// The CPU kernels' entry points: each runs the active instruction-set variant's kernel (isa/dispatch.h).

#include "ops/cpu/kernels.h"

#include "ops/cpu/isa/dispatch.h"

#include <c10/util/Exception.h>

namespace attn::ops::cpu {
namespace {

/// bfloat16 inputs reach the kernels on BLAS, which widens them as it reads them, or on the routes that multiply
/// them, which run only where products/route.h chose them: on AVX512-BF16 (and AMX, for its tiles), with even
/// pair dimensions.
template <typename Pass>
void check_bfloat16_route(const Pass& args, bool needs_even_dv) {
  const ProductRoute route = args.problem.route;
  if (route == ProductRoute::Blas) return;
  TORCH_INTERNAL_ASSERT(multiplies_bfloat16(route) && hardware_capability_limit() == Capability::Avx512Bf16 &&
                            (route != ProductRoute::AmxTiles || hardware_has_amx()),
                        "attn: bfloat16 inputs reached the kernel on the ", product_route_name(args.problem.route),
                        " route with ", capability_name(hardware_capability_limit()));
  TORCH_INTERNAL_ASSERT(args.problem.dk % 2 == 0 && (!needs_even_dv || args.problem.dv % 2 == 0),
                        "the bfloat16 route needs an even d_k", needs_even_dv ? " and d_v" : "", ", got ",
                        args.problem.dk, " and ", args.problem.dv);
}

}  // namespace

void flash_forward(const FlashForward<float>& a) { on_active_variant([&](auto v) { decltype(v)::flash_forward(a); }); }
void flash_forward(const FlashForward<double>& a) { on_active_variant([&](auto v) { decltype(v)::flash_forward(a); }); }
void flash_forward(const FlashForward<float, c10::BFloat16>& a) {
  check_bfloat16_route(a, false);
  on_active_variant([&](auto v) { decltype(v)::flash_forward(a); });
}
void flash_backward(const FlashBackward<float>& a) {
  on_active_variant([&](auto v) { decltype(v)::flash_backward(a); });
}
void flash_backward(const FlashBackward<double>& a) {
  on_active_variant([&](auto v) { decltype(v)::flash_backward(a); });
}
void flash_backward(const FlashBackward<float, c10::BFloat16>& a) {
  check_bfloat16_route(a, true);
  on_active_variant([&](auto v) { decltype(v)::flash_backward(a); });
}
void decode_forward(const DecodeArgs<float>& a) { on_active_variant([&](auto v) { decltype(v)::decode_forward(a); }); }
void decode_forward(const DecodeArgs<double>& a) { on_active_variant([&](auto v) { decltype(v)::decode_forward(a); }); }
void linear_rows(const LinearRowsArgs<float>& a) { on_active_variant([&](auto v) { decltype(v)::linear_rows(a); }); }
void linear_rows(const LinearRowsArgs<c10::BFloat16>& a) {
  on_active_variant([&](auto v) { decltype(v)::linear_rows(a); });
}
void softcap_values(float* x, int64_t n, float cap, float* tanh_out) {
  on_active_variant([&](auto v) { decltype(v)::softcap_values(x, n, cap, tanh_out); });
}

}  // namespace attn::ops::cpu
