#include <attn/paged_kv_cache.h>

#include "cache_positions.h"
#include "huge_page_memory.h"
#include "common/checks.h"
#include "common/dtypes.h"
#include "int8_rows.h"
#include "layer_writers.h"

#include <attn/ops/decode_attention.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace attn {
namespace {
constexpr const char* kPaged = "attn::PagedKVCache";

/// A zeroed pool [num_blocks, H_kv, ...] stored head by head ([H_kv, num_blocks, ...] in memory): a head's rows
/// in consecutive blocks then lie one after another, so a sequence whose blocks were taken in order (a prompt's)
/// streams like a contiguous cache instead of jumping every block_size rows. A pool of a huge page or more sits
/// on huge pages where Linux offers them (huge_page_memory.h): a sequence's blocks lie anywhere in the pool, and
/// with 4 KiB pages nearly every block a decode step reads would be a TLB miss of its own.
torch::Tensor block_pool(at::IntArrayRef sizes, torch::Dtype dtype) {
  std::vector<int64_t> head_major(sizes.begin(), sizes.end());
  std::swap(head_major[0], head_major[1]);
  const auto as_block_major = [](const torch::Tensor& pool) { return pool.transpose(0, 1); };
  int64_t bytes = static_cast<int64_t>(c10::elementSize(dtype));
  for (int64_t s : sizes) TORCH_CHECK(!__builtin_mul_overflow(bytes, s, &bytes), "its size overflows 64 bits");
  if (bytes < kHugePageBytes) return as_block_major(at::zeros(head_major, dtype));  // small: not worth a huge page
  std::string why_not;
  const std::shared_ptr<HugePageMemory> memory = HugePageMemory::map(bytes, &why_not);
  TORCH_CHECK(memory != nullptr, kPaged, ": cannot allocate a block pool of ", bytes, " bytes: ", why_not);
  return as_block_major(torch::from_blob(memory->data(), head_major, [memory](void*) {},
                                         torch::TensorOptions().dtype(dtype)));
}
}  // namespace

PagedKVCache::PagedKVCache(const PagedKVCacheOptions& options) : options_(options) {
  static std::atomic<uint64_t> caches{0};
  id_ = ++caches;
  using common::check_positive;
  check_positive(kPaged, "num_layers", options.num_layers());
  check_positive(kPaged, "num_kv_heads", options.num_kv_heads());
  check_positive(kPaged, "head_dim", options.head_dim());
  check_positive(kPaged, "num_blocks", options.num_blocks());
  check_positive(kPaged, "block_size", options.block_size());
  const int64_t value_dim = options.value_dim().value_or(options.head_dim());
  check_positive(kPaged, "value_dim", value_dim);
  TORCH_CHECK(common::is_decode_kernel_dtype(options.dtype()) || options.dtype() == torch::kInt8, kPaged,
              ": dtype must be float32, float64, bfloat16 or int8 (what the CPU decode kernel reads), got ",
              common::dtype_name(options.dtype()));
  const int64_t N = options.num_blocks(), H = options.num_kv_heads(), S = options.block_size();
  const int64_t split = quantized() ? ops::kDecodeSplitKeysInt8 : ops::kDecodeSplitKeys;
  const int64_t run = options.run_positions().value_or(split);
  check_positive(kPaged, "run_positions", run);
  run_blocks_ = std::min(run / S + (run % S != 0), N);
  try {
    for (int64_t l = 0; l < options.num_layers(); ++l) {
      keys_.push_back(block_pool({N, H, S, options.head_dim()}, options.dtype()));
      values_.push_back(block_pool({N, H, S, value_dim}, options.dtype()));
      key_scales_.push_back(quantized() ? block_pool({N, H, S}, torch::kFloat32) : torch::Tensor());
      value_scales_.push_back(quantized() ? block_pool({N, H, S}, torch::kFloat32) : torch::Tensor());
    }
  } catch (const c10::Error& e) {  // name the options that asked for the memory
    TORCH_CHECK(false, kPaged, ": cannot allocate the block pools of ", options.num_layers(), " layer(s) of ",
                "[num_blocks, H_kv, block_size, head_dim] = [", N, ", ", H, ", ", S, ", ", options.head_dim(),
                "] (value_dim ", value_dim, ", ", common::dtype_name(options.dtype()),
                "); fewer or smaller blocks fit: ", e.what_without_backtrace());
  }
  references_.assign(N, 0);
  for (int64_t block = 0; block < N; ++block) free_.insert(free_.end(), block);
  writers_.assign(options.num_layers(), nullptr);
}

