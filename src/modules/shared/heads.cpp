#include "modules/shared/heads.h"

#include "backends/cache.h"
#include "backends/dispatch.h"
#include "backends/linear.h"
#include "common/checks.h"
#include "int8_rows.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include <vector>

namespace attn::modules {
namespace {

void check_input(const ModuleLayout& layout, const char* arg, const torch::Tensor& x, int64_t width, int64_t rank,
                 const torch::Tensor& param) {
  TORCH_CHECK(x.defined(), layout.module, ": ", arg, " is undefined");
  TORCH_CHECK(x.dim() == rank, layout.module, ": ", arg, " must be ", rank == 3 ? "[B, T, " : "[T, ", width,
              "] like the query (batched [B, T, E] or unbatched [T, E]), got shape ", x.sizes());
  common::check_floating(layout.module, arg, x);
  TORCH_CHECK(x.size(-1) == width, layout.module, ": ", arg, " must have last dimension ", width, ", got shape ",
              x.sizes());
  TORCH_CHECK(x.device() == param.device(), layout.module, ": ", arg, " is on ", x.device(),
              " but the module's parameters are on ", param.device(), "; move one with module->to(device)");
  TORCH_CHECK(x.scalar_type() == param.scalar_type(), layout.module, ": ", arg, " is ", common::dtype_name(x),
              " but the module's parameters are ", common::dtype_name(param), "; convert one with module->to(dtype)");
}

/// Checks a module-level attend/additive mask and lifts it to [Tq, Tk] or [B|1, H|1, Tq, Tk].
torch::Tensor lift_pair_mask(const ModuleLayout& layout, const CallShape& shape, const char* arg,
                             const torch::Tensor& mask, common::MaskKind kind, const torch::Tensor& query) {
  if (!mask.defined()) return mask;
  const int64_t heads = layout.widths.num_heads, tq = shape.tq, tk = shape.tk;
  if (shape.batched) {
    TORCH_CHECK(mask.dim() == 2 || mask.dim() == 4, layout.module, ": ", arg, " must be [Tq, Tk] = [", tq, ", ", tk,
                "] or [B|1, H|1, Tq, Tk] = [", shape.batch, ", ", heads, ", ", tq, ", ", tk, "], got shape ",
                mask.sizes(),
                mask.dim() == 3 ? " (a 3-D mask is ambiguous; reshape PyTorch's [B*H, Tq, Tk] with "
                                  "view({B, H, Tq, Tk}))"
                                : "");
  } else {
    TORCH_CHECK(mask.dim() == 2 || mask.dim() == 3, layout.module, ": ", arg, " must be [Tq, Tk] = [", tq, ", ", tk,
                "] or [H|1, Tq, Tk] for unbatched inputs, got shape ", mask.sizes());
  }
  // Checked against the form it was given in, which the message then names.
  if (mask.dim() == 2) {
    common::check_mask(layout.module, arg, mask, kind, query, {tq, tk}, "[Tq, Tk]");
  } else if (shape.batched) {
    common::check_mask(layout.module, arg, mask, kind, query, {shape.batch, heads, tq, tk}, "[B|1, H|1, Tq, Tk]");
  } else {
    common::check_mask(layout.module, arg, mask, kind, query, {heads, tq, tk}, "[H|1, Tq, Tk]");
  }
  return mask.dim() == 3 ? mask.unsqueeze(0) : mask;
}

/// [B, T, H*d] -> [B, H, T, d]
torch::Tensor split_heads(const torch::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

}  // namespace

ModuleLayout one_input(const ModuleLayout& layout) {
  ModuleLayout x = layout;
  x.query_name = x.key_name = x.value_name = "x";
  return x;
}

CallShape check_inputs(const ModuleLayout& layout, const torch::Tensor& query, const torch::Tensor& key,
                       const torch::Tensor& value, const torch::Tensor& param) {
  const ProjectionWidths& w = layout.widths;
  TORCH_CHECK(query.defined(), layout.module, ": ", layout.query_name, " is undefined");
  TORCH_CHECK(query.dim() == 2 || query.dim() == 3, layout.module, ": ", layout.query_name, " must be [B, T, ",
              w.query_in, "] or unbatched [T, ", w.query_in, "], got shape ", query.sizes());
  const int64_t rank = query.dim();
  check_input(layout, layout.query_name, query, w.query_in, rank, param);
  check_input(layout, layout.key_name, key, w.key_in, rank, param);
  check_input(layout, layout.value_name, value, w.value_in, rank, param);
  const bool batched = rank == 3;
  const int64_t tq = query.size(-2), tk = key.size(-2);
  TORCH_CHECK(value.size(-2) == tk, layout.module, ": ", layout.key_name, " and ", layout.value_name,
              " must have the same length, got ", key.sizes(), " and ", value.sizes());
  const int64_t batch = batched ? query.size(0) : 1;
  if (batched && std::strcmp(layout.key_name, layout.value_name) == 0) {  // one memory gives keys and values
    TORCH_CHECK(key.size(0) == batch && value.size(0) == batch, layout.module, ": ", layout.query_name, " and ",
                layout.key_name, " must have the same batch size, got ", query.sizes(), " and ", key.sizes());
  } else if (batched) {
    TORCH_CHECK(key.size(0) == batch && value.size(0) == batch, layout.module, ": ", layout.query_name, ", ",
                layout.key_name, " and ", layout.value_name, " must have the same batch size, got ", query.sizes(),
                ", ", key.sizes(), ", ", value.sizes());
  }
  return {batched, batch, tq, tk};
}

AttentionMasks lift_masks(const ModuleLayout& layout, const CallShape& shape, const AttentionMasks& masks,
                          const torch::Tensor& query) {
  AttentionMasks lifted;
  if (masks.key_padding_mask().defined()) {
    const torch::Tensor& pad = masks.key_padding_mask();
    const std::vector<int64_t> expected =
        shape.batched ? std::vector<int64_t>{shape.batch, shape.tk} : std::vector<int64_t>{shape.tk};
    TORCH_CHECK(pad.sizes() == at::IntArrayRef(expected), layout.module, ": key_padding_mask must be ",
                shape.batched ? "[B, Tk] = " : "[Tk] = ", at::IntArrayRef(expected), " (true = padding), got shape ",
                pad.sizes());
    common::check_mask(layout.module, "key_padding_mask", pad, common::MaskKind::Bool, query, expected, "[B, Tk]");
    lifted.key_padding_mask(pad.reshape({shape.batch, 1, shape.tk}));  // reshape: the caller's mask may be strided
  }
  lifted.attend_mask(lift_pair_mask(layout, shape, "attend_mask", masks.attend_mask(), common::MaskKind::Bool, query));
  lifted.additive_mask(lift_pair_mask(layout, shape, "additive_mask", masks.additive_mask(),
                                      common::MaskKind::AdditiveOfInputDtype, query));
  return lifted;
}

Heads project(const ModuleLayout& layout, const CallShape& shape, const torch::Tensor& query,
              const torch::Tensor& key, const torch::Tensor& value, const Projections& p) {
  const auto as_batch = [&](const torch::Tensor& x) { return shape.batched ? x : x.unsqueeze(0); };
  const ProjectionWidths& w = layout.widths;
  const int64_t heads = w.num_heads, kv_heads = w.kv_heads();
  // (Below kStackedRows rows, the copy of the stacked weights costs more than the wider product saves.)
  constexpr int64_t kStackedRows = 64;
  if (query.is_same(key) && key.is_same(value) && query.numel() / query.size(-1) >= kStackedRows) {
    // Self-attention: one product with the three weights stacked is faster than three (a wider GEMM), and
    // the q/k/v column slices it yields are views the attention reads in place.
    const auto stacked = [](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
      return a.defined() ? torch::cat({a, b, c}) : torch::Tensor();
    };
    const torch::Tensor qkv = backends::project_rows(as_batch(query), stacked(p.q.weight, p.k.weight, p.v.weight),
                                                     stacked(p.q.bias, p.k.bias, p.v.bias));
    const int64_t q_width = heads * w.head_dim_qk, k_width = kv_heads * w.head_dim_qk,
                  v_width = kv_heads * w.head_dim_v;
    return {split_heads(qkv.narrow(-1, 0, q_width), heads),
            split_heads(qkv.narrow(-1, q_width, k_width), kv_heads),
            split_heads(qkv.narrow(-1, q_width + k_width, v_width), kv_heads)};
  }
  if (query.is_same(key) && key.is_same(value)) {
    // Fewer rows (a decoding step's): one pass over the three weights where the few-row kernel takes them.
    const std::vector<torch::Tensor> qkv = backends::project_rows_many(
        as_batch(query), {p.q.weight, p.k.weight, p.v.weight}, {p.q.bias, p.k.bias, p.v.bias});
    return {split_heads(qkv[0], heads), split_heads(qkv[1], kv_heads), split_heads(qkv[2], kv_heads)};
  }
  return {split_heads(backends::project_rows(as_batch(query), p.q.weight, p.q.bias), heads),
          split_heads(backends::project_rows(as_batch(key), p.k.weight, p.k.bias), kv_heads),
          split_heads(backends::project_rows(as_batch(value), p.v.weight, p.v.bias), kv_heads)};
}

void rotate(const RotaryEmbeddingImpl* rotary, Heads& heads, const torch::Tensor& q_positions,
            const torch::Tensor& k_positions) {
  if (rotary == nullptr) return;
  // The positions on the heads' device (rotary_cos_sin brings the frequencies there). Queries rotate at the
  // keys' frequencies (dynamic NTK's depend on the sequence's length), as project_memory's keys and the
  // queries of forward_with_memory do.
  const torch::Tensor k_at = k_positions.to(heads.k.device());
  const RotaryFrequencies frequencies = rotary->frequencies_at(k_at);
  heads.q = rotary->rotate(heads.q, q_positions.to(heads.q.device()), frequencies);
  heads.k = rotary->rotate(heads.k, k_at, frequencies);
}

torch::Tensor merge_heads(const torch::Tensor& x, const CallShape& shape) {
  torch::Tensor merged = x.transpose(1, 2).reshape({x.size(0), x.size(2), x.size(1) * x.size(3)});
  return shape.batched ? merged : merged.squeeze(0);
}

std::tuple<torch::Tensor, torch::Tensor> attend_heads(const ModuleLayout& layout, const torch::Tensor& query,
                                                      const torch::Tensor& key, const torch::Tensor& value,
                                                      const Projections& projections, const AttentionMasks& masks,
                                                      const SdpaOptions& options, bool need_weights,
                                                      const RotaryEmbeddingImpl* rotary) {
  const CallShape shape = check_inputs(layout, query, key, value, projections.q.weight);
  SdpaOptions lifted = options;
  lifted.masks(lift_masks(layout, shape, masks, query));
  Heads heads = project(layout, shape, query, key, value, projections);
  if (rotary != nullptr) rotate(rotary, heads, torch::arange(shape.tq), torch::arange(shape.tk));
  auto [out, weights] = backends::attention(layout.module, heads.q, heads.k, heads.v, lifted, need_weights);
  if (!shape.batched && weights.defined()) weights = weights.squeeze(0);
  return {merge_heads(out, shape), weights};
}

namespace {

/// A module call's step over a cache, whatever the cache's form (KVCache, a token tree on one, PagedKVCache):
/// what the call checks x against, and how it appends and attends.
struct CacheStep {
  int64_t batch = 0, kv_heads = 0, head_dim = 0, value_dim = 0;
  std::function<std::string()> layout;  // the cache's shape, for messages: built only for one
  bool quantized = false;
  torch::Dtype dtype = torch::kFloat32;
  torch::Device device = torch::kCPU;
  torch::Tensor starts;   // [B] the step's first positions (before the append)
  torch::Tensor offsets;  // [T] each new position's offset from its row's start; undefined: 0..T-1
  ops::DecodeOnlyInputs decode_only;  // known before the append (scales, tree); a block table comes after it
  std::function<torch::Tensor()> keys, values;
  std::function<void(const torch::Tensor& k, const torch::Tensor& v)> append;
  std::function<torch::Tensor()> lengths;             // after the append
  std::function<void(ops::DecodeOnlyInputs&)> after_append;  // adds what the append decides (a block table)
  bool fresh = false;  // a KVCache step, whose rows may be empty before it (a prompt)
};

/// [B, T], true at a ragged step's padding (t >= counts[b]); undefined where every row is whole.
torch::Tensor padding_positions(const std::vector<int64_t>& counts, int64_t T, const torch::Device& device) {
  if (counts.empty() || std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == T; })) return {};
  const torch::Tensor count_tensor = torch::tensor(at::ArrayRef<int64_t>(counts), torch::kLong).to(device);
  return torch::arange(T, count_tensor.options()).unsqueeze(0) >= count_tensor.unsqueeze(1);
}

torch::Tensor attend_cache_step(const ModuleLayout& layout, const torch::Tensor& x, const Projections& projections,
                                CacheStep step, const std::vector<int64_t>& counts, const SdpaOptions& options,
                                const RotaryEmbeddingImpl* rotary) {
  const ProjectionWidths& w = layout.widths;
  TORCH_CHECK(x.defined() && x.dim() == 3, layout.module, ": with a KV cache, x must be batched [B, T, ", w.query_in,
              "], got ", x.defined() ? x.sizes() : at::IntArrayRef{});
  const CallShape shape = check_inputs(one_input(layout), x, x, x, projections.q.weight);
  TORCH_CHECK(step.batch == shape.batch && step.kv_heads == w.kv_heads() && step.head_dim == w.head_dim_qk &&
                  step.value_dim == w.head_dim_v,
              layout.module, ": the cache holds ", step.layout(), ", but this call needs [", shape.batch, ", ",
              w.kv_heads(), ", ..., ", w.head_dim_qk, "] (value_dim ", w.head_dim_v, ")");
  if (step.quantized) {
    TORCH_CHECK((x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kBFloat16) && x.is_cpu(),
                layout.module, ": an int8 cache serves a float32 or bfloat16 model on the CPU, but x is ",
                common::dtype_name(x), " on ", x.device());
  } else {
    TORCH_CHECK(step.dtype == x.scalar_type() && step.device == x.device(), layout.module, ": the cache holds ",
                c10::toString(step.dtype), " on ", step.device, " but x is ", common::dtype_name(x), " on ",
                x.device(), "; build the cache with the model's dtype and device (cache_options())");
  }
  const int64_t T = shape.tq;
  if (!counts.empty()) common::check_row_counts(layout.module, "new_lengths", counts, shape.batch, T);

  Heads heads = project(layout, shape, x, x, x, projections);
  if (rotary != nullptr) {
    // [B, T]; a decoding step's one new position per row is the row's start, without a tensor operation.
    torch::Tensor positions =
        !step.offsets.defined() && T == 1
            ? step.starts.unsqueeze(1)
            : step.starts.unsqueeze(1) + (step.offsets.defined() ? step.offsets : torch::arange(T)).unsqueeze(0);
    if (std::any_of(counts.begin(), counts.end(), [T](int64_t n) { return n < T; })) {
      // Right padding takes its row's last real position: its keys are never stored, and a position past the
      // row's own would lengthen the sequence that dynamic NTK scales the frequencies for.
      const torch::Tensor last = step.starts + (torch::tensor(counts, torch::kLong) - 1).clamp_min(0);
      positions = torch::minimum(positions, last.unsqueeze(1));
    }
    rotate(rotary, heads, positions, positions);
  }
  {
    // What the backend that will read the cache refuses, refused before the cache changes: as a call on empty
    // rows (the cache's form, the query and the options, not yet the new positions).
    const torch::Tensor empty = torch::zeros_like(step.starts);
    backends::check_cache_inputs(layout.module, heads.q, step.keys(), step.values(), empty, empty, options,
                                 step.decode_only);
  }
  step.append(heads.k.detach(), heads.v.detach());  // checks every row's room before writing
  ops::DecodeOnlyInputs decode_only = step.decode_only;
  if (step.after_append) step.after_append(decode_only);
  // A prompt into empty rows of an int8 cache reads none of the cache: it attends over its own keys and values as
  // computed (its padding masked), by the general backends (the fused kernel), and later steps read the int8 rows
  // it appended.
  const bool fresh_int8_prompt = step.quantized && step.fresh && !decode_only.tree_mask.defined() &&
                                 !decode_only.block_table.defined() && !step.starts.any().item<bool>();
  if (!fresh_int8_prompt) {
    return merge_heads(attend_stored_rows(layout.module, heads.q, step.keys(), step.values(), step.starts,
                                          step.lengths(), options, decode_only),
                       shape);
  }
  SdpaOptions prompt = options;
  const torch::Tensor padding = padding_positions(counts, T, heads.q.device());
  if (padding.defined()) prompt.masks(AttentionMasks().key_padding_mask(padding.unsqueeze(1)));  // [B, 1, T]
  return merge_heads(std::get<0>(backends::attention(layout.module, heads.q, heads.k, heads.v, prompt,
                                                     /*need_weights=*/false)),
                     shape);
}

/// The parts of a step over layer `layer` of a KVCache that a plain step and a tree step share.
CacheStep kv_cache_step(const char* module, KVCache& cache, int64_t layer, const void* owner) {
  const KVCacheOptions& c = cache.options();
  common::check_layer_index(module, layer, c.num_layers());
  cache.check_writer(layer, owner, module);  // claimed once the append succeeds
  CacheStep step;
  step.batch = c.batch(), step.kv_heads = c.num_kv_heads(), step.head_dim = c.head_dim();
  step.value_dim = c.value_dim().value_or(c.head_dim());
  step.layout = [o = &c] {  // the cache's options outlive the step
    return "[B, H_kv, capacity, head_dim] = [" + std::to_string(o->batch()) + ", " + std::to_string(o->num_kv_heads()) +
           ", " + std::to_string(o->capacity()) + ", " + std::to_string(o->head_dim()) + "] (value_dim " +
           std::to_string(o->value_dim().value_or(o->head_dim())) + ")";
  };
  step.quantized = cache.quantized(), step.dtype = c.dtype(), step.device = c.device();
  // The lengths before the append advances them in place.
  step.starts = cache.lengths(layer).clone();
  step.decode_only.key_scales = cache.key_scales(layer), step.decode_only.value_scales = cache.value_scales(layer);
  step.keys = [&cache, layer] { return cache.keys(layer); };
  step.values = [&cache, layer] { return cache.values(layer); };
  step.lengths = [&cache, layer] { return cache.lengths(layer); };
  return step;
}

}  // namespace

