// The fused CPU attention kernels (FlashAttention-2 scheme), written once and compiled once per instruction
// set: the including file defines ATTN_KERNEL_NAMESPACE (and CPU_CAPABILITY, which selects at::vec's
// implementation). No include guard on purpose.
//
// Forward: each task takes one block of query rows of one (batch, head) and walks the key blocks. Per tile,
// S = scale·Q·Kᵀ runs through BLAS, the masks overwrite S, an online softmax rescales the running output, and
// O += P·V runs through BLAS again. Only the tile, the output accumulator and two numbers per row live in
// memory, never [Tq, Tk]. The log-sum-exp per row is returned for the backward pass.
//
// Backward: each task takes a range of key blocks of one (batch, head), recomputes P = exp(S - lse) tile by
// tile, and accumulates dK and dV in place; dQ goes to a per-split slice so tasks never write the same row.

#ifndef ATTN_KERNEL_NAMESPACE
#error "define ATTN_KERNEL_NAMESPACE before including flash_attention_kernel_impl.h"
#endif

#include "ops/cpu/blas.h"
#if defined(CPU_CAPABILITY_AVX512) && defined(ATTN_HAVE_BF16_DOT)
#define ATTN_BF16_ROUTE 1
#include "ops/cpu/bf16_gemm.h"
#include "ops/cpu/bf16_softmax.h"
#endif
#include "ops/cpu/flash_attention_kernel.h"
#if defined(CPU_CAPABILITY_AVX512)
#define ATTN_FLOAT_TILES 1
#include "ops/cpu/float_tiles.h"
#endif
#include "ops/cpu/score_terms.h"
#include "ops/cpu/vec_exp.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {
namespace {

using at::vec::Vectorized;

template <typename T>
constexpr T kNegInf = -std::numeric_limits<T>::infinity();

/// Row-major C[m, n] = alpha · op(A) · op(B) + beta · C through the BLAS that LibTorch uses. BLAS is
/// column-major, and a row-major matrix is its transpose in column-major, so the operands swap.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: BLAS implementations disagree on whether they touch C here
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    }
    return;
  }
  // BLAS rejects a leading dimension smaller than the row length, which a single-row view may carry.
  lda = std::max(lda, trans_a ? m : k);
  ldb = std::max(ldb, trans_b ? k : n);
  blas_gemm(trans_b, trans_a, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
}

/// max(x[0..n)), NaN if any element is NaN.
template <typename T>
T row_max(const T* x, int64_t n) {
  using Vec = Vectorized<T>;
  T result = kNegInf<T>;
  int64_t j = 0;
  if (n >= Vec::size()) {
    Vec acc(kNegInf<T>);
    for (; j + Vec::size() <= n; j += Vec::size()) acc = at::vec::maximum(acc, Vec::loadu(x + j));
    result = at::vec::vec_reduce_all<T>([](Vec a, Vec b) { return at::vec::maximum(a, b); }, acc);
  }
  for (; j < n; ++j) {
    if (std::isnan(x[j])) return x[j];
    result = std::max(result, x[j]);
  }
  return result;
}

/// x = exp(x - shift) in place; returns the sum.
template <typename T>
T exp_shifted_sum(T* x, int64_t n, T shift) {
  using Vec = Vectorized<T>;
  const Vec vshift(shift);
  Vec acc(T(0));
  int64_t j = 0;
  for (; j + Vec::size() <= n; j += Vec::size()) {
    const Vec e = fast_exp(Vec::loadu(x + j) - vshift);
    e.store(x + j);
    acc = acc + e;
  }
  T sum = at::vec::vec_reduce_all<T>(std::plus<Vec>(), acc);
  for (; j < n; ++j) {
    x[j] = std::exp(x[j] - shift);
    sum += x[j];
  }
  return sum;
}

/// x = exp(x - shift) in place.
template <typename T>
void exp_shifted(T* x, int64_t n, T shift) {
  using Vec = Vectorized<T>;
  const Vec vshift(shift);
  int64_t j = 0;
  for (; j + Vec::size() <= n; j += Vec::size()) fast_exp(Vec::loadu(x + j) - vshift).store(x + j);
  for (; j < n; ++j) x[j] = std::exp(x[j] - shift);
}

/// ds = p · (dp - delta), and exactly 0 where p is 0: a blocked key contributes no gradient even where dp is
/// NaN or Inf (a non-finite value at a masked key).
template <typename T>
void softmax_backward_row(const T* p, T* dp, int64_t n, T delta) {
  using Vec = Vectorized<T>;
  const Vec vdelta(delta), zero(T(0));
  int64_t j = 0;
  for (; j + Vec::size() <= n; j += Vec::size()) {
    const Vec pv = Vec::loadu(p + j);
    const Vec ds = pv * (Vec::loadu(dp + j) - vdelta);
    Vec::blendv(ds, zero, pv == zero).store(dp + j);
  }
  for (; j < n; ++j) dp[j] = p[j] == T(0) ? T(0) : p[j] * (dp[j] - delta);
}

template <typename T>
bool all_finite(const T* x, int64_t rows, int64_t cols, int64_t ld) {
  using Vec = Vectorized<T>;
  const Vec zero(T(0));
  Vec acc(T(0));
  T tail = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * ld;
    int64_t c = 0;
    for (; c + Vec::size() <= cols; c += Vec::size()) acc = acc + Vec::loadu(row + c) * zero;
    for (; c < cols; ++c) tail += row[c] * T(0);
  }
  // x · 0 is 0 for finite x and NaN for NaN or ±Inf.
  return !std::isnan(at::vec::vec_reduce_all<T>(std::plus<Vec>(), acc) + tail);
}

