// The CUDA implementation of the attn::decode_attention op: a few new queries per sequence against a KV cache,
// split across thread blocks along the keys and merged by log-sum-exp (FlashDecoding's scheme), with the query
// heads of a grouped-query group packed into one block so that each cache element is read from memory once.
//
// One block takes one (batch row, K/V head, split of the keys) and up to kRows packed query rows (row
// r = i * Tq + t is query t of head hk * group + i). It streams the split's keys through shared memory in
// tiles, two deep (cp.async), scores them on CUDA cores (decoding reads each cache element for a few FLOPs, so
// it is bound by memory, not arithmetic), and keeps each row's running max, sum and output in float. A second
// kernel merges the splits; with one split the block writes the output itself.

#include "common/band.h"
#include "common/checks.h"
#include "ops/cuda/decode_attention_cuda.h"
#include "ops/cuda/elements.cuh"
#include "ops/attention_contract.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <cmath>
#include <limits>
#include <vector>

namespace attn::ops::cuda {
namespace {

constexpr const char* kOp = "attn::decode_attention";
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct DecodeParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  int64_t q_stride[3], k_stride[3], v_stride[3], out_stride[3];  // batch, head, row; d is contiguous
  const int64_t* starts;   // [B] on the device
  const int64_t* lengths;  // [B] on the device
  int heads, kv_heads, tq, d, group, rows, row_chunks;
  int splits, split_keys;
  float scale, softcap;
  const float* alibi;  // slope of (b, h) at alibi[b * alibi_stride + h], or null
  int alibi_stride;
  const float* sinks;  // [H] or null
  int64_t left, right;  // the band around a query's position p: p - left <= j <= p + right (-1: unbounded)
  float* part_max;  // [B, H_kv, row_chunks, splits, kRows]
  float* part_sum;
  float* part_out;  // [..., kRows, d]
};

/// Keys per shared tile: about 16 KB of K (and as much of V) per stage.
template <typename T, int kMaxD>
constexpr int tile_keys() {
  const int keys = 16384 / (kMaxD * static_cast<int>(sizeof(T)));
  return keys > 64 ? 64 : (keys < 16 ? 16 : keys);
}

template <typename T, int kMaxD, int kRows>
struct Layout {
  static constexpr int kTile = tile_keys<T, kMaxD>();
  static constexpr int kPartsPerKey = kThreads / kTile;      // threads scoring one key, each a share of d
  static constexpr int kStride = padded_stride<T>(kMaxD, kPartsPerKey);
  static constexpr int kPairs = kMaxD / 2;                    // threads along d in the weighted sum
  static constexpr int kKeyGroups = kThreads / kPairs;        // ... and how many keys they take at once
  static constexpr size_t kQueryBytes = sizeof(float) * kRows * kMaxD;
  static constexpr size_t kTileBytes = sizeof(T) * kTile * kStride;
  static constexpr size_t kScoreBytes = sizeof(float) * kRows * kTile;
  static constexpr size_t kReduceBytes = sizeof(float) * kKeyGroups * kRows * kMaxD;
  // q | K stage 0, 1 | V stage 0, 1 | scores; the per-group sums reuse the K stages at the end.
  static constexpr size_t kBytes = kQueryBytes + 4 * kTileBytes + kScoreBytes;
  static_assert(kReduceBytes <= 2 * kTileBytes, "the per-group sums must fit in the K stages");
  static_assert(kThreads % kTile == 0 && kThreads % kPairs == 0, "threads must divide evenly");
};

/// Positions are int64; CUDA's min and max overloads do not deduce mixed or templated arguments.
__device__ inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/// The larger of a and b, NaN if either is (fmaxf drops a NaN, and a NaN score must reach the output).
__device__ inline float max_nan(float a, float b) { return (a != a || b != b) ? __int_as_float(0x7fffffff) : fmaxf(a, b); }

__device__ inline float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = max_nan(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ inline float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <typename T, int kMaxD, int kRows>
__global__ void __launch_bounds__(kThreads) decode_split_kernel(const DecodeParams p) {
  using L = Layout<T, kMaxD, kRows>;
  constexpr int kTile = L::kTile, kChunk = Elements<T>::kPerChunk;
  extern __shared__ __align__(16) unsigned char smem[];
  float* q_s = reinterpret_cast<float*>(smem);
  T* k_s = reinterpret_cast<T*>(smem + L::kQueryBytes);
  T* v_s = reinterpret_cast<T*>(smem + L::kQueryBytes + 2 * L::kTileBytes);
  float* s_s = reinterpret_cast<float*>(smem + L::kQueryBytes + 4 * L::kTileBytes);
  __shared__ float m_s[kRows], l_s[kRows], alpha_s[kRows], slope_s[kRows];
  __shared__ int64_t pos_s[kRows];
  __shared__ int64_t band_s[2];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int split = blockIdx.x, hk = blockIdx.y;
  const int b = blockIdx.z / p.row_chunks, chunk = blockIdx.z % p.row_chunks;
  const int row0 = chunk * kRows, rows_here = min(kRows, p.rows - row0);
  const int d = p.d, chunks = d / kChunk;
  const int64_t length = p.lengths[b];

  // The block's query rows in float, their positions and ALiBi slopes, and the band of keys any of them sees.
  for (int i = tid; i < kRows * kMaxD; i += kThreads) {
    const int r = i / kMaxD, e = i % kMaxD;
    float x = 0.f;
    if (r < rows_here && e < d) {
      const int R = row0 + r, h = hk * p.group + R / p.tq, t = R % p.tq;
      x = static_cast<float>(static_cast<const T*>(p.q)[b * p.q_stride[0] + h * p.q_stride[1] + t * p.q_stride[2] + e]);
    }
    q_s[i] = x;
  }
  if (tid < kRows) {
    const int R = row0 + min(tid, rows_here - 1), h = hk * p.group + R / p.tq;
    pos_s[tid] = p.starts[b] + R % p.tq;
    slope_s[tid] = p.alibi ? p.alibi[b * p.alibi_stride + h] : 0.f;
    m_s[tid] = kNegInf;
    l_s[tid] = 0.f;
  }
  __syncthreads();
  if (tid == 0) {
    int64_t lo = length, hi = 0;
    for (int r = 0; r < rows_here; ++r) {
      lo = min64(lo, p.left >= 0 ? max64(pos_s[r] - p.left, 0) : 0);
      hi = max64(hi, p.right >= 0 ? min64(pos_s[r] + p.right + 1, length) : length);
    }
    band_s[0] = lo;
    band_s[1] = hi;
  }
  __syncthreads();

  // This split's keys, cut to the band; tiles stay aligned to the split's start.
  const int64_t split_begin = static_cast<int64_t>(split) * p.split_keys;
  const int64_t split_end = min64(split_begin + p.split_keys, length);
  int64_t first = split_begin;
  if (band_s[0] > first) first += (band_s[0] - first) / kTile * kTile;
  const int64_t last = min64(split_end, band_s[1]);
  const int tiles = last > first ? static_cast<int>((last - first + kTile - 1) / kTile) : 0;

  const T* k_base = static_cast<const T*>(p.k) + b * p.k_stride[0] + hk * p.k_stride[1];
  const T* v_base = static_cast<const T*>(p.v) + b * p.v_stride[0] + hk * p.v_stride[1];
  const auto load_tile = [&](int tile, int stage) {
    const int64_t j0 = first + static_cast<int64_t>(tile) * kTile;
    const int n = static_cast<int>(min64(kTile, last - j0));
    T* ks = k_s + stage * kTile * L::kStride;
    T* vs = v_s + stage * kTile * L::kStride;
    for (int i = tid; i < n * chunks; i += kThreads) {
      const int row = i / chunks, c = i % chunks;
      copy_chunk_async(ks + row * L::kStride + c * kChunk, k_base + (j0 + row) * p.k_stride[2] + c * kChunk);
      copy_chunk_async(vs + row * L::kStride + c * kChunk, v_base + (j0 + row) * p.v_stride[2] + c * kChunk);
    }
    commit_copies();
  };

  // The weighted sum's accumulators: a pair of output elements per thread and row, for every kKeyGroups-th key.
  const int pair = tid % L::kPairs, key_group = tid / L::kPairs;
  const bool pair_active = 2 * pair < d;
  float acc[kRows][2];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = 0.f;

  if (tiles > 0) load_tile(0, 0);
  for (int tile = 0; tile < tiles; ++tile) {
    const int stage = tile & 1;
    if (tile + 1 < tiles) {
      load_tile(tile + 1, stage ^ 1);
      wait_copies<1>();
    } else {
      wait_copies<0>();
    }
    __syncthreads();
    const int64_t j0 = first + static_cast<int64_t>(tile) * kTile;
    const int n = static_cast<int>(min64(kTile, last - j0));
    const T* ks = k_s + stage * kTile * L::kStride;
    const T* vs = v_s + stage * kTile * L::kStride;

    // Scores: kPartsPerKey threads per key, each a share of d's 16-byte chunks (interleaved, so that the
    // threads of a key read different banks), summed across them by shuffles.
    {
      const int key = tid / L::kPartsPerKey, part = tid % L::kPartsPerKey;
      float dot[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) dot[r] = 0.f;
      if (key < n) {
        for (int c = part; c < chunks; c += L::kPartsPerKey) {
          // One 16-byte read per chunk (the padded stride keeps the threads of a quarter-warp in distinct banks).
          float kk[kChunk];
          Elements<T>::chunk(ks + key * L::kStride + c * kChunk, kk);
#pragma unroll
          for (int e = 0; e < kChunk; e += 2) {
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              const float2 qq = *reinterpret_cast<const float2*>(q_s + r * kMaxD + c * kChunk + e);
              dot[r] = fmaf(qq.x, kk[e], fmaf(qq.y, kk[e + 1], dot[r]));
            }
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int o = 1; o < L::kPartsPerKey; o <<= 1) dot[r] += __shfl_xor_sync(0xffffffffu, dot[r], o);
      }
      if (part == 0) {
        const int64_t j = j0 + key;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float s = kNegInf;
          const int64_t pos = pos_s[r];
          const bool allowed = key < n && (p.left < 0 || j >= pos - p.left) && (p.right < 0 || j <= pos + p.right);
          if (allowed) {
            s = dot[r] * p.scale;
            // The score terms in backends/masks.h's order: soft-capping, then the ALiBi bias.
            if (p.softcap > 0.f) s = p.softcap * tanhf(s / p.softcap);
            if (p.alibi) s -= slope_s[r] * fabsf(static_cast<float>(pos - j));
          }
          s_s[r * kTile + key] = s;
        }
      }
    }
    __syncthreads();

    // Online softmax: a warp per row; the scores become weights in place.
    for (int r = warp; r < kRows; r += kWarps) {
      float mx = kNegInf;
      for (int c = lane; c < kTile; c += 32) mx = max_nan(mx, s_s[r * kTile + c]);
      mx = warp_max(mx);
      const float m_old = m_s[r], m_new = max_nan(m_old, mx);
      float sum = 0.f;
      for (int c = lane; c < kTile; c += 32) {
        const float s = s_s[r * kTile + c];
        const float w = s == kNegInf ? 0.f : __expf(s - m_new);
        s_s[r * kTile + c] = w;
        sum += w;
      }
      sum = warp_sum(sum);
      if (lane == 0) {
        const float alpha = m_old == kNegInf ? 0.f : __expf(m_old - m_new);
        alpha_s[r] = alpha;
        l_s[r] = l_s[r] * alpha + sum;
        m_s[r] = m_new;
      }
    }
    __syncthreads();

    // Weighted sum of V's rows. A blocked key's weight is 0 and it is skipped, never multiplied, so a NaN or
    // Inf value there stays out of the output.
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      acc[r][0] *= alpha_s[r];
      acc[r][1] *= alpha_s[r];
    }
    if (pair_active) {
      for (int key = key_group; key < n; key += L::kKeyGroups) {
        const float2 vv = Elements<T>::pair(vs + key * L::kStride + 2 * pair);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float w = s_s[r * kTile + key];
          if (w != 0.f) {
            acc[r][0] = fmaf(w, vv.x, acc[r][0]);
            acc[r][1] = fmaf(w, vv.y, acc[r][1]);
          }
        }
      }
    }
    __syncthreads();  // the stage and the weights are reused by the next tile
  }

  // Sum the key groups' accumulators (in the K stages, free now), then write the split's result.
  float* red = reinterpret_cast<float*>(smem + L::kQueryBytes);
  if (pair_active) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      red[(key_group * kRows + r) * kMaxD + 2 * pair] = acc[r][0];
      red[(key_group * kRows + r) * kMaxD + 2 * pair + 1] = acc[r][1];
    }
  }
  __syncthreads();
  const int64_t slot = ((static_cast<int64_t>(b) * p.kv_heads + hk) * p.row_chunks + chunk) * p.splits + split;
  for (int i = tid; i < rows_here * d; i += kThreads) {
    const int r = i / d, e = i % d;
    float sum = 0.f;
    for (int g = 0; g < L::kKeyGroups; ++g) sum += red[(g * kRows + r) * kMaxD + e];
    if (p.splits > 1) {
      p.part_out[(slot * kRows + r) * d + e] = sum;
      continue;
    }
    // One split: normalise here, with the sink (one more logit, with no value) in the denominator.
    const int R = row0 + r, h = hk * p.group + R / p.tq, t = R % p.tq;
    const float m = m_s[r], sink = p.sinks ? p.sinks[h] : kNegInf;
    const float top = fmaxf(m, sink);
    float y = 0.f;
    if (m != kNegInf) {
      const float w = __expf(m - top);
      y = sum * w / (l_s[r] * w + (sink == kNegInf ? 0.f : __expf(sink - top)));
    }
    static_cast<T*>(p.out)[b * p.out_stride[0] + h * p.out_stride[1] + t * p.out_stride[2] + e] = static_cast<T>(y);
  }
  if (p.splits > 1 && tid < rows_here) {
    p.part_max[slot * kRows + tid] = m_s[tid];
    p.part_sum[slot * kRows + tid] = l_s[tid];
  }
}

