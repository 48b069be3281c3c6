// make_gloo_group: c10d's Gloo backend over a store, wrapped as the abstract c10d::ProcessGroup. Its own
// translation unit because ProcessGroupGloo.hpp needs Gloo's headers (Debian's libgloo-dev; LibTorch holds
// the symbols), which the rest of attn does not.

#include <attn/distributed/gloo.h>

#include <torch/version.h>

#if __has_include(<gloo/config.h>)
#define ATTN_HAVE_GLOO_HEADERS 1
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO  // ProcessGroupGloo.hpp declares its class only under this macro
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#else
#define ATTN_HAVE_GLOO_HEADERS 0
#endif

#include "distributed/error_text.h"

#include <c10/util/Exception.h>

namespace attn::distributed {

bool gloo_available() { return ATTN_HAVE_GLOO_HEADERS != 0; }

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(int rank, int world,
                                                       const c10::intrusive_ptr<c10d::Store>& store,
                                                       const std::string& host, std::chrono::milliseconds timeout) {
  constexpr const char* kFn = "attn::distributed::make_gloo_group";
  TORCH_CHECK(world >= 1, kFn, ": world must be >= 1, got ", world);
  TORCH_CHECK(rank >= 0 && rank < world, kFn, ": rank must be in [0, ", world, "), got ", rank);
  TORCH_CHECK(store, kFn, ": store is null");
  TORCH_CHECK(timeout.count() > 0, kFn, ": timeout must be positive, got ", timeout.count(), " ms");
#if ATTN_HAVE_GLOO_HEADERS
  // The store's own timeout bounds the rendezvous: a rank that never starts ends this call on the others.
  store->setTimeout(timeout);
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  try {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(host));
  } catch (const std::exception& error) {
    TORCH_CHECK(false, kFn, ": rank ", rank, ": no network device for host '", host, "': ", detail::cause_of(error));
  }
  options->threads = 2;  // Gloo's worker threads run the collectives; send/recv progress on its I/O thread
  try {
#if TORCH_VERSION_MAJOR >= 2
    // LibTorch 2: ProcessGroupGloo is a Backend; the ProcessGroup routes CPU tensors to it.
    auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 6
    // LibTorch 2.0-2.5 still take ProcessGroup::Options (not built here: the lanes are 1.13 and 2.15).
    auto group = c10::make_intrusive<c10d::ProcessGroup>(
        store, rank, world, c10::make_intrusive<c10d::ProcessGroup::Options>("gloo", timeout));
#else
    auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world);
#endif
    group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, backend);
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    return group;
#else
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
#endif
  } catch (const std::exception& error) {
    TORCH_CHECK(false, kFn, ": rank ", rank, " of ", world, ": the group did not form within ", timeout.count(),
                " ms. Every rank must start and call make_gloo_group with the same store and world size; a "
                "FileStore must be on a path that no earlier run used (a stale file breaks the rendezvous). "
                "Cause: ", detail::cause_of(error));
  }
#else
  (void)host;
  TORCH_CHECK(false, kFn, ": attn was built without Gloo's headers; install Debian's libgloo-dev "
              "(scripts/install-deps.sh does) and rebuild attn");
#endif
}

}  // namespace attn::distributed
