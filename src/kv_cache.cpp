#include <attn/kv_cache.h>

#include <attn/device.h>

#include "cache_positions.h"
#include "common/checks.h"
#include "common/dtypes.h"
#include "int8_rows.h"
#include "layer_writers.h"

#include <ATen/ATen.h>

#include <unistd.h>

#include <algorithm>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace attn {
namespace {
constexpr const char* kCache = "attn::KVCache";

/// Writes positions [0, n[b]) of rows[b] (the new positions along dimension 2) after position len[b] of
/// buffer[b]: row by row, except that where the rows are not written by memmove and every row takes as many at
/// the same length, one tensor copy takes them all.
void write_positions(const torch::Tensor& buffer, const torch::Tensor& rows, const int64_t* len,
                     const std::vector<int64_t>& n) {
  const int64_t B = buffer.size(0);
  const PositionWriter writer(buffer, rows);
  const bool uniform = std::all_of(n.begin(), n.end(), [&](int64_t c) { return c == n[0]; }) &&
                       std::all_of(len, len + B, [&](int64_t l) { return l == len[0]; });
  if (!writer.by_memmove() && uniform) {
    if (n[0] > 0) buffer.narrow(2, len[0], n[0]).copy_(n[0] == rows.size(2) ? rows : rows.narrow(2, 0, n[0]));
    return;
  }
  for (int64_t b = 0; b < B; ++b) writer.write({b, len[b], b, 0, n[b]});
}

/// Zeroes positions [from, to) of row b in each buffer (keys, values, an int8 cache's scales). Positions past a
/// row's length are read by no kernel of attn's, but LibTorch's (Backend::Torch, and Auto on a GPU) multiply
/// them by zero weights: a NaN that a discarded position kept would reach the rows that attend past it.
void zero_positions(const std::vector<torch::Tensor*>& buffers, int64_t b, int64_t from, int64_t to) {
  if (to <= from) return;
  for (torch::Tensor* buf : buffers) (*buf)[b].narrow(1, from, to - from).zero_();
}

/// "N layer(s) of [B, H_kv, capacity, head_dim] = [...] (value_dim V, dtype) on device": what a cache's
/// options ask for, in its errors.
std::string describe_buffers(const KVCacheOptions& o) {
  std::ostringstream s;
  s << o.num_layers() << " layer(s) of [B, H_kv, capacity, head_dim] = [" << o.batch() << ", " << o.num_kv_heads()
    << ", " << o.capacity() << ", " << o.head_dim() << "] (value_dim " << o.value_dim().value_or(o.head_dim())
    << ", " << common::dtype_name(o.dtype()) << ") on " << o.device();
  return s.str();
}

std::string gibibytes(int64_t bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30)
    << " GiB";
  return s.str();
}

}  // namespace

int64_t KVCacheOptions::buffer_bytes() const {
  const int64_t element = c10::elementSize(dtype());
  // Per position of one (row, head): its key and value, and an int8 cache's two float32 scales.
  const int64_t per_position = (head_dim() + value_dim().value_or(head_dim())) * element +
                               (dtype() == torch::kInt8 ? 2 * static_cast<int64_t>(sizeof(float)) : 0);
  int64_t bytes = per_position;
  for (const int64_t factor : {capacity(), num_kv_heads(), batch(), num_layers()}) {
    if (factor < 0 || __builtin_mul_overflow(bytes, factor, &bytes)) return std::numeric_limits<int64_t>::max();
  }
  return bytes;
}

void check_kv_cache_fits_memory(const KVCacheOptions& options) {
  if (!options.device().is_cpu()) return;
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return;  // unknown: the allocator decides
  const int64_t memory = static_cast<int64_t>(pages) * page_size, bytes = options.buffer_bytes();
  TORCH_CHECK(bytes <= memory, kCache, ": the buffers of ", describe_buffers(options), " would take ",
              gibibytes(bytes), ", more than this machine's ", gibibytes(memory), " of memory; a smaller capacity or ",
              "batch fits");
}