torch::Tensor zero_padding_rows(const torch::Tensor& out, const std::vector<int64_t>& counts) {
  const torch::Tensor padding = padding_positions(counts, out.size(1), out.device());
  return padding.defined() ? out.masked_fill(padding.unsqueeze(-1), 0.0) : out;
}

torch::Tensor attend_with_cache(const ModuleLayout& layout, const torch::Tensor& x, const Projections& projections,
                                KVCache& cache, int64_t layer, const std::vector<int64_t>& counts,
                                const SdpaOptions& options, const RotaryEmbeddingImpl* rotary, const void* owner) {
  CacheStep step = kv_cache_step(layout.module, cache, layer, owner);
  step.append = [&](const torch::Tensor& k, const torch::Tensor& v) {
    cache.append(layer, k, v, counts);
    cache.claim_layer(layer, owner, layout.module);
  };
  step.fresh = true;
  return attend_cache_step(layout, x, projections, std::move(step), counts, options, rotary);
}

torch::Tensor attend_with_tree(const ModuleLayout& layout, const torch::Tensor& x, const Projections& projections,
                               KVCache& cache, int64_t layer, const TokenTree& tree, const SdpaOptions& options,
                               const RotaryEmbeddingImpl* rotary, const void* owner) {
  TORCH_CHECK(x.defined() && x.dim() == 3 && x.size(1) == tree.size(), layout.module,
              ": x must hold one position per candidate, [B, ", tree.size(), ", E], got ",
              x.defined() ? x.sizes() : at::IntArrayRef{});
  CacheStep step = kv_cache_step(layout.module, cache, layer, owner);
  // A candidate sits at its row's length plus its depth: siblings share a position.
  step.offsets = torch::tensor(tree.depths(), torch::kLong);
  step.decode_only.tree_mask = tree.ancestor_mask();
  step.append = [&](const torch::Tensor& k, const torch::Tensor& v) {
    cache.append(layer, k, v);
    cache.claim_layer(layer, owner, layout.module);
  };
  return attend_cache_step(layout, x, projections, std::move(step), {}, options, rotary);
}

