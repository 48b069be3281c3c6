#pragma once
// A buffer for packed operands, left uninitialised: the packers write every element that is read, and a
// zero-filled std::vector spent 2 % of a bfloat16 forward pass filling what they overwrite. It starts on a cache
// line, so that a packed 1 KB tile spans 16 lines, not 17.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "ops/cpu/products/cache_line_vector.h"

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

template <typename T>
struct Uninitialised {
  static_assert(std::is_trivially_default_constructible_v<T> && std::is_trivially_destructible_v<T>);
  struct Release {
    void operator()(T* p) const noexcept { CacheLineAllocator<T>().deallocate(p, 0); }
  };
  std::unique_ptr<T, Release> storage;
  void allocate(int64_t n) {
    storage.reset(CacheLineAllocator<T>().allocate(static_cast<std::size_t>(std::max<int64_t>(n, 1))));
  }
  T* data() { return storage.get(); }
  const T* data() const { return storage.get(); }
};

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
