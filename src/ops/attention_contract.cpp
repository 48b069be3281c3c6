#include "ops/attention_contract.h"

#include "common/band.h"
#include "common/checks.h"
#include "common/dtypes.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace attn::ops {
void check_input(const char* fn, const char* arg, const at::Tensor& t, const char* layout, InputKernel kernel) {
  TORCH_CHECK(t.defined(), fn, ": ", arg, " is undefined");
  TORCH_CHECK(t.dim() == 4, fn, ": ", arg, " must be 4-D ", layout, ", got shape ", t.sizes());
  TORCH_CHECK(t.device().is_cpu() || t.device().is_meta(), fn, ": ", arg, " is on ", t.device(),
              "; this op runs on the CPU (attn::scaled_dot_product_attention picks a CUDA backend itself)");
  if (kernel == InputKernel::Fused) {
    TORCH_CHECK(common::is_fused_kernel_dtype(t.scalar_type()), fn, ": ", arg,
                " must be float32, float64, bfloat16 or float16, got ", common::dtype_name(t));
  } else {
    TORCH_CHECK(common::is_decode_kernel_dtype(t.scalar_type()), fn, ": ", arg,
                " must be float32, float64 or bfloat16 (the decode kernel's dtypes), got ", common::dtype_name(t));
  }
}

namespace {

SymFlashSizes check_qkv(const char* fn, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  check_input(fn, "query", q, "[B, H, Tq, d_k]", InputKernel::Fused);
  check_input(fn, "key", k, "[B, H_kv, Tk, d_k]", InputKernel::Fused);
  check_input(fn, "value", v, "[B, H_kv, Tk, d_v]", InputKernel::Fused);
  common::check_same_device_dtype(fn, "key", k, "query", q);
  common::check_same_device_dtype(fn, "value", v, "query", q);
  const c10::SymIntArrayRef qs = q.sym_sizes(), ks = k.sym_sizes(), vs = v.sym_sizes();
  const SymFlashSizes s{qs[0], qs[1], qs[2], ks[2], qs[3], vs[3], ks[1]};
  TORCH_CHECK(s.dk > 0, fn, ": d_k (query's last dimension) must be positive, got query ", qs);
  constexpr int64_t kMaxWidth = std::numeric_limits<int32_t>::max();  // BLAS's 32-bit sizes
  TORCH_CHECK(s.dk <= kMaxWidth && vs[3] <= kMaxWidth, fn, ": d_k and d_v must be at most ", kMaxWidth,
              " for the fused kernel's BLAS tiles, got query ", qs, " and value ", vs, "; use attn::Backend::Math");
  // No heads at all (an empty [0, T, d] input folds to [1, 0, T, d]) is an empty call, not a mismatch.
  const bool heads_divide = (s.kv_heads > 0 && s.heads % s.kv_heads == 0) || (s.heads == 0 && s.kv_heads == 0);
  TORCH_CHECK(ks[0] == s.batch && heads_divide && ks[3] == s.dk, fn, ": key must be [B, H_kv, Tk, d_k] = [", s.batch,
              ", H_kv, Tk, ", s.dk, "] with H_kv dividing the query's ", s.heads, " heads, to match query ", qs,
              ", got key ", ks);
  TORCH_CHECK(vs[0] == s.batch && vs[1] == s.kv_heads && vs[2] == s.tk, fn, ": value must be [B, H_kv, Tk, d_v] = [",
              s.batch, ", ", s.kv_heads, ", ", s.tk, ", d_v] to match key ", ks, ", got value ", vs);
  return s;
}

void check_masks(const char* fn, const SymFlashSizes& s, const at::Tensor& q,
                 const c10::optional<at::Tensor>& padding, const c10::optional<at::Tensor>& attend,
                 const c10::optional<at::Tensor>& additive) {
  using common::MaskKind;
  const auto check = [&](const char* arg, const at::Tensor& mask, MaskKind kind, c10::SymIntArrayRef target,
                         const char* layout) { common::check_mask_symbolic(fn, arg, mask, kind, q, target, layout); };
  if (padding && padding->defined()) check("key_padding_mask", *padding, MaskKind::Bool, {s.batch, s.heads, s.tk}, "[B, H, Tk]");
  if (attend && attend->defined()) {
    check("attend_mask", *attend, MaskKind::Bool, {s.batch, s.heads, s.tq, s.tk}, "[B, H, Tq, Tk]");
  }
  if (additive && additive->defined()) {
    check("additive_mask", *additive, MaskKind::AdditiveAnyFloat, {s.batch, s.heads, s.tq, s.tk}, "[B, H, Tq, Tk]");
  }
}

/// The symbolic sizes of concrete ones.
SymFlashSizes symbolic(const FlashSizes& s) {
  return {s.batch, s.heads, s.tq, s.tk, s.dk, s.dv, s.kv_heads, s.sequences};
}

/// A tensor's shape as the messages print it, or [] for an undefined one.
c10::SymIntArrayRef shape_of(const at::Tensor& t) { return t.defined() ? t.sym_sizes() : c10::SymIntArrayRef{}; }

}  // namespace

