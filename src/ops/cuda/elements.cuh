#pragma once
// Element types of attn's CUDA kernels, from one traits table (as ggml's): how many elements a 16-byte chunk
// holds and how a pair of them widens to float. The kernels load and copy 16-byte chunks and compute in float.

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace attn::ops::cuda {

template <typename T>
struct Elements;

template <>
struct Elements<float> {
  static constexpr int kPerChunk = 4;  // per 16 bytes
  __device__ static float2 pair(const float* p) { return *reinterpret_cast<const float2*>(p); }
  /// The 16 bytes at p (16-byte aligned), widened.
  __device__ static void chunk(const float* p, float (&f)[kPerChunk]) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
  }
};

template <>
struct Elements<c10::BFloat16> {
  static constexpr int kPerChunk = 8;
  // A bfloat16 is the upper half of a float's bits.
  __device__ static float2 pair(const c10::BFloat16* p) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  }
  __device__ static void chunk(const c10::BFloat16* p, float (&f)[kPerChunk]) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) f[2 * i] = __uint_as_float(w[i] << 16), f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
};

template <>
struct Elements<c10::Half> {
  static constexpr int kPerChunk = 8;
  __device__ static float2 pair(const c10::Half* p) { return __half22float2(*reinterpret_cast<const __half2*>(p)); }
  __device__ static void chunk(const c10::Half* p, float (&f)[kPerChunk]) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      f[2 * i] = x.x, f[2 * i + 1] = x.y;
    }
  }
};

/// Asynchronous 16-byte copy from global to shared memory (sm_80's cp.async), and the waits on it.
__device__ inline void copy_chunk_async(void* shared, const void* global) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
}
__device__ inline void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ inline void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

/// Row stride, in elements, of a shared tile whose rows hold `width` elements and are read 16 bytes at a time
/// by `parts` threads per row at once: padded so that those reads fall in different banks.
template <typename T>
constexpr int padded_stride(int width, int parts) {
  const int words = width * static_cast<int>(sizeof(T)) / 4;
  const int want = (4 * parts) % 32;
  const int pad_words = ((want - words % 32) % 32 + 32) % 32;
  return (words + pad_words) * 4 / static_cast<int>(sizeof(T));
}

}  // namespace attn::ops::cuda
