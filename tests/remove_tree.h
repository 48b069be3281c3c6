#pragma once
// Removes a directory tree, the tests' temporary folders, with POSIX's nftw rather than
// std::filesystem::remove_all: a LibTorch wheel (2.11, on the GPU machine of docs/testing.md) exports a copy of
// remove_all that crashes when code built with a newer GCC calls it.

#include <ftw.h>
#include <stdio.h>

#include <string>

namespace attn::test {

inline void remove_tree(const std::string& path) {
  const auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); };
  ::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace attn::test