/// Merges the splits of each query row: out = Σ e^(m_s - M) acc_s / (Σ e^(m_s - M) l_s + e^(sink - M)).
template <typename T, int kRows>
__global__ void __launch_bounds__(kThreads) decode_merge_kernel(const DecodeParams p) {
  const int64_t row = blockIdx.x;  // (b, h, t)
  const int t = static_cast<int>(row % p.tq), h = static_cast<int>(row / p.tq % p.heads);
  const int b = static_cast<int>(row / p.tq / p.heads);
  const int hk = h / p.group, R = (h % p.group) * p.tq + t, chunk = R / kRows, r = R % kRows;
  const int64_t slot0 = ((static_cast<int64_t>(b) * p.kv_heads + hk) * p.row_chunks + chunk) * p.splits;
  const float* part_max = p.part_max + slot0 * kRows + r;
  const float* part_sum = p.part_sum + slot0 * kRows + r;
  float top = p.sinks ? p.sinks[h] : kNegInf;
  bool any = false, nan = false;
  for (int s = 0; s < p.splits; ++s) {
    const float m = part_max[s * kRows];
    any = any || m != kNegInf;
    nan = nan || isnan(m);
    top = fmaxf(top, m);
  }
  T* dst = static_cast<T*>(p.out) + b * p.out_stride[0] + h * p.out_stride[1] + t * p.out_stride[2];
  if (!any || nan) {  // every key blocked: a zero row, as the other backends give; a NaN score: NaN
    for (int e = threadIdx.x; e < p.d; e += kThreads) dst[e] = static_cast<T>(nan ? NAN : 0.f);
    return;
  }
  float denom = p.sinks ? __expf(p.sinks[h] - top) : 0.f;
  for (int s = 0; s < p.splits; ++s) {
    const float m = part_max[s * kRows];
    if (m != kNegInf) denom += __expf(m - top) * part_sum[s * kRows];
  }
  for (int e = threadIdx.x; e < p.d; e += kThreads) {
    float y = 0.f;
    for (int s = 0; s < p.splits; ++s) {
      const float m = part_max[s * kRows];
      if (m != kNegInf) y += __expf(m - top) * p.part_out[((slot0 + s) * kRows + r) * p.d + e];
    }
    dst[e] = static_cast<T>(y / denom);
  }
}