FlashSizes concrete(const SymFlashSizes& s) {
  const auto get = [](const c10::SymInt& i) { return i.guard_int(__FILE__, __LINE__); };
  return {get(s.batch), get(s.heads), get(s.tq), get(s.tk), get(s.dk), get(s.dv), get(s.kv_heads), get(s.sequences)};
}

SymFlashSizes check_forward_args_symbolic(const char* fn, const at::Tensor& query, const at::Tensor& key,
                                          const at::Tensor& value, const FlashArguments& a) {
  SymFlashSizes s = check_qkv(fn, query, key, value);
  check_masks(fn, s, query, a.key_padding_mask, a.attend_mask, a.additive_mask);
  if (a.scale) TORCH_CHECK(std::isfinite(*a.scale), fn, ": scale must be finite, got ", *a.scale);
  check_variant_args(fn, s, query, a);
  return s;
}

FlashSizes check_forward_args(const char* fn, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                              const FlashArguments& arguments) {
  return concrete(check_forward_args_symbolic(fn, query, key, value, arguments));
}

SymFlashSizes check_backward_args_symbolic(const at::Tensor& grad_output, const at::Tensor& query,
                                           const at::Tensor& key, const at::Tensor& value, const at::Tensor& output,
                                           const at::Tensor& logsumexp, const FlashArguments& arguments) {
  const SymFlashSizes s = check_forward_args_symbolic(kBackwardOp, query, key, value, arguments);
  const std::vector<c10::SymInt> out_shape{s.batch, s.heads, s.tq, s.dv};
  const c10::SymIntArrayRef out(out_shape);
  TORCH_CHECK(grad_output.defined() && grad_output.sym_sizes() == out, kBackwardOp,
              ": grad_output must be [B, H, Tq, d_v] = ", out, ", got ", shape_of(grad_output));
  TORCH_CHECK(output.defined() && output.sym_sizes() == out, kBackwardOp, ": output must be [B, H, Tq, d_v] = ", out,
              ", got ", shape_of(output));
  // Floating, on the query's device; their dtype may differ from the query's (a float32 output is widened).
  for (const auto& [arg, t] : {std::pair{"grad_output", &grad_output}, {"output", &output}}) {
    TORCH_CHECK(common::is_attention_dtype(t->scalar_type()), kBackwardOp, ": ", arg,
                " must be a floating-point tensor (float32, float64, bfloat16 or float16), got ",
                common::dtype_name(*t));
    common::check_same_device(kBackwardOp, arg, *t, "query", query);
  }
  const at::ScalarType compute = compute_type(query);
  const std::vector<c10::SymInt> lse_shape{s.batch, s.heads, s.tq};
  TORCH_CHECK(logsumexp.defined() && logsumexp.sym_sizes() == c10::SymIntArrayRef(lse_shape) &&
                  logsumexp.scalar_type() == compute,
              kBackwardOp, ": logsumexp must be the forward pass's [B, H, Tq] = [", s.batch, ", ", s.heads, ", ", s.tq,
              "] ", c10::toString(compute), " tensor, got ", shape_of(logsumexp));
  common::check_same_device(kBackwardOp, "logsumexp", logsumexp, "query", query);
  return s;
}

FlashSizes check_backward_args(const at::Tensor& grad_output, const at::Tensor& query, const at::Tensor& key,
                               const at::Tensor& value, const at::Tensor& output, const at::Tensor& logsumexp,
                               const FlashArguments& arguments) {
  return concrete(check_backward_args_symbolic(grad_output, query, key, value, output, logsumexp, arguments));
}

