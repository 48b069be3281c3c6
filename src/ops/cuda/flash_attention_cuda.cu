// The CUDA implementation of the attn::flash_attention ops: the attention variants (sliding window, ALiBi,
// sinks, packed sequences, soft-capping) blockwise on the GPU, without the [Tq, Tk] mask or scores that the
// general backends would build.
//
// Two routes, chosen once per call by variant_route():
//  - LibTorch's FlashAttention-2 (at::_flash_attention_forward and _backward), which computes sliding windows and
//    packed sequences itself, aligned bottom-right as attn's ops are. Sinks are one more logit in each
//    row's softmax with no value: the output is FlashAttention's scaled by e^(lse - lse'), lse' = logaddexp(lse,
//    sink), and the backward is FlashAttention's with (out', lse'), since a sink is a key whose value is zero.
//  - attn's own tensor-core kernel (variant_forward_kernel below) for what FlashAttention-2 in LibTorch does not
//    take: soft-capping, ALiBi (LibTorch builds it without), and the diagonal aligned other than bottom-right.
//    Forward only.

#include "common/band.h"
#include "common/checks.h"
#include "ops/cuda/elements.cuh"
#include "ops/cuda/flash_attention_cuda.h"
#include "ops/cuda/mma.cuh"
#include "ops/attention_contract.h"
#include "ops/flash_attention_schema.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace attn::ops::cuda {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---------------------------------------------------------------------------------------------------------
// attn's own kernel: FlashAttention-2's forward on mma.sync, with the score terms applied to each tile.

struct VariantParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;  // [B, H, Tq] contiguous
  int64_t q_stride[3], k_stride[3], v_stride[3], out_stride[3];  // batch, head, row; d is contiguous
  int heads, kv_heads;
  int64_t tq, tk;
  int64_t offset;       // query i sits on the diagonal at key i + offset
  int64_t left, right;  // the band: i + offset - left <= j <= i + offset + right (-1: unbounded)
  float scale, softcap;
  const float* alibi;  // slope of (b, h) at alibi[b * alibi_stride + h], or null
  int alibi_stride;
  const float* sinks;  // [H] or null
};

constexpr int kVariantThreads = 128;  // 4 warps, 16 query rows each
constexpr int kBlockM = 64, kBlockN = 64;

template <int D>
constexpr int variant_stride() {
  return D + 8;  // 16 bytes of padding: rows of 4 * (D / 2 + 4) bytes start 4 banks apart
}

template <int D>
constexpr size_t variant_smem_bytes() {
  return sizeof(uint16_t) * variant_stride<D>() * (kBlockM + 4 * kBlockN);  // Q, then K and V in two stages
}

__device__ inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
/// The larger of a and b, NaN if either is (fmaxf drops a NaN, and a NaN score must reach the output).
__device__ inline float max_nan(float a, float b) { return (a != a || b != b) ? __int_as_float(0x7fffffff) : fmaxf(a, b); }