template <typename T, int kMaxD, int kRows>
void launch(DecodeParams p, int batch, int64_t max_length, const at::TensorOptions& float_options) {
  using L = Layout<T, kMaxD, kRows>;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const auto kernel = decode_split_kernel<T, kMaxD, kRows>;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::kBytes)));
  // A long cache of few rows and heads is split along the keys into as many blocks as the GPU holds at once
  // (one wave: a second, partial one would leave most of the GPU idle while it runs), never more finely than
  // a tile.
  const int64_t base = static_cast<int64_t>(batch) * p.kv_heads * p.row_chunks;
  const int64_t tiles = std::max<int64_t>((max_length + L::kTile - 1) / L::kTile, 1);
  int resident = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, kThreads, L::kBytes));
  const int64_t wave = static_cast<int64_t>(std::max(resident, 1)) * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  int64_t splits = std::clamp<int64_t>(wave / base, 1, tiles);
  const int64_t split_tiles = (tiles + splits - 1) / splits;
  splits = (tiles + split_tiles - 1) / split_tiles;
  p.splits = static_cast<int>(splits);
  p.split_keys = static_cast<int>(split_tiles * L::kTile);
  TORCH_CHECK(p.kv_heads <= 65535 && base / p.kv_heads <= 65535, kOp, ": B x ceil(rows / ", kRows,
              ") = ", base / p.kv_heads, " and H_kv = ", p.kv_heads, " must be at most 65535 for the CUDA grid");
  at::Tensor parts;
  if (splits > 1) {
    const int64_t slots = base * splits * kRows;
    parts = at::empty({slots * (2 + p.d)}, float_options);
    p.part_max = parts.data_ptr<float>();
    p.part_sum = p.part_max + slots;
    p.part_out = p.part_sum + slots;
  }
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(p.kv_heads),
                  static_cast<unsigned>(base / p.kv_heads));
  kernel<<<grid, kThreads, L::kBytes, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (splits > 1) {
    const int64_t rows_out = static_cast<int64_t>(batch) * p.heads * p.tq;
    decode_merge_kernel<T, kRows><<<static_cast<unsigned>(rows_out), kThreads, 0, stream>>>(p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

template <typename T, int kMaxD>
void launch_rows(const DecodeParams& p, int batch, int64_t max_length, const at::TensorOptions& float_options) {
  // The packed rows of a block, rounded up to a power of two: one per query head of the group and query.
  if (p.rows <= 1) return launch<T, kMaxD, 1>(p, batch, max_length, float_options);
  if (p.rows <= 2) return launch<T, kMaxD, 2>(p, batch, max_length, float_options);
  if (p.rows <= 4) return launch<T, kMaxD, 4>(p, batch, max_length, float_options);
  return launch<T, kMaxD, 8>(p, batch, max_length, float_options);
}

int rows_per_block(int rows) { return rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : 8; }

void check_input_defined(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache) {
  for (const auto& [arg, t] : {std::pair<const char*, const at::Tensor&>{"query", query},
                               std::pair<const char*, const at::Tensor&>{"key_cache", key_cache},
                               std::pair<const char*, const at::Tensor&>{"value_cache", value_cache}}) {
    TORCH_CHECK(t.defined(), kOp, ": ", arg, " is undefined");
    TORCH_CHECK(t.dim() == 4, kOp, ": ", arg, " must be 4-D, got shape ", t.sizes());
  }
}

bool aligned_rows(const at::Tensor& t) {
  const auto bytes = static_cast<int64_t>(t.element_size());
  const bool rows = t.size(2) <= 1 || (t.stride(2) * bytes) % 16 == 0;
  const bool heads = t.size(1) <= 1 || (t.stride(1) * bytes) % 16 == 0;
  const bool batch = t.size(0) <= 1 || (t.stride(0) * bytes) % 16 == 0;
  return t.stride(3) == 1 && rows && heads && batch && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

at::Tensor decode_attention_cuda(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                                 const at::Tensor& query_starts, const at::Tensor& key_lengths, bool is_causal,
                                 c10::optional<double> scale, int64_t window_left, int64_t window_right,
                                 double softcap, const c10::optional<at::Tensor>& alibi_slopes,
                                 const c10::optional<at::Tensor>& sinks, const c10::optional<at::Tensor>& key_scales,
                                 const c10::optional<at::Tensor>& value_scales,
                                 const c10::optional<at::Tensor>& block_table,
                                 const c10::optional<at::Tensor>& tree_mask) {
  check_input_defined(query, key_cache, value_cache);
  const auto given = [](const c10::optional<at::Tensor>& t) { return t && t->defined(); };
  TORCH_CHECK(!is_int8_cache(key_cache) && !is_int8_cache(value_cache) && !given(key_scales) && !given(value_scales),
              kOp, ": an int8 cache is read by the CPU kernel only; on ", query.device(),
              " keep the cache in the model's dtype");
  TORCH_CHECK(!given(block_table) && !given(tree_mask), kOp,
              ": paged caches and token trees are read by the CPU kernel only, not on ", query.device());
  const DecodeKernelSupport support = decode_support(query, key_cache, value_cache);
  TORCH_CHECK(support.supported, kOp, ": no CUDA kernel for these inputs: ", support.reason,
              "; attn::attention_with_kv_cache takes the general backends for them");
  const CacheSizes c = check_cache_call(kOp, query, key_cache, value_cache, query_starts, key_lengths);
  const int64_t B = c.batch, H = c.heads, tq = c.tq, d = c.dk, H_kv = c.kv_heads;
  check_decode_variants(kOp, c, query, is_causal, scale, window_left, window_right, softcap, alibi_slopes, sinks);
  // The kernel sizes its grid from the positions, so they come to the host (where a KVCache keeps them).
  const at::Tensor host_starts = host_positions(query_starts), host_lengths = host_positions(key_lengths);
  const at::ArrayRef<int64_t> starts(host_starts.data_ptr<int64_t>(), B), lengths(host_lengths.data_ptr<int64_t>(), B);

  const c10::cuda::CUDAGuard guard(query.device());
  at::Tensor out = empty_decode_output(c, query.options());
  if (B == 0 || H == 0 || tq == 0) return out;
  const auto float_options = query.options().dtype(at::kFloat);
  std::vector<int64_t> positions(starts.begin(), starts.end());
  positions.insert(positions.end(), lengths.begin(), lengths.end());
  const at::Tensor device_positions =
      at::tensor(positions, at::TensorOptions().dtype(at::kLong)).to(query.device(), /*non_blocking=*/true);
  const at::Tensor q = query.stride(3) == 1 ? query : query.contiguous();
  const at::Tensor slopes =
      alibi_slopes && alibi_slopes->defined() ? alibi_slopes->to(float_options).contiguous() : at::Tensor();
  const at::Tensor sink_logits = sinks && sinks->defined() ? sinks->to(float_options).contiguous() : at::Tensor();

  DecodeParams p{};
  p.q = q.data_ptr(), p.k = key_cache.data_ptr(), p.v = value_cache.data_ptr(), p.out = out.data_ptr();
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = q.stride(i), p.k_stride[i] = key_cache.stride(i), p.v_stride[i] = value_cache.stride(i);
    p.out_stride[i] = out.stride(i);
  }
  p.starts = device_positions.data_ptr<int64_t>();
  p.lengths = p.starts + B;
  p.heads = static_cast<int>(H), p.kv_heads = static_cast<int>(H_kv), p.tq = static_cast<int>(tq);
  p.d = static_cast<int>(d), p.group = static_cast<int>(H / H_kv), p.rows = p.group * p.tq;
  p.row_chunks = (p.rows + rows_per_block(p.rows) - 1) / rows_per_block(p.rows);
  p.scale = static_cast<float>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d)));
  p.softcap = static_cast<float>(softcap);
  if (slopes.defined()) {
    p.alibi = slopes.data_ptr<float>();
    p.alibi_stride = slopes.dim() == 2 && slopes.size(0) > 1 ? static_cast<int>(H) : 0;
  }
  if (sink_logits.defined()) p.sinks = sink_logits.data_ptr<float>();
  p.left = common::applied_window(window_left);
  p.right = common::band_right(is_causal, common::applied_window(window_right));
  const int64_t max_length = *std::max_element(lengths.begin(), lengths.end());

  const auto by_width = [&](auto type_tag) {
    using T = decltype(type_tag);
    if (d <= 64) return launch_rows<T, 64>(p, static_cast<int>(B), max_length, float_options);
    if (d <= 128) return launch_rows<T, 128>(p, static_cast<int>(B), max_length, float_options);
    return launch_rows<T, 256>(p, static_cast<int>(B), max_length, float_options);
  };
  switch (query.scalar_type()) {
    case at::kFloat: by_width(float{}); break;
    case at::kHalf: by_width(c10::Half{}); break;
    default: by_width(c10::BFloat16{}); break;
  }
  return out;
}

}  // namespace

