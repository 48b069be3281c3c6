// attn_apps::keep_freed_memory (apps/common/freed_memory.h): after it, a freed block of a prefill's activation
// size comes back for the next allocation of that size without its pages faulting in again. The reference is
// glibc's default, measured the same way in a process that never calls it: there the block faults every page in
// again (it was mapped on its own and unmapped, or trimmed off the heap's top). Each measurement runs in a child
// process of its own, so neither sees the other's settings. This binary links neither LibTorch nor OpenMP: it has
// one thread when it forks. Not built with the sanitizers, whose allocator ignores mallopt.

#include "freed_memory.h"

#include <gtest/gtest.h>

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace {

constexpr size_t kBlockBytes = size_t{8} << 20;  // above glibc's default mmap threshold of 128 KiB

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

/// Page faults while a second block of kBlockBytes is allocated and written, after a first was written and freed.
long faults_of_a_second_block(size_t page) {
  const auto write_block = [page] {
    volatile char* p = static_cast<volatile char*>(std::malloc(kBlockBytes));
    for (size_t i = 0; i < kBlockBytes; i += page) p[i] = 1;
    return p;
  };
  std::free(const_cast<char*>(write_block()));
  const long before = minor_faults();
  volatile char* again = write_block();
  const long faults = minor_faults() - before;
  std::free(const_cast<char*>(again));
  return faults;
}

/// The second block's page faults in a child process, with or without keep_freed_memory() first; -1 on failure.
long faults_in_a_child(bool keep) {
  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) return -1;
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"}) unsetenv(name);
    // Whole pages, not huge pages: where transparent huge pages are "always", 8 MiB would fault a few times.
    prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
    if (keep) attn_apps::keep_freed_memory();
    const long faults = faults_of_a_second_block(static_cast<size_t>(sysconf(_SC_PAGESIZE)));
    const ssize_t written = write(pipe_ends[1], &faults, sizeof faults);
    _exit(written == sizeof faults ? 0 : 1);
  }
  close(pipe_ends[1]);
  long faults = -1;
  if (read(pipe_ends[0], &faults, sizeof faults) != sizeof faults) faults = -1;
  close(pipe_ends[0]);
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return faults;
}

TEST(FreedMemory, AFreedBlockReturnsWithoutPageFaults) {
  const long pages = static_cast<long>(kBlockBytes / static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  const long defaults = faults_in_a_child(/*keep=*/false), kept = faults_in_a_child(/*keep=*/true);
  ASSERT_GE(defaults, 0) << "the child process failed: " << std::strerror(errno);
  ASSERT_GE(kept, 0) << "the child process failed: " << std::strerror(errno);
  EXPECT_GT(defaults, pages / 2) << "with glibc's defaults the second block faulted in only " << defaults << " of "
                                 << pages << " pages: the reference does not hold here";
  EXPECT_LT(kept, pages / 16) << kept << " page faults for a block of " << pages << " pages freed just before";
}

}  // namespace
