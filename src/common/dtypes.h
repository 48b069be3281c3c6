#pragma once
// The one allow-list of the dtypes attn computes in. Every check and every backend choice asks these.

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

namespace attn::common {

/// The dtypes attention accepts: float32, float64, bfloat16 and float16. An allow-list rather than
/// isFloatingType(), which on LibTorch >= 2.1 also admits float8 types that the matrix products reject with a
/// less helpful message.
inline bool is_attention_dtype(c10::ScalarType s) {
  return s == c10::kFloat || s == c10::kDouble || s == c10::kBFloat16 || s == c10::kHalf;
}

/// The dtypes the fused CPU kernels (attn::flash_attention) run: all of them. bfloat16 and float16 are
/// computed in float32 (ops/attention_contract.h's compute_type), float16 always widened.
inline bool is_fused_kernel_dtype(c10::ScalarType s) { return is_attention_dtype(s); }

/// The subset the CPU decode kernel reads and writes (attn::decode_attention, and so a PagedKVCache's float
/// blocks): all but float16. A float16 KVCache is attended by the fused kernels instead.
inline bool is_decode_kernel_dtype(c10::ScalarType s) { return is_attention_dtype(s) && s != c10::kHalf; }

inline const char* dtype_name(c10::ScalarType s) { return c10::toString(s); }

}  // namespace attn::common