template <typename T, int D>
__global__ void __launch_bounds__(kVariantThreads) variant_forward_kernel(const VariantParams p) {
  constexpr int kStride = variant_stride<D>(), kChunks = D / 8;  // 16-byte chunks per row
  extern __shared__ __align__(16) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);
  T* k_s = q_s + kBlockM * kStride;
  T* v_s = k_s + 2 * kBlockN * kStride;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (p.heads / p.kv_heads);
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kBlockM;
  const T* q_base = static_cast<const T*>(p.q) + b * p.q_stride[0] + h * p.q_stride[1];
  const T* k_base = static_cast<const T*>(p.k) + b * p.k_stride[0] + hk * p.k_stride[1];
  const T* v_base = static_cast<const T*>(p.v) + b * p.v_stride[0] + hk * p.v_stride[1];

  // The keys any row of this block may see, in whole tiles.
  const int64_t last_row = min64(i0 + kBlockM, p.tq) - 1;
  const int64_t lo = p.left >= 0 ? max64(i0 + p.offset - p.left, 0) : 0;
  const int64_t hi = p.right >= 0 ? min64(last_row + p.offset + p.right + 1, p.tk) : p.tk;
  const int64_t first = lo / kBlockN * kBlockN;
  const int tiles = hi > first ? static_cast<int>((hi - first + kBlockN - 1) / kBlockN) : 0;

  for (int c = tid; c < kBlockM * kChunks; c += kVariantThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    const bool in = i0 + r < p.tq;
    copy_chunk_async_or_zero(q_s + r * kStride + ch * 8, in ? q_base + (i0 + r) * p.q_stride[2] + ch * 8 : q_base,
                             in ? 16 : 0);
  }
  // Rows outside the keys any row of the block sees are zeros, never data: their weights are 0, and in the
  // tensor-core product 0 times a NaN or Inf there would be NaN.
  const auto load_tile = [&](int tile, int stage) {
    const int64_t j0 = first + static_cast<int64_t>(tile) * kBlockN;
    T* ks = k_s + stage * kBlockN * kStride;
    T* vs = v_s + stage * kBlockN * kStride;
    for (int c = tid; c < kBlockN * kChunks; c += kVariantThreads) {
      const int r = c / kChunks, ch = c % kChunks;
      const bool in = j0 + r >= lo && j0 + r < hi;
      copy_chunk_async_or_zero(ks + r * kStride + ch * 8, in ? k_base + (j0 + r) * p.k_stride[2] + ch * 8 : k_base,
                               in ? 16 : 0);
      copy_chunk_async_or_zero(vs + r * kStride + ch * 8, in ? v_base + (j0 + r) * p.v_stride[2] + ch * 8 : v_base,
                               in ? 16 : 0);
    }
  };
  if (tiles > 0) load_tile(0, 0);
  commit_copies();  // Q with the first tile

  uint32_t qf[D / 16][4];
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float row_max[2] = {kNegInf, kNegInf}, row_sum[2] = {0.f, 0.f};  // log2 units; rows g and g + 8
  const int64_t rows[2] = {i0 + warp * 16 + g, i0 + warp * 16 + g + 8};
  const float slope = p.alibi ? p.alibi[b * p.alibi_stride + h] : 0.f;

  if (tiles == 0) wait_copies<0>();
  for (int tile = 0; tile < tiles; ++tile) {
    const int stage = tile & 1;
    if (tile + 1 < tiles) {
      load_tile(tile + 1, stage ^ 1);
      commit_copies();
      wait_copies<1>();
    } else {
      wait_copies<0>();
    }
    __syncthreads();
    if (tile == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const T* q0 = q_s + (warp * 16 + g) * kStride + kk * 16 + 2 * t;
        qf[kk][0] = *reinterpret_cast<const uint32_t*>(q0);
        qf[kk][1] = *reinterpret_cast<const uint32_t*>(q0 + 8 * kStride);
        qf[kk][2] = *reinterpret_cast<const uint32_t*>(q0 + 8);
        qf[kk][3] = *reinterpret_cast<const uint32_t*>(q0 + 8 * kStride + 8);
      }
    }
    const T* ks = k_s + stage * kBlockN * kStride;
    const T* vs = v_s + stage * kBlockN * kStride;
    const int64_t j0 = first + static_cast<int64_t>(tile) * kBlockN;

    // S = Q Kᵀ for this warp's 16 rows and the tile's 64 keys: 8 tiles of 8 keys.
    float s[kBlockN / 8][4];
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const T* krow = ks + (j * 8 + g) * kStride + kk * 16 + 2 * t;
        MmaType<T>::mma(s[j], qf[kk], *reinterpret_cast<const uint32_t*>(krow),
                        *reinterpret_cast<const uint32_t*>(krow + 8));
      }
    }

    // The score terms in backends/masks.h's order (soft-capping, then ALiBi), then the band and the key count.
    float tile_max[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = rows[e >> 1], key = j0 + j * 8 + 2 * t + (e & 1);
        const int64_t diagonal = i + p.offset;
        const bool allowed = key < p.tk && (p.left < 0 || key >= diagonal - p.left) &&
                             (p.right < 0 || key <= diagonal + p.right);
        float x = s[j][e] * p.scale;
        if (p.softcap > 0.f) x = p.softcap * tanhf(x / p.softcap);
        if (p.alibi) x -= slope * fabsf(static_cast<float>(diagonal - key));
        x = allowed ? x * kLog2e : kNegInf;
        s[j][e] = x;
        tile_max[e >> 1] = max_nan(tile_max[e >> 1], x);
      }
    }
    float scale_old[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = max_nan(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = max_nan(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float m_new = max_nan(row_max[r], tile_max[r]);
      scale_old[r] = row_max[r] == kNegInf ? 0.f : exp2f(row_max[r] - m_new);
      row_max[r] = m_new;
      row_sum[r] *= scale_old[r];
    }
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const float w = s[j][e] == kNegInf ? 0.f : exp2f(s[j][e] - row_max[r]);
        s[j][e] = w;
        row_sum[r] += w;
      }
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      acc[n][0] *= scale_old[0], acc[n][1] *= scale_old[0];
      acc[n][2] *= scale_old[1], acc[n][3] *= scale_old[1];
    }

    // O += P V: P's accumulator fragments are the A fragments of the product, rounded to T; V's B fragments come
    // transposed out of its row-major tile.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint32_t a[4] = {MmaType<T>::pack(s[2 * kk][0], s[2 * kk][1]), MmaType<T>::pack(s[2 * kk][2], s[2 * kk][3]),
                             MmaType<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             MmaType<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const int matrix = lane >> 3, row = lane & 7;
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t bv[4];
        load_matrices_transposed(bv, vs + (kk * 16 + (matrix & 1) * 8 + row) * kStride + (n + (matrix >> 1)) * 8);
        MmaType<T>::mma(acc[n], a, bv[0], bv[1]);
        MmaType<T>::mma(acc[n + 1], a, bv[2], bv[3]);
      }
    }
    __syncthreads();  // the stage is loaded again two tiles on
  }

  // Each row's sum over the four threads that hold it, its log-sum-exp with the sink, and the output.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    const int64_t i = rows[r];
    if (i >= p.tq) continue;
    const float sink = p.sinks ? p.sinks[h] : kNegInf;
    float lse = kNegInf, factor = 0.f;
    if (row_max[r] != kNegInf) {
      lse = row_max[r] * kLn2 + logf(row_sum[r]);
      const float top = fmaxf(lse, sink);
      const float with_sink = sink == kNegInf ? lse : top + logf(expf(lse - top) + expf(sink - top));
      factor = expf(lse - with_sink) / row_sum[r];
      lse = with_sink;
    } else if (p.sinks) {
      lse = sink;  // no key: the sink alone, and a zero row
    }
    T* out_row = static_cast<T*>(p.out) + b * p.out_stride[0] + h * p.out_stride[1] + i * p.out_stride[2];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(out_row + n * 8 + 2 * t) =
          MmaType<T>::pack(acc[n][2 * r] * factor, acc[n][2 * r + 1] * factor);
    }
    if (t == 0) p.lse[(static_cast<int64_t>(b) * p.heads + h) * p.tq + i] = lse;
  }
}

