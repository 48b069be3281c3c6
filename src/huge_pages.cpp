// attn::place_on_huge_pages: a module's CPU weights copied into one block that Linux backs with huge pages.

#include <attn/huge_pages.h>

#include <ATen/ATen.h>
#include <c10/core/Storage.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>

#include <cerrno>
#include <fstream>
#endif

namespace attn {
namespace {

constexpr int64_t kStorageAlignment = 64;  // each storage on a cache line, as LibTorch's CPU allocator places them

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

/// The module's tensors that share one storage, and where that storage goes in the block.
struct StorageGroup {
  std::vector<torch::Tensor> tensors;
  int64_t offset = 0;
  const c10::Storage& storage() const { return tensors.front().storage(); }
};

#if defined(__linux__)
constexpr int64_t kHugePageBytes = int64_t{2} << 20;  // x86-64's and most arm64 kernels' transparent huge page

/// Why an madvised block cannot get transparent huge pages on this system; empty where it can.
std::string transparent_huge_pages_off() {
  const char* path = "/sys/kernel/mm/transparent_hugepage/enabled";
  std::ifstream in(path);
  std::string setting;
  if (!in || !std::getline(in, setting)) return std::string("this kernel has no transparent huge pages (no ") + path + ")";
  if (setting.find("[never]") != std::string::npos) {
    return std::string("transparent huge pages are off (") + path + ": " + setting + ")";
  }
  return {};
}

/// The mapping that holds the moved storages: [start, start + advised) lies on huge-page boundaries inside the
/// mapped [base, base + length), so that Linux can back all of it with huge pages and never merges it with a
/// neighbouring block (the unadvised ends part them). Unmapped when the last storage in it is freed.
struct Block {
  void* base = nullptr;
  size_t length = 0;
  char* start = nullptr;
  int64_t advised = 0;
  Block() = default;
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  ~Block() {
    if (base != nullptr) munmap(base, length);
  }
};

void release_block(void* holder) { delete static_cast<std::shared_ptr<Block>*>(holder); }

/// The bytes of the block that Linux backs with huge pages now: the AnonHugePages of its mapping in
/// /proc/self/smaps (0 where that cannot be read).
int64_t huge_page_bytes_of(const Block& block) {
  std::ifstream smaps("/proc/self/smaps");
  const auto start = reinterpret_cast<uintptr_t>(block.start);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long from = 0, to = 0;
    char dash = 0;
    if (std::sscanf(line.c_str(), "%lx%c%lx ", &from, &dash, &to) == 3 && dash == '-') {
      inside = from <= start && start < to;
      continue;
    }
    long kilobytes = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kilobytes) == 1) {
      return std::min<int64_t>(int64_t{kilobytes} * 1024, block.advised);
    }
  }
  return 0;
}
#endif

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
  int64_t total = 0;
  for (StorageGroup& g : groups) {
    g.offset = total;
    total += round_up(static_cast<int64_t>(g.storage().nbytes()), kStorageAlignment);
  }
  if (groups.empty()) return result;

#if defined(__linux__)
  result.unavailable = transparent_huge_pages_off();
  if (!result.unavailable.empty()) return result;
  auto block = std::make_shared<Block>();
  block->advised = round_up(total, kHugePageBytes);
  block->length = static_cast<size_t>(block->advised + kHugePageBytes);
  block->base = mmap(nullptr, block->length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (block->base == MAP_FAILED) {
    block->base = nullptr;
    result.unavailable = "mapping " + std::to_string(block->length) + " bytes failed: " + std::strerror(errno);
    return result;
  }
  const auto base = static_cast<int64_t>(reinterpret_cast<uintptr_t>(block->base));
  block->start = reinterpret_cast<char*>(static_cast<uintptr_t>(round_up(base, kHugePageBytes)));
  if (madvise(block->start, static_cast<size_t>(block->advised), MADV_HUGEPAGE) != 0) {
    result.unavailable = std::string("madvise(MADV_HUGEPAGE) failed: ") + std::strerror(errno);
    return result;
  }
  // A storage at a time, so that each old one can be freed before the next is copied.
  for (StorageGroup& g : groups) {
    const size_t nbytes = g.storage().nbytes();
    char* to = block->start + g.offset;
    std::memcpy(to, g.storage().data_ptr().get(), nbytes);
    c10::DataPtr data(to, new std::shared_ptr<Block>(block), &release_block, c10::Device(c10::kCPU));
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
  result.huge_page_bytes = std::min(huge_page_bytes_of(*block), result.bytes);
#else
  result.unavailable = "huge pages are placed on Linux only";
#endif
  return result;
}

}  // namespace attn
