#pragma once
// What the fused kernels read and write: the problem (the tile operands, the masks and the variants) and the
// forward and backward passes' arguments, validated by the op (flash_attention_cpu.cpp): shapes agree, the last
// dimension of every tensor is contiguous. Also the tile sizes of both passes.
#include "common/band.h"
#include "ops/cpu/math/kernel_layout.h"
#include "ops/cpu/products/operands.h"

#include <c10/util/BFloat16.h>

#include <cstdint>

namespace attn::ops::cpu {

/// What the forward and backward kernels share: the tile operands (sizes, q, k, v, scale, product route), and
/// the masks and variants. In is the element type of q, k, v and the output (TileOperands).
template <typename T, typename In = T>
struct FlashProblem : TileOperands<T, In> {
  View4<const bool> key_padding;  // [B, H, 1, Tk] (si unused); data == nullptr when absent; true = padding
  View4<const bool> attend;       // [B, H, Tq, Tk]; true = may attend
  View4<const T> additive;        // [B, H, Tq, Tk]
  bool causal = false;
  int64_t causal_offset = 0;  // key j allowed for query i iff j <= i + causal_offset
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

  int64_t right_bound() const { return common::band_right(causal, window_right); }
};

template <typename T, typename In = T>
struct FlashForward {
  FlashProblem<T, In> problem;
  View4<In> out;  // [B, H, Tq, dv]
  T* lse = nullptr;  // [B, H, Tq] contiguous
};

/// In as in FlashProblem: bfloat16 for T = float on the bfloat16 routes, whose gradients accumulate in float and
/// are rounded to bfloat16 once, as the pass writes them.
template <typename T, typename In = T>
struct FlashBackward {
  FlashProblem<T, In> problem;
  View4<const In> grad_out;    // [B, H, Tq, dv]
  View4<const In> out;         // [B, H, Tq, dv]: the forward pass's output
  const T* lse = nullptr;      // [B, H, Tq] contiguous, from the forward pass
  T* delta = nullptr;          // [B, H, Tq] contiguous: rowsum(grad_out * out), which the pass writes first
  View4<T> grad_q_splits;      // [splits * B, H, Tq, dk], zeroed: split s accumulates batch s*B + b
  int64_t splits = 1;          // key blocks are divided among this many tasks per (b, kv head)
  // [B, H, Tq, dk]: the splits' sum. With one split and In = T, the same memory as grad_q_splits (nothing to sum).
  View4<In> grad_q;
  View4<In> grad_k, grad_v;    // [B, H_kv, Tk, dk], [B, H_kv, Tk, dv]: summed over each group of query heads
};

/// Tile sizes: query rows and key rows per tile. A [kQueryBlock, kKeyBlock] score tile plus the output
/// accumulator stay in L2; the key tile is wide enough that P·V runs as an efficient product. 128 query rows
/// halve the masked half of each causal diagonal tile against 256 (bench/RESULTS.md, "Where the kernels'
/// constants come from").
inline constexpr int64_t kQueryBlock = 128;
inline constexpr int64_t kKeyBlock = 512;
inline constexpr int64_t kBackwardQueryBlock = 64;
inline constexpr int64_t kBackwardKeyBlock = 128;

}  // namespace attn::ops::cpu