template <typename T, int D>
void launch_variant_kernel(const VariantParams& p, int64_t batch) {
  const auto kernel = variant_forward_kernel<T, D>;
  constexpr size_t bytes = variant_smem_bytes<D>();
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.tq + kBlockM - 1) / kBlockM), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>(batch));
  kernel<<<grid, kVariantThreads, bytes, at::cuda::getCurrentCUDAStream()>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// ---------------------------------------------------------------------------------------------------------
// The op's CUDA kernels.

constexpr const char* kOp = "attn::flash_attention";

bool given(const c10::optional<at::Tensor>& t) { return t && t->defined(); }

/// `t` [B, H, T, d] itself when its rows are contiguous along d and start on 16-byte boundaries (the kernels,
/// attn's and FlashAttention's, read them 16 bytes at a time), else a contiguous copy.
at::Tensor rows_of_16_bytes(const at::Tensor& t) {
  const auto bytes = static_cast<int64_t>(t.element_size());
  bool aligned = t.stride(-1) == 1 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  for (int64_t i = 0; i + 1 < t.dim(); ++i) aligned = aligned && (t.size(i) <= 1 || (t.stride(i) * bytes) % 16 == 0);
  return aligned ? t : t.contiguous();
}

/// The inputs as FlashAttention takes them: [B, T, H, d] views of [B, H, T, d] (packed: [total, H, d]).
at::Tensor sequence_first(const at::Tensor& t, bool packed) { return packed ? t[0].transpose(0, 1) : t.transpose(1, 2); }
at::Tensor heads_first(const at::Tensor& t, bool packed) {
  return packed ? t.transpose(0, 1).unsqueeze(0) : t.transpose(1, 2);
}

struct Packing {
  c10::optional<at::Tensor> cu_q, cu_k;  // int32 on the device
  int64_t max_q = 0, max_k = 0;
};