namespace {

bool given(const c10::optional<at::Tensor>& t) { return t && t->defined(); }

/// A cu_seqlens argument: [N + 1] int64 on the CPU (or meta, where its values are not read), 0 first,
/// non-decreasing, `total` last.
void check_cu_seqlens(const char* fn, const char* arg, const at::Tensor& cu, const c10::SymInt& total,
                      const at::Tensor& query) {
  TORCH_CHECK(cu.dim() == 1 && cu.sym_size(0) >= 1, fn, ": ", arg,
              " must be [N + 1] (N packed sequences), got shape ", cu.sym_sizes());
  TORCH_CHECK(cu.scalar_type() == at::kLong, fn, ": ", arg, " must be int64, got ", common::dtype_name(cu));
  common::check_host_index_device(fn, arg, cu, "query", query);
  if (cu.device().is_meta()) return;
  const at::Tensor c = cu.contiguous();
  const int64_t* v = c.data_ptr<int64_t>();
  TORCH_CHECK(v[0] == 0, fn, ": ", arg, "[0] must be 0, got ", v[0]);
  for (int64_t i = 1; i < c.size(0); ++i) {
    TORCH_CHECK(v[i] >= v[i - 1], fn, ": ", arg, " must be non-decreasing, got ", arg, "[", i, "] = ", v[i], " < ",
                arg, "[", i - 1, "] = ", v[i - 1]);
  }
  TORCH_CHECK(total == v[c.size(0) - 1], fn, ": ", arg, " must end at the packed length ", total, ", got ",
              v[c.size(0) - 1]);
}

}  // namespace

void check_variant_args(const char* fn, FlashSizes& s, const at::Tensor& query, const FlashArguments& arguments) {
  SymFlashSizes sizes = symbolic(s);
  check_variant_args(fn, sizes, query, arguments);
  s.sequences = sizes.sequences.guard_int(__FILE__, __LINE__);
}

void check_variant_args(const char* fn, SymFlashSizes& s, const at::Tensor& query, const FlashArguments& a) {
  const int64_t window_left = a.window_left, window_right = a.window_right;
  const c10::SymInt& causal_offset = a.causal_offset;
  const double softcap = a.softcap;
  const c10::optional<at::Tensor>&alibi_slopes = a.alibi_slopes, &sinks = a.sinks;
  const c10::optional<at::Tensor>&cu_seqlens_q = a.cu_seqlens_q, &cu_seqlens_k = a.cu_seqlens_k;
  TORCH_CHECK(window_left >= -1 && window_right >= -1, fn,
              ": window_left and window_right must be >= 0, or -1 for an unbounded side, got ", window_left, " and ",
              window_right);
  TORCH_CHECK(causal_offset >= -common::kMaxPosition && causal_offset <= common::kMaxPosition, fn,
              ": causal_offset must lie within -2^60 .. 2^60 (a difference of positions), got ", causal_offset);
  TORCH_CHECK(std::isfinite(softcap) && softcap >= 0.0, fn, ": softcap must be finite and >= 0, got ", softcap);
  c10::SymInt sequences = 0;
  TORCH_CHECK(given(cu_seqlens_q) == given(cu_seqlens_k), fn,
              ": cu_seqlens_q and cu_seqlens_k must be given together");
  const bool packed = given(cu_seqlens_q);
  if (packed) {
    TORCH_CHECK(s.batch == 1, fn, ": packed sequences (cu_seqlens) need batch 1, [1, H, total, d], got query ",
                query.sym_sizes());
    TORCH_CHECK(!a.has_masks(), fn, ": packed sequences (cu_seqlens) take no masks");
    TORCH_CHECK(causal_offset == 0, fn, ": packed sequences align each sequence's diagonal bottom-right; "
                "causal_offset must be 0, got ", causal_offset);
    check_cu_seqlens(fn, "cu_seqlens_q", *cu_seqlens_q, s.tq, query);
    check_cu_seqlens(fn, "cu_seqlens_k", *cu_seqlens_k, s.tk, query);
    TORCH_CHECK(cu_seqlens_q->sym_size(0) == cu_seqlens_k->sym_size(0), fn,
                ": cu_seqlens_q and cu_seqlens_k must have the same length, got ", cu_seqlens_q->sym_sizes(), " and ",
                cu_seqlens_k->sym_sizes());
    sequences = cu_seqlens_q->sym_size(0) - 1;
  }
  const c10::SymInt rows = packed ? sequences : s.batch;
  const auto check_per_head = [&](const char* arg, const at::Tensor& t, bool per_row_ok) {
    TORCH_CHECK(at::isFloatingType(t.scalar_type()), fn, ": ", arg, " must be floating, got ", common::dtype_name(t));
    TORCH_CHECK(t.device() == query.device(), fn, ": ", arg, " must be on the query's device ", query.device(),
                ", got ", t.device());
    const bool per_head = t.dim() == 1 && t.sym_size(0) == s.heads;
    const bool per_row = per_row_ok && t.dim() == 2 && (t.sym_size(0) == rows || t.sym_size(0) == 1) &&
                         t.sym_size(1) == s.heads;
    TORCH_CHECK(per_head || per_row, fn, ": ", arg, " must be [H] = [", s.heads, "]",
                per_row_ok ? " or [B, H] (packed: [N, H])" : "", ", got shape ", t.sym_sizes());
  };
  if (given(alibi_slopes)) check_per_head("alibi_slopes", *alibi_slopes, true);
  if (given(sinks)) check_per_head("sinks", *sinks, false);
  s.sequences = sequences;
}

