// The decode kernel (split-KV, FlashDecoding's scheme), compiled once per instruction set like the fused
// kernels (ops/cpu/variant_*.cpp). No include guard on purpose: each variant file includes it once.
//
// Decoding reads the whole cache for a few FLOPs per element, so it is bound by memory bandwidth. Each task
// takes one split of split_keys<KV>() keys of one (batch row, K/V head) and computes, for every query row of
// the heads that share that K/V head (group × Tq rows, packed into one tile so each K/V element is read once
// per group), the split's running max, sum and unnormalised output. The task that finishes a (row, K/V head)'s
// last split merges its splits with their log-sum-exp, in split order. Splits are fixed by the length, so every
// thread count gives the same bits, and B × H_kv smaller than the thread count still keeps every core busy.
// Within a split, the products run in register tiles (products/row_tiles.h) and the rows ahead are prefetched,
// so the arithmetic and the memory latency stay under the time the rows take to stream in.

#ifndef ATTN_KERNEL_NAMESPACE
#error "define ATTN_KERNEL_NAMESPACE and ATTN_KERNEL_VARIANT before including decode/decode_kernel.h"
#endif

#include "ops/cpu/decode/decode_args.h"
#include "ops/cpu/flash/tasks.h"
#include "ops/cpu/isa/variants.h"
#include "ops/cpu/math/rows.h"
#include "ops/cpu/math/score_terms.h"
#include "ops/cpu/products/cache_line_vector.h"
#include "ops/cpu/products/int8_dot.h"
#include "ops/cpu/products/kept_buffer.h"
#include "ops/cpu/products/row_tiles.h"
#include "ops/cpu/products/uninitialised.h"