void PagedKVCache::check_layer(const char* fn, int64_t layer) const {
  common::check_layer_index(kPaged, fn, layer, num_layers());
}

const PagedKVCache::Sequence& PagedKVCache::find(const char* fn, int64_t sequence) const {
  const auto it = sequences_.find(sequence);
  TORCH_CHECK(it != sequences_.end(), kPaged, "::", fn, ": no sequence ", sequence,
              " (never added, or released); live sequences: ", sequences_.size());
  return it->second;
}

PagedKVCache::Sequence& PagedKVCache::find(const char* fn, int64_t sequence) {
  return const_cast<Sequence&>(std::as_const(*this).find(fn, sequence));
}

void PagedKVCache::set_run(Sequence& s, int64_t next, int64_t left) {
  if (s.run_left > 0) runs_.erase({s.run_left, s.id});
  reserved_ += left - s.run_left;
  s.run_next = next, s.run_left = left;
  if (left > 0) runs_.insert({left, s.id});
}

// Block `index` of s: the next of its run; else, up to the end of the run `index` belongs to (runs start at
// multiples of run_blocks_, where the kernel's splits do when block_size divides them), the first of that many
// adjacent free blocks, reserving the rest; or, with no free block left but those reserved, the tail half of the
// longest run a sequence reserved (runs_ keeps them in order, so a full pool of many sequences costs no search).
// append has checked that the pool has a block for every call.
int64_t PagedKVCache::take_block(Sequence& s, int64_t index) {
  if (s.run_left > 0 && index > 0 && s.run_next == s.blocks[index - 1] + 1) {
    const int64_t block = s.run_next;
    set_run(s, s.run_next + 1, s.run_left - 1);
    references_[block] = 1;
    return block;
  }
  end_run(s);  // a run left behind (the sequence copied a shared block instead) goes back to the pool
  const int64_t wanted = run_blocks_ - index % run_blocks_;
  int64_t block = -1;
  if (!free_.empty()) {
    // Next fit, from where the last search ended: the first run of `wanted` adjacent free blocks among the next
    // kRunSearch free blocks, else the longest run among them (bounded, so a fragmented pool costs little).
    constexpr int64_t kRunSearch = 4096;
    auto it = free_.lower_bound(search_from_);
    if (it == free_.end()) it = free_.begin();
    int64_t best = *it, best_length = 0, start = *it, length = 0, previous = -2;
    const int64_t visits = std::min<int64_t>(kRunSearch, static_cast<int64_t>(free_.size()));
    for (int64_t seen = 0; seen < visits && best_length < wanted; ++seen) {
      if (*it != previous + 1) start = *it, length = 0;
      previous = *it;
      if (++length > best_length) best = start, best_length = length;
      if (++it == free_.end()) it = free_.begin(), previous = -2;  // blocks do not run on across the end
    }
    it = free_.find(best);
    for (int64_t i = 0; i < best_length; ++i) it = free_.erase(it);
    search_from_ = best + best_length;
    block = best;
    set_run(s, best + 1, best_length - 1);
  } else {
    TORCH_INTERNAL_ASSERT(!runs_.empty(), kPaged, ": no free block (append checks the pool first)");
    Sequence& donor = sequences_.at(runs_.rbegin()->second);  // the longest run (of the highest id, if tied)
    const int64_t given = std::min(wanted, (donor.run_left + 1) / 2);
    block = donor.run_next + donor.run_left - given;
    set_run(donor, donor.run_next, donor.run_left - given);
    set_run(s, block + 1, given - 1);
  }
  references_[block] = 1;
  return block;
}

void PagedKVCache::end_run(Sequence& s) {
  for (int64_t i = 0; i < s.run_left; ++i) free_.insert(s.run_next + i);
  set_run(s, 0, 0);
}

void PagedKVCache::drop_block(int64_t block) {
  if (--references_[block] == 0) free_.insert(block);
}

int64_t PagedKVCache::add_sequence() {
  Sequence& s = sequences_[next_id_];
  s.id = next_id_;
  s.lengths.assign(num_layers(), 0);
  ++version_;
  return next_id_++;
}

int64_t PagedKVCache::fork(int64_t sequence) {
  Sequence copy = find("fork", sequence);
  copy.id = next_id_;
  copy.run_left = 0;  // the parent keeps its run
  for (int64_t block : copy.blocks) ++references_[block];
  sequences_[next_id_] = std::move(copy);
  ++version_;
  return next_id_++;
}

void PagedKVCache::release(int64_t sequence) {
  Sequence& s = find("release", sequence);
  end_run(s);
  for (int64_t block : s.blocks) drop_block(block);
  sequences_.erase(sequence);
  if (sequences_.empty()) std::fill(writers_.begin(), writers_.end(), nullptr);  // no layer holds anything
  ++version_;
}