/// The same for bfloat16: an all-ones exponent is Inf or NaN. (e & 0x7F80) + 0x80 carries into bit 15 exactly
/// for that exponent, so one OR per element, which the compiler vectorises, finds any of them.
inline bool all_finite(const c10::BFloat16* x, int64_t rows, int64_t cols, int64_t ld) {
  uint16_t carries = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const c10::BFloat16* row = x + r * ld;
    for (int64_t c = 0; c < cols; ++c) carries |= static_cast<uint16_t>((row[c].x & 0x7F80) + 0x0080);
  }
  return (carries & 0x8000) == 0;
}

/// For each (b, kv head, block of `block` rows) of x [B, H_kv, Tk, width]: whether all its elements are
/// finite. One pass over x per call, so the tiles can choose the plain GEMM without scanning their block again.
template <typename T, typename In, typename X>
std::vector<uint8_t> finite_blocks(const FlashProblem<T, In>& p, const View4<const X>& x, int64_t width,
                                   int64_t block) {
  const int64_t blocks = (p.tk + block - 1) / block;
  std::vector<uint8_t> flags(p.batch * p.kv_heads * blocks);
  at::parallel_for(0, static_cast<int64_t>(flags.size()), 8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t bh = i / blocks, j0 = (i % blocks) * block;
      flags[i] = all_finite(x.row(bh / p.kv_heads, bh % p.kv_heads, j0), std::min(block, p.tk - j0), width, x.si);
    }
  });
  return flags;
}

template <typename T, typename In>
bool has_masks(const FlashProblem<T, In>& p) {
  return p.key_padding.data != nullptr || p.attend.data != nullptr || p.additive.data != nullptr;
}

/// One sequence of the problem: a batch row, or one packed sequence of a batch row (cu_seqlens). Its query
/// rows q0 .. q0 + tq and key rows k0 .. k0 + tk, indexed locally from 0 by the tiles, with its own diagonal.
struct Sequence {
  int64_t b, id, q0, tq, k0, tk, offset;
};

template <typename T, typename In>
std::vector<Sequence> sequences_of(const FlashProblem<T, In>& p) {
  std::vector<Sequence> out;
  if (p.cu_seqlens_q) {
    for (int64_t s = 0; s < p.sequences; ++s) {
      const int64_t q0 = p.cu_seqlens_q[s], tq = p.cu_seqlens_q[s + 1] - q0;
      const int64_t k0 = p.cu_seqlens_k[s], tk = p.cu_seqlens_k[s + 1] - k0;
      out.push_back({0, s, q0, tq, k0, tk, tk - tq});  // bottom-right per sequence, as flash_attn_varlen_func
    }
  } else {
    for (int64_t b = 0; b < p.batch; ++b) out.push_back({b, b, 0, p.tq, 0, p.tk, p.causal_offset});
  }
  return out;
}

/// The keys [begin, end) that some query of rows [i0, i0 + rows) may see under the band.
template <typename T, typename In>
std::pair<int64_t, int64_t> key_range(const FlashProblem<T, In>& p, const Sequence& sq, int64_t i0, int64_t rows) {
  const int64_t right = p.right_bound();
  const int64_t begin = p.window_left >= 0 ? std::clamp<int64_t>(i0 + sq.offset - p.window_left, 0, sq.tk) : 0;
  const int64_t end = right >= 0 ? std::clamp<int64_t>(i0 + rows - 1 + sq.offset + right + 1, 0, sq.tk) : sq.tk;
  return {begin, std::max(begin, end)};
}

/// The queries [begin, end) that may see some key of [j0, j0 + cols) under the band.
template <typename T, typename In>
std::pair<int64_t, int64_t> query_range(const FlashProblem<T, In>& p, const Sequence& sq, int64_t j0, int64_t cols) {
  const int64_t right = p.right_bound();
  const int64_t begin = right >= 0 ? std::clamp<int64_t>(j0 - sq.offset - right, 0, sq.tq) : 0;
  const int64_t end =
      p.window_left >= 0 ? std::clamp<int64_t>(j0 + cols - 1 - sq.offset + p.window_left + 1, 0, sq.tq) : sq.tq;
  return {begin, std::max(begin, end)};
}

/// True when some pair of the tile lies outside the band, so the tile needs masking.
template <typename T, typename In>
bool tile_leaves_band(const FlashProblem<T, In>& p, const Sequence& sq, int64_t i0, int64_t rows, int64_t j0,
                      int64_t cols) {
  const int64_t right = p.right_bound();
  return (right >= 0 && j0 + cols - 1 > i0 + sq.offset + right) ||
         (p.window_left >= 0 && j0 < i0 + rows - 1 + sq.offset - p.window_left);
}

/// Soft-capping and ALiBi on a [rows, cols] tile of scaled scores at local (i0, j0); the tanh values go to
/// `tanh_out` (same layout) when given.
template <typename T, typename In>
void score_terms(const FlashProblem<T, In>& p, const Sequence& sq, int64_t h, int64_t i0, int64_t rows, int64_t j0,
                 int64_t cols, T* s, int64_t lds, T* tanh_out) {
  if (p.softcap > T(0)) {
    for (int64_t r = 0; r < rows; ++r) {
      softcap_row(s + r * lds, cols, p.softcap, tanh_out ? tanh_out + r * lds : nullptr);
    }
  }
  if (p.alibi) {
    const T slope = p.alibi[sq.id * p.alibi_stride + h];
    for (int64_t r = 0; r < rows; ++r) alibi_row(s + r * lds, cols, slope, i0 + r + sq.offset - j0);
  }
}