DecodeKernelSupport decode_support(const at::Tensor& query, const at::Tensor& key_cache,
                                   const at::Tensor& value_cache) {
  const auto no = [](std::string why) { return DecodeKernelSupport{false, std::move(why)}; };
  if (query.dim() != 4 || key_cache.dim() != 4 || value_cache.dim() != 4) return no("the inputs must be 4-D");
  const at::ScalarType type = query.scalar_type();
  if (type != at::kFloat && type != at::kHalf && type != at::kBFloat16) {
    return no(std::string("the CUDA kernel computes float32, float16 and bfloat16, not ") + common::dtype_name(type));
  }
  if (key_cache.scalar_type() != type || value_cache.scalar_type() != type) return no("the caches' dtype must be the query's");
  if (!key_cache.is_cuda() || !value_cache.is_cuda() || key_cache.device() != query.device() ||
      value_cache.device() != query.device()) {
    return no("the caches must be on the query's device");
  }
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(query.device().index());
  if (props->major < 8) {
    return no("the CUDA kernel needs compute capability 8.0 or newer (cp.async), the GPU has " +
              std::to_string(props->major) + "." + std::to_string(props->minor));
  }
  const int64_t d = query.size(3), chunk = 16 / query.element_size();
  if (key_cache.size(3) != d || value_cache.size(3) != d || d > 256 || d % chunk != 0 || d == 0) {
    return no("the CUDA kernel needs d_k = d_v <= 256, a multiple of " + std::to_string(chunk) + " (16 bytes), got d_k = " +
              std::to_string(key_cache.size(3)) + " and d_v = " + std::to_string(value_cache.size(3)));
  }
  if (!aligned_rows(key_cache) || !aligned_rows(value_cache)) {
    return no("the CUDA kernel reads cache rows 16 bytes at a time: they must be contiguous along d and start on "
              "16-byte boundaries");
  }
  return {true, ""};
}

TORCH_LIBRARY_IMPL(attn, CUDA, m) { m.impl("decode_attention", TORCH_FN(decode_attention_cuda)); }

}  // namespace attn::ops::cuda