torch::Tensor attend_with_paged_cache(const ModuleLayout& layout, const torch::Tensor& x,
                                      const Projections& projections, PagedKVCache& cache, int64_t layer,
                                      const std::vector<int64_t>& sequences, const SdpaOptions& options,
                                      const RotaryEmbeddingImpl* rotary, const void* owner) {
  const PagedKVCacheOptions& c = cache.options();
  common::check_layer_index(layout.module, layer, c.num_layers());
  cache.check_writer(layer, owner, layout.module);  // claimed once the append succeeds
  const int64_t rows = static_cast<int64_t>(sequences.size());
  TORCH_CHECK(!x.defined() || x.dim() != 3 || x.size(0) == rows, layout.module,
              ": x must have one row per sequence, [", rows, ", T, E] for the ", rows, " sequences given, got ",
              x.sizes());
  CacheStep step;
  step.batch = rows;
  step.kv_heads = c.num_kv_heads(), step.head_dim = c.head_dim(), step.value_dim = c.value_dim().value_or(c.head_dim());
  step.layout = [o = &c, count = sequences.size()] {
    return "blocks of [H_kv, block_size, head_dim] = [" + std::to_string(o->num_kv_heads()) + ", " +
           std::to_string(o->block_size()) + ", " + std::to_string(o->head_dim()) + "] (value_dim " +
           std::to_string(o->value_dim().value_or(o->head_dim())) + ") for " + std::to_string(count) + " sequences";
  };
  step.quantized = cache.quantized(), step.dtype = c.dtype(), step.device = torch::kCPU;
  step.starts = cache.batch(layer, sequences).lengths;
  step.decode_only.key_scales = cache.key_scales(layer), step.decode_only.value_scales = cache.value_scales(layer);
  // Checked as a paged call even where the blocks are float: a block table is what the decode kernel alone reads.
  step.decode_only.block_table = torch::zeros({step.batch, 1}, torch::kLong);
  step.keys = [&cache, layer] { return cache.key_blocks(layer); };
  step.values = [&cache, layer] { return cache.value_blocks(layer); };
  auto current = std::make_shared<PagedBatch>();
  step.append = [&cache, layer, &sequences, current, owner, module = layout.module](const torch::Tensor& k,
                                                                                  const torch::Tensor& v) {
    cache.append(layer, sequences, k, v);
    cache.claim_layer(layer, owner, module);
    *current = cache.batch(layer, sequences);
  };
  step.lengths = [current] { return current->lengths; };
  step.after_append = [current](ops::DecodeOnlyInputs& d) { d.block_table = current->block_table; };
  return attend_cache_step(layout, x, projections, std::move(step), {}, options, rotary);
}