#if defined(CPU_CAPABILITY_AVX512) && defined(ATTN_HAVE_BF16_DOT) && defined(ATTN_HAVE_AMX)
#define ATTN_DECODE_AMX 1
#include "ops/cpu/decode/decode_amx.h"
#endif

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {
namespace {

/// The keys [begin, end) query t of row b may attend: the cache rule of DecodeArgs (and of backends/masks.h),
/// the band around the query's position p, cut to the written keys.
template <typename T>
std::pair<int64_t, int64_t> key_band(const DecodeArgs<T>& a, int64_t b, int64_t t) {
  const int64_t p = a.query_starts[b] + t, length = a.key_lengths[b], right = a.right_bound();
  const int64_t begin = a.window_left >= 0 ? std::clamp<int64_t>(p - a.window_left, 0, length) : 0;
  const int64_t end = right >= 0 ? std::clamp<int64_t>(p + right + 1, 0, length) : length;
  return {begin, std::max(begin, end)};
}

/// y += alpha · x, x widened from the cache type.
template <typename T, typename KV>
void axpy(T alpha, const KV* x, T* y, int64_t n) {
  using Vec = Vectorized<T>;
  const Vec va(alpha);
  int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) {
    at::vec::fmadd(va, load_one<T>(x + i), Vec::loadu(y + i)).store(y + i);
  }
  for (; i < n; ++i) y[i] += alpha * static_cast<T>(x[i]);
}

/// Keys ahead of the one being scored whose rows are requested from memory (a few µs of DRAM latency ahead).
template <typename KV>
inline constexpr int64_t kPrefetchKeys = sizeof(KV) == 1 ? 32 : 16;

/// Asks for rows[first] .. rows[first + count - 1], `width` elements each, to be brought into the cache.
template <typename Rows>
inline void prefetch_rows(const Rows& rows, int64_t first, int64_t count, int64_t width) {
  using KV = std::remove_const_t<std::remove_pointer_t<decltype(rows[0])>>;
  constexpr int64_t kLine = 64 / sizeof(KV);
  for (int64_t r = first; r < first + count; ++r) {
    for (int64_t e = 0; e < width; e += kLine) __builtin_prefetch(rows[r] + e);
  }
}

/// Whether a split's rows were gathered through a block table (a paged cache).
template <typename Rows>
inline constexpr bool kIsGathered = false;
template <typename KV>
inline constexpr bool kIsGathered<GatheredRows<KV>> = true;

/// Sweeps a gathered (paged, not evenly spaced) split's scores run side by side, where it has at least
/// kPagedSweeps · kPrefetchKeys keys: four on AVX-512, two on AVX2. Its rows lie in blocks anywhere in the pool
/// (4 KiB for 16 bfloat16 rows of 128), and the hardware prefetchers start over at each block; scoring the
/// split's parts together keeps several such starts in flight instead of one: on blocks scattered through the
/// pool, 0.59x-0.64x of the contiguous cache's speed in one sweep, 0.68x-0.74x in four (bench/RESULTS.md,
/// issue 33). A contiguous split streams no faster that way, so it keeps one sweep. A key's score is computed alike in
/// either order. (The int8 dot products, products/int8_dot.h, sweep in order.)
inline constexpr int64_t kPagedSweeps = kScoreKeys;

/// score_tile for a run-time row count (1 to kTileRows) over keys k[0, n): full tiles of kScoreKeys (a paged
/// split's first kPagedSweeps · ⌊n / kPagedSweeps⌋ keys in kPagedSweeps sweeps side by side), then one key at a
/// time. The rows kPrefetchKeys ahead, of keys and values alike, are requested as the sweep goes, so the
/// weighted sum that follows reads the values from L2 while this sweep waits on memory for the keys anyway.
template <typename T, typename Rows>
void score_rows(int64_t rows, const T* q, const Rows& k, const Rows& v, int64_t n, int64_t dk, int64_t dv, T scale,
                T* s, int64_t lds) {
  using KV = std::remove_const_t<std::remove_pointer_t<decltype(k[0])>>;
  auto sweep = [&](auto rows_c) {
    constexpr int R = decltype(rows_c)::value;
    constexpr int64_t kAhead = kPrefetchKeys<KV>;
    int64_t c = 0;
    if constexpr (kIsGathered<Rows>) {
      if (n >= kPagedSweeps * kAhead) {
        const int64_t part = n / kPagedSweeps;  // sweep j scores keys [j · part, (j + 1) · part)
        for (int64_t i = 0; i < part; ++i) {
          for (int64_t j = 0; j < kPagedSweeps; ++j) {
            const int64_t ahead = j * part + i + kAhead;
            if (ahead < n) {
              prefetch_rows(k, ahead, 1, dk);
              prefetch_rows(v, ahead, 1, dv);
            }
          }
          score_tile<R, kPagedSweeps>(q, EveryNth<Rows>{k.from(i), part}, dk, scale, s + i, lds, part);
        }
        c = part * kPagedSweeps;
      }
    }
    for (; c + kScoreKeys <= n; c += kScoreKeys) {
      const int64_t ahead = std::min<int64_t>(kScoreKeys, n - c - kAhead);
      prefetch_rows(k, c + kAhead, ahead, dk);
      prefetch_rows(v, c + kAhead, ahead, dv);
      score_tile<R, kScoreKeys>(q, k.from(c), dk, scale, s + c, lds);
    }
    for (; c < n; ++c) score_tile<R, 1>(q, k.from(c), dk, scale, s + c, lds);
  };
  switch (rows) {
    case 1: return sweep(std::integral_constant<int, 1>{});
    case 2: return sweep(std::integral_constant<int, 2>{});
    case 3: return sweep(std::integral_constant<int, 3>{});
    default: return sweep(std::integral_constant<int, 4>{});
  }
}

/// weighted_sum_tile for a run-time row count (1 to kTileRows).
template <typename T, typename Rows>
void weighted_sum_rows(int64_t rows, const T* w, int64_t ldw, int64_t n, const Rows& v, int64_t dv, T* out) {
  switch (rows) {
    case 1: return weighted_sum_tile<1>(w, ldw, n, v, dv, out);
    case 2: return weighted_sum_tile<2>(w, ldw, n, v, dv, out);
    case 3: return weighted_sum_tile<3>(w, ldw, n, v, dv, out);
    default: return weighted_sum_tile<4>(w, ldw, n, v, dv, out);
  }
}

/// Whether a cache element type carries a scale per row (CacheView::scales).
template <typename KV>
inline constexpr bool kHasRowScales = std::is_same_v<KV, int8_t>;

/// s[r · lds + c] *= scales[c] for every row r < rows and column c < cols.
template <typename T>
void scale_columns(T* s, int64_t rows, int64_t cols, int64_t lds, const float* scales) {
  for (int64_t r = 0; r < rows; ++r) {
    T* row = s + r * lds;
    for (int64_t c = 0; c < cols; ++c) row[c] *= static_cast<T>(scales[c]);
  }
}

/// Whether this variant calls the int8 dot products (products/int8_dot.h): the AVX-512 one, where they are built.
#if defined(CPU_CAPABILITY_AVX512) && defined(ATTN_HAVE_INT8_DOT)
inline constexpr bool kVariantHasInt8Dot = true;
#else
inline constexpr bool kVariantHasInt8Dot = false;
#endif

/// Whether this variant multiplies a bfloat16 cache on AMX's tiles (decode/decode_amx.h), where the op chose it.
#ifdef ATTN_DECODE_AMX
inline constexpr bool kVariantHasAmx = true;
#else
inline constexpr bool kVariantHasAmx = false;
#endif

/// The pointers of rows[0, n): a paged split's gathered ones as they are, a contiguous split's written to `buffer`.
template <typename KV>
const KV* const* row_pointers(const GatheredRows<KV>& rows, int64_t, std::vector<const KV*>&) {
  return rows.rows;
}
template <typename KV>
const KV* const* row_pointers(const StridedRows<KV>& rows, int64_t n, std::vector<const KV*>& buffer) {
  buffer.resize(n);
  for (int64_t c = 0; c < n; ++c) buffer[c] = rows[c];
  return buffer.data();
}

template <typename T, typename KV>
struct DecodeState {
  CacheLineVector<T> q, scores;
  CacheLineVector<int16_t> q16;  // the packed query rows rounded for the int8 dot products, and their scales
  std::vector<float> q_scales;
  std::vector<int64_t> begin, end;  // each packed row's allowed keys in the split, [begin, end)
  std::vector<const KV*> key_rows, value_rows;   // a paged cache's split, gathered through its block table
  std::vector<float> key_scales, value_scales;   // and its int8 rows' scales
  CacheLineVector<T> merged;                      // a merged output row
#ifdef ATTN_DECODE_AMX
  AmxSplitScratch amx;                            // the products on AMX's tiles (decode/decode_amx.h)
#endif
};

/// Whether positions [j0, j0 + cols) of row b lie evenly spaced in a paged cache, as in a contiguous one: their
/// blocks follow each other in the pool (as a prompt's do, taken in order) and a block's stride is its rows'.
/// Such a split is read as a contiguous one, whose single sweep streams best.
inline bool evenly_spaced(const CacheView& view, int64_t b, int64_t j0, int64_t cols) {
  if (view.sb != view.block_size * view.si) return false;
  const int64_t* table = view.blocks + b * view.blocks_stride;
  for (int64_t k = j0 / view.block_size; k < (j0 + cols - 1) / view.block_size; ++k) {
    if (table[k + 1] != table[k] + 1) return false;
  }
  return true;
}

/// Calls f(c, n) for each run [c, c + n) of split columns (positions j0 + c ..) that lie in one block of a
/// paged cache: a row's place is looked up once per block, not once per row (a division and a table read per
/// row cost as much as streaming the split's rows).
template <typename F>
void for_each_block_run(const CacheView& view, int64_t j0, int64_t cols, F&& f) {
  for (int64_t c = 0; c < cols;) {
    const int64_t n = std::min(view.block_size - (j0 + c) % view.block_size, cols - c);
    f(c, n);
    c += n;
  }
}

/// Calls body(keys, values, key_scales, value_scales) with the rows of row b's split [j0, j0 + cols) for K/V
/// head hk: where they lie for a contiguous cache (or a paged split whose blocks follow each other), gathered
/// through the block table for a paged one (the tiles then read any layout alike, and look ahead across
/// blocks). The scales are undefined but for int8.
template <typename T, typename KV, typename Body>
void with_split_rows(const CacheView& keys, const CacheView& values, int64_t b, int64_t hk, int64_t j0, int64_t cols,
                     DecodeState<T, KV>& st, Body&& body) {
  const auto scales_of = [&](const CacheView& view, std::vector<float>& gathered) -> const float* {
    if constexpr (!kHasRowScales<KV>) return nullptr;
    if (view.blocks == nullptr) return view.row_scales(b, hk, j0);
    gathered.resize(cols);
    for_each_block_run(view, j0, cols, [&](int64_t c, int64_t n) {
      std::copy_n(view.row_scales(b, hk, j0 + c), n, gathered.data() + c);
    });
    return gathered.data();
  };
  const float* key_scales = scales_of(keys, st.key_scales);
  const float* value_scales = scales_of(values, st.value_scales);
  if (keys.blocks == nullptr || (evenly_spaced(keys, b, j0, cols) && evenly_spaced(values, b, j0, cols))) {
    body(StridedRows<KV>{keys.row<KV>(b, hk, j0), keys.si}, StridedRows<KV>{values.row<KV>(b, hk, j0), values.si},
         key_scales, value_scales);
    return;
  }
  const auto gather = [&](const CacheView& view, std::vector<const KV*>& rows) {
    rows.resize(cols);
    for_each_block_run(view, j0, cols, [&](int64_t c, int64_t n) {
      const KV* first = view.row<KV>(b, hk, j0 + c);
      for (int64_t i = 0; i < n; ++i) rows[c + i] = first + i * view.si;
    });
  };
  gather(keys, st.key_rows);
  gather(values, st.value_rows);
  body(GatheredRows<KV>{st.key_rows.data()}, GatheredRows<KV>{st.value_rows.data()}, key_scales, value_scales);
}

/// Blocks, in the row of packed scores `row` (query t of a token tree whose candidates start at column
/// `first`), the candidates that are not t's ancestors or t itself.
template <typename T>
void block_outside_tree(const bool* allowed, int64_t tq, int64_t t, int64_t first, int64_t cols, T* row) {
  for (int64_t u = 0; u < tq; ++u) {
    const int64_t c = first + u;
    if (c >= 0 && c < cols && !allowed[t * tq + u]) row[c] = kNegInf<T>;
  }
}

/// The most bytes of the splits' partials that a calling thread keeps from one call to the next; larger partials
/// are allocated for the call.
inline constexpr int64_t kKeptPartialsBytes = int64_t{64} << 20;

/// The splits' partials of a decoding step (kept_buffer.h): a decoding loop calls the kernel once a token, and a
/// fresh buffer of many megabytes was mapped, page by page, every time: 8 sequences of 8192 keys, 8 K/V heads of 32
/// rows with d_v = 128 take 33 MB, and its page faults were about a third of the kernel's samples.
struct DecodePartials;
template <typename T>
T* partials_buffer(int64_t n, Uninitialised<T>& own) {
  return kept_buffer<DecodePartials>(n, kKeptPartialsBytes, own);
}

/// The decode of caches whose elements are KV (a.k and a.v, read as KV).
template <typename T, typename KV>
void decode(const DecodeArgs<T>& a) {
  const CacheView &keys = a.k, &values = a.v;
  const int64_t group = a.heads / a.kv_heads, rows = group * a.tq;
  const int64_t split_length = split_keys<KV>();
  // Row b's splits are [first_split[b], first_split[b + 1]); a row with no key still has one (empty) split.
  std::vector<int64_t> first_split(a.batch + 1, 0);
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t splits = std::max<int64_t>((a.key_lengths[b] + split_length - 1) / split_length, 1);
    first_split[b + 1] = first_split[b] + splits;
  }
  const int64_t total_splits = first_split[a.batch];
  // Per (split, K/V head): the rows' max and sum of exp over the split, and their unnormalised outputs. Each
  // split's task writes all three before the merge reads them, so they are not filled first.
  const int64_t slots = total_splits * a.kv_heads;
  Uninitialised<T> own_partials;
  T* const part_max = partials_buffer(slots * rows * (2 + a.dv), own_partials);
  T* const part_sum = part_max + slots * rows;
  T* const part_out = part_sum + slots * rows;

  // One split's partial max, sum and output for every packed row.
  const auto score_split = [&](int64_t task, int64_t b, int64_t hk, int64_t j0, DecodeState<T, KV>& st) {
    const int64_t cols = std::clamp<int64_t>(a.key_lengths[b] - j0, 0, split_length);
    T* m = part_max + task * rows;
    T* l = part_sum + task * rows;
    T* acc = part_out + task * rows * a.dv;

    // Each packed row's allowed keys within the split; a split outside every row's band is not read at all.
    st.begin.resize(rows);
    st.end.resize(rows);
    bool any_allowed = false;
    for (int64_t r = 0; r < rows; ++r) {
      const auto [begin, end] = key_band(a, b, r % a.tq);
      st.begin[r] = std::clamp<int64_t>(begin - j0, 0, cols);
      st.end[r] = std::clamp<int64_t>(end - j0, st.begin[r], cols);
      any_allowed = any_allowed || st.end[r] > st.begin[r];
    }
    if (!any_allowed) {
      std::fill(m, m + rows, kNegInf<T>);
      std::fill(l, l + rows, T(0));
      std::fill(acc, acc + rows * a.dv, T(0));
      return;
    }

    // The group's query rows, packed: row r = i * Tq + t is query t of head hk * group + i.
    st.q.resize(rows * a.dk);
    for (int64_t i = 0; i < group; ++i) {
      for (int64_t t = 0; t < a.tq; ++t) {
        read_row(a.q, b, hk * group + i, t, a.dk, st.q.data() + (i * a.tq + t) * a.dk);
      }
    }
    // An int8 cache's dot products take the query rows rounded to int16; a query they cannot take, or a variant
    // without them (the op's choice raced a forced capability), widens instead, which is always right.
    bool int8_dot = false;
    if constexpr (kHasRowScales<KV> && kVariantHasInt8Dot) {
      st.q16.resize(rows * a.dk);
      st.q_scales.resize(rows);
      int8_dot = a.int8_dot && quantize_query_rows(st.q.data(), rows, a.dk, st.q16.data(), st.q_scales.data());
    }
    // Scores and weighted sums run in register tiles of kTileRows packed rows: each K and V row comes from
    // memory once per split and serves every row of the group while it is in L1 or L2. (A GEMM of so few
    // rows would stream the tile through its packing instead.) Where the op chose AMX's tiles for a step of
    // many rows, both products run there instead, on the split packed once.
    constexpr bool kAmxVariant = kVariantHasAmx && std::is_same_v<KV, c10::BFloat16> && std::is_same_v<T, float>;
    const bool amx = kAmxVariant && a.amx;
    int64_t lds = std::max<int64_t>(cols, 1);
    int64_t score_rows_allocated = rows;
#ifdef ATTN_DECODE_AMX
    if (amx) lds = amx_score_stride(cols), score_rows_allocated = amx_score_rows(rows);
#endif
    st.scores.resize(score_rows_allocated * lds);
    T* s = st.scores.data();
    with_split_rows(keys, values, b, hk, j0, cols, st, [&](const auto& krows, const auto& vrows,
                                                           const float* key_scales, const float* value_scales) {
      // An int8 row stands for its scale times its elements: the scale multiplies the row's score (and, below,
      // its probability), so the products read the int8 elements as they are.
      const KV* const* key_pointers = nullptr;
      const KV* const* value_pointers = nullptr;
      if constexpr (kHasRowScales<KV> && kVariantHasInt8Dot) {
        if (int8_dot) {
          key_pointers = row_pointers(krows, cols, st.key_rows);
          value_pointers = row_pointers(vrows, cols, st.value_rows);
          for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
            int8_dot_scores(std::min<int64_t>(kTileRows, rows - r0), st.q16.data() + r0 * a.dk,
                            st.q_scales.data() + r0, key_pointers, key_scales, cols, a.dk, a.scale, s + r0 * lds, lds,
                            value_pointers, a.dv, kPrefetchKeys<KV>);
          }
        }
      }
      if constexpr (kAmxVariant) {
#ifdef ATTN_DECODE_AMX
        if (amx) amx_score_split(st.q.data(), rows, krows, vrows, cols, a.dk, a.dv, a.scale, s, lds, st.amx);
#endif
      }
      if (!int8_dot && !amx) {
        for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
          score_rows(std::min<int64_t>(kTileRows, rows - r0), st.q.data() + r0 * a.dk, krows, vrows, cols, a.dk,
                     a.dv, a.scale, s + r0 * lds, lds);
        }
        if constexpr (kHasRowScales<KV>) scale_columns(s, rows, cols, lds, key_scales);
      }
      // A token tree's candidates start at this column of the split.
      const int64_t first_candidate = a.query_starts[b] - j0;

      for (int64_t r = 0; r < rows; ++r) {
        T* row = s + r * lds;
        const int64_t h = hk * group + r / a.tq;
        // The score terms in backends/masks.h's order, then the blocked keys outside the row's band.
        if (a.softcap > T(0)) softcap_row(row, cols, a.softcap, static_cast<T*>(nullptr));
        if (a.alibi) alibi_row(row, cols, a.alibi[b * a.alibi_stride + h], a.query_starts[b] + r % a.tq - j0);
        std::fill(row, row + st.begin[r], kNegInf<T>);
        std::fill(row + st.end[r], row + cols, kNegInf<T>);
        if (a.tree) block_outside_tree(a.tree + b * a.tree_stride, a.tq, r % a.tq, first_candidate, cols, row);
        m[r] = st.end[r] > st.begin[r] ? row_max(row, cols) : kNegInf<T>;
        if (m[r] == kNegInf<T>) {  // no key of this split is allowed for this row
          std::fill(row, row + cols, T(0));
          l[r] = T(0);
          st.begin[r] = st.end[r] = 0;
        } else {
          l[r] = exp_shifted_sum(row, cols, m[r]);
        }
      }
      if constexpr (kHasRowScales<KV>) scale_columns(s, rows, cols, lds, value_scales);

      // The keys every row of a tile may attend go through the tile; a row's other allowed keys (causal rows of
      // a multi-query step, window edges, a tree's candidates) go row by row. A blocked key never enters a
      // product, so a NaN or Inf value there contributes nothing. A row that attends no key of the split passes
      // through the tile with zero weights (the merge skips its split), so it does not empty the tile's range.
      // On AMX's tiles, every row is one tile.
      std::fill(acc, acc + rows * a.dv, T(0));
      const int64_t tile_rows = amx ? rows : kTileRows;
      for (int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
        const int64_t tile = std::min<int64_t>(tile_rows, rows - r0);
        int64_t common_begin = 0, common_end = 0;
        bool attending = false;
        for (int64_t r = r0; r < r0 + tile; ++r) {
          if (st.end[r] == st.begin[r]) continue;
          common_begin = attending ? std::max(common_begin, st.begin[r]) : st.begin[r];
          common_end = attending ? std::min(common_end, st.end[r]) : st.end[r];
          attending = true;
        }
        common_end = std::max(common_begin, common_end);
        if (a.tree) common_end = std::clamp(first_candidate, common_begin, common_end);
        if (common_end > common_begin) {
          bool done = false;
          if constexpr (kHasRowScales<KV> && kVariantHasInt8Dot) {
            done = int8_dot && int8_dot_weighted_sum(tile, s + r0 * lds + common_begin, lds,
                                                     common_end - common_begin, value_pointers + common_begin, a.dv,
                                                     acc + r0 * a.dv);
          }
          if constexpr (kAmxVariant) {
#ifdef ATTN_DECODE_AMX
            if (amx) {
              amx_weighted_sum_split(s + r0 * lds + common_begin, lds, tile, common_end - common_begin,
                                     vrows.from(common_begin), a.dv, acc + r0 * a.dv, st.amx);
              done = true;
            }
#endif
          }
          if (!done) {
            weighted_sum_rows(tile, s + r0 * lds + common_begin, lds, common_end - common_begin,
                              vrows.from(common_begin), a.dv, acc + r0 * a.dv);
          }
        }
        for (int64_t r = r0; r < r0 + tile; ++r) {
          const auto add = [&](int64_t c) {
            if (s[r * lds + c] != T(0)) axpy(s[r * lds + c], vrows[c], acc + r * a.dv, a.dv);
          };
          for (int64_t c = st.begin[r]; c < std::min(common_begin, st.end[r]); ++c) add(c);
          for (int64_t c = std::max(common_end, st.begin[r]); c < st.end[r]; ++c) add(c);
        }
      }
    });
  };

  // Merges (row b, K/V head hk)'s splits in order: out = Σ e^(m_s - M) acc_s / Σ e^(m_s - M) l_s.
  const auto merge = [&](int64_t b, int64_t hk, CacheLineVector<T>& out) {
    out.resize(a.dv);
    for (int64_t r = 0; r < rows; ++r) {
      // A sink joins the merge as one more split: its logit, exp(0) = 1 of mass, and no output.
      const T sink = a.sinks ? a.sinks[hk * group + r / a.tq] : kNegInf<T>;
      T max = sink;
      for (int64_t sp = first_split[b]; sp < first_split[b + 1]; ++sp) {
        const T ms = part_max[(sp * a.kv_heads + hk) * rows + r];
        if (std::isnan(ms) || ms > max) max = ms;
        if (std::isnan(max)) break;
      }
      const int64_t h = hk * group + r / a.tq, t = r % a.tq;
      if (max == kNegInf<T>) {  // every key blocked: a zero row, as the other backends give
        std::fill(out.begin(), out.end(), T(0));
        write_row(a.out, b, h, t, a.dv, out.data(), T(1));
        continue;
      }
      T denom = sink == kNegInf<T> ? T(0) : std::exp(sink - max);
      std::fill(out.begin(), out.end(), T(0));
      for (int64_t sp = first_split[b]; sp < first_split[b + 1]; ++sp) {
        const int64_t slot = sp * a.kv_heads + hk;
        const T ms = part_max[slot * rows + r];
        if (ms == kNegInf<T>) continue;
        const T w = std::exp(ms - max);
        denom += w * part_sum[slot * rows + r];
        const T* src = part_out + (slot * rows + r) * a.dv;
        for (int64_t e = 0; e < a.dv; ++e) out[e] += w * src[e];
      }
      write_row(a.out, b, h, t, a.dv, out.data(), T(1) / denom);
    }
  };

  // The last split of a (row, K/V head) to finish merges it, in the same task: one parallel region in all (a
  // second one for the merges costs more than a short cache's whole step). The merge reads the splits in
  // order whoever runs it, so the bits do not depend on the threads.
  std::vector<std::atomic<int64_t>> unmerged(a.batch * a.kv_heads);
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t hk = 0; hk < a.kv_heads; ++hk) unmerged[b * a.kv_heads + hk] = first_split[b + 1] - first_split[b];
  }
  run_tasks<DecodeState<T, KV>>(slots, [&](int64_t task, DecodeState<T, KV>& st) {
    const int64_t split = task / a.kv_heads, hk = task % a.kv_heads;
    const int64_t b = std::upper_bound(first_split.begin(), first_split.end(), split) - first_split.begin() - 1;
    score_split(task, b, hk, (split - first_split[b]) * split_length, st);
    // acq_rel: the merge sees every other split's partials of this (row, K/V head).
    if (unmerged[b * a.kv_heads + hk].fetch_sub(1, std::memory_order_acq_rel) == 1) merge(b, hk, st.merged);
  });
}

