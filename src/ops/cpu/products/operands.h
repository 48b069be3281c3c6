#pragma once
// What a call's tile products read: the operands' views and sizes, the scale and the route (TileOperands), and
// where one tile lies (TileAt). The fused kernels' problem extends TileOperands with the masks and variants
// (flash/problem.h); the product routes see only this.

#include "ops/cpu/math/kernel_layout.h"
#include "ops/cpu/products/route.h"

#include <cstdint>

namespace attn::ops::cpu {

/// q [B, H, Tq, dk], k [B, H_kv, Tk, dk] and v [B, H_kv, Tk, dv], each row contiguous; dk and dv are positive
/// (the op runs values of width zero as two columns of zeros), so every row has data to address. In is their
/// element type: T itself, or bfloat16 for T = float on the pairs route, whose products accumulate in float.
template <typename T, typename In = T>
struct TileOperands {
  int64_t batch = 0, heads = 0, tq = 0, tk = 0, dk = 0, dv = 0;
  int64_t kv_heads = 0;  // k and v have kv_heads heads, each shared by heads / kv_heads query heads
  View4<const In> q, k, v;
  T scale = 1;
  ProductRoute route = ProductRoute::Blas;  // chosen by the op (products/route.h)

  /// How many query heads share one key/value head, and which one query head h reads.
  int64_t group() const { return heads / kv_heads; }
  int64_t kv_head(int64_t h) const { return h / group(); }
};

/// Where one tile of a pass lies: batch row b, query head h and its kv head hk, query rows [i, i + rows) and
/// key rows [j, j + cols) of that batch row (a packed sequence's offsets included).
struct TileAt {
  int64_t b, h, hk, i, rows, j, cols;
};

}  // namespace attn::ops::cpu