Packing packing_of(const at::Tensor& query, const at::Tensor& key, const c10::optional<at::Tensor>& cu_seqlens_q,
                   const c10::optional<at::Tensor>& cu_seqlens_k) {
  Packing pk;
  if (!given(cu_seqlens_q)) {
    pk.max_q = query.size(2), pk.max_k = key.size(2);
    return pk;
  }
  const auto longest = [](const at::Tensor& cu) {
    const at::Tensor c = cu.to(at::kCPU, at::kLong);
    return c.numel() > 1 ? (c.slice(0, 1) - c.slice(0, 0, -1)).max().item<int64_t>() : int64_t(0);
  };
  pk.max_q = longest(*cu_seqlens_q), pk.max_k = longest(*cu_seqlens_k);
  pk.cu_q = cu_seqlens_q->to(query.device(), at::kInt);
  pk.cu_k = cu_seqlens_k->to(query.device(), at::kInt);
  return pk;
}

/// FlashAttention marks a row without keys with lse = +inf; attn's contract says -inf (and the backward wants
/// FlashAttention's own back).
at::Tensor lse_from_library(const at::Tensor& lse) {
  return at::where(lse == std::numeric_limits<float>::infinity(), at::full({}, kNegInf, lse.options()), lse);
}

at::Tensor lse_for_library(const at::Tensor& lse, bool with_sinks) {
  if (with_sinks) return lse;  // a sink keeps every row's lse finite
  return at::where(lse == kNegInf, at::full({}, std::numeric_limits<float>::infinity(), lse.options()), lse);
}

enum class SdpaWithLse { None, Cudnn, Flash };

/// A window as LibTorch's FlashAttention-2 takes it: unset where attn's is unbounded, or reaches every key.
c10::optional<int64_t> flash_window(int64_t window) {
  const int64_t w = common::applied_window(window);
  return w >= 0 ? c10::optional<int64_t>(w) : c10::nullopt;
}

/// For sinks on a dense call with no window: the kernel of LibTorch's SDPA that gives the log-sum-exp too, where
/// SDPA would pick cuDNN's or FlashAttention's for the same call (its causality is top-left: Tq = Tk only).
SdpaWithLse sdpa_with_lse(const at::Tensor& query, const at::Tensor& key, const FlashArguments& call, double scale) {
  if (!call.has_sinks() || call.packed() || call.window_left >= 0 || call.window_right >= 0 || call.has_alibi() ||
      query.size(1) != key.size(1) || (call.is_causal && query.size(2) != key.size(2))) {
    return SdpaWithLse::None;
  }
  const int64_t choice = at::_fused_sdp_choice(query, key, key, c10::nullopt, 0.0, call.is_causal, scale);
  return choice == 3 ? SdpaWithLse::Cudnn : choice == 1 ? SdpaWithLse::Flash : SdpaWithLse::None;
}