void PagedKVCache::check_writer(int64_t layer, const void* module, const char* caller) const {
  check_layer("check_writer", layer);
  check_layer_writer(writers_, layer, module, caller, "since the cache was built or last held no sequence",
                     "release every sequence before handing the cache to other modules");
}

void PagedKVCache::claim_layer(int64_t layer, const void* module, const char* caller) {
  check_writer(layer, module, caller);
  writers_[layer] = module;
}

std::vector<int64_t> PagedKVCache::sequences() const {
  std::vector<int64_t> ids;
  for (const auto& entry : sequences_) ids.push_back(entry.first);
  std::sort(ids.begin(), ids.end());
  return ids;
}

int64_t PagedKVCache::length(int64_t layer, int64_t sequence) const {
  check_layer("length", layer);
  return find("length", sequence).lengths[layer];
}

std::vector<int64_t> PagedKVCache::blocks_of(int64_t sequence) const { return find("blocks_of", sequence).blocks; }

void PagedKVCache::append(int64_t layer, const std::vector<int64_t>& sequences, const torch::Tensor& key,
                          const torch::Tensor& value, const std::vector<int64_t>& counts) {
  constexpr const char* fn = "attn::PagedKVCache::append";
  check_layer("append", layer);
  const int64_t B = static_cast<int64_t>(sequences.size()), H = options_.num_kv_heads(), S = block_size();
  const int64_t dk = keys_[layer].size(3), dv = values_[layer].size(3);
  TORCH_CHECK(B > 0, fn, ": sequences is empty");
  TORCH_CHECK(std::set<int64_t>(sequences.begin(), sequences.end()).size() == sequences.size(), fn,
              ": a sequence is listed twice; each batch row writes its own sequence");
  for (int64_t id : sequences) find("append", id);
  TORCH_CHECK(key.defined() && key.dim() == 4 && key.size(0) == B && key.size(1) == H && key.size(3) == dk, fn,
              ": key must be [B, H_kv, T, head_dim] = [", B, ", ", H, ", T, ", dk, "], got ",
              key.defined() ? key.sizes() : at::IntArrayRef{});
  const int64_t T = key.size(2);
  TORCH_CHECK(value.defined() && value.dim() == 4 && value.size(0) == B && value.size(1) == H && value.size(2) == T &&
                  value.size(3) == dv,
              fn, ": value must be [B, H_kv, T, value_dim] = [", B, ", ", H, ", ", T, ", ", dv, "], got ",
              value.defined() ? value.sizes() : at::IntArrayRef{});
  for (const torch::Tensor* t : {&key, &value}) {
    const char* arg = t == &key ? "key" : "value";
    TORCH_CHECK(t->is_cpu(), fn, ": ", arg, " is on ", t->device(), "; a PagedKVCache lives on the CPU");
    if (quantized()) {
      TORCH_CHECK(common::is_attention_dtype(t->scalar_type()), fn, ": ", arg, " is ", common::dtype_name(*t),
                  " but an int8 cache takes float32, float64, bfloat16 or float16");
    } else {
      TORCH_CHECK(t->scalar_type() == options_.dtype(), fn, ": ", arg, " is ", common::dtype_name(*t),
                  " but the cache holds ", common::dtype_name(options_.dtype()),
                  "; build the cache with the model's dtype");
    }
  }
  const std::vector<int64_t> n = counts.empty() ? std::vector<int64_t>(B, T) : counts;
  TORCH_CHECK(static_cast<int64_t>(n.size()) == B, fn, ": counts must have one entry per batch row (", B, "), got ",
              n.size());
  // The blocks the call needs: new ones past each table's end, and a copy of every shared block it writes into.
  int64_t needed = 0;
  std::unordered_map<int64_t, int64_t> references;  // of the shared blocks written, as the writes will leave them
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(n[b] >= 0 && n[b] <= T, fn, ": counts[", b, "] must be in [0, T = ", T, "], got ", n[b]);
    if (n[b] == 0) continue;
    const Sequence& s = sequences_.at(sequences[b]);
    const int64_t begin = s.lengths[layer], end = begin + n[b];
    const int64_t have = static_cast<int64_t>(s.blocks.size());
    needed += std::max<int64_t>((end + S - 1) / S - have, 0);
    for (int64_t i = begin / S; i < std::min(have, (end + S - 1) / S); ++i) {
      const int64_t block = s.blocks[i];
      int64_t& r = references.emplace(block, references_[block]).first->second;
      if (r > 1) ++needed, --r;  // copied, and one sharer fewer
    }
  }
  TORCH_CHECK(needed <= free_blocks(), fn, ": the block pool is full: this append needs ", needed,
              " more block(s) and ", free_blocks(), " of ", options_.num_blocks(),
              " are free; nothing was written (release finished sequences, or build the cache with more blocks)");
  torch::NoGradGuard no_grad;
  // Rows that are a view of the pool itself are copied first: the writes below change the blocks they would be
  // read from (and LibTorch's copy refuses the overlap), after the tables and lengths already changed.
  const auto rows_apart_from_the_pool = [&](const torch::Tensor& rows) {
    for (const std::vector<torch::Tensor>* pool : {&keys_, &values_}) {
      for (const torch::Tensor& blocks : *pool) {
        if (rows.is_alias_of(blocks)) return rows.clone();
      }
    }
    return rows;
  };
  StoredRows k{rows_apart_from_the_pool(key), {}}, v{rows_apart_from_the_pool(value), {}};
  if (quantized()) {  // before any write
    k = quantize_rows(fn, "key", stored_positions(key, n)), v = quantize_rows(fn, "value", stored_positions(value, n));
  }

  // The blocks first (new ones, and copies of the shared ones written into), then every block's share of the
  // new positions.
  std::vector<PositionRun> runs;
  for (int64_t b = 0; b < B; ++b) {
    if (n[b] == 0) continue;
    Sequence& s = sequences_.at(sequences[b]);
    const int64_t begin = s.lengths[layer], end = begin + n[b];
    for (int64_t i = begin / S; i * S < end; ++i) {
      if (i == static_cast<int64_t>(s.blocks.size())) {
        s.blocks.push_back(take_block(s, i));
      } else if (references_[s.blocks[i]] > 1) {  // copy on write, every layer's rows of the block
        const int64_t shared = s.blocks[i], own = take_block(s, i);
        for (int64_t l = 0; l < num_layers(); ++l) {
          for (std::vector<torch::Tensor>* pool : {&keys_, &values_, &key_scales_, &value_scales_}) {
            if ((*pool)[l].defined()) (*pool)[l][own].copy_((*pool)[l][shared]);
          }
        }
        drop_block(shared);
        s.blocks[i] = own;
      }
      // Positions [first, last) of this block, from the new rows' [first - begin, last - begin).
      const int64_t first = std::max(begin, i * S), last = std::min(end, (i + 1) * S);
      runs.push_back({s.blocks[i], first - i * S, b, first - begin, last - first});
    }
    s.lengths[layer] = end;
  }
  const auto write = [&](const torch::Tensor& pool, const torch::Tensor& rows) {
    const PositionWriter writer(pool, rows);
    for (const PositionRun& run : runs) writer.write(run);
  };
  write(keys_[layer], k.rows);
  write(values_[layer], v.rows);
  if (quantized()) {
    write(key_scales_[layer], k.scales);
    write(value_scales_[layer], v.scales);
  }
  ++version_;
}