KVCache::KVCache(const KVCacheOptions& options) : options_(options) {
  using common::check_positive;
  check_positive(kCache, "num_layers", options.num_layers());
  check_positive(kCache, "batch", options.batch());
  check_positive(kCache, "num_kv_heads", options.num_kv_heads());
  check_positive(kCache, "head_dim", options.head_dim());
  check_positive(kCache, "capacity", options.capacity());
  const int64_t value_dim = options.value_dim().value_or(options.head_dim());
  check_positive(kCache, "value_dim", value_dim);
  TORCH_CHECK(common::is_attention_dtype(options.dtype()) || options.dtype() == torch::kInt8, kCache,
              ": dtype must be float32, float64, bfloat16, float16 or int8, got ", common::dtype_name(options.dtype()));
  check_device_usable(kCache, options.device());
  TORCH_CHECK(!quantized() || options.device().is_cpu(), kCache, ": an int8 cache is read by the CPU decode kernel "
              "only, got device ", options.device(), "; keep a cache on ", options.device(), " in the model's dtype");
  check_kv_cache_fits_memory(options);
  const auto tensor_options = torch::TensorOptions().dtype(options.dtype()).device(options.device());
  const int64_t B = options.batch(), H = options.num_kv_heads(), capacity = options.capacity();
  try {
    for (int64_t l = 0; l < options.num_layers(); ++l) {
      // Zeroed, not empty: the kernels never read past a row's length, but a caller reading the buffer may.
      keys_.push_back(at::zeros({B, H, capacity, options.head_dim()}, tensor_options));
      values_.push_back(at::zeros({B, H, capacity, value_dim}, tensor_options));
      if (quantized()) {
        key_scales_.push_back(at::zeros({B, H, capacity}, torch::kFloat32));
        value_scales_.push_back(at::zeros({B, H, capacity}, torch::kFloat32));
      } else {
        key_scales_.emplace_back();
        value_scales_.emplace_back();
      }
    }
  } catch (const c10::Error& e) {  // the allocator's message names bytes only: say which options asked for them
    TORCH_CHECK(false, kCache, ": cannot allocate the buffers of ", describe_buffers(options),
                "; a smaller capacity or batch fits: ", e.what_without_backtrace());
  }
  for (int64_t l = 0; l < options.num_layers(); ++l) lengths_.push_back(at::zeros({options.batch()}, at::kLong));
  writers_ = std::make_shared<std::vector<const void*>>(options.num_layers(), nullptr);
}

void KVCache::check_layer(const char* fn, int64_t layer) const {
  common::check_layer_index(kCache, fn, layer, num_layers());
}

std::vector<torch::Tensor*> KVCache::layer_buffers(int64_t layer) {
  std::vector<torch::Tensor*> buffers = {&keys_[layer], &values_[layer]};
  if (key_scales_[layer].defined()) buffers.insert(buffers.end(), {&key_scales_[layer], &value_scales_[layer]});
  return buffers;
}

const torch::Tensor& KVCache::keys(int64_t layer) const {
  check_layer("keys", layer);
  return keys_[layer];
}

const torch::Tensor& KVCache::values(int64_t layer) const {
  check_layer("values", layer);
  return values_[layer];
}

const torch::Tensor& KVCache::key_scales(int64_t layer) const {
  check_layer("key_scales", layer);
  return key_scales_[layer];
}

const torch::Tensor& KVCache::value_scales(int64_t layer) const {
  check_layer("value_scales", layer);
  return value_scales_[layer];
}

const torch::Tensor& KVCache::lengths(int64_t layer) const {
  check_layer("lengths", layer);
  return lengths_[layer];
}