/// Applies the masks to a [rows, cols] tile of scores at local (i0, j0): adds the additive mask, then sets
/// every blocked pair to -inf (replacing, not adding, so that a NaN score at a blocked pair disappears).
template <typename T, typename In>
void mask_tile(const FlashProblem<T, In>& p, const Sequence& sq, int64_t h, int64_t i0, int64_t rows, int64_t j0,
               int64_t cols, T* s, int64_t lds) {
  const int64_t b = sq.b, gi = sq.q0 + i0, gj = sq.k0 + j0;  // the masks are indexed by the batch row's rows
  if (p.additive.data) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* add = p.additive.row(b, h, gi + r) + gj * p.additive.sj;
      T* row = s + r * lds;
      for (int64_t c = 0; c < cols; ++c) {
        const T a = add[c * p.additive.sj];
        row[c] = a == kNegInf<T> ? kNegInf<T> : row[c] + a;
      }
    }
  }
  if (p.key_padding.data) {
    const bool* pad = p.key_padding.row(b, h, 0) + gj * p.key_padding.sj;
    for (int64_t c = 0; c < cols; ++c) {
      if (!pad[c * p.key_padding.sj]) continue;
      for (int64_t r = 0; r < rows; ++r) s[r * lds + c] = kNegInf<T>;
    }
  }
  if (p.attend.data) {
    for (int64_t r = 0; r < rows; ++r) {
      const bool* allowed = p.attend.row(b, h, gi + r) + gj * p.attend.sj;
      T* row = s + r * lds;
      for (int64_t c = 0; c < cols; ++c) {
        if (!allowed[c * p.attend.sj]) row[c] = kNegInf<T>;
      }
    }
  }
  if (tile_leaves_band(p, sq, i0, rows, j0, cols)) {
    const int64_t right = p.right_bound();
    for (int64_t r = 0; r < rows; ++r) {
      T* row = s + r * lds;
      const int64_t diagonal = i0 + r + sq.offset - j0;  // the row's diagonal, in tile columns
      if (p.window_left >= 0) {
        const int64_t first_allowed = std::clamp<int64_t>(diagonal - p.window_left, 0, cols);
        std::fill(row, row + first_allowed, kNegInf<T>);
      }
      if (right >= 0) {
        const int64_t first_blocked = std::clamp<int64_t>(diagonal + right + 1, 0, cols);
        std::fill(row + first_blocked, row + cols, kNegInf<T>);
      }
    }
  }
}

/// Whether every row of keys (or values) [g0, g0 + rows) of (b, kv head) is finite, from finite_blocks' flags.
template <typename T, typename In>
bool rows_finite(const FlashProblem<T, In>& p, const std::vector<uint8_t>& flags, int64_t block, int64_t b, int64_t hk,
                 int64_t g0, int64_t rows) {
  const int64_t blocks = (p.tk + block - 1) / block;
  const uint8_t* f = flags.data() + (b * p.kv_heads + hk) * blocks;
  for (int64_t i = g0 / block; i <= (g0 + rows - 1) / block; ++i) {
    if (!f[i]) return false;
  }
  return true;
}

/// Runs `task(t, thread_state)` for t in [0, count) on LibTorch's intra-op threads, handing tasks out one at
/// a time: under a causal mask the tasks differ in cost, and a static split would leave a thread idle.
template <typename State, typename Task>
void run_tasks(int64_t count, const Task& task) {
  if (count <= 0) return;
  std::atomic<int64_t> next{0};
  const int64_t workers = std::min<int64_t>(at::get_num_threads(), count);
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    State state;
    for (int64_t t = next.fetch_add(1); t < count; t = next.fetch_add(1)) task(t, state);
  });
}

/// Rows of a score tile that get their score terms and masks together, just before their softmax.
inline constexpr int64_t kRowChunk = 8;

template <typename T>
struct ForwardState {
  std::vector<T> scores, acc, row_max, row_sum;
  std::vector<c10::BFloat16> probs;  // the bfloat16 route: P rounded for P·V
  std::vector<uint32_t> value_pairs;  // the bfloat16 route: the key block's V in pairs layout
  std::vector<float> lane_max;        // row maxima of the tile from its product, kMaxLanes a row
};

/// Lanes per row of the row maxima a tile product gives on the side (lane_max): one AVX-512 vector.
inline constexpr int64_t kMaxLanes = 16;

/// The maximum of one row's lanes of maxima (the tiles' lane_max); -inf if none is a number.
inline float lanes_max(const float* lanes) {
  float m = kNegInf<float>;
  for (int64_t l = 0; l < kMaxLanes; ++l) m = lanes[l] > m ? lanes[l] : m;
  return m;
}

/// A buffer of n elements left uninitialised: the packers below write every element that is read, and a
/// zero-filled std::vector spent 2 % of a bfloat16 forward pass on filling what they overwrite.
template <typename T>
struct Uninitialised {
  std::unique_ptr<T[]> storage;
  void allocate(int64_t n) { storage.reset(new T[std::max<int64_t>(n, 1)]); }
  T* data() { return storage.get(); }
  const T* data() const { return storage.get(); }
};

#ifdef ATTN_FLOAT_TILES
static_assert(kMaxLanes == float_tiles::kLanes, "lane_max holds one vector of the float tiles a row");

/// Whether a pass with inputs of type In multiplies on the float tiles: float inputs, float_products() Tiles.
template <typename In>
bool float_tiles_on() {
  if constexpr (std::is_same_v<In, float>) return float_products() == FloatProducts::Tiles;
  return false;
}

/// The float tiles' Kᵀ (or Vᵀ) of every (batch row, kv head), [width, ld] each, packed once per call and read
/// by every tile of its head's query heads. Empty unless In is float.
struct FloatTransposed {
  Uninitialised<float> data;
  int64_t ld = 0, width = 0, heads = 0;
  const float* of(int64_t b, int64_t h) const { return data.data() + (b * heads + h) * width * ld; }
};

template <typename In>
FloatTransposed float_transposed(const View4<const In>& x, int64_t batch, int64_t heads, int64_t rows, int64_t width) {
  FloatTransposed t;
  if constexpr (std::is_same_v<In, float>) {
    t.ld = std::max<int64_t>(rows, 1);
    t.width = width;
    t.heads = heads;
    t.data.allocate(batch * heads * width * t.ld);
    if (rows == 0 || width == 0) return t;
    at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        float_tiles::pack_transposed(x.row(i / heads, i % heads, 0), x.si, rows, width,
                                     t.data.data() + i * width * t.ld, t.ld);
      }
    });
  }
  return t;
}
#endif