std::tuple<at::Tensor, at::Tensor> library_forward(const at::Tensor& query, const at::Tensor& key,
                                                   const at::Tensor& value, const FlashArguments& call, double scale,
                                                   const c10::optional<at::Tensor>& sinks,
                                                   const c10::optional<at::Tensor>& cu_seqlens_q,
                                                   const c10::optional<at::Tensor>& cu_seqlens_k) {
  const bool packed = given(cu_seqlens_q);
  const Packing pk = packing_of(query, key, cu_seqlens_q, cu_seqlens_k);
  const at::Tensor q = rows_of_16_bytes(query), k = rows_of_16_bytes(key), v = rows_of_16_bytes(value);
  at::Tensor out, lse;
  const SdpaWithLse sdpa = sdpa_with_lse(query, key, call, scale);
  if (sdpa != SdpaWithLse::None) {
    // Sinks alone need only the plain softmax's output and log-sum-exp: from the kernel LibTorch's SDPA picks
    // (cuDNN's or FlashAttention's), the faster ones on Hopper, in the SDPA layout [B, H, T, d].
    auto result = sdpa == SdpaWithLse::Cudnn
                      ? at::_scaled_dot_product_cudnn_attention(q, k, v, c10::nullopt, /*compute_log_sumexp=*/true,
                                                                0.0, call.is_causal, false, scale)
                      : at::_scaled_dot_product_flash_attention(q, k, v, 0.0, call.is_causal, false, scale);
    out = std::get<0>(result);
    lse = std::get<1>(result).reshape({query.size(0), query.size(1), query.size(2)}).to(at::kFloat);
  } else {
    auto result = at::_flash_attention_forward(
        sequence_first(q, packed), sequence_first(k, packed), sequence_first(v, packed), pk.cu_q, pk.cu_k,
        pk.max_q, pk.max_k, /*dropout_p=*/0.0, call.is_causal, /*return_debug_mask=*/false, scale,
        flash_window(call.window_left), flash_window(call.window_right));
    out = heads_first(std::get<0>(result), packed);
    lse = std::get<1>(result);
  }
  // Packed: [H, total_q] (FlashAttention 2.5 and later, which LibTorch 2.x carries).
  if (packed) {
    TORCH_CHECK(lse.dim() == 2 && lse.size(1) == query.size(2), kOp,
                ": LibTorch's FlashAttention returned a packed log-sum-exp of shape ", lse.sizes(),
                "; attn reads [H, total_q] = [", query.size(1), ", ", query.size(2), "]");
    lse = lse.unsqueeze(0);
  }
  lse = lse_from_library(lse);
  if (given(sinks)) {
    const at::Tensor sink = sinks->to(at::kFloat).view({1, -1, 1});
    const at::Tensor with_sink = at::logaddexp(lse, sink.expand_as(lse));
    // A row without keys and a sink of -inf: nothing at all, a zero row.
    const at::Tensor share = at::where(with_sink == kNegInf, at::zeros_like(lse), (lse - with_sink).exp());
    // In place, computed in float per element (no float copy of the output: GPU memory stays within the plain
    // call's), in the op's output layout, [B, Tq, H, d] in memory, whatever the kernel's.
    if (!sequence_first(out, packed).is_contiguous()) {
      at::Tensor laid_out = heads_first(at::empty_like(sequence_first(query, packed), at::MemoryFormat::Contiguous), packed);
      out = laid_out.copy_(out);
    }
    out.mul_(share.unsqueeze(-1));
    lse = with_sink;
  }
  return {out, lse.contiguous()};
}

std::tuple<at::Tensor, at::Tensor> own_forward(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                               const FlashArguments& call, double scale,
                                               const c10::optional<at::Tensor>& alibi_slopes,
                                               const c10::optional<at::Tensor>& sinks) {
  const int64_t B = query.size(0), H = query.size(1), tq = query.size(2), d = query.size(3);
  at::Tensor out = at::empty({B, tq, H, d}, query.options()).transpose(1, 2);
  at::Tensor lse = at::empty({B, H, tq}, query.options().dtype(at::kFloat));
  if (B == 0 || H == 0 || tq == 0) return {out, lse};
  const auto float_options = query.options().dtype(at::kFloat);
  const at::Tensor slopes = given(alibi_slopes) ? alibi_slopes->to(float_options).contiguous() : at::Tensor();
  const at::Tensor sink_logits = given(sinks) ? sinks->to(float_options).contiguous() : at::Tensor();
  TORCH_CHECK(B <= 65535 && H <= 65535, kOp, ": attn's CUDA kernel takes at most 65535 batch rows and heads, got ",
              query.sizes());
  const at::Tensor q = rows_of_16_bytes(query), k = rows_of_16_bytes(key), v = rows_of_16_bytes(value);

  VariantParams p{};
  p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr(), p.out = out.data_ptr(), p.lse = lse.data_ptr<float>();
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = q.stride(i), p.k_stride[i] = k.stride(i), p.v_stride[i] = v.stride(i);
    p.out_stride[i] = out.stride(i);
  }
  p.heads = static_cast<int>(H), p.kv_heads = static_cast<int>(key.size(1));
  p.tq = tq, p.tk = key.size(2);
  p.offset = call.causal_offset.expect_int();
  p.left = common::applied_window(call.window_left);
  p.right = common::band_right(call.is_causal, common::applied_window(call.window_right));
  p.scale = static_cast<float>(scale);
  p.softcap = static_cast<float>(call.softcap);
  if (slopes.defined()) {
    p.alibi = slopes.data_ptr<float>();
    p.alibi_stride = slopes.dim() == 2 && slopes.size(0) > 1 ? static_cast<int>(H) : 0;
  }
  if (sink_logits.defined()) p.sinks = sink_logits.data_ptr<float>();
  const bool half = query.scalar_type() == at::kHalf;
  if (d == 64) {
    half ? launch_variant_kernel<c10::Half, 64>(p, B) : launch_variant_kernel<c10::BFloat16, 64>(p, B);
  } else {
    half ? launch_variant_kernel<c10::Half, 128>(p, B) : launch_variant_kernel<c10::BFloat16, 128>(p, B);
  }
  return {out, lse};
}

