#pragma once
// Vectors whose data starts on a cache line. A tile row or an AVX-512 register of 64 bytes from a buffer that
// malloc aligned to 16 bytes spans two lines, and every such load costs two.

#include <cstddef>
#include <new>
#include <vector>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

inline constexpr std::size_t kCacheLineBytes = 64;

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kCacheLineBytes}));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{kCacheLineBytes}); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }
  template <typename U>
  bool operator!=(const CacheLineAllocator<U>&) const noexcept { return false; }
};

template <typename T>
using CacheLineVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