Heads project_memory(const ModuleLayout& layout, const torch::Tensor& key, const torch::Tensor& value,
                     const Projections& p, const RotaryEmbeddingImpl* rotary) {
  const ProjectionWidths& w = layout.widths;
  TORCH_CHECK(key.defined() && value.defined(), layout.module, ": ", layout.key_name, " and ", layout.value_name,
              " must be defined");
  TORCH_CHECK(key.dim() == 2 || key.dim() == 3, layout.module, ": ", layout.key_name, " must be [B, T, ", w.key_in,
              "] or unbatched [T, ", w.key_in, "], got shape ", key.sizes());
  // The query's checks with the memory standing in for it: ranks, widths, lengths, dtype and device.
  ModuleLayout as_memory = layout;
  as_memory.widths.query_in = w.key_in;
  as_memory.query_name = layout.key_name;
  const CallShape shape = check_inputs(as_memory, key, key, value, p.q.weight);
  const auto as_batch = [&](const torch::Tensor& t) { return shape.batched ? t : t.unsqueeze(0); };
  torch::Tensor k = split_heads(backends::project_rows(as_batch(key), p.k.weight, p.k.bias), w.kv_heads());
  if (rotary != nullptr) {  // positions 0..tk-1: the frequencies of a sequence of tk, as attend_memory reads them
    k = rotary->rotate(k, torch::arange(shape.tk).to(k.device()), rotary->frequencies(shape.tk));
  }
  return {torch::Tensor(), k, split_heads(backends::project_rows(as_batch(value), p.v.weight, p.v.bias), w.kv_heads())};
}

