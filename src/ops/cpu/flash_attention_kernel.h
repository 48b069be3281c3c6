#pragma once
// The fused CPU attention kernels on raw pointers. They are compiled once per instruction set
// (flash_attention_kernel_{default,avx2,avx512}.cpp include flash_attention_kernel_impl.h) and chosen at run
// time, the way ATen's own CPU kernels are. Everything here is validated by the caller
// (flash_attention_cpu.cpp): shapes agree, the last dimension of every tensor is contiguous.

#include "common/band.h"

#include <c10/util/BFloat16.h>

#include <algorithm>
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
/// In is the element type of q, k, v and the output: T itself, or bfloat16 for T = float on the bfloat16
/// route (Capability::Avx512Bf16), whose tile products run on bfloat16 pairs and accumulate in float.
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

/// In as in FlashProblem: bfloat16 for T = float on the bfloat16 route, whose gradients still accumulate in
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

/// The decode kernel: few queries (Tq <= 16 or so) per batch row against a KV cache. Query t of row b sits at
/// position p = query_starts[b] + t; it may attend key j iff j < key_lengths[b] and j lies in the band around
/// p: when causal j <= p, with a window p - window_left <= j <= p + window_right (backends/masks.h,
/// cache_blocked, states the same rule). The cache element type
/// KV is the compute type T, or bfloat16 for T = float.
template <typename T, typename KV>
struct DecodeArgs {
  int64_t batch = 0, heads = 0, kv_heads = 0, tq = 0, dk = 0, dv = 0;
  View4<const T> q;          // [B, H, Tq, dk]
  View4<const KV> k, v;      // [B, H_kv, capacity, dk|dv]
  const int64_t* query_starts = nullptr;  // [B]
  const int64_t* key_lengths = nullptr;   // [B], each <= capacity
  bool causal = true;
  T scale = 1;
  // The variants of FlashProblem, around each query's position p instead of a diagonal.
  int64_t window_left = -1, window_right = -1;
  T softcap = 0;
  const T* alibi = nullptr;  // slope of (row b, head h) at alibi[b * alibi_stride + h]
  int64_t alibi_stride = 0;
  const T* sinks = nullptr;  // [H]
  View4<T> out;              // [B, H, Tq, dv]

  int64_t right_bound() const { return common::band_right(causal, window_right); }
};

/// The few-row linear kernel (attn::linear_rows): y[r, o] = Σ_i x[r, i] · weight[o, i] + bias[o] for
/// rows <= kLinearRowsMax (<attn/ops/linear_rows.h>), summed in float. W, the weight's element type, is float
/// or bfloat16.
template <typename W>
struct LinearRowsArgs {
  int64_t rows = 0, in = 0, out = 0;
  const float* x = nullptr;     // [rows, in] contiguous
  const W* x_native = nullptr;  // the same rows in W, contiguous (the bfloat16 pairs route reads these)
  const W* weight = nullptr;    // row o at weight + o * weight_stride, its in elements contiguous
  int64_t weight_stride = 0;
  const float* bias = nullptr;  // [out]; nullptr: none
  float* y = nullptr;           // [rows, out] contiguous
};

/// Keys per split of a row's cache: the split depends on the length only, never on the thread count, so
/// the merged result is bitwise the same at any thread count.
inline constexpr int64_t kDecodeKeyBlock = 256;

/// The instruction sets the kernels are compiled for. Avx512Bf16 is the AVX-512 variant plus the bfloat16
/// route: bfloat16 inputs are multiplied as bfloat16 pairs (ops/cpu/bf16_gemm.h) instead of being widened to
/// float first.
enum class Capability { Default, Avx2, Avx512, Avx512Bf16 };

