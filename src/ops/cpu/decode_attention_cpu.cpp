// The CPU implementation of the attn::decode_attention op: checks the arguments, reads the caches in place
// and calls the decode kernel of this CPU's instruction set.

#include "common/checks.h"
#include "ops/cpu/flash_attention_kernel.h"
#include "ops/cpu/kernel_layout.h"
#include "ops/flash_attention_contract.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <type_traits>
#include <vector>

namespace attn::ops::cpu {
namespace {

constexpr const char* kOp = "attn::decode_attention";

/// [B] int64 CPU positions, copied out (the kernel reads them while the caller may not hold them).
std::vector<int64_t> positions(const char* arg, const at::Tensor& t, int64_t batch) {
  TORCH_CHECK(t.defined() && t.dim() == 1 && t.size(0) == batch, kOp, ": ", arg, " must be [B] = [", batch,
              "], got ", t.defined() ? t.sizes() : at::IntArrayRef{});
  TORCH_CHECK(t.scalar_type() == at::kLong && t.device().is_cpu(), kOp, ": ", arg,
              " must be an int64 tensor on the CPU, got ", common::dtype_name(t), " on ", t.device());
  const at::Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + batch);
}

template <typename T>
View4<T> view(const at::Tensor& t) {
  return {t.data_ptr<std::remove_const_t<T>>(), t.stride(0), t.stride(1), t.stride(2), 1};
}

at::Tensor decode_attention_cpu(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                                const at::Tensor& query_starts, const at::Tensor& key_lengths, bool is_causal,
                                c10::optional<double> scale, int64_t window_left, int64_t window_right,
                                double softcap, const c10::optional<at::Tensor>& alibi_slopes,
                                const c10::optional<at::Tensor>& sinks) {
  check_input(kOp, "query", query, "[B, H, Tq, d_k]");
  check_input(kOp, "key_cache", key_cache, "[B, H_kv, capacity, d_k]");
  check_input(kOp, "value_cache", value_cache, "[B, H_kv, capacity, d_v]");
  common::check_same_device_dtype(kOp, "key_cache", key_cache, "query", query);
  common::check_same_device_dtype(kOp, "value_cache", value_cache, "query", query);
  const int64_t B = query.size(0), H = query.size(1), tq = query.size(2), dk = query.size(3);
  const int64_t H_kv = key_cache.size(1), capacity = key_cache.size(2), dv = value_cache.size(3);
  TORCH_CHECK(key_cache.size(0) == B && H_kv > 0 && H % H_kv == 0 && key_cache.size(3) == dk, kOp,
              ": key_cache must be [B, H_kv, capacity, d_k] = [", B, ", H_kv, capacity, ", dk,
              "] with H_kv dividing the query's ", H, " heads, got key_cache ", key_cache.sizes(), " for query ",
              query.sizes());
  TORCH_CHECK(value_cache.size(0) == B && value_cache.size(1) == H_kv && value_cache.size(2) == capacity, kOp,
              ": value_cache must be [B, H_kv, capacity, d_v] = [", B, ", ", H_kv, ", ", capacity,
              ", d_v] to match key_cache, got value_cache ", value_cache.sizes());
  TORCH_CHECK(dk > 0 && dv > 0, kOp, ": d_k and d_v must be positive, got query ", query.sizes(), " and value_cache ",
              value_cache.sizes());
  if (scale) TORCH_CHECK(std::isfinite(*scale), kOp, ": scale must be finite, got ", *scale);
  check_variant_args(kOp, FlashSizes{B, H, tq, capacity, dk, dv, H_kv}, query, /*has_masks=*/false, 0, window_left,
                     window_right, softcap, alibi_slopes, sinks, c10::nullopt, c10::nullopt);
  const std::vector<int64_t> starts = positions("query_starts", query_starts, B);
  const std::vector<int64_t> lengths = positions("key_lengths", key_lengths, B);
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(lengths[b] >= 0 && lengths[b] <= capacity, kOp, ": key_lengths[", b, "] = ", lengths[b],
                " must be in [0, capacity = ", capacity, "]");
    TORCH_CHECK(starts[b] >= 0, kOp, ": query_starts[", b, "] = ", starts[b], " must be >= 0");
  }

  const bool bf16 = query.scalar_type() == at::kBFloat16;
  const at::ScalarType compute = bf16 ? at::kFloat : query.scalar_type();
  // The query is small and converted; the caches are read in place, in their own dtype.
  const at::Tensor q = row_major_layout(query.to(compute));
  const at::Tensor k = row_major_layout(key_cache), v = row_major_layout(value_cache);
  // [B, Tq, H, d_v] memory, as flash_attention's output: merging the heads back is a free view.
  at::Tensor out = at::empty({B, tq, H, dv}, q.options()).transpose(1, 2);
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(dk));
  // The per-head terms in the compute type, contiguous.
  const at::Tensor slopes = alibi_slopes && alibi_slopes->defined() ? alibi_slopes->to(compute).contiguous() : at::Tensor();
  const at::Tensor sink_logits = sinks && sinks->defined() ? sinks->to(compute).contiguous() : at::Tensor();

  const auto fill = [&](auto& args) {
    args.batch = B, args.heads = H, args.kv_heads = H_kv, args.tq = tq, args.dk = dk, args.dv = dv;
    args.query_starts = starts.data();
    args.key_lengths = lengths.data();
    args.causal = is_causal;
    args.window_left = window_left, args.window_right = window_right;
    using T = std::remove_pointer_t<decltype(args.sinks)>;
    args.softcap = static_cast<std::remove_const_t<T>>(softcap);
    if (slopes.defined()) {
      args.alibi = slopes.data_ptr<std::remove_const_t<T>>();
      args.alibi_stride = slopes.dim() == 2 && slopes.size(0) > 1 ? H : 0;
    }
    if (sink_logits.defined()) args.sinks = sink_logits.data_ptr<std::remove_const_t<T>>();
  };
  if (bf16) {
    DecodeArgs<float, c10::BFloat16> args;
    fill(args);
    args.q = view<const float>(q), args.k = view<const c10::BFloat16>(k), args.v = view<const c10::BFloat16>(v);
    args.scale = static_cast<float>(sc);
    args.out = view<float>(out);
    decode_forward(args);
    return out.to(at::kBFloat16);
  }
  AT_DISPATCH_FLOATING_TYPES(compute, kOp, [&] {
    DecodeArgs<scalar_t, scalar_t> args;
    fill(args);
    args.q = view<const scalar_t>(q), args.k = view<const scalar_t>(k), args.v = view<const scalar_t>(v);
    args.scale = static_cast<scalar_t>(sc);
    args.out = view<scalar_t>(out);
    decode_forward(args);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, CPU, m) { m.impl("decode_attention", TORCH_FN(decode_attention_cpu)); }

}  // namespace attn::ops::cpu
