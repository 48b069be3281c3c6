#pragma once
// What a decoder keeps between steps, owned by the caller so that the modules stay stateless (threads may
// share them): the key/value cache of its self-attention, one for every layer of a model, and the encoder
// memory its cross-attention projects once (ProjectedMemory).

#include <attn/hadamard_rows.h>
#include <attn/token_tree.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace attn {

struct KVCacheOptions {
  KVCacheOptions(int64_t num_layers, int64_t batch, int64_t num_kv_heads, int64_t head_dim, int64_t capacity)
      : num_layers_(num_layers), batch_(batch), num_kv_heads_(num_kv_heads), head_dim_(head_dim),
        capacity_(capacity) {}
  /// The bytes a KVCache with these options allocates: every layer's keys and values, and an int8 cache's
  /// scales (saturating at INT64_MAX).
  int64_t buffer_bytes() const;

  TORCH_ARG(int64_t, num_layers);
  /// Sequences (batch rows) decoded together.
  TORCH_ARG(int64_t, batch);
  TORCH_ARG(int64_t, num_kv_heads);
  /// Width of each key head.
  TORCH_ARG(int64_t, head_dim);
  /// Positions each row can hold; appending past it is refused.
  TORCH_ARG(int64_t, capacity);
  /// Width of each value head. Default: head_dim.
  TORCH_ARG(std::optional<int64_t>, value_dim) = std::nullopt;
  /// What the cache stores: the model's dtype (float32, float64, bfloat16, float16), or torch::kInt8 for
  /// int8 rows with a float32 scale per (token, head) on the CPU (keys and values of a float32 or bfloat16
  /// model are rotated by hadamard_rows and quantized as they are appended: docs/decoding.md says how, and the
  /// error it adds).
  TORCH_ARG(torch::Dtype, dtype) = torch::kFloat32;
  /// The model's device.
  TORCH_ARG(torch::Device, device) = torch::kCPU;
};

/// Throws c10::Error, naming the options and the bytes, where a KVCache with them would not fit this machine's
/// physical memory (a CPU cache; a GPU's allocator refuses for itself). KVCache's constructor checks it before
/// it allocates, since a CPU cache past the memory would pass the allocator and then be killed as it is zeroed;
/// call it to be told before the work that precedes the cache (a model's load).
void check_kv_cache_fits_memory(const KVCacheOptions& options);

/// Per layer, keys [B, H_kv, capacity, head_dim] and values [B, H_kv, capacity, value_dim], allocated once
/// (zeroed) in the options' dtype and on their device, and a length per batch row: positions [0, length) of
/// row b hold its tokens. Rows may have different lengths (prompts of different lengths, no padding).
///
/// MultiHeadAttention::forward_with_cache(x, cache, layer) appends and attends in one call. Used directly:
///   append(layer, k, v) writes each row's new positions in place, after its current length;
///   attn::attention_with_kv_cache(q, keys(layer), values(layer), ...) attends over them.
///
/// Not synchronised: one thread (or one decoding loop) uses a cache at a time.
class KVCache {
 public:
  explicit KVCache(const KVCacheOptions& options);

  const KVCacheOptions& options() const { return options_; }
  int64_t num_layers() const { return options_.num_layers(); }
  int64_t batch() const { return options_.batch(); }
  int64_t capacity() const { return options_.capacity(); }

  /// The whole buffers of `layer` (all `capacity` positions; only each row's first length(s) are valid).
  const torch::Tensor& keys(int64_t layer) const;
  const torch::Tensor& values(int64_t layer) const;
  /// An int8 cache's scales [B, H_kv, capacity] float32: row (b, h, j) of keys(layer) stands for
  /// key_scales(layer)[b, h, j] times its elements, which is the appended row rotated by hadamard_rows
  /// (hadamard_rows.h). Undefined tensors for a cache of another dtype.
  const torch::Tensor& key_scales(int64_t layer) const;
  const torch::Tensor& value_scales(int64_t layer) const;
  /// Whether the cache stores int8 rows with scales (options().dtype() == torch::kInt8).
  bool quantized() const { return options_.dtype() == torch::kInt8; }
  /// Valid positions of each batch row in `layer`: [B] int64 on the CPU, the form attention_with_kv_cache and
  /// the decode kernel read in place. append, reorder, truncate and reset update it in place: clone it to keep
  /// one step's values.
  const torch::Tensor& lengths(int64_t layer) const;