/// The variant that runs: the widest this CPU and build support, or a lower one forced. ATTN_CPU_CAPABILITY=
/// default|avx2|avx512 lowers it. Avx512Bf16 runs the AVX-512 kernels; whether bfloat16 takes its own route
/// there is bf16_route_chosen().
Capability active_capability();
/// The widest this CPU and build support (after ATTN_CPU_CAPABILITY).
Capability hardware_capability_limit();
/// How much faster vdpbf16ps must measure than the float FMA (pair_product_speed) for the bfloat16 route to be
/// taken. Measured end to end, the route ran the fused forward pass 1.8x faster than widening where that speed
/// is 2.0 (AMD Zen 4), and 0.68x where it is 0.48 (an Intel Xeon without AMX): 1.5 lies well between, so the
/// choice does not flip with a noisy probe. (An earlier probe timed a Q·Kᵀ tile against BLAS, whose threads
/// made it read anywhere from 1.1x to 3.1x on the same Zen 4.)
inline constexpr double kBf16RouteMargin = 1.5;
/// Whether a bfloat16 forward pass takes the bfloat16 route: forced with force_capability(Avx512Bf16) or
/// ATTN_CPU_CAPABILITY=avx512_bf16; otherwise where the CPU has AVX512-BF16 and bf16_pair_speed() >=
/// kBf16RouteMargin. The first call measures (under a millisecond, on the calling thread, once per process).
bool bf16_route_chosen();
/// AVX512-BF16's pair product FLOP rate over the float FMA's (pair_product_speed), measured once; 0 where not
/// measured.
double bf16_pair_speed();
/// Which products the float passes of the AVX-512 variant run: attn's register tiles (ops/cpu/float_tiles.h:
/// Kᵀ and Vᵀ packed once per kv head, the other operands read where they lie, the forward's row maxima from the
/// tile's epilogue) or BLAS once per tile, as the other variants and float64 do. Tiles unless
/// ATTN_FLOAT_PRODUCTS=blas or forced: on an AMD Zen 4 they ran the forward pass 1.2x and a training step 1.1x
/// faster than BLAS (bench/RESULTS.md, issue 15).
enum class FloatProducts { Tiles, Blas };
FloatProducts float_products();
/// Forces the float products (tests run both); `reset_float_products()` undoes it.
void force_float_products(FloatProducts products);
void reset_float_products();
/// Forces a capability up to hardware_capability_limit() (tests run every variant); `reset_capability()`
/// undoes it.
void force_capability(Capability capability);
void reset_capability();
const char* capability_name(Capability capability);

void flash_forward(const FlashForward<float>& args);
void flash_forward(const FlashForward<double>& args);
void flash_backward(const FlashBackward<float>& args);
void flash_backward(const FlashBackward<double>& args);
void decode_forward(const DecodeArgs<float, float>& args);
void decode_forward(const DecodeArgs<double, double>& args);
void decode_forward(const DecodeArgs<float, c10::BFloat16>& args);
void linear_rows(const LinearRowsArgs<float>& args);
void linear_rows(const LinearRowsArgs<c10::BFloat16>& args);
/// The bfloat16 route's forward: only on a CPU with AVX512-BF16 (hardware_capability_limit()), with d_k even.
void flash_forward(const FlashForward<float, c10::BFloat16>& args);
/// The bfloat16 route's backward: the same, with d_k and d_v even.
void flash_backward(const FlashBackward<float, c10::BFloat16>& args);
/// x = cap · tanh(x / cap) over n floats, exactly as the active variant's kernels soft-cap a score row, with
/// tanh(x / cap) in tanh_out when it is non-null. The tanh is an approximation of ours; tests check it here.
void softcap_values(float* x, int64_t n, float cap, float* tanh_out);

/// The per-instruction-set definitions, declared once per variant namespace.
#define ATTN_DECLARE_FLASH_KERNELS(ns)                               \
  namespace ns {                                                      \
  void flash_forward(const FlashForward<float>& args);                \
  void flash_forward(const FlashForward<double>& args);               \
  void flash_backward(const FlashBackward<float>& args);              \
  void flash_backward(const FlashBackward<double>& args);             \
  void decode_forward(const DecodeArgs<float, float>& args);          \
  void decode_forward(const DecodeArgs<double, double>& args);        \
  void decode_forward(const DecodeArgs<float, c10::BFloat16>& args);  \
  void linear_rows(const LinearRowsArgs<float>& args);                \
  void linear_rows(const LinearRowsArgs<c10::BFloat16>& args);        \
  void softcap_values(float* x, int64_t n, float cap, float* tanh_out); \
  }
ATTN_DECLARE_FLASH_KERNELS(kernel_default)
ATTN_DECLARE_FLASH_KERNELS(kernel_avx2)
ATTN_DECLARE_FLASH_KERNELS(kernel_avx512)
#undef ATTN_DECLARE_FLASH_KERNELS
namespace kernel_avx512 {
void flash_forward(const FlashForward<float, c10::BFloat16>& args);
void flash_backward(const FlashBackward<float, c10::BFloat16>& args);
/// linear_rows on bfloat16 pairs (bf16_dot_rows): only on a CPU with AVX512-BF16.
void linear_rows_pairs(const LinearRowsArgs<c10::BFloat16>& args);
}

/// Tile sizes: query rows and key rows per tile. A [kQueryBlock, kKeyBlock] score tile plus the output
/// accumulator stay in L2; the key tile is wide enough that P·V runs as an efficient GEMM. 128 query rows
/// rather than 256 halve the masked half of each causal diagonal tile: causal T=2048 ran 10 % (float) and
/// 14 % (bfloat16) faster on the Zen 4, noncausal the same; 64 slowed noncausal float by 7 %.
inline constexpr int64_t kQueryBlock = 128;
inline constexpr int64_t kKeyBlock = 512;
inline constexpr int64_t kBackwardQueryBlock = 64;
inline constexpr int64_t kBackwardKeyBlock = 128;

}  // namespace attn::ops::cpu