void KVCache::append(int64_t layer, const torch::Tensor& key, const torch::Tensor& value,
                     const std::vector<int64_t>& counts) {
  check_layer("append", layer);
  const torch::Tensor& kbuf = keys_[layer];
  const torch::Tensor& vbuf = values_[layer];
  const int64_t B = batch(), H = options_.num_kv_heads();
  TORCH_CHECK(key.defined() && key.dim() == 4 && key.size(0) == B && key.size(1) == H &&
                  key.size(3) == kbuf.size(3),
              kCache, "::append: key must be [B, H_kv, T, head_dim] = [", B, ", ", H, ", T, ", kbuf.size(3),
              "], got ", key.defined() ? key.sizes() : at::IntArrayRef{});
  const int64_t T = key.size(2);
  TORCH_CHECK(value.defined() && value.dim() == 4 && value.size(0) == B && value.size(1) == H &&
                  value.size(2) == T && value.size(3) == vbuf.size(3),
              kCache, "::append: value must be [B, H_kv, T, value_dim] = [", B, ", ", H, ", ", T, ", ", vbuf.size(3),
              "], got ", value.defined() ? value.sizes() : at::IntArrayRef{});
  for (const torch::Tensor* t : {&key, &value}) {
    const char* arg = t == &key ? "key" : "value";
    if (quantized()) {
      TORCH_CHECK(common::is_attention_dtype(t->scalar_type()) && t->device() == kbuf.device(), kCache, "::append: ",
                  arg, " is ", common::dtype_name(*t), " on ", t->device(), " but an int8 cache on ", kbuf.device(),
                  " takes float32, float64, bfloat16 or float16 there");
    } else {
      TORCH_CHECK(t->scalar_type() == kbuf.scalar_type() && t->device() == kbuf.device(), kCache, "::append: ", arg,
                  " is ", common::dtype_name(*t), " on ", t->device(), " but the cache holds ",
                  common::dtype_name(kbuf), " on ", kbuf.device(), "; build the cache with the model's dtype and device");
    }
  }
  const std::vector<int64_t> n = counts.empty() ? std::vector<int64_t>(B, T) : counts;
  common::check_row_counts("attn::KVCache::append", "counts", n, B, T);
  int64_t* len = lengths_[layer].data_ptr<int64_t>();
  // Every check before any write: an overflow leaves the cache as it was.
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(len[b] + n[b] <= capacity(), kCache, "::append: row ", b, " holds ", len[b], " of ", capacity(),
                " positions and cannot take ", n[b], " more; nothing was written (build the cache with a larger "
                "capacity, or truncate/reset it)");
  }
  torch::NoGradGuard no_grad;  // the cache holds values, not a graph
  // (buffer, new rows) pairs, positions along dimension 2; an int8 cache's scales are written alike.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> writes;
  if (quantized()) {
    const StoredRows k = quantize_rows("attn::KVCache::append", "key", stored_positions(key, n)),
                     v = quantize_rows("attn::KVCache::append", "value", stored_positions(value, n));  // may throw
    writes = {{kbuf, k.rows}, {vbuf, v.rows}, {key_scales_[layer], k.scales}, {value_scales_[layer], v.scales}};
  } else {
    writes = {{kbuf, key}, {vbuf, value}};
  }
  for (auto& [buffer, rows] : writes) write_positions(buffer, rows, len, n);
  for (int64_t b = 0; b < B; ++b) len[b] += n[b];
}

void KVCache::reorder(const torch::Tensor& indices) {
  const int64_t B = batch();
  TORCH_CHECK(indices.defined() && indices.dim() == 1 && indices.size(0) == B, kCache,
              "::reorder: indices must be [B] = [", B, "], got ", indices.defined() ? indices.sizes() : at::IntArrayRef{});
  TORCH_CHECK(!c10::isFloatingType(indices.scalar_type()) && indices.scalar_type() != at::kBool, kCache,
              "::reorder: indices must be integers, got ", common::dtype_name(indices));
  const torch::Tensor idx = indices.to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = idx.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(p[b] >= 0 && p[b] < B, kCache, "::reorder: indices[", b, "] = ", p[b], " is not a row in [0, ", B,
                ")");
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor device_idx = idx.to(options_.device());
  for (int64_t l = 0; l < num_layers(); ++l) {
    int64_t* len = lengths_[l].data_ptr<int64_t>();
    const int64_t used = *std::max_element(len, len + B);
    if (used > 0) {
      // Only the used prefix moves; index_select gathers into a new tensor first, so rows may repeat.
      for (torch::Tensor* buf : layer_buffers(l)) {
        torch::Tensor prefix = buf->narrow(2, 0, used);
        prefix.copy_(prefix.index_select(0, device_idx));
      }
    }
    std::vector<int64_t> reordered(B);
    for (int64_t b = 0; b < B; ++b) reordered[b] = len[p[b]];
    std::copy(reordered.begin(), reordered.end(), len);
  }
}

