#pragma once
// A buffer for packed operands, left uninitialised: the packers write every element that is read, and a
// zero-filled std::vector spent 2 % of a bfloat16 forward pass filling what they overwrite.

#include <algorithm>
#include <cstdint>
#include <memory>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

template <typename T>
struct Uninitialised {
  std::unique_ptr<T[]> storage;
  void allocate(int64_t n) { storage.reset(new T[std::max<int64_t>(n, 1)]); }
  T* data() { return storage.get(); }
  const T* data() const { return storage.get(); }
};

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