void check_cuda_inputs(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value) {
  for (const auto& [arg, t] : {std::pair<const char*, const at::Tensor&>{"query", query},
                               std::pair<const char*, const at::Tensor&>{"key", key},
                               std::pair<const char*, const at::Tensor&>{"value", value}}) {
    TORCH_CHECK(t.defined() && t.dim() == 4, kOp, ": ", arg, " must be a 4-D [B, H, T, d] tensor, got ",
                t.defined() ? t.sizes() : at::IntArrayRef{});
  }
  common::check_same_device_dtype(kOp, "key", key, "query", query);
  common::check_same_device_dtype(kOp, "value", value, "query", query);
  TORCH_CHECK(key.size(0) == query.size(0) && value.size(0) == query.size(0) && key.size(1) == value.size(1) &&
                  key.size(1) > 0 && query.size(1) % key.size(1) == 0 && key.size(2) == value.size(2) &&
                  key.size(3) == query.size(3),
              kOp, ": expected query [B, H, Tq, d_k], key [B, H_kv, Tk, d_k] and value [B, H_kv, Tk, d_v] with H_kv "
              "dividing H, got query ", query.sizes(), ", key ", key.sizes(), " and value ", value.sizes());
}

std::tuple<at::Tensor, at::Tensor> flash_attention_cuda(const at::Tensor& query, const at::Tensor& key,
                                                        const at::Tensor& value, const FlashArguments& call) {
  check_cuda_inputs(query, key, value);
  FlashSizes sizes{query.size(0), query.size(1), query.size(2), key.size(2), query.size(3), value.size(3),
                   key.size(1)};
  check_variant_args(kOp, sizes, query, call);
  if (call.scale) TORCH_CHECK(std::isfinite(*call.scale), kOp, ": scale must be finite, got ", *call.scale);
  const double sc = resolved_scale(call.scale, query.size(3));
  const VariantSupport support = variant_support(query, key, value, call);
  TORCH_CHECK(support.forward != VariantRoute::None, kOp, ": no CUDA kernel for these inputs: ", support.reason,
              "; attn::scaled_dot_product_attention takes the general backends for them");
  const c10::cuda::CUDAGuard guard(query.device());
  if (support.forward == VariantRoute::Library) {
    return library_forward(query, key, value, call, sc, call.sinks, call.cu_seqlens_q, call.cu_seqlens_k);
  }
  return own_forward(query, key, value, call, sc, call.alibi_slopes, call.sinks);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> flash_attention_backward_cuda(
    const at::Tensor& grad_output, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& output, const at::Tensor& logsumexp, const FlashArguments& call) {
  check_cuda_inputs(query, key, value);
  const double sc = resolved_scale(call.scale, query.size(3));
  const VariantSupport support = variant_support(query, key, value, call);
  TORCH_CHECK(support.backward, kOp, ": no CUDA backward for these inputs: ", support.reason,
              "; attn::scaled_dot_product_attention takes the math backend when gradients are needed");
  TORCH_CHECK(grad_output.sizes() == output.sizes() && logsumexp.dim() == 3, "attn::flash_attention_backward: ",
              "grad_output must be shaped like output ", output.sizes(), ", got ", grad_output.sizes());
  const c10::cuda::CUDAGuard guard(query.device());
  const bool packed = call.packed();
  const Packing pk = packing_of(query, key, call.cu_seqlens_q, call.cu_seqlens_k);
  const at::Tensor grad = grad_output.to(query.scalar_type());
  // FlashAttention reads its random state only with dropout, which attn never asks of it.
  const at::Tensor rng_state = at::zeros({2}, query.options().dtype(at::kLong));
  const at::Tensor lse = lse_for_library(packed ? logsumexp[0] : logsumexp, call.has_sinks());
  const at::Tensor q = rows_of_16_bytes(query), k = rows_of_16_bytes(key), v = rows_of_16_bytes(value);
  auto grads = at::_flash_attention_backward(
      sequence_first(rows_of_16_bytes(grad), packed), sequence_first(q, packed), sequence_first(k, packed),
      sequence_first(v, packed), sequence_first(rows_of_16_bytes(output), packed), lse.contiguous(),
      pk.cu_q ? *pk.cu_q : at::Tensor(), pk.cu_k ? *pk.cu_k : at::Tensor(), pk.max_q, pk.max_k, /*dropout_p=*/0.0,
      call.is_causal, rng_state, at::empty({0}, rng_state.options()), sc, flash_window(call.window_left),
      flash_window(call.window_right));
  at::Tensor grad_sinks;
  if (call.has_sinks()) {
    const at::Tensor& sinks = *call.sinks;
    // A sink is a key with a zero value: its gradient is -Σ_rows e^(sink - lse') · rowsum(dO ∘ O).
    const at::Tensor rowdot = (grad.to(at::kFloat) * output.to(at::kFloat)).sum(-1);  // [B, H, Tq]
    const at::Tensor weight = (sinks.to(at::kFloat).view({1, -1, 1}) - logsumexp).exp();
    grad_sinks = -(weight * rowdot).sum(at::IntArrayRef{0, 2}).to(sinks.scalar_type());
  } else {
    grad_sinks = at::empty({0}, query.options());
  }
  return {heads_first(std::get<0>(grads), packed), heads_first(std::get<1>(grads), packed),
          heads_first(std::get<2>(grads), packed), grad_sinks};
}

}  // namespace

