#pragma once
// The fused kernels' product routes, and the one switch that turns a call's route (TileOperands::route, chosen
// by products/route.h) into the type whose members the forward and backward loops call. The only place that
// knows which routes this instruction-set variant compiled.
//
// A route is a type constructed once per call from the tile operands (and dO, backward), packing what it packs
// there, and then shared, read-only, by every task; each task owns a Route::Scratch. For a tile at TileAt t:
//   Forward   scores(st, t, s, lds, lane_max)       S = scale · Q·Kᵀ; with lane_max (kRowMaxima routes, a
//                                                    tile without masks or score terms), each row's maxima
//                                                    over kRowMaxLanes lanes
//             exp_sum(st, r, row, cols, max, vf)     P = exp(S - max) for row r, kept as the route keeps it;
//                                                    returns its sum (vf: the tile's values are all finite)
//             no_keys_yet(st, r, row, cols)          P = 0 for row r
//             add_values(st, t, p, ldp, acc, ldacc)  acc += P·V
//   Backward  key_block(st, t, keys_finite)          once per key block, before its tiles
//             scores(st, t, s, lds, nullptr)         as forward
//             add_grad_values(st, t, p, ldp, dv, ld) dV += Pᵀ·dO
//             grad_probs(st, t, dp, lddp)            dP = dO·Vᵀ
//             add_grad_keys(st, t, ds, ldds, dk, ld) dK += scale · dSᵀ·Q
//             add_grad_queries(st, t, ds, ldds, dq, ld)  dQ += scale · dS·K, where the block's keys are finite

#include "ops/cpu/math/kernel_layout.h"
#include "ops/cpu/math/rows.h"
#include "ops/cpu/products/blas_products.h"
#include "ops/cpu/products/operands.h"
#include "ops/cpu/products/route.h"

#if defined(CPU_CAPABILITY_AVX512)
#define ATTN_FLOAT_TILE_PRODUCTS 1
#include "ops/cpu/products/float_tile_products.h"
#endif
#if defined(CPU_CAPABILITY_AVX512) && defined(ATTN_HAVE_BF16_DOT)
#define ATTN_PAIR_PRODUCTS 1
#include "ops/cpu/products/pair_products.h"
#endif
#if defined(ATTN_PAIR_PRODUCTS) && defined(ATTN_HAVE_AMX)
#define ATTN_AMX_TILE_PRODUCTS 1
#include "ops/cpu/products/amx_products.h"
#endif

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <type_traits>

#if defined(CPU_CAPABILITY_AVX512)
#include <immintrin.h>
#endif

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

/// Lanes per row of the row maxima a route's scores give on the side: one AVX-512 vector.
inline constexpr int64_t kRowMaxLanes = 16;
#ifdef ATTN_FLOAT_TILE_PRODUCTS
static_assert(kRowMaxLanes == float_tiles::kLanes, "the float tiles give one vector of maxima a row");
#endif
#ifdef ATTN_PAIR_PRODUCTS
static_assert(kRowMaxLanes == kPairLanes, "the pairs micro-kernel gives one vector of maxima a row");
#endif

/// The maximum of one row's lanes of maxima; -inf if none is a number.
inline float lanes_max(const float* lanes) {
#if defined(CPU_CAPABILITY_AVX512)
  // One vector: its NaN lanes masked off (they count as -inf), where a scalar loop takes 16 compares a row.
  static_assert(kRowMaxLanes == 16, "one AVX-512 vector a row");
  const __m512 v = _mm512_loadu_ps(lanes);
  return _mm512_mask_reduce_max_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
#else
  float m = kNegInf<float>;
  for (int64_t l = 0; l < kRowMaxLanes; ++l) m = lanes[l] > m ? lanes[l] : m;
  return m;
#endif
}

/// A route for a forward pass (grad_out null) or a backward one.
template <typename Route, typename T, typename In>
Route make_route(const TileOperands<T, In>& o, const View4<const In>* grad_out) {
  return grad_out ? Route(o, *grad_out) : Route(o);
}

/// Calls run(route) with the route o.route names, constructed from `o`, and from *grad_out for a backward pass
/// (kBackward; nullptr forward). AMX's tiles take a type of their own for each pass.
template <bool kBackward, typename T, typename In, typename Run>
void with_products(const TileOperands<T, In>& o, const View4<const In>* grad_out, const Run& run) {
  switch (o.route) {
    case ProductRoute::Blas:
      if constexpr (std::is_same_v<T, In> || (std::is_same_v<T, float> && std::is_same_v<In, c10::BFloat16>)) {
        return run(make_route<BlasProducts<T, In>>(o, grad_out));
      }
      break;
    case ProductRoute::FloatTiles:
#ifdef ATTN_FLOAT_TILE_PRODUCTS
      if constexpr (std::is_same_v<T, float> && std::is_same_v<In, float>) {
        return run(make_route<FloatTileProducts>(o, grad_out));
      }
#endif
      break;
    case ProductRoute::BfloatPairs:
#ifdef ATTN_PAIR_PRODUCTS
      if constexpr (std::is_same_v<T, float> && std::is_same_v<In, c10::BFloat16>) {
        return run(make_route<PairProducts>(o, grad_out));
      }
#endif
      break;
    case ProductRoute::AmxTiles:
#ifdef ATTN_AMX_TILE_PRODUCTS
      if constexpr (std::is_same_v<T, float> && std::is_same_v<In, c10::BFloat16>) {
        if constexpr (kBackward) {
          return run(AmxBackwardProducts(o, *grad_out));
        } else {
          return run(AmxForwardProducts(o));
        }
      }
#endif
      break;
  }
  TORCH_INTERNAL_ASSERT(false, "attn: the ", product_route_name(o.route),
                        " route was not compiled for these inputs in this instruction-set variant");
}

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
