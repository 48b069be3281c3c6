#include "huge_page_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace attn {

std::string transparent_huge_pages_off() {
#if defined(__linux__)
  const char* path = "/sys/kernel/mm/transparent_hugepage/enabled";
  std::ifstream in(path);
  std::string setting;
  if (!in || !std::getline(in, setting)) {
    return std::string("this kernel has no transparent huge pages (no ") + path + ")";
  }
  if (setting.find("[never]") != std::string::npos) {
    return std::string("transparent huge pages are off (") + path + ": " + setting + ")";
  }
  return {};
#else
  return "transparent huge pages are Linux's";
#endif
}

std::shared_ptr<HugePageMemory> HugePageMemory::map(int64_t bytes, std::string* why_not) {
  std::shared_ptr<HugePageMemory> memory(new HugePageMemory());
  memory->usable_ = round_up_to(std::max<int64_t>(bytes, 1), kHugePageBytes);
  memory->length_ = static_cast<size_t>(memory->usable_ + 2 * kHugePageBytes);
  void* base = mmap(nullptr, memory->length_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    *why_not = "mapping " + std::to_string(memory->length_) + " bytes failed: " + std::strerror(errno);
    return nullptr;
  }
  memory->base_ = base;
  // One unadvised huge page at least on either side: Linux merges neighbouring mappings of equal flags.
  const auto after_first = static_cast<int64_t>(reinterpret_cast<uintptr_t>(base)) + kHugePageBytes;
  memory->start_ = reinterpret_cast<char*>(static_cast<uintptr_t>(round_up_to(after_first, kHugePageBytes)));
#ifdef MADV_HUGEPAGE
  // Advice only: where Linux's huge pages are off, it changes nothing and the memory works the same on 4 KB pages.
  madvise(memory->start_, static_cast<size_t>(memory->usable_), MADV_HUGEPAGE);
#endif
  return memory;
}

HugePageMemory::~HugePageMemory() {
  if (base_ != nullptr) munmap(base_, length_);
}

int64_t HugePageMemory::huge_page_bytes() const {
#if defined(__linux__)
  std::ifstream smaps("/proc/self/smaps");
  const auto start = reinterpret_cast<uintptr_t>(start_);
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
      return std::min<int64_t>(int64_t{kilobytes} * 1024, usable_);
    }
  }
#endif
  return 0;
}

}  // namespace attn