at::ScalarType compute_type(const at::Tensor& query) {
  const at::ScalarType s = query.scalar_type();
  return s == at::kBFloat16 || s == at::kHalf ? at::kFloat : s;
}

double resolved_scale(c10::optional<double> scale, int64_t dk) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(dk));
}

std::tuple<at::Tensor, at::Tensor> empty_forward_results(const SymFlashSizes& s, const at::TensorOptions& options,
                                                         at::ScalarType lse_type) {
  return {at::empty_symint({s.batch, s.tq, s.heads, s.dv}, options).transpose(1, 2),
          at::empty_symint({s.batch, s.heads, s.tq}, options.dtype(lse_type))};
}

std::tuple<at::Tensor, at::Tensor> empty_forward_results(const FlashSizes& s, const at::TensorOptions& options,
                                                         at::ScalarType lse_type) {
  return empty_forward_results(symbolic(s), options, lse_type);
}

// ---- attn::decode_attention ----
at::Tensor host_positions(const at::Tensor& t) { return t.to(at::kCPU, at::kLong).contiguous(); }

CacheSizes concrete(const SymCacheSizes& s) {
  const auto get = [](const c10::SymInt& i) { return i.guard_int(__FILE__, __LINE__); };
  return {get(s.batch), get(s.heads),    get(s.tq), get(s.dk), get(s.kv_heads), get(s.capacity),
          get(s.dv),    get(s.block_size)};
}

namespace {

SymCacheSizes symbolic(const CacheSizes& s) {
  return {s.batch, s.heads, s.tq, s.dk, s.kv_heads, s.capacity, s.dv, s.block_size};
}

}  // namespace

