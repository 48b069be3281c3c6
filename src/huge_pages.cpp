// attn::place_on_huge_pages: a module's CPU weights copied into one block that Linux backs with huge pages.

#include <attn/huge_pages.h>

#include "huge_page_memory.h"

#include <ATen/ATen.h>
#include <c10/core/Storage.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace attn {
namespace {

constexpr int64_t kStorageAlignment = 64;  // each storage on a cache line, as LibTorch's CPU allocator places them

/// The module's tensors that share one storage, and where that storage goes in the block.
struct StorageGroup {
  std::vector<torch::Tensor> tensors;
  int64_t offset = 0;
  const c10::Storage& storage() const { return tensors.front().storage(); }
};

void release_memory(void* holder) { delete static_cast<std::shared_ptr<HugePageMemory>*>(holder); }

}  // namespace

HugePagePlacement place_on_huge_pages(torch::nn::Module& module) {
  HugePagePlacement result;
  std::vector<StorageGroup> groups;
  std::unordered_map<const c10::StorageImpl*, size_t> group_of;
  std::unordered_set<const c10::TensorImpl*> seen;  // a tensor registered under two names moves once
  const auto take = [&](const torch::Tensor& t) {
    if (!t.defined() || !seen.insert(t.unsafeGetTensorImpl()).second) return;
    if (!t.device().is_cpu() || t.layout() != torch::kStrided || t.is_quantized() || !t.has_storage() ||
        t.is_inference()) {
      ++result.skipped;
      return;
    }
    if (t.storage().nbytes() == 0) return;  // nothing to read: where it points does not matter
    const auto [at, added] = group_of.emplace(t.storage().unsafeGetStorageImpl(), groups.size());
    if (added) groups.emplace_back();
    groups[at->second].tensors.push_back(t);
  };
  const std::vector<torch::Tensor> parameters = module.parameters(/*recurse=*/true);
  const std::vector<torch::Tensor> buffers = module.buffers(/*recurse=*/true);
  for (const torch::Tensor& t : parameters) take(t);
  for (const torch::Tensor& t : buffers) take(t);
  if (groups.empty()) return result;
  int64_t total = 0;
  for (StorageGroup& g : groups) {
    g.offset = total;
    total += round_up_to(static_cast<int64_t>(g.storage().nbytes()), kStorageAlignment);
  }

  result.unavailable = transparent_huge_pages_off();
  if (!result.unavailable.empty()) return result;  // copying would gain nothing
  const std::shared_ptr<HugePageMemory> memory = HugePageMemory::map(total, &result.unavailable);
  if (!memory) return result;
  // A storage at a time, so that each old one can be freed before the next is copied.
  for (StorageGroup& g : groups) {
    const size_t nbytes = g.storage().nbytes();
    char* to = memory->data() + g.offset;
    std::memcpy(to, g.storage().data_ptr().get(), nbytes);
    c10::DataPtr data(to, new std::shared_ptr<HugePageMemory>(memory), &release_memory, c10::Device(c10::kCPU));
    const c10::Storage moved(c10::Storage::use_byte_size_t(), nbytes, std::move(data), /*allocator=*/nullptr,
                             /*resizable=*/false);
    // Every replacement made before any tensor changes: the group moves whole or not at all.
    std::vector<torch::Tensor> replacements;
    for (const torch::Tensor& t : g.tensors) {
      replacements.push_back(at::empty({0}, t.options()).set_(moved, t.storage_offset(), t.sizes(), t.strides()));
    }
    for (size_t i = 0; i < g.tensors.size(); ++i) g.tensors[i].set_data(replacements[i]);
    result.tensors += static_cast<int64_t>(g.tensors.size());
    result.bytes += static_cast<int64_t>(nbytes);
  }
  result.huge_page_bytes = std::min(memory->huge_page_bytes(), result.bytes);
  return result;
}

}  // namespace attn