#ifdef ATTN_BF16_ROUTE
static_assert(kMaxLanes == kPairLanes, "lane_max holds one vector of the pairs micro-kernel a row");

/// The bfloat16 route's right operands, packed once per call and read by every tile: for each of `count` heads
/// (h = b · heads + head of a View4), either the transpose of its [rows, width] matrix in pairs layout (Kᵀ for
/// Q·Kᵀ, Vᵀ for dO·Vᵀ: pairs along width, a column per row) or the matrix itself in pairs of rows (V for P·V,
/// K for dS·K, Q and dO for the backward pass's transposed products: a column per element of width).
struct PackedPairs {
  Uninitialised<uint32_t> data;
  int64_t ld = 0, pairs = 0, heads = 0;
  const uint32_t* of(int64_t b, int64_t h) const { return data.data() + (b * heads + h) * pairs * ld; }
  /// Pairs of rows from row g on (g even).
  const uint32_t* from(int64_t b, int64_t h, int64_t g) const { return of(b, h) + g / 2 * ld; }
};

inline PackedPairs transposed_in_pairs(const View4<const c10::BFloat16>& x, int64_t batch, int64_t heads, int64_t rows,
                                       int64_t width) {
  PackedPairs t;
  t.ld = pairs_row_length(rows);
  t.pairs = (width + 1) / 2;
  t.heads = heads;
  // kPairLanes words of slack: a panel that starts mid-row reads up to one vector past the last column (into
  // lanes that are never stored; zeros all the same).
  t.data.allocate(batch * heads * t.pairs * t.ld + kPairLanes);
  std::fill_n(t.data.data() + batch * heads * t.pairs * t.ld, kPairLanes, 0u);
  // No rows or no width: nothing to pack, and the data pointer may be null (no row to address).
  if (rows == 0 || width == 0) return t;
  at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      pack_transposed_in_pairs(x.row(i / heads, i % heads, 0), x.si, rows, width, t.data.data() + i * t.pairs * t.ld,
                               t.ld);
    }
  });
  return t;
}

inline PackedPairs rows_in_pairs(const View4<const c10::BFloat16>& x, int64_t batch, int64_t heads, int64_t rows,
                                 int64_t width) {
  PackedPairs t;
  t.ld = pairs_row_length(width);
  t.pairs = (rows + 1) / 2;
  t.heads = heads;
  t.data.allocate(batch * heads * t.pairs * t.ld);
  if (rows == 0 || width == 0) return t;
  at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      pack_rows_in_pairs(x.row(i / heads, i % heads, 0), x.si, rows, width, t.data.data() + i * t.pairs * t.ld, t.ld);
    }
  });
  return t;
}

/// The pairs of rows [g0, g0 + n) of head (b, h) for a product: from the pack of the whole head where they
/// start a pair there and end one; otherwise (an odd start in a packed batch, a window or a band, or an odd
/// count, whose pad row must be 0 rather than the next row's value) packed into `scratch`.
inline const uint32_t* pairs_of_rows(const PackedPairs& packed, const View4<const c10::BFloat16>& x, int64_t b,
                                     int64_t h, int64_t g0, int64_t n, int64_t width, std::vector<uint32_t>& scratch) {
  if (g0 % 2 == 0 && n % 2 == 0) return packed.from(b, h, g0);
  scratch.resize((n + 1) / 2 * packed.ld);
  pack_rows_in_pairs(x.row(b, h, g0), x.si, n, width, scratch.data(), packed.ld);
  return scratch.data();
}
#endif

/// A block of query rows of one sequence, and how many keys it visits (its cost).
struct QueryBlock {
  int64_t sequence, i0, rows, cost;
};