SymCacheSizes check_cache_call_symbolic(const char* fn, const at::Tensor& query, const at::Tensor& key_cache,
                                        const at::Tensor& value_cache, const at::Tensor& query_starts,
                                        const at::Tensor& key_lengths, const DecodeOnlyInputs& decode_only) {
  const at::Tensor& table = decode_only.block_table;
  const bool paged = table.defined();
  // How the caches' dimensions are named in messages: per batch row, or per block of a paged cache.
  const char* k_layout = paged ? "[num_blocks, H_kv, block_size, d_k]" : "[B, H_kv, capacity, d_k]";
  const char* v_layout = paged ? "[num_blocks, H_kv, block_size, d_v]" : "[B, H_kv, capacity, d_v]";
  TORCH_CHECK(query.defined() && key_cache.defined() && value_cache.defined(), fn,
              ": query, key_cache and value_cache must be defined");
  TORCH_CHECK(query.dim() == 4, fn, ": query must be [B, H, Tq, d_k], got shape ", query.sym_sizes());
  TORCH_CHECK(key_cache.dim() == 4, fn, ": key_cache must be ", k_layout, ", got shape ", key_cache.sym_sizes());
  TORCH_CHECK(value_cache.dim() == 4, fn, ": value_cache must be ", v_layout, ", got shape ",
              value_cache.sym_sizes());
  common::check_floating(fn, "query", query);
  const bool int8 = is_int8_cache(key_cache) || is_int8_cache(value_cache);
  if (int8) {
    TORCH_CHECK(is_int8_cache(key_cache) && is_int8_cache(value_cache), fn,
                ": key_cache and value_cache must both be int8 or neither, got ", common::dtype_name(key_cache),
                " and ", common::dtype_name(value_cache));
    TORCH_CHECK(query.scalar_type() == at::kFloat || query.scalar_type() == at::kBFloat16, fn,
                ": an int8 cache is read by a float32 or bfloat16 query, got ", common::dtype_name(query));
    for (const auto& [arg, t] : {std::pair<const char*, const at::Tensor&>{"key_cache", key_cache},
                                 std::pair<const char*, const at::Tensor&>{"value_cache", value_cache}}) {
      TORCH_CHECK(t.device() == query.device(), fn, ": ", arg, " is on ", t.device(), " but query is on ",
                  query.device());
    }
  } else {
    common::check_same_device_dtype(fn, "key_cache", key_cache, "query", query);
    common::check_same_device_dtype(fn, "value_cache", value_cache, "query", query);
  }
  const c10::SymIntArrayRef qs = query.sym_sizes(), ks = key_cache.sym_sizes(), vs = value_cache.sym_sizes();
  SymCacheSizes s{qs[0], qs[1], qs[2], qs[3], ks[1], ks[2], vs[3]};
  // The first dimension of the caches and scales: B, or the blocks of a paged cache.
  const c10::SymInt rows = paged ? ks[0] : s.batch;
  const c10::SymInt positions = ks[2];  // per row, or per block
  if (paged) {
    TORCH_CHECK(table.dim() == 2 && table.sym_size(0) == s.batch, fn, ": block_table must be [B, max_blocks] = [",
                s.batch, ", max_blocks], got ", table.sym_sizes());
    TORCH_CHECK(at::isIntegralType(table.scalar_type(), /*includeBool=*/false), fn,
                ": block_table must hold integers, got ", common::dtype_name(table));
    common::check_host_index_device(fn, "block_table", table, "query", query);
    TORCH_CHECK(positions > 0, fn, ": a paged cache's blocks must hold at least one position, got key_cache ", ks);
    s.block_size = positions;
    s.capacity = table.sym_size(1) * positions;
  }
  for (const auto& [arg, t] : {std::pair<const char*, const at::Tensor&>{"key_scales", decode_only.key_scales},
                               std::pair<const char*, const at::Tensor&>{"value_scales", decode_only.value_scales}}) {
    const char* layout = paged ? "[num_blocks, H_kv, block_size]" : "[B, H_kv, capacity]";
    if (!int8) {
      TORCH_CHECK(!t.defined(), fn, ": ", arg, " is given only with an int8 cache, but the caches are ",
                  common::dtype_name(key_cache));
      continue;
    }
    TORCH_CHECK(t.defined(), fn, ": an int8 cache needs ", arg, " ", layout, " = [", rows, ", ", s.kv_heads, ", ",
                positions, "] (float32), got none");
    TORCH_CHECK(t.dim() == 3 && t.sym_size(0) == rows && t.sym_size(1) == s.kv_heads && t.sym_size(2) == positions,
                fn, ": ", arg, " must be ", layout, " = [", rows, ", ", s.kv_heads, ", ", positions, "], got ",
                t.sym_sizes());
    TORCH_CHECK(t.scalar_type() == at::kFloat && t.device() == query.device(), fn, ": ", arg,
                " must be float32 on ", query.device(), ", got ", common::dtype_name(t), " on ", t.device());
  }
  TORCH_CHECK(ks[0] == rows && s.kv_heads > 0 && s.heads % s.kv_heads == 0 && ks[3] == s.dk, fn,
              ": key_cache must be ", k_layout, " = [", paged ? std::string("num_blocks") : c10::str(s.batch),
              ", H_kv, ", paged ? "block_size" : "capacity", ", ", s.dk, "] with H_kv dividing the query's ", s.heads,
              " heads, got key_cache ", ks, " for query ", qs);
  TORCH_CHECK(vs[0] == rows && vs[1] == s.kv_heads && vs[2] == positions, fn, ": value_cache must be ", v_layout,
              " = [", rows, ", ", s.kv_heads, ", ", positions, ", d_v] to match key_cache, got value_cache ", vs);
  TORCH_CHECK(s.dk > 0, fn, ": d_k (query's last dimension) must be positive, got query ", qs);
  for (const auto& [arg, t] : {std::pair<const char*, const at::Tensor&>{"query_starts", query_starts},
                               std::pair<const char*, const at::Tensor&>{"key_lengths", key_lengths}}) {
    TORCH_CHECK(t.defined() && t.dim() == 1 && t.sym_size(0) == s.batch, fn, ": ", arg, " must be [B] = [", s.batch,
                "], got ", t.defined() ? t.sym_sizes() : c10::SymIntArrayRef{});
    TORCH_CHECK(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), fn, ": ", arg,
                " must hold integers, got ", common::dtype_name(t));
    common::check_not_meta_beside_real(fn, arg, t, "query", query);
  }
  return s;
}

