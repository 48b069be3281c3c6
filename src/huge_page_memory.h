#pragma once
// Memory that Linux may back with transparent huge pages: the one way attn asks for them, for the paged cache's
// block pools and for place_on_huge_pages' block of weights.

#include <cstdint>
#include <memory>
#include <string>

namespace attn {

/// A transparent huge page on x86-64 and on most arm64 kernels.
inline constexpr int64_t kHugePageBytes = int64_t{2} << 20;

/// value rounded up to a multiple of `multiple`.
inline int64_t round_up_to(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

/// Why memory advised onto transparent huge pages cannot get them on this system (not Linux, or
/// /sys/kernel/mm/transparent_hugepage/enabled missing or reading never); empty where it can.
std::string transparent_huge_pages_off();

/// A zeroed anonymous mapping of at least `bytes` whose usable part starts on a huge-page boundary and is advised
/// onto transparent huge pages (madvise MADV_HUGEPAGE), which Linux follows where they are not off. The mapping
/// reaches a huge page past the usable part on either side, unadvised, so Linux never merges it with a
/// neighbouring one. Unmapped when destroyed: tensors over it hold it through a shared_ptr.
class HugePageMemory {
 public:
  /// Maps it; a null pointer, with the reason in *why_not, where the mapping fails.
  static std::shared_ptr<HugePageMemory> map(int64_t bytes, std::string* why_not);
  ~HugePageMemory();
  HugePageMemory(const HugePageMemory&) = delete;
  HugePageMemory& operator=(const HugePageMemory&) = delete;

  /// The usable part: at least the bytes asked for, a whole number of huge pages.
  char* data() const { return start_; }
  /// The bytes of the usable part that Linux backs with huge pages now (AnonHugePages in /proc/self/smaps; 0
  /// where that cannot be read).
  int64_t huge_page_bytes() const;

 private:
  HugePageMemory() = default;
  void* base_ = nullptr;
  size_t length_ = 0;
  char* start_ = nullptr;
  int64_t usable_ = 0;
};

}  // namespace attn