template <typename T, typename In>
void forward(const FlashForward<T, In>& args) {
  // The bfloat16 route: Q·Kᵀ and P·V on bfloat16 pairs, the softmax and the output accumulator in float, P
  // rounded to bfloat16 for P·V as FlashAttention does.
  constexpr bool kPairs = !std::is_same_v<T, In>;
  const FlashProblem<T, In>& p = args.problem;
  const bool masked = has_masks(p);
  const std::vector<Sequence> seqs = sequences_of(p);
  const std::vector<uint8_t> values_finite = finite_blocks(p, p.v, p.dv, kKeyBlock);
#ifdef ATTN_BF16_ROUTE
  PackedPairs keys_t, values_paired;
  if constexpr (kPairs) {
    keys_t = transposed_in_pairs(p.k, p.batch, p.kv_heads, p.tk, p.dk);
    values_paired = rows_in_pairs(p.v, p.batch, p.kv_heads, p.tk, p.dv);
  }
  const int64_t ld_probs = kKeyBlock + 2;
#endif
#ifdef ATTN_FLOAT_TILES
  constexpr bool kFloatInputs = std::is_same_v<In, float>;
  const bool tiles = float_tiles_on<In>();
  const FloatTransposed float_keys = tiles ? float_transposed(p.k, p.batch, p.kv_heads, p.tk, p.dk) : FloatTransposed{};
#else
  constexpr bool tiles = false;
#endif

  // The costliest blocks first (under a causal mask, the last ones), so the run ends on short tasks.
  std::vector<QueryBlock> blocks;
  for (int64_t s = 0; s < static_cast<int64_t>(seqs.size()); ++s) {
    for (int64_t i0 = 0; i0 < seqs[s].tq; i0 += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, seqs[s].tq - i0);
      const auto [begin, end] = key_range(p, seqs[s], i0, rows);
      blocks.push_back({s, i0, rows, end - begin});
    }
  }
  std::stable_sort(blocks.begin(), blocks.end(),
                   [](const QueryBlock& a, const QueryBlock& b) { return a.cost > b.cost; });

  run_tasks<ForwardState<T>>(static_cast<int64_t>(blocks.size()) * p.heads, [&](int64_t t, ForwardState<T>& st) {
    const QueryBlock& blk = blocks[t / p.heads];
    const Sequence& sq = seqs[blk.sequence];
    const int64_t h = t % p.heads, b = sq.b, i0 = blk.i0, rows = blk.rows;
    st.scores.resize(kQueryBlock * kKeyBlock);
    st.acc.assign(rows * p.dv, T(0));
    // A sink starts every row's softmax: max = sink, sum = exp(sink - sink) = 1, no value behind it.
    const T sink = p.sinks ? p.sinks[h] : kNegInf<T>;
    const bool has_sink = sink != kNegInf<T>;
    st.row_max.assign(rows, sink);
    st.row_sum.assign(rows, has_sink ? T(1) : T(0));
    T* s = st.scores.data();
    T* acc = st.acc.data();
#ifdef ATTN_BF16_ROUTE
    if constexpr (kPairs) st.probs.resize(kQueryBlock * ld_probs);
#endif
    if (kPairs || tiles) st.lane_max.resize(kQueryBlock * kMaxLanes);

    // Keys outside the band of every row of the block are skipped entirely.
    const auto [key_begin, key_end] = key_range(p, sq, i0, rows);
    const In* q = p.q.row(b, h, sq.q0 + i0);
    const int64_t hk = p.kv_head(h);
    for (int64_t j0 = key_begin; j0 < key_end; j0 += kKeyBlock) {
      const int64_t cols = std::min(kKeyBlock, key_end - j0);
      const bool mask = masked || tile_leaves_band(p, sq, i0, rows, j0, cols);
      // A tile with neither masks nor score terms keeps the row maxima its product gives.
      const bool plain = !mask && !(p.softcap > T(0)) && p.alibi == nullptr;
      float* lane_max = plain && (kPairs || tiles) ? st.lane_max.data() : nullptr;
      const In* v = p.v.row(b, hk, sq.k0 + j0);
      const bool values_finite_here = rows_finite(p, values_finite, kKeyBlock, b, hk, sq.k0 + j0, cols);
      if constexpr (kPairs) {
#ifdef ATTN_BF16_ROUTE
        bf16_gemm(rows, cols, keys_t.pairs, p.scale, LeftOperand{q, p.q.si, 2},
                  PairsOperand{keys_t.of(b, hk) + sq.k0 + j0, keys_t.ld}, 0.0f, s, kKeyBlock, lane_max);
#endif
      } else if (tiles) {
#ifdef ATTN_FLOAT_TILES
        if constexpr (kFloatInputs) {
          float_tiles::gemm(rows, cols, p.dk, p.scale, {q, p.q.si, 1}, float_keys.of(b, hk) + sq.k0 + j0,
                            float_keys.ld, 0.0f, s, kKeyBlock, lane_max);
        }
#endif
      } else {
        const In* k = p.k.row(b, hk, sq.k0 + j0);
        gemm<T>(false, true, rows, cols, p.dk, p.scale, q, p.q.si, k, p.k.si, T(0), s, kKeyBlock);
      }

      for (int64_t r = 0; r < rows; ++r) {
        T* row = s + r * kKeyBlock;
        // The score terms and masks a few rows at a time, so the softmax below reads them from L1.
        if (r % kRowChunk == 0) {
          const int64_t chunk = std::min(kRowChunk, rows - r);
          score_terms(p, sq, h, i0 + r, chunk, j0, cols, row, kKeyBlock, static_cast<T*>(nullptr));
          if (mask) mask_tile(p, sq, h, i0 + r, chunk, j0, cols, row, kKeyBlock);
        }
        // -inf from the lanes means no number there (all NaN or -inf): the pass decides.
        T tile_max = lane_max ? static_cast<T>(lanes_max(lane_max + r * kMaxLanes)) : kNegInf<T>;
        if (tile_max == kNegInf<T>) tile_max = row_max(row, cols);
        const T old_max = st.row_max[r];
        const T new_max = (std::isnan(tile_max) || tile_max > old_max) ? tile_max : old_max;
        if (new_max == kNegInf<T>) {  // no key allowed for this row yet
          std::fill(row, row + cols, T(0));
#ifdef ATTN_BF16_ROUTE
          if constexpr (kPairs) std::fill_n(st.probs.data() + r * ld_probs, cols + 1, c10::BFloat16(0.0f));
#endif
          continue;
        }
        const T rescale = std::exp(old_max - new_max);  // 0 on the first allowed tile
        T tile_sum;
#ifdef ATTN_BF16_ROUTE
        // The bfloat16 route writes P straight to bfloat16 for P·V; the float P stays in the tile only where
        // the values' fallback below needs it.
        if constexpr (kPairs) {
          tile_sum = values_finite_here ? exp_round_sum(row, cols, new_max, st.probs.data() + r * ld_probs)
                                        : exp_shifted_sum(row, cols, new_max);
        } else
#endif
        {
          tile_sum = exp_shifted_sum(row, cols, new_max);
        }
        st.row_sum[r] = st.row_sum[r] * rescale + tile_sum;
        if (rescale != T(1)) {
          T* out = acc + r * p.dv;
          for (int64_t c = 0; c < p.dv; ++c) out[c] *= rescale;
        }
        st.row_max[r] = new_max;
      }

      if (values_finite_here) {
        if constexpr (kPairs) {
#ifdef ATTN_BF16_ROUTE
          // The row sums keep the float P; P·V reads it rounded, as FlashAttention's bfloat16 kernels do.
          const uint32_t* v_pairs =
              pairs_of_rows(values_paired, p.v, b, hk, sq.k0 + j0, cols, p.dv, st.value_pairs);
          bf16_gemm(rows, p.dv, (cols + 1) / 2, 1.0f, LeftOperand{st.probs.data(), ld_probs, 2},
                    PairsOperand{v_pairs, values_paired.ld}, 1.0f, acc, p.dv);
#endif
        } else if (tiles) {
#ifdef ATTN_FLOAT_TILES
          if constexpr (kFloatInputs) {
            float_tiles::gemm(rows, p.dv, cols, 1.0f, {s, kKeyBlock, 1}, v, p.v.si, 1.0f, acc, p.dv, nullptr);
          }
#endif
        } else {
          gemm<T>(false, false, rows, p.dv, cols, T(1), s, kKeyBlock, v, p.v.si, T(1), acc, p.dv);
        }
      } else {
        // 0 · Inf is NaN in a matrix product: add up only the keys with a nonzero weight.
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            const T w = s[r * kKeyBlock + c];
            if (w == T(0)) continue;
            const In* vrow = v + c * p.v.si;
            for (int64_t e = 0; e < p.dv; ++e) acc[r * p.dv + e] += w * static_cast<T>(vrow[e]);
          }
        }
      }
    }

    for (int64_t r = 0; r < rows; ++r) {
      In* out = args.out.row(b, h, sq.q0 + i0 + r);
      T& lse = args.lse[(b * p.heads + h) * p.tq + sq.q0 + i0 + r];
      const T sum = st.row_sum[r];
      if (sum == T(0)) {  // every key blocked: zeros, as FlashAttention and SDPA give
        std::fill(out, out + p.dv, In(0));
        lse = kNegInf<T>;
        continue;
      }
      // With a sink and no allowed key, acc is 0 and sum 1: a zero row, and lse = the sink.
      const T inv = T(1) / sum;
      for (int64_t c = 0; c < p.dv; ++c) out[c] = static_cast<In>(acc[r * p.dv + c] * inv);
      lse = st.row_max[r] + std::log(sum);
    }
  });
}