PagedBatch PagedKVCache::batch(int64_t layer, const std::vector<int64_t>& sequences) const {
  check_layer("batch", layer);
  TORCH_CHECK(!sequences.empty(), kPaged, "::batch: sequences is empty");
  size_t widest = 1;
  for (int64_t id : sequences) widest = std::max(widest, find("batch", id).blocks.size());
  PagedBatch out;
  out.sequences = sequences;
  out.layer = layer;
  out.cache_id = id_;
  out.version = version_;
  const int64_t B = static_cast<int64_t>(sequences.size());
  out.block_table = torch::zeros({B, static_cast<int64_t>(widest)}, torch::kLong);  // past a row's blocks: unread
  out.lengths = torch::empty({B}, torch::kLong);
  int64_t* table = out.block_table.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const Sequence& s = sequences_.at(sequences[b]);
    std::copy(s.blocks.begin(), s.blocks.end(), table + b * static_cast<int64_t>(widest));
    out.lengths.data_ptr<int64_t>()[b] = s.lengths[layer];
  }
  return out;
}

const torch::Tensor& PagedKVCache::key_blocks(int64_t layer) const {
  check_layer("key_blocks", layer);
  return keys_[layer];
}

const torch::Tensor& PagedKVCache::value_blocks(int64_t layer) const {
  check_layer("value_blocks", layer);
  return values_[layer];
}

const torch::Tensor& PagedKVCache::key_scales(int64_t layer) const {
  check_layer("key_scales", layer);
  return key_scales_[layer];
}

const torch::Tensor& PagedKVCache::value_scales(int64_t layer) const {
  check_layer("value_scales", layer);
  return value_scales_[layer];
}

}  // namespace attn
