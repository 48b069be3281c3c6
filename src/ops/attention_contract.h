#pragma once
// What every kernel of the attention ops agrees on, attn::flash_attention's and attn::decode_attention's: the
// checks of their arguments (each op is a public entry point of its own, reached from C++, Python and
// TorchScript) and the shapes, dtypes and strides of their results. The CPU, CUDA and Meta kernels (ops/meta/,
// which torch.compile and torch.export trace with) all use it, so the traced shapes are the computed ones; the
// backends check a call on a KV cache with it too.

#include <attn/ops/flash_attention.h>

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/Optional.h>

#include <tuple>

namespace attn::ops {

inline constexpr const char* kForwardOp = "attn::flash_attention";
inline constexpr const char* kBackwardOp = "attn::flash_attention_backward";

/// Which CPU kernel an argument is for, and so which dtypes it takes (common/dtypes.h).
enum class InputKernel { Fused, Decode };

/// One 4-D tensor argument of an op: defined, rank 4 (`layout` names its dimensions in the message), on the
/// CPU or the meta device, in a dtype that `kernel` computes.
void check_input(const char* fn, const char* arg, const at::Tensor& t, const char* layout, InputKernel kernel);

/// The sizes of a call: int64_t for the kernels, c10::SymInt where they may be symbolic (the Meta kernels under
/// torch.compile(dynamic=True) and torch.export with a Dim). The checks are written once, over SymInt: a
/// comparison of symbolic sizes guards (records the relation) instead of specialising the size to a number.
template <typename Int>
struct FlashSizesOf {
  Int batch, heads, tq, tk, dk, dv;
  Int kv_heads;        ///< key/value heads; divides `heads` (grouped-query attention when smaller)
  Int sequences = 0;   ///< packed sequences (cu_seqlens), 0 when not packed
};
using FlashSizes = FlashSizesOf<int64_t>;
using SymFlashSizes = FlashSizesOf<c10::SymInt>;

/// The sizes of a call on tensors that have concrete sizes (every kernel but Meta's).
FlashSizes concrete(const SymFlashSizes& s);

/// Checks q [B, H, Tq, d_k], k [B, H_kv, Tk, d_k], v [B, H_kv, Tk, d_v] (H_kv divides H; CPU or meta,
/// float32/float64/bfloat16/float16), and the arguments: the masks (in the query's heads), the scale and the
/// variants (check_variant_args).
SymFlashSizes check_forward_args_symbolic(const char* fn, const at::Tensor& query, const at::Tensor& key,
                                          const at::Tensor& value, const FlashArguments& arguments);
FlashSizes check_forward_args(const char* fn, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                              const FlashArguments& arguments);

/// check_forward_args, and that grad_output, output and logsumexp are the forward pass's.
SymFlashSizes check_backward_args_symbolic(const at::Tensor& grad_output, const at::Tensor& query,
                                           const at::Tensor& key, const at::Tensor& value, const at::Tensor& output,
                                           const at::Tensor& logsumexp, const FlashArguments& arguments);
FlashSizes check_backward_args(const at::Tensor& grad_output, const at::Tensor& query, const at::Tensor& key,
                               const at::Tensor& value, const at::Tensor& output, const at::Tensor& logsumexp,
                               const FlashArguments& arguments);

/// Checks the variant arguments (window, softcap, ALiBi slopes, sinks, packed sequences) against the sizes of
/// q, k and v, and sets s.sequences. The decode op checks its own variants with it too.
void check_variant_args(const char* fn, SymFlashSizes& s, const at::Tensor& query, const FlashArguments& arguments);
void check_variant_args(const char* fn, FlashSizes& s, const at::Tensor& query, const FlashArguments& arguments);

/// The dtype the kernels compute in: float32 for bfloat16 and float16 inputs, else the inputs' own.
at::ScalarType compute_type(const at::Tensor& query);

/// scale, or 1 / sqrt(d_k).
double resolved_scale(c10::optional<double> scale, int64_t dk);

/// Uninitialised (output, logsumexp) on `options`' device: output [B, H, Tq, d_v] in `options`' dtype, laid out
/// as [B, Tq, H, d_v] (so that merging the heads back is a free view), logsumexp [B, H, Tq] contiguous in
/// `lse_type` (compute_type of the query).
std::tuple<at::Tensor, at::Tensor> empty_forward_results(const SymFlashSizes& s, const at::TensorOptions& options,
                                                         at::ScalarType lse_type);
std::tuple<at::Tensor, at::Tensor> empty_forward_results(const FlashSizes& s, const at::TensorOptions& options,
                                                         at::ScalarType lse_type);

// ---- attn::decode_attention: a call on a KV cache ----
/// Its sizes, int64_t for the kernels and c10::SymInt for the Meta kernel, as FlashSizesOf.
template <typename Int>
struct CacheSizesOf {
  Int batch, heads, tq, dk, kv_heads, capacity, dv;
  Int block_size = 0;  ///< a paged cache's positions per block; 0 when contiguous
};
using CacheSizes = CacheSizesOf<int64_t>;
using SymCacheSizes = CacheSizesOf<c10::SymInt>;

/// What only the decode kernel reads, each undefined when unused: an int8 cache's row scales, a paged cache's
/// block table, and a token tree's mask over its candidates.
struct DecodeOnlyInputs {
  at::Tensor key_scales, value_scales, block_table, tree_mask;
  bool any() const { return key_scales.defined() || value_scales.defined() || block_table.defined() || tree_mask.defined(); }
  /// The op's optional arguments, an absent one undefined.
  static DecodeOnlyInputs of(const c10::optional<at::Tensor>& key_scales, const c10::optional<at::Tensor>& value_scales,
                             const c10::optional<at::Tensor>& block_table, const c10::optional<at::Tensor>& tree_mask) {
    const auto get = [](const c10::optional<at::Tensor>& t) { return t && t->defined() ? *t : at::Tensor(); };
    return {get(key_scales), get(value_scales), get(block_table), get(tree_mask)};
  }
};

/// Checks query [B, H, Tq, d_k] (floating, d_k > 0), key_cache [B, H_kv, capacity, d_k] and value_cache
/// [B, H_kv, capacity, d_v] (H_kv dividing H; the query's device and dtype, or int8 with scales),
/// query_starts and key_lengths [B] integer tensors with query_starts[b] >= 0 and 0 <= key_lengths[b] <=
/// capacity, and the decode kernel's own inputs. `fn` names the caller.
/// The caches' element type, the one rule: the query's dtype, and then the scales are undefined; or int8
/// caches (is_int8_cache) read by a float32 or bfloat16 query, each with its float32 scales [B, H_kv, capacity]
/// on the query's device: element i of row (b, h, j) stands for scales[b, h, j] · cache[..., i].
/// A paged cache (block_table [B, max_blocks] integers on the CPU) is given as its blocks: key_cache
/// [num_blocks, H_kv, block_size, d_k], value_cache [num_blocks, H_kv, block_size, d_v], the scales
/// [num_blocks, H_kv, block_size]; row b's position j is in block block_table[b, j / block_size], and capacity is
/// max_blocks · block_size. The blocks holding each row's key_lengths[b] positions must be in [0, num_blocks).
/// A tree_mask is checked by check_decode_variants.
/// check_cache_call_symbolic checks the shapes, dtypes and devices only, over symbolic sizes (the Meta kernel's
/// tensors hold no positions to read); check_cache_call checks those and then the positions and block ids.
SymCacheSizes check_cache_call_symbolic(const char* fn, const at::Tensor& query, const at::Tensor& key_cache,
                                        const at::Tensor& value_cache, const at::Tensor& query_starts,
                                        const at::Tensor& key_lengths, const DecodeOnlyInputs& decode_only = {});
CacheSizes check_cache_call(const char* fn, const at::Tensor& query, const at::Tensor& key_cache,
                            const at::Tensor& value_cache, const at::Tensor& query_starts,
                            const at::Tensor& key_lengths, const DecodeOnlyInputs& decode_only = {});

/// check_cache_call's checks of the values: the positions and a paged cache's block ids (`block_table`, or
/// undefined), for sizes check_cache_call_symbolic passed.
void check_cache_positions(const char* fn, const CacheSizes& s, const at::Tensor& key_cache,
                           const at::Tensor& query_starts, const at::Tensor& key_lengths, const at::Tensor& block_table);

/// The sizes of a call on tensors that have concrete sizes.
CacheSizes concrete(const SymCacheSizes& s);

/// The decode op's own checks, its CPU and Meta kernels' (over symbolic sizes, the values not read): check_input
/// for the query and a cache in the query's dtype, check_cache_call_symbolic, d_v > 0 and check_decode_variants.
SymCacheSizes check_decode_op_args_symbolic(const char* fn, const at::Tensor& query, const at::Tensor& key_cache,
                                            const at::Tensor& value_cache, const at::Tensor& query_starts,
                                            const at::Tensor& key_lengths, const DecodeOnlyInputs& decode_only,
                                            bool is_causal, c10::optional<double> scale, int64_t window_left,
                                            int64_t window_right, double softcap,
                                            const c10::optional<at::Tensor>& alibi_slopes,
                                            const c10::optional<at::Tensor>& sinks);

/// Whether a cache holds int8 rows with a scale per row (KVCacheOptions().dtype(torch::kInt8)).
bool is_int8_cache(const at::Tensor& cache);

/// The decode op's variants (its arguments after the positions) as a fused call's arguments, checked as the
/// fused op checks its own (check_variant_args), the scale included. A tree_mask (token tree verification) is
/// bool [Tq, Tq] or [B, Tq, Tq]: candidate t, at position query_starts[b] + t, attends candidate u iff
/// tree_mask[(b,) t, u]; true on the diagonal, false above it (a parent comes before its child). It needs
/// is_causal, and takes no window and no ALiBi (a candidate's distance to a key is its depth, not its index).
/// On the meta device the tree's values are not read.
FlashArguments check_decode_variants(const char* fn, const SymCacheSizes& s, const at::Tensor& query, bool is_causal,
                                     c10::optional<double> scale, int64_t window_left, int64_t window_right,
                                     double softcap, const c10::optional<at::Tensor>& alibi_slopes,
                                     const c10::optional<at::Tensor>& sinks, const at::Tensor& tree_mask = {});
FlashArguments check_decode_variants(const char* fn, const CacheSizes& s, const at::Tensor& query, bool is_causal,
                                     c10::optional<double> scale, int64_t window_left, int64_t window_right,
                                     double softcap, const c10::optional<at::Tensor>& alibi_slopes,
                                     const c10::optional<at::Tensor>& sinks, const at::Tensor& tree_mask = {});

/// The decode op's output, uninitialised: [B, H, Tq, d_v] in the query's dtype, laid out as [B, Tq, H, d_v] (as
/// flash_attention's output, so merging the heads back is a free view).
at::Tensor empty_decode_output(const SymCacheSizes& s, const at::TensorOptions& options);
at::Tensor empty_decode_output(const CacheSizes& s, const at::TensorOptions& options);

/// Positions as the kernels read them: [B] int64 on the CPU, contiguous. `t` itself where it is so already (a
/// KVCache's lengths are), else a converted copy.
at::Tensor host_positions(const at::Tensor& t);

}  // namespace attn::ops