std::tuple<torch::Tensor, torch::Tensor> attend_memory(const ModuleLayout& layout, const torch::Tensor& query,
                                                       const torch::Tensor& memory_key,
                                                       const torch::Tensor& memory_value,
                                                       const Projections& projections, const AttentionMasks& masks,
                                                       const SdpaOptions& options, bool need_weights,
                                                       const RotaryEmbeddingImpl* rotary) {
  const ProjectionWidths& w = layout.widths;
  TORCH_CHECK(query.defined() && (query.dim() == 2 || query.dim() == 3), layout.module, ": ", layout.query_name,
              " must be [B, T, ", w.query_in, "] or unbatched [T, ", w.query_in, "], got ",
              query.defined() ? query.sizes() : at::IntArrayRef{});
  const bool batched = query.dim() == 3;
  const int64_t batch = batched ? query.size(0) : 1;
  TORCH_CHECK(memory_key.defined() && memory_value.defined() && memory_key.dim() == 4 && memory_value.dim() == 4 &&
                  memory_key.size(0) == batch && memory_key.size(1) == w.kv_heads() &&
                  memory_key.size(3) == w.head_dim_qk && memory_value.sizes().slice(0, 3) == memory_key.sizes().slice(0, 3) &&
                  memory_value.size(3) == w.head_dim_v,
              layout.module, ": memory must come from this module's project_memory: key [B, H_kv, Tk, d_k] = [", batch,
              ", ", w.kv_heads(), ", Tk, ", w.head_dim_qk, "] and value [", batch, ", ", w.kv_heads(), ", Tk, ",
              w.head_dim_v, "], got key ", memory_key.defined() ? memory_key.sizes() : at::IntArrayRef{}, " and value ",
              memory_value.defined() ? memory_value.sizes() : at::IntArrayRef{});
  const int64_t tk = memory_key.size(2);
  // The query's own checks (width, dtype, device), with the query standing in for the key and value inputs.
  ModuleLayout query_only = layout;
  query_only.widths.key_in = query_only.widths.value_in = w.query_in;
  check_inputs(query_only, query, query, query, projections.q.weight);
  TORCH_CHECK(memory_key.device() == query.device() && memory_key.scalar_type() == query.scalar_type(), layout.module,
              ": memory is ", common::dtype_name(memory_key), " on ", memory_key.device(), " but ", layout.query_name,
              " is ", common::dtype_name(query), " on ", query.device());
  const CallShape shape{batched, batch, query.size(-2), tk};
  SdpaOptions lifted = options;
  lifted.masks(lift_masks(layout, shape, masks, query));
  torch::Tensor q = split_heads(
      backends::project_rows(batched ? query : query.unsqueeze(0), projections.q.weight, projections.q.bias),
      w.num_heads);
  if (rotary != nullptr) {  // at the frequencies the memory's keys were rotated with
    q = rotary->rotate(q, torch::arange(shape.tq).to(q.device()), rotary->frequencies(tk));
  }
  auto [out, weights] = backends::attention(layout.module, q, memory_key, memory_value, lifted, need_weights);
  if (!batched && weights.defined()) weights = weights.squeeze(0);
  return {merge_heads(out, shape), weights};
}

torch::Tensor select_head_weights(const torch::Tensor& per_head, HeadWeights head_weights) {
  return head_weights == HeadWeights::Averaged ? per_head.mean(-3) : per_head;
}

}  // namespace attn::modules
