#pragma once
// What the fused kernels read and write: strided views of the tensors, the problem (sizes, masks, variants)
// and the forward and backward passes' arguments, validated by the op (flash_attention_cpu.cpp): shapes agree,
// the last dimension of every tensor is contiguous. Also the tile sizes of both passes.
#include "common/band.h"
#include "ops/cpu/products/route.h"

#include <c10/util/BFloat16.h>

#include <cstdint>

namespace attn::ops::cpu {

/// A strided [B, H, rows, cols] view: element (b, h, i, j) is at data[b*sb + h*sh + i*si + j]. Masks use
/// stride 0 to broadcast, and their innermost stride `sj` may be anything.
template <typename T>
struct View4 {
  T* data = nullptr;
  int64_t sb = 0, sh = 0, si = 0, sj = 1;
  T* row(int64_t b, int64_t h, int64_t i) const { return data + b * sb + h * sh + i * si; }
};

/// What the forward and backward kernels share: sizes, inputs, masks and options.
/// In is the element type of q, k, v and the output: T itself, or bfloat16 for T = float on the bfloat16 pairs
/// route, whose tile products accumulate in float.
template <typename T, typename In = T>
struct FlashProblem {
  int64_t batch = 0, heads = 0, tq = 0, tk = 0, dk = 0, dv = 0;
  int64_t kv_heads = 0;  // k and v have kv_heads heads, each shared by heads / kv_heads query heads
  View4<const In> q, k, v;
  View4<const bool> key_padding;  // [B, H, 1, Tk] (si unused); data == nullptr when absent; true = padding
  View4<const bool> attend;       // [B, H, Tq, Tk]; true = may attend
  View4<const T> additive;        // [B, H, Tq, Tk]
  bool causal = false;
  int64_t causal_offset = 0;  // key j allowed for query i iff j <= i + causal_offset
  T scale = 1;
  // The window band around the diagonal j = i + offset: offset - window_left <= j - i <= offset + window_right,
  // -1 unbounded (backends/masks.h, Band). Causal bounds the right side at 0.
  int64_t window_left = -1, window_right = -1;
  T softcap = 0;                 // 0: off; else s = softcap · tanh(s / softcap)
  const T* alibi = nullptr;      // slope of (sequence s, head h) at alibi[s * alibi_stride + h]; nullptr: none
  int64_t alibi_stride = 0;
  const T* sinks = nullptr;      // [H] logits in every row's denominator; nullptr: none
  // Packed sequences (batch == 1): sequence s is query rows cu_seqlens_q[s] .. [s+1] and key rows
  // cu_seqlens_k[s] .. [s+1], each with its own bottom-right diagonal. nullptr: each batch row is one sequence.
  const int64_t* cu_seqlens_q = nullptr;
  const int64_t* cu_seqlens_k = nullptr;
  int64_t sequences = 0;
  ProductRoute route = ProductRoute::Blas;  // the tile products (products/route.h), chosen by the op

  int64_t right_bound() const { return common::band_right(causal, window_right); }

  /// How many query heads share one key/value head, and which one query head h reads.
  int64_t group() const { return heads / kv_heads; }
  int64_t kv_head(int64_t h) const { return h / group(); }
};

template <typename T, typename In = T>
struct FlashForward {
  FlashProblem<T, In> problem;
  View4<In> out;  // [B, H, Tq, dv]
  T* lse = nullptr;  // [B, H, Tq] contiguous
};

/// In as in FlashProblem: bfloat16 for T = float on the pairs route, whose gradients still accumulate in
/// (and are returned as) float.
template <typename T, typename In = T>
struct FlashBackward {
  FlashProblem<T, In> problem;
  View4<const In> grad_out;    // [B, H, Tq, dv]
  const T* lse = nullptr;      // [B, H, Tq] contiguous, from the forward pass
  const T* delta = nullptr;    // [B, H, Tq] contiguous: rowsum(grad_out * out)
  View4<T> grad_q;             // [splits * B, H, Tq, dk], zeroed: split s writes batch s*B + b
  int64_t splits = 1;          // key blocks are divided among this many tasks per (b, kv head)
  View4<T> grad_k, grad_v;     // [B, H_kv, Tk, dk], [B, H_kv, Tk, dv]: summed over each group of query heads
};

/// Where one tile of a pass lies: batch row b, query head h and its kv head hk, query rows [i, i + rows) and
/// key rows [j, j + cols) of that batch row (a packed sequence's offsets included). The product routes read
/// their operands from here.
struct TileAt {
  int64_t b, h, hk, i, rows, j, cols;
};

/// Tile sizes: query rows and key rows per tile. A [kQueryBlock, kKeyBlock] score tile plus the output
/// accumulator stay in L2; the key tile is wide enough that P·V runs as an efficient GEMM. 128 query rows
/// rather than 256 halve the masked half of each causal diagonal tile: causal T=2048 ran 10 % (float) and
/// 14 % (bfloat16) faster on the Zen 4, noncausal the same; 64 slowed noncausal float by 7 %.
inline constexpr int64_t kQueryBlock = 128;
inline constexpr int64_t kKeyBlock = 512;
inline constexpr int64_t kBackwardQueryBlock = 64;
inline constexpr int64_t kBackwardKeyBlock = 128;

}  // namespace attn::ops::cpu
