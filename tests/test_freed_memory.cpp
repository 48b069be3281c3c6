// attn_apps::keep_freed_memory (apps/common/freed_memory.h): after it, a freed block of a prefill's activation
// size comes back for the next allocation of that size without its pages faulting in again. The reference is
// glibc's default, measured in a child process that never calls it: there the same block faults every page in
// again (it was mapped on its own and unmapped, or trimmed off the heap's top).

#include "freed_memory.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace {

constexpr size_t kBlockBytes = size_t{8} << 20;  // 2048 pages: above glibc's default mmap threshold of 128 KiB
constexpr long kPages = static_cast<long>(kBlockBytes / 4096);

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

/// Page faults while a second block of kBlockBytes is allocated and written, after a first was written and freed.
long faults_of_a_second_block() {
  const auto write_block = [] {
    volatile char* p = static_cast<volatile char*>(std::malloc(kBlockBytes));
    for (size_t i = 0; i < kBlockBytes; i += 4096) p[i] = 1;
    return p;
  };
  std::free(const_cast<char*>(write_block()));
  const long before = minor_faults();
  volatile char* again = write_block();
  const long faults = minor_faults() - before;
  std::free(const_cast<char*>(again));
  return faults;
}

TEST(FreedMemory, AFreedBlockReturnsWithoutPageFaults) {
  // glibc's default, in a child that reports whether the second block faulted most of its pages in.
  const pid_t child = fork();
  ASSERT_GE(child, 0) << std::strerror(errno);
  if (child == 0) _exit(faults_of_a_second_block() > kPages / 2 ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "with glibc's defaults the second block did not fault its pages in again";

  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"}) unsetenv(name);
  attn_apps::keep_freed_memory();
  const long faults = faults_of_a_second_block();
  EXPECT_LT(faults, kPages / 16) << faults << " page faults for a block of " << kPages << " pages freed just before";
}

}  // namespace