/// The cache element types the kernel reads, and the compute type each is read in: the one list of them. A new
/// element type is a case here and its widening load in products/row_tiles.h.
template <typename T>
void decode_cache(const DecodeArgs<T>& a) {
  const CacheView &k = a.k, &v = a.v;
  TORCH_INTERNAL_ASSERT(k.type == v.type, "attn: the key and value caches' element types differ");
  switch (k.type) {
    case at::kFloat:
      if constexpr (std::is_same_v<T, float>) return decode<T, float>(a);
      break;
    case at::kDouble:
      if constexpr (std::is_same_v<T, double>) return decode<T, double>(a);
      break;
    case at::kBFloat16:
      if constexpr (std::is_same_v<T, float>) return decode<T, c10::BFloat16>(a);
      break;
    case at::kChar:  // with a scale per row (CacheView::scales)
      if constexpr (std::is_same_v<T, float>) return decode<T, int8_t>(a);
      break;
    default: break;
  }
  TORCH_INTERNAL_ASSERT(false, "attn: the decode kernel reads no ", c10::toString(k.type), " cache in ",
                        c10::toString(c10::CppTypeToScalarType<T>::value));
}

}  // namespace
}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE

namespace attn::ops::cpu {
void ATTN_KERNEL_VARIANT::decode_forward(const DecodeArgs<float>& args) { ATTN_KERNEL_NAMESPACE::decode_cache(args); }
void ATTN_KERNEL_VARIANT::decode_forward(const DecodeArgs<double>& args) {
  ATTN_KERNEL_NAMESPACE::decode_cache(args);
}
}  // namespace attn::ops::cpu