VariantSupport variant_support(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                               const FlashArguments& call) {
  VariantSupport s;
  const auto no = [&](std::string why) {
    s.reason = std::move(why);
    return s;
  };
  const at::ScalarType type = query.scalar_type();
  if (type != at::kHalf && type != at::kBFloat16) {
    return no(std::string("attn's CUDA attention computes float16 and bfloat16, not ") + common::dtype_name(type));
  }
  if (!query.is_cuda()) return no("the inputs are not on a CUDA device");
  if (at::cuda::getDeviceProperties(query.device().index())->major < 8) {
    return no("attn's CUDA attention needs compute capability 8.0 or newer");
  }
  if (call.has_masks()) return no("attn's CUDA attention takes no masks");
  const int64_t dk = query.size(3), dv = value.size(3);
  if (dk != dv || dk % 8 != 0 || dk > 256) {
    return no("attn's CUDA attention needs d_k = d_v, a multiple of 8 up to 256, got d_k = " + std::to_string(dk) +
              " and d_v = " + std::to_string(dv));
  }
  // FlashAttention aligns the diagonal bottom-right (each packed sequence its own); where the alignment matters
  // (causal, a window or ALiBi) attn's offset must say the same.
  const bool diagonal_matters = call.is_causal || call.window_left >= 0 || call.window_right >= 0 || call.has_alibi();
  const bool bottom_right =
      call.packed() || !diagonal_matters || call.causal_offset.expect_int() == key.size(2) - query.size(2);
  // FlashAttention reads a right side of at least the key count as unbounded: the same band only where every
  // row's diagonal plus it reaches the last key.
  const int64_t tq = query.size(2), tk = key.size(2);
  const bool right_ok = call.is_causal || call.window_right < tk || call.window_right >= tq - 1;
  // LibTorch builds its FlashAttention without ALiBi ("This flash attention build does not support alibi", seen
  // on torch 2.11): ALiBi goes to attn's own kernel.
  if (call.softcap == 0.0 && !call.has_alibi() && bottom_right && (right_ok || call.packed())) {
    s.forward = VariantRoute::Library;
    s.backward = true;
    return s;
  }
  if (call.packed()) return no("attn's own CUDA kernel takes no packed sequences (here with soft-capping or ALiBi)");
  if (dk != 64 && dk != 128) return no("attn's own CUDA kernel (soft-capping, ALiBi) takes d = 64 or 128");
  s.forward = VariantRoute::Own;
  s.reason = "attn's own CUDA kernel (soft-capping, ALiBi) has no backward";
  return s;
}

const char* route_name(VariantRoute route) {
  switch (route) {
    case VariantRoute::Library: return "cuda:libtorch";
    case VariantRoute::Own: return "cuda:attn";
    default: return "none";
  }
}

TORCH_LIBRARY_IMPL(attn, CUDA, m) {
  m.impl("flash_attention", TORCH_FN(ForwardKernel<flash_attention_cuda>::call));
  m.impl("flash_attention_backward", TORCH_FN(BackwardKernel<flash_attention_backward_cuda>::call));
}

}  // namespace attn::ops::cuda