  /// Writes key [B, H_kv, T, head_dim] and value [B, H_kv, T, value_dim] after each row's current length and
  /// advances it: row b takes its first `counts[b]` positions of T (default: all T; fewer for a right-padded
  /// ragged batch). Checks every row's room first: when any would overflow, throws and writes nothing.
  /// An int8 cache takes float32, bfloat16, float16 or float64 keys and values, finite in the positions it
  /// stores (right padding may hold anything), and stores each (token, head) row x as round(r / s),
  /// r = hadamard_rows(x) and s = max|r| / 127.
  void append(int64_t layer, const torch::Tensor& key, const torch::Tensor& value,
              const std::vector<int64_t>& counts = {});

  /// Beam search: row b becomes old row indices[b] (indices: [B] integers in [0, B), repeats allowed), in
  /// every layer, lengths included.
  void reorder(const torch::Tensor& indices);
  /// Shortens every row of every layer to at most `length` positions (speculative decoding's rollback). The
  /// positions it drops are zeroed, as keep_candidates' and reset's are: LibTorch's kernels multiply positions
  /// past a row's length by zero weights, and a NaN left there would reach the row.
  void truncate(int64_t length);
  /// Speculative decoding's commit: the last `num_candidates` positions of each row, in every layer, hold the
  /// candidates of a TokenTree (MultiHeadAttentionImpl::forward_with_tree appended them). Row b keeps the
  /// candidates accepted[b] (increasing candidate indices, a root-to-node path: TokenTree::path_to) right after
  /// its prefix and drops the rest. Only the accepted rows move; the prefix is not copied. Checks the indices'
  /// range and order, and the rows' lengths, before changing anything; the cache holds no tree, so a set that is
  /// not a path is kept as given (at positions its keys were not rotated for): keep_path cannot be given one.
  void keep_candidates(int64_t num_candidates, const std::vector<std::vector<int64_t>>& accepted);
  /// keep_candidates of the paths of `tree` that end at last[b] (the deepest accepted candidate of row b, or -1
  /// to keep none): the form that cannot keep a set of candidates that is not a root-to-node path.
  void keep_path(const TokenTree& tree, const std::vector<int64_t>& last);
  /// Empties every row (the buffers stay allocated) and forgets which module wrote each layer.
  void reset();

  /// A module's call on `layer` claims it for `module`: two modules configured with the same layer index
  /// would interleave their keys in one layer and decode wrong tokens without an error. check_writer throws,
  /// naming `caller`, when another module already wrote the layer since the cache was built or last reset;
  /// claim_layer checks and records `module` as the layer's writer. (The modules check before their call
  /// changes anything and claim once their append succeeded; a caller appending by hand need not.) Copies of a
  /// cache share their buffers, their lengths and these claims.
  void check_writer(int64_t layer, const void* module, const char* caller) const;
  void claim_layer(int64_t layer, const void* module, const char* caller);

 private:
  void check_layer(const char* fn, int64_t layer) const;
  /// The layer's keys and values, and its scales when the cache is int8: what reorder, truncate and
  /// keep_candidates move or clear together.
  std::vector<torch::Tensor*> layer_buffers(int64_t layer);

  KVCacheOptions options_;
  std::vector<torch::Tensor> keys_, values_;
  std::vector<torch::Tensor> key_scales_, value_scales_;  // int8 caches only
  std::vector<torch::Tensor> lengths_;
  std::shared_ptr<std::vector<const void*>> writers_;  // per layer: the module that wrote it, or nullptr
};

/// An encoder memory projected once by a cross-attention module, so that a decoder's every step reuses it
/// instead of projecting the same encoder output again.
/// Keys [B, H_kv, Tk, d_k] and values [B, H_kv, Tk, d_v] from a module's project_memory(); pass them to the
/// same module's forward(query, memory). Plain tensors: share them across steps and threads, move them with
/// .to(), or drop them when the sequence ends.
struct ProjectedMemory {
  torch::Tensor key;
  torch::Tensor value;
};

}  // namespace attn