template <typename T>
struct BackwardState {
  std::vector<T> probs, grad_probs, tanh_values, grad_k, grad_v;
  // The bfloat16 route: P and dS in pairs of their rows (the left operands Pᵀ and dSᵀ), dS rounded as stored
  // (for dS·K), and the pairs of query, dO and key rows where a tile cannot use the packed heads.
  std::vector<uint32_t> prob_pairs, grad_score_pairs, query_pairs, grad_out_pairs, key_pairs;
  std::vector<c10::BFloat16> grad_scores;
};

template <typename T, typename In>
void backward(const FlashBackward<T, In>& args) {
  // The bfloat16 route: the five tile products on bfloat16 pairs with float accumulation; P and dS are
  // rounded to bfloat16 for the products they feed, as FlashAttention's bfloat16 backward does, and the
  // softmax backward and every accumulator stay in float.
  constexpr bool kPairs = !std::is_same_v<T, In>;
  const FlashProblem<T, In>& p = args.problem;
  const bool masked = has_masks(p);
  const bool capped = p.softcap > T(0);
  const int64_t ld = kBackwardKeyBlock;
  const std::vector<Sequence> seqs = sequences_of(p);
  const std::vector<uint8_t> keys_finite_blocks = finite_blocks(p, p.k, p.dk, kBackwardKeyBlock);
#ifdef ATTN_BF16_ROUTE
  // Kᵀ and Vᵀ for S = Q·Kᵀ and dP = dO·Vᵀ; K, Q and dO in pairs of rows for dQ += dS·K, dK += dSᵀ·Q and
  // dV += Pᵀ·dO. Each is packed once here and read by every tile.
  PackedPairs keys_t, values_t, key_rows, query_rows, grad_out_rows;
  if constexpr (kPairs) {
    keys_t = transposed_in_pairs(p.k, p.batch, p.kv_heads, p.tk, p.dk);
    values_t = transposed_in_pairs(p.v, p.batch, p.kv_heads, p.tk, p.dv);
    key_rows = rows_in_pairs(p.k, p.batch, p.kv_heads, p.tk, p.dk);
    query_rows = rows_in_pairs(p.q, p.batch, p.heads, p.tq, p.dk);
    grad_out_rows = rows_in_pairs(args.grad_out, p.batch, p.heads, p.tq, p.dv);
  }
  const int64_t ld_grad_scores = kBackwardKeyBlock + 2;
#endif
#ifdef ATTN_FLOAT_TILES
  // The float tiles (float_products()): Kᵀ and Vᵀ packed once; the other operands are read where they lie.
  constexpr bool kFloatInputs = std::is_same_v<In, float>;
  const bool tiles = float_tiles_on<In>();
  const FloatTransposed keys_ft = tiles ? float_transposed(p.k, p.batch, p.kv_heads, p.tk, p.dk) : FloatTransposed{};
  const FloatTransposed values_ft = tiles ? float_transposed(p.v, p.batch, p.kv_heads, p.tk, p.dv) : FloatTransposed{};
#else
  constexpr bool tiles = false;
#endif

  // One task per (sequence, kv head, split): it walks every query head of the group, so dK and dV of a shared
  // head are summed over its group in the task's accumulator, in a fixed order. Sequences never share query
  // rows, so the tasks of different sequences may write the same dQ slice.
  // The costliest tasks first (under a causal mask, the first keys' splits, which every later query sees),
  // so that the run ends on short ones. No task's sums depend on the order.
  struct KeyTask {
    int64_t sequence, split, cost;
  };
  std::vector<KeyTask> key_tasks;
  for (int64_t sqi = 0; sqi < static_cast<int64_t>(seqs.size()); ++sqi) {
    const int64_t k_blocks = (seqs[sqi].tk + kBackwardKeyBlock - 1) / kBackwardKeyBlock;
    for (int64_t split = 0; split < args.splits; ++split) {
      int64_t cost = 0;
      for (int64_t kb = split * k_blocks / args.splits; kb < (split + 1) * k_blocks / args.splits; ++kb) {
        const int64_t j0 = kb * kBackwardKeyBlock;
        const auto [q_begin, q_end] = query_range(p, seqs[sqi], j0, std::min(kBackwardKeyBlock, seqs[sqi].tk - j0));
        cost += q_end - q_begin;
      }
      key_tasks.push_back({sqi, split, cost});
    }
  }
  std::stable_sort(key_tasks.begin(), key_tasks.end(),
                   [](const KeyTask& a, const KeyTask& b) { return a.cost > b.cost; });
  const int64_t task_count = static_cast<int64_t>(key_tasks.size()) * p.kv_heads;
  run_tasks<BackwardState<T>>(task_count, [&](int64_t t, BackwardState<T>& st) {
    const KeyTask& task = key_tasks[t / p.kv_heads];
    const Sequence& sq = seqs[task.sequence];
    const int64_t split = task.split, hk = t % p.kv_heads, b = sq.b;
    const int64_t k_blocks = (sq.tk + kBackwardKeyBlock - 1) / kBackwardKeyBlock;
    const int64_t kb_begin = split * k_blocks / args.splits, kb_end = (split + 1) * k_blocks / args.splits;
    st.probs.resize(kBackwardQueryBlock * ld);
    st.grad_probs.resize(kBackwardQueryBlock * ld);
    if (capped) st.tanh_values.resize(kBackwardQueryBlock * ld);
    T* prob = st.probs.data();
    T* dprob = st.grad_probs.data();
    T* tanh_values = capped ? st.tanh_values.data() : nullptr;
#ifdef ATTN_BF16_ROUTE
    if constexpr (kPairs) {
      st.prob_pairs.resize((kBackwardQueryBlock + 1) / 2 * ld);
      st.grad_score_pairs.resize((kBackwardQueryBlock + 1) / 2 * ld);
      st.grad_scores.resize(kBackwardQueryBlock * ld_grad_scores);
    }
#endif

    for (int64_t kb = kb_begin; kb < kb_end; ++kb) {
      const int64_t j0 = kb * kBackwardKeyBlock, cols = std::min(kBackwardKeyBlock, sq.tk - j0);
      st.grad_k.assign(cols * p.dk, T(0));
      st.grad_v.assign(cols * p.dv, T(0));
      const In* k = p.k.row(b, hk, sq.k0 + j0);
      const In* v = p.v.row(b, hk, sq.k0 + j0);
      const bool keys_finite = rows_finite(p, keys_finite_blocks, kBackwardKeyBlock, b, hk, sq.k0 + j0, cols);
#ifdef ATTN_BF16_ROUTE
      const uint32_t* k_pairs = nullptr;
      if constexpr (kPairs) {
        if (keys_finite) k_pairs = pairs_of_rows(key_rows, p.k, b, hk, sq.k0 + j0, cols, p.dk, st.key_pairs);
      }
#endif
      // Only the queries whose band reaches the tile's keys.
      const auto [q_begin, q_end] = query_range(p, sq, j0, cols);
      for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
        const T* lse = args.lse + (b * p.heads + h) * p.tq + sq.q0;
        const T* delta = args.delta + (b * p.heads + h) * p.tq + sq.q0;
        for (int64_t i0 = q_begin; i0 < q_end; i0 += kBackwardQueryBlock) {
          const int64_t rows = std::min(kBackwardQueryBlock, q_end - i0);
          const In* q = p.q.row(b, h, sq.q0 + i0);
          const In* dout = args.grad_out.row(b, h, sq.q0 + i0);
          if constexpr (kPairs) {
#ifdef ATTN_BF16_ROUTE
            bf16_gemm(rows, cols, keys_t.pairs, p.scale, LeftOperand{q, p.q.si, 2},
                      PairsOperand{keys_t.of(b, hk) + sq.k0 + j0, keys_t.ld}, 0.0f, prob, ld);
#endif
          } else if (tiles) {
#ifdef ATTN_FLOAT_TILES
            if constexpr (kFloatInputs) {
              float_tiles::gemm(rows, cols, p.dk, p.scale, {q, p.q.si, 1}, keys_ft.of(b, hk) + sq.k0 + j0, keys_ft.ld,
                                0.0f, prob, ld, nullptr);
            }
#endif
          } else {
            gemm<T>(false, true, rows, cols, p.dk, p.scale, q, p.q.si, k, p.k.si, T(0), prob, ld);
          }
          score_terms(p, sq, h, i0, rows, j0, cols, prob, ld, tanh_values);
          if (masked || tile_leaves_band(p, sq, i0, rows, j0, cols)) mask_tile(p, sq, h, i0, rows, j0, cols, prob, ld);
          for (int64_t r = 0; r < rows; ++r) {
            T* row = prob + r * ld;
            if (lse[i0 + r] == kNegInf<T>) {
              std::fill(row, row + cols, T(0));
            } else {
              exp_shifted(row, cols, lse[i0 + r]);
            }
          }
          // dV += Pᵀ dO;  dP = dO Vᵀ;  dS = P (dP - delta);  dK += scale dSᵀ Q;  dQ += scale dS K
          if constexpr (kPairs) {
#ifdef ATTN_BF16_ROUTE
            pack_rows_in_pairs(prob, ld, rows, cols, st.prob_pairs.data(), ld);
            const uint32_t* dout_pairs =
                pairs_of_rows(grad_out_rows, args.grad_out, b, h, sq.q0 + i0, rows, p.dv, st.grad_out_pairs);
            bf16_gemm(cols, p.dv, (rows + 1) / 2, 1.0f,
                      LeftOperand{reinterpret_cast<const c10::BFloat16*>(st.prob_pairs.data()), 2, 2 * ld},
                      PairsOperand{dout_pairs, grad_out_rows.ld}, 1.0f, st.grad_v.data(), p.dv);
            bf16_gemm(rows, cols, values_t.pairs, 1.0f, LeftOperand{dout, args.grad_out.si, 2},
                      PairsOperand{values_t.of(b, hk) + sq.k0 + j0, values_t.ld}, 0.0f, dprob, ld);
#endif
          } else if (tiles) {
#ifdef ATTN_FLOAT_TILES
            if constexpr (kFloatInputs) {
              float_tiles::gemm(cols, p.dv, rows, 1.0f, {prob, 1, ld}, dout, args.grad_out.si, 1.0f, st.grad_v.data(),
                                p.dv, nullptr);
              float_tiles::gemm(rows, cols, p.dv, 1.0f, {dout, args.grad_out.si, 1}, values_ft.of(b, hk) + sq.k0 + j0,
                                values_ft.ld, 0.0f, dprob, ld, nullptr);
            }
#endif
          } else {
            gemm<T>(true, false, cols, p.dv, rows, T(1), prob, ld, dout, args.grad_out.si, T(1), st.grad_v.data(),
                    p.dv);
            gemm<T>(false, true, rows, cols, p.dv, T(1), dout, args.grad_out.si, v, p.v.si, T(0), dprob, ld);
          }
          for (int64_t r = 0; r < rows; ++r) softmax_backward_row(prob + r * ld, dprob + r * ld, cols, delta[i0 + r]);
          // Through the soft-cap: d(cap · tanh(s / cap)) / ds = 1 - tanh².
          if (capped) {
            for (int64_t r = 0; r < rows; ++r) softcap_backward_row(dprob + r * ld, tanh_values + r * ld, cols);
          }
          T* dq = args.grad_q.row(split * p.batch + b, h, sq.q0 + i0);
          bool dq_done = false;
          if constexpr (kPairs) {
#ifdef ATTN_BF16_ROUTE
            pack_rows_in_pairs(dprob, ld, rows, cols, st.grad_score_pairs.data(), ld);
            const uint32_t* q_pairs = pairs_of_rows(query_rows, p.q, b, h, sq.q0 + i0, rows, p.dk, st.query_pairs);
            bf16_gemm(cols, p.dk, (rows + 1) / 2, p.scale,
                      LeftOperand{reinterpret_cast<const c10::BFloat16*>(st.grad_score_pairs.data()), 2, 2 * ld},
                      PairsOperand{q_pairs, query_rows.ld}, 1.0f, st.grad_k.data(), p.dk);
            if (keys_finite) {
              c10::BFloat16* ds = st.grad_scores.data();
              for (int64_t r = 0; r < rows; ++r) round_to_bfloat16(dprob + r * ld, cols, ds + r * ld_grad_scores);
              bf16_gemm(rows, p.dk, (cols + 1) / 2, p.scale, LeftOperand{ds, ld_grad_scores, 2},
                        PairsOperand{k_pairs, key_rows.ld}, 1.0f, dq, args.grad_q.si);
              dq_done = true;
            }
#endif
          } else if (tiles) {
#ifdef ATTN_FLOAT_TILES
            if constexpr (kFloatInputs) {
              float_tiles::gemm(cols, p.dk, rows, p.scale, {dprob, 1, ld}, q, p.q.si, 1.0f, st.grad_k.data(), p.dk,
                                nullptr);
              if (keys_finite) {
                float_tiles::gemm(rows, p.dk, cols, p.scale, {dprob, ld, 1}, k, p.k.si, 1.0f, dq, args.grad_q.si,
                                  nullptr);
                dq_done = true;
              }
            }
#endif
          } else {
            gemm<T>(true, false, cols, p.dk, rows, p.scale, dprob, ld, q, p.q.si, T(1), st.grad_k.data(), p.dk);
            if (keys_finite) {
              gemm<T>(false, false, rows, p.dk, cols, p.scale, dprob, ld, k, p.k.si, T(1), dq, args.grad_q.si);
              dq_done = true;
            }
          }
          if (!dq_done) {
            // A NaN or Inf key at a blocked pair has dS = 0 there, and 0 · NaN would still poison dQ.
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t c = 0; c < cols; ++c) {
                const T w = dprob[r * ld + c] * p.scale;
                if (w == T(0)) continue;
                const In* krow = k + c * p.k.si;
                for (int64_t e = 0; e < p.dk; ++e) dq[r * args.grad_q.si + e] += w * static_cast<T>(krow[e]);
              }
            }
          }
        }
      }
      for (int64_t c = 0; c < cols; ++c) {
        std::copy_n(st.grad_k.data() + c * p.dk, p.dk, args.grad_k.row(b, hk, sq.k0 + j0 + c));
        std::copy_n(st.grad_v.data() + c * p.dv, p.dv, args.grad_v.row(b, hk, sq.k0 + j0 + c));
      }
    }
  });
}

}  // namespace

void flash_forward(const FlashForward<float>& args) { forward(args); }
void flash_forward(const FlashForward<double>& args) { forward(args); }
void flash_backward(const FlashBackward<float>& args) { backward(args); }
void flash_backward(const FlashBackward<double>& args) { backward(args); }
void softcap_values(float* x, int64_t n, float cap, float* tanh_out) { softcap_row(x, n, cap, tanh_out); }
#ifdef CPU_CAPABILITY_AVX512
void flash_forward(const FlashForward<float, c10::BFloat16>& args) {
#ifdef ATTN_BF16_ROUTE
  forward(args);
#else
  (void)args;
  TORCH_INTERNAL_ASSERT(false, "attn: the bfloat16 route was not compiled (no AVX512-BF16 compiler support)");
#endif
}
void flash_backward(const FlashBackward<float, c10::BFloat16>& args) {
#ifdef ATTN_BF16_ROUTE
  backward(args);
#else
  (void)args;
  TORCH_INTERNAL_ASSERT(false, "attn: the bfloat16 route was not compiled (no AVX512-BF16 compiler support)");
#endif
}
#endif

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
