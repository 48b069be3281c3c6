#pragma once
// A KV cache in fixed-size blocks, for serving many sequences at once (vLLM's paged attention on the CPU):
// each sequence has a list of blocks (its block table), sequences that share a prefix share its blocks
// (fork), and a finished sequence gives its blocks back (release). A sequence takes its blocks in runs of
// adjacent ones, so that sequences growing together still read like contiguous caches. The decode kernel reads
// the blocks in place through the block table. KVCache (kv_cache.h) remains the simple, contiguous case.

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace attn {

struct PagedKVCacheOptions {
  PagedKVCacheOptions(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, int64_t num_blocks,
                      int64_t block_size)
      : num_layers_(num_layers), num_kv_heads_(num_kv_heads), head_dim_(head_dim), num_blocks_(num_blocks),
        block_size_(block_size) {}
  TORCH_ARG(int64_t, num_layers);
  TORCH_ARG(int64_t, num_kv_heads);
  /// Width of each key head.
  TORCH_ARG(int64_t, head_dim);
  /// Blocks in the pool, shared by every sequence; a block holds block_size positions of every layer.
  TORCH_ARG(int64_t, num_blocks);
  /// Positions per block (vLLM uses 16; any size works, the decode kernel reads a block's run at a time).
  TORCH_ARG(int64_t, block_size);
  /// Width of each value head. Default: head_dim.
  TORCH_ARG(std::optional<int64_t>, value_dim) = std::nullopt;
  /// The model's dtype (float32, float64, bfloat16), or torch::kInt8 for int8 rows with a scale each, as
  /// KVCacheOptions::dtype. The blocks live on the CPU: the decode kernel that reads them is the CPU's.
  TORCH_ARG(torch::Dtype, dtype) = torch::kFloat32;
  /// Positions a sequence takes adjacent blocks for at a time, where the pool has such a run. Default: the
  /// decode kernel's split (ops::kDecodeSplitKeys, 256, or ops::kDecodeSplitKeysInt8, 1024, for int8), so
  /// that sequences growing together, as a batch decoding in turn, still keep each split in adjacent blocks
  /// (where block_size divides the split), which the kernel streams as it streams a contiguous cache; blocks
  /// taken one at a time in turn read at 0.5x-1.0x that speed on the CPU measured (docs/decoding.md). The rest
  /// of a run is reserved for its sequence but counts as free: another sequence takes part of it when the pool
  /// has no other free block, and a release returns it. 1 takes one block at a time.
  TORCH_ARG(std::optional<int64_t>, run_positions) = std::nullopt;
};

/// Some sequences of a PagedKVCache, as one call's batch: their block tables [B, max_blocks] (int64, CPU) and
/// lengths [B] in one layer, at one version of the cache. Any append, fork or release makes it stale: the
/// attention refuses a stale batch instead of reading blocks that may have changed hands.
struct PagedBatch {
  std::vector<int64_t> sequences;
  int64_t layer = 0;
  torch::Tensor block_table, lengths;
  uint64_t cache_id = 0, version = 0;  // the cache that made it, and its version then
};

/// Per layer, key blocks [num_blocks, H_kv, block_size, head_dim] and value blocks [num_blocks, H_kv,
/// block_size, value_dim] (zeroed), and for an int8 cache their scales [num_blocks, H_kv, block_size]. The
/// tensors are views of storage kept head by head, so a head's rows in consecutive blocks are adjacent in memory.
/// Sequences are named by the ids add_sequence and fork return. A sequence's position j lives in block
/// table[j / block_size] at slot j % block_size, in every layer; each layer keeps its own length per sequence
/// (a decoder appends layer by layer).
///
/// MultiHeadAttention::forward_with_cache(x, paged_cache, layer, sequences) appends and attends in one call.
/// Used directly: append(layer, sequences, k, v), then attn::attention_with_kv_cache(q, cache,
/// cache.batch(layer, sequences), query_starts).
///
/// Not synchronised: one thread (or one serving loop) uses a cache at a time.
class PagedKVCache {
 public:
  explicit PagedKVCache(const PagedKVCacheOptions& options);
  /// Move-only: a copy would share the blocks but count their owners apart, and hand the same block out twice.
  /// A moved-from cache may only be assigned to or destroyed.
  PagedKVCache(const PagedKVCache&) = delete;
  PagedKVCache& operator=(const PagedKVCache&) = delete;
  PagedKVCache(PagedKVCache&&) = default;
  PagedKVCache& operator=(PagedKVCache&&) = default;

  const PagedKVCacheOptions& options() const { return options_; }
  int64_t num_layers() const { return options_.num_layers(); }
  int64_t block_size() const { return options_.block_size(); }
  bool quantized() const { return options_.dtype() == torch::kInt8; }

  /// A new, empty sequence; returns its id.
  int64_t add_sequence();
  /// A new sequence holding `sequence`'s positions in every layer, sharing its blocks: no block is copied or
  /// allocated until one of the two writes into a shared block (copy on write, one block at a time).
  int64_t fork(int64_t sequence);
  /// Forgets `sequence`; each of its blocks returns to the pool once no other sequence shares it.
  void release(int64_t sequence);
  /// The live sequences' ids, ascending.
  std::vector<int64_t> sequences() const;

  /// Positions `sequence` holds in `layer`.
  int64_t length(int64_t layer, int64_t sequence) const;
  /// The blocks `sequence` refers to, in order (shared ones included).
  std::vector<int64_t> blocks_of(int64_t sequence) const;
  /// Blocks no sequence holds (a sequence's reserved run included: see PagedKVCacheOptions::run_positions).
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()) + reserved_; }
  int64_t blocks_in_use() const { return options_.num_blocks() - free_blocks(); }

  /// Writes key [B, H_kv, T, head_dim] and value [B, H_kv, T, value_dim] after the current length of
  /// sequences[b] in `layer` (its first counts[b] positions of T; default all T), taking blocks from the pool
  /// as needed and copying a shared block before writing into it. Checks everything first (the ids, the
  /// shapes, that the pool has every block the call needs): on any failure nothing is written.
  void append(int64_t layer, const std::vector<int64_t>& sequences, const torch::Tensor& key,
              const torch::Tensor& value, const std::vector<int64_t>& counts = {});

  /// The block tables and lengths of `sequences` in `layer`, at this version of the cache.
  PagedBatch batch(int64_t layer, const std::vector<int64_t>& sequences) const;
  /// Changes with every append, fork and release.
  uint64_t version() const { return version_; }
  /// Tells this cache from every other one in the process (a PagedBatch names the cache that made it).
  uint64_t id() const { return id_; }

  const torch::Tensor& key_blocks(int64_t layer) const;
  const torch::Tensor& value_blocks(int64_t layer) const;
  /// An int8 cache's scales [num_blocks, H_kv, block_size]; undefined tensors otherwise. An int8 block's rows
  /// times their scales stand for the appended rows rotated by hadamard_rows (hadamard_rows.h), as KVCache's do.
  const torch::Tensor& key_scales(int64_t layer) const;
  const torch::Tensor& value_scales(int64_t layer) const;

  /// One module per layer, as KVCache::check_writer and claim_layer: a module's forward_with_cache on `layer`
  /// claims it, and another module's call on that layer is refused, naming `caller`, until the cache holds no
  /// sequence again (the last one released). A caller appending by hand need not claim.
  void check_writer(int64_t layer, const void* module, const char* caller) const;
  void claim_layer(int64_t layer, const void* module, const char* caller);

 private:
  struct Sequence {
    int64_t id = 0;
    std::vector<int64_t> blocks;
    std::vector<int64_t> lengths;  // per layer
    int64_t run_next = 0, run_left = 0;  // its reserved blocks: [run_next, run_next + run_left), taken in order
  };
  void check_layer(const char* fn, int64_t layer) const;
  const Sequence& find(const char* fn, int64_t sequence) const;
  Sequence& find(const char* fn, int64_t sequence);
  int64_t take_block(Sequence& s, int64_t index);
  void set_run(Sequence& s, int64_t next, int64_t left);  // keeps reserved_ and runs_ in step
  void drop_block(int64_t block);
  void end_run(Sequence& s);

  PagedKVCacheOptions options_;
  std::vector<torch::Tensor> keys_, values_, key_scales_, value_scales_;
  std::vector<const void*> writers_;  // per layer: the module that wrote it, or nullptr
  int64_t run_blocks_ = 1;           // blocks per run (run_positions in blocks)
  std::set<int64_t> free_;           // blocks nobody refers to or reserves, in pool order (to find runs)
  int64_t search_from_ = 0;          // where the next search for a run starts: after the last run taken
  int64_t reserved_ = 0;             // blocks reserved in the sequences' runs
  std::set<std::pair<int64_t, int64_t>> runs_;  // (blocks reserved, sequence id) of every sequence with a run
  std::vector<int64_t> references_;  // per block: how many sequences refer to it
  std::unordered_map<int64_t, Sequence> sequences_;
  int64_t next_id_ = 0;
  uint64_t version_ = 0, id_ = 0;
};

}  // namespace attn
