// The CPU implementation of the attn::decode_attention op: checks the arguments (ops/attention_contract.h),
// reads the caches and their positions in place and calls the decode kernel of this CPU's instruction set.

#include "common/band.h"
#include "common/checks.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/math/kernel_layout.h"
#include "ops/cpu/products/int8_dot.h"
#include "ops/cpu/products/route.h"
#include "ops/attention_contract.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>
#include <vector>

namespace attn::ops::cpu {
namespace {

constexpr const char* kOp = "attn::decode_attention";
/// Queries per kernel call: splits × K/V heads × (group × chunk) × d_v floats of partial outputs at most.
constexpr int64_t kDecodeQueryChunk = 64;

/// Rows [t0, ..) of a [B, H, Tq, d] tensor with unit stride along d, in its own element type.
template <typename Data>
ElementRows<Data> element_rows(const at::Tensor& t, int64_t t0) {
  using Byte = std::conditional_t<std::is_const_v<Data>, const char, char>;
  Byte* first = static_cast<Byte*>(t.data_ptr()) + t0 * t.stride(2) * static_cast<int64_t>(t.element_size());
  return {first, t.stride(0), t.stride(1), t.stride(2), t.scalar_type()};
}

/// A cache as the kernel reads it, in its own element type, with its row scales where it is int8 and its block
/// table where it is paged.
CacheView cache_view(const at::Tensor& t, const at::Tensor& scales, const at::Tensor& blocks) {
  CacheView view{t.data_ptr(), t.stride(0), t.stride(1), t.stride(2), t.scalar_type()};
  if (scales.defined()) view.scales = scales.data_ptr<float>(), view.ssb = scales.stride(0), view.ssh = scales.stride(1);
  if (blocks.defined()) {
    view.blocks = blocks.data_ptr<int64_t>(), view.blocks_stride = blocks.size(1), view.block_size = t.size(2);
  }
  return view;
}

/// Scales laid out as the kernel reads them: positions of a row adjacent.
at::Tensor row_scales_layout(const at::Tensor& scales) {
  return !scales.defined() || scales.stride(2) == 1 ? scales : scales.contiguous();
}

at::Tensor decode_attention_cpu(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                                const at::Tensor& query_starts, const at::Tensor& key_lengths, bool is_causal,
                                c10::optional<double> scale, int64_t window_left, int64_t window_right,
                                double softcap, const c10::optional<at::Tensor>& alibi_slopes,
                                const c10::optional<at::Tensor>& sinks, const c10::optional<at::Tensor>& key_scales,
                                const c10::optional<at::Tensor>& value_scales,
                                const c10::optional<at::Tensor>& block_table,
                                const c10::optional<at::Tensor>& tree_mask) {
  DecodeOnlyInputs decode_only = DecodeOnlyInputs::of(key_scales, value_scales, block_table, tree_mask);
  const CacheSizes c = concrete(check_decode_op_args_symbolic(kOp, query, key_cache, value_cache, query_starts,
                                                              key_lengths, decode_only, is_causal, scale, window_left,
                                                              window_right, softcap, alibi_slopes, sinks));
  check_cache_positions(kOp, c, key_cache, query_starts, key_lengths, decode_only.block_table);
  decode_only.key_scales = row_scales_layout(decode_only.key_scales);
  decode_only.value_scales = row_scales_layout(decode_only.value_scales);
  const int64_t B = c.batch, H = c.heads, tq = c.tq, dk = c.dk, H_kv = c.kv_heads, dv = c.dv;
  // A paged cache's block table as the kernel reads it, and a token tree's mask, contiguous.
  const at::Tensor blocks = decode_only.block_table.defined()
                                ? host_positions(decode_only.block_table.flatten()).view(decode_only.block_table.sizes())
                                : at::Tensor();
  const at::Tensor tree = decode_only.tree_mask.defined() ? decode_only.tree_mask.contiguous() : at::Tensor();
  // Read in place: a KVCache's lengths are int64 on the CPU already.
  const at::Tensor starts = host_positions(query_starts), lengths = host_positions(key_lengths);

  const bool bf16 = query.scalar_type() == at::kBFloat16;
  const at::ScalarType compute = bf16 ? at::kFloat : query.scalar_type();
  // Everything is read in place in its own dtype: the kernel widens the query's rows as it packs them, and writes
  // the output in the query's dtype.
  const at::Tensor q = row_major_layout(query);
  const at::Tensor k = row_major_layout(key_cache), v = row_major_layout(value_cache);
  at::Tensor out = empty_decode_output(c, q.options());
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(dk));
  // The per-head terms in the compute type, contiguous.
  const at::Tensor slopes = alibi_slopes && alibi_slopes->defined() ? alibi_slopes->to(compute).contiguous() : at::Tensor();
  const at::Tensor sink_logits = sinks && sinks->defined() ? sinks->to(compute).contiguous() : at::Tensor();

  const auto fill = [&](auto& args) {
    args.batch = B, args.heads = H, args.kv_heads = H_kv, args.tq = tq, args.dk = dk, args.dv = dv;
    args.query_starts = starts.data_ptr<int64_t>();
    args.key_lengths = lengths.data_ptr<int64_t>();
    args.causal = is_causal;
    args.window_left = common::applied_window(window_left), args.window_right = common::applied_window(window_right);
    using T = std::remove_pointer_t<decltype(args.sinks)>;
    args.softcap = static_cast<std::remove_const_t<T>>(softcap);
    if (slopes.defined()) {
      args.alibi = slopes.data_ptr<std::remove_const_t<T>>();
      args.alibi_stride = slopes.dim() == 2 && slopes.size(0) > 1 ? H : 0;
    }
    if (sink_logits.defined()) args.sinks = sink_logits.data_ptr<std::remove_const_t<T>>();
  };
  // The kernel keeps every split's partial output for every query row: a long prompt (a prefill over an int8 or
  // paged cache) goes through in chunks of queries, so that memory stays bounded by the chunk. A token tree's
  // candidates see each other, so they go together.
  const bool int8_dot = k.scalar_type() == at::kChar && compute == at::kFloat && int8_dot_fits(dk, dv) &&
                        int8_dot_route_chosen();
  const int64_t chunk = tree.defined() ? std::max<int64_t>(tq, 1) : kDecodeQueryChunk;
  std::vector<int64_t> chunk_starts(B);
  AT_DISPATCH_FLOATING_TYPES(compute, kOp, [&] {
    for (int64_t t0 = 0; t0 < tq; t0 += chunk) {
      const int64_t n = std::min(chunk, tq - t0);
      DecodeArgs<scalar_t> args;
      fill(args);
      args.tq = n;
      for (int64_t b = 0; b < B; ++b) chunk_starts[b] = starts.data_ptr<int64_t>()[b] + t0;
      args.query_starts = chunk_starts.data();
      args.q = element_rows<const void>(q, t0);
      args.k = cache_view(k, decode_only.key_scales, blocks);
      args.v = cache_view(v, decode_only.value_scales, blocks);
      if (tree.defined()) args.tree = tree.data_ptr<bool>(), args.tree_stride = tree.dim() == 3 ? tq * tq : 0;
      args.scale = static_cast<scalar_t>(sc);
      args.int8_dot = int8_dot;
      args.amx = decode_takes_amx(q.scalar_type(), k.scalar_type(), H / H_kv * n);
      args.out = element_rows<void>(out, t0);
      decode_forward(args);
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, CPU, m) { m.impl("decode_attention", TORCH_FN(decode_attention_cpu)); }

}  // namespace attn::ops::cpu