CacheSizes check_cache_call(const char* fn, const at::Tensor& query, const at::Tensor& key_cache,
                            const at::Tensor& value_cache, const at::Tensor& query_starts,
                            const at::Tensor& key_lengths, const DecodeOnlyInputs& decode_only) {
  const CacheSizes s =
      concrete(check_cache_call_symbolic(fn, query, key_cache, value_cache, query_starts, key_lengths, decode_only));
  check_cache_positions(fn, s, key_cache, query_starts, key_lengths, decode_only.block_table);
  return s;
}

void check_cache_positions(const char* fn, const CacheSizes& s, const at::Tensor& key_cache,
                           const at::Tensor& query_starts, const at::Tensor& key_lengths, const at::Tensor& table) {
  const at::Tensor starts = host_positions(query_starts), lengths = host_positions(key_lengths);
  const int64_t* start = starts.data_ptr<int64_t>();
  const int64_t* length = lengths.data_ptr<int64_t>();
  const bool paged = s.block_size > 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    TORCH_CHECK(length[b] >= 0 && length[b] <= s.capacity, fn, ": key_lengths[", b, "] = ", length[b],
                " must be in [0, capacity = ", s.capacity, "]", paged ? " (max_blocks · block_size)" : "");
    TORCH_CHECK(start[b] >= 0 && start[b] <= common::kMaxPosition, fn, ": query_starts[", b, "] = ", start[b],
                " must be in [0, 2^60] (a position)");
  }
  if (paged) {
    const int64_t blocks_in_pool = key_cache.size(0);
    const at::Tensor blocks = host_positions(table.flatten()).view(table.sizes());
    const int64_t* block = blocks.data_ptr<int64_t>();
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t i = 0; i * s.block_size < length[b]; ++i) {
        const int64_t id = block[b * table.size(1) + i];
        TORCH_CHECK(id >= 0 && id < blocks_in_pool, fn, ": block_table[", b, ", ", i, "] = ", id,
                    " is not a block in [0, ", blocks_in_pool, ") (row ", b, " holds ", length[b],
                    " positions, in blocks of ", s.block_size, ")");
      }
    }
  }
}

bool is_int8_cache(const at::Tensor& cache) { return cache.defined() && cache.scalar_type() == at::kChar; }