void KVCache::truncate(int64_t length) {
  TORCH_CHECK(length >= 0, kCache, "::truncate: length must be >= 0, got ", length);
  torch::NoGradGuard no_grad;
  for (int64_t l = 0; l < num_layers(); ++l) {
    int64_t* len = lengths_[l].data_ptr<int64_t>();
    for (int64_t b = 0; b < batch(); ++b) {
      zero_positions(layer_buffers(l), b, length, len[b]);
      len[b] = std::min(len[b], length);
    }
  }
}

void KVCache::reset() {
  truncate(0);
  std::fill(writers_->begin(), writers_->end(), nullptr);
}

void KVCache::keep_path(const TokenTree& tree, const std::vector<int64_t>& last) {
  TORCH_CHECK(static_cast<int64_t>(last.size()) == batch(), kCache, "::keep_path: last must have one node per batch "
              "row (", batch(), "), got ", last.size());
  std::vector<std::vector<int64_t>> accepted(last.size());
  for (size_t b = 0; b < last.size(); ++b) {
    TORCH_CHECK(last[b] >= -1 && last[b] < tree.size(), kCache, "::keep_path: last[", b, "] must be -1 or a candidate in "
                "[0, ", tree.size(), "), got ", last[b]);
    if (last[b] >= 0) accepted[b] = tree.path_to(last[b]);
  }
  keep_candidates(tree.size(), accepted);
}

void KVCache::check_writer(int64_t layer, const void* module, const char* caller) const {
  check_layer("check_writer", layer);
  check_layer_writer(*writers_, layer, module, caller, "since the cache was built or reset",
                     "reset() the cache before handing it to other modules");
}

void KVCache::claim_layer(int64_t layer, const void* module, const char* caller) {
  check_writer(layer, module, caller);
  (*writers_)[layer] = module;
}

void KVCache::keep_candidates(int64_t num_candidates, const std::vector<std::vector<int64_t>>& accepted) {
  const int64_t B = batch();
  TORCH_CHECK(num_candidates >= 1, kCache, "::keep_candidates: num_candidates must be >= 1, got ", num_candidates);
  TORCH_CHECK(static_cast<int64_t>(accepted.size()) == B, kCache,
              "::keep_candidates: accepted must have one list per batch row (", B, "), got ", accepted.size());
  for (int64_t b = 0; b < B; ++b) {
    int64_t previous = -1;
    for (int64_t index : accepted[b]) {
      TORCH_CHECK(index > previous && index < num_candidates, kCache, "::keep_candidates: accepted[", b,
                  "] must hold increasing candidate indices in [0, ", num_candidates, "), got ", index, " after ",
                  previous);
      previous = index;
    }
    for (int64_t l = 0; l < num_layers(); ++l) {
      const int64_t length = lengths_[l].data_ptr<int64_t>()[b];
      TORCH_CHECK(length >= num_candidates, kCache, "::keep_candidates: layer ", l, " row ", b, " holds ", length,
                  " positions, fewer than the ", num_candidates, " candidates");
    }
  }
  torch::NoGradGuard no_grad;
  for (int64_t l = 0; l < num_layers(); ++l) {
    int64_t* len = lengths_[l].data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
      const int64_t prefix = len[b] - num_candidates, kept = static_cast<int64_t>(accepted[b].size());
      if (kept > 0) {
        const torch::Tensor sources =
            (torch::tensor(accepted[b], torch::kLong) + prefix).to(options_.device());
        for (torch::Tensor* buf : layer_buffers(l)) {
          torch::Tensor row = (*buf)[b];  // [H_kv, capacity(, d)]
          row.narrow(1, prefix, kept).copy_(row.index_select(1, sources));  // gathered first: sources may overlap
        }
      }
      zero_positions(layer_buffers(l), b, prefix + kept, len[b]);
      len[b] = prefix + kept;
    }
  }
}

}  // namespace attn