FlashArguments check_decode_variants(const char* fn, const SymCacheSizes& s, const at::Tensor& query, bool is_causal,
                                     c10::optional<double> scale, int64_t window_left, int64_t window_right,
                                     double softcap, const c10::optional<at::Tensor>& alibi_slopes,
                                     const c10::optional<at::Tensor>& sinks, const at::Tensor& tree_mask) {
  if (scale) TORCH_CHECK(std::isfinite(*scale), fn, ": scale must be finite, got ", *scale);
  if (tree_mask.defined()) {
    const c10::SymInt& n = s.tq;
    TORCH_CHECK(tree_mask.scalar_type() == at::kBool, fn, ": tree_mask must be bool, got ",
                common::dtype_name(tree_mask));
    common::check_host_index_device(fn, "tree_mask", tree_mask, "query", query);
    TORCH_CHECK((tree_mask.dim() == 2 || (tree_mask.dim() == 3 && tree_mask.sym_size(0) == s.batch)) &&
                    tree_mask.sym_size(-1) == n && tree_mask.sym_size(-2) == n,
                fn, ": tree_mask must be [Tq, Tq] or [B, Tq, Tq] = [", s.batch, ", ", n, ", ", n, "], got ",
                tree_mask.sym_sizes());
    TORCH_CHECK(n > 0, fn, ": tree_mask needs at least one candidate (Tq > 0)");
    TORCH_CHECK(is_causal, fn, ": tree_mask needs is_causal (the candidates attend the cache before them)");
    TORCH_CHECK(window_left < 0 && window_right < 0 && !(alibi_slopes && alibi_slopes->defined()), fn,
                ": tree_mask takes no window and no ALiBi: a candidate's distance to a key is its depth in the tree, "
                "not its index");
    if (!tree_mask.device().is_meta()) {
      const int64_t tq = n.guard_int(__FILE__, __LINE__);
      const at::Tensor mask = tree_mask.reshape({-1, tq, tq});
      const at::Tensor diagonal = mask.diagonal(0, 1, 2);
      TORCH_CHECK(diagonal.all().item<bool>(), fn, ": tree_mask must let each candidate attend itself (true on the "
                  "diagonal)");
      TORCH_CHECK(!mask.triu(1).any().item<bool>(), fn, ": tree_mask lets a candidate attend a later one (true "
                  "above the diagonal): list each candidate after its parent");
    }
  }
  FlashArguments a;
  a.is_causal = is_causal, a.scale = scale;
  a.window_left = window_left, a.window_right = window_right, a.softcap = softcap;
  a.alibi_slopes = alibi_slopes, a.sinks = sinks;
  SymFlashSizes sizes{s.batch, s.heads, s.tq, s.capacity, s.dk, s.dv, s.kv_heads};
  check_variant_args(fn, sizes, query, a);
  return a;
}

FlashArguments check_decode_variants(const char* fn, const CacheSizes& s, const at::Tensor& query, bool is_causal,
                                     c10::optional<double> scale, int64_t window_left, int64_t window_right,
                                     double softcap, const c10::optional<at::Tensor>& alibi_slopes,
                                     const c10::optional<at::Tensor>& sinks, const at::Tensor& tree_mask) {
  return check_decode_variants(fn, symbolic(s), query, is_causal, scale, window_left, window_right, softcap,
                               alibi_slopes, sinks, tree_mask);
}

at::Tensor empty_decode_output(const SymCacheSizes& s, const at::TensorOptions& options) {
  return at::empty_symint({s.batch, s.tq, s.heads, s.dv}, options).transpose(1, 2);
}

at::Tensor empty_decode_output(const CacheSizes& s, const at::TensorOptions& options) {
  return empty_decode_output(symbolic(s), options);
}

SymCacheSizes check_decode_op_args_symbolic(const char* fn, const at::Tensor& query, const at::Tensor& key_cache,
                                            const at::Tensor& value_cache, const at::Tensor& query_starts,
                                            const at::Tensor& key_lengths, const DecodeOnlyInputs& decode_only,
                                            bool is_causal, c10::optional<double> scale, int64_t window_left,
                                            int64_t window_right, double softcap,
                                            const c10::optional<at::Tensor>& alibi_slopes,
                                            const c10::optional<at::Tensor>& sinks) {
  const InputKernel kernel = InputKernel::Decode;
  check_input(fn, "query", query, "[B, H, Tq, d_k]", kernel);
  if (!is_int8_cache(key_cache)) check_input(fn, "key_cache", key_cache, "[B, H_kv, capacity, d_k]", kernel);
  if (!is_int8_cache(value_cache)) check_input(fn, "value_cache", value_cache, "[B, H_kv, capacity, d_v]", kernel);
  const SymCacheSizes s =
      check_cache_call_symbolic(fn, query, key_cache, value_cache, query_starts, key_lengths, decode_only);
  TORCH_CHECK(s.dv > 0, fn, ": d_v must be positive, got value_cache ", value_cache.sym_sizes());
  check_decode_variants(fn, s, query, is_causal, scale, window_left, window_right, softcap, alibi_slopes, sinks,
                        decode_only.tree_mask);
  return s;
}

}  // namespace attn::ops
