// make_nccl_group: c10d's NCCL backend over a store, wrapped as the abstract c10d::ProcessGroup. Its own
// translation unit because ProcessGroupNCCL.hpp needs NCCL's header, which the rest of attn does not; the
// header must be the NCCL that LibTorch runs with (the nvidia-nccl wheel beside torch's), since LibTorch's
// NCCL classes take their shape from its version (cmake/nccl_group.cmake finds it).

#include <attn/distributed/nccl.h>

#include <torch/version.h>

#if defined(ATTN_HAVE_NCCL_HEADER) && defined(USE_C10D_NCCL)
#define ATTN_HAVE_NCCL 1
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <c10/cuda/CUDAFunctions.h>
#else
#define ATTN_HAVE_NCCL 0
#endif

#include "distributed/error_text.h"

#include <c10/util/Exception.h>

namespace attn::distributed {

bool nccl_available() { return ATTN_HAVE_NCCL != 0; }

c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_group(int rank, int world,
                                                       const c10::intrusive_ptr<c10d::Store>& store, int device,
                                                       std::chrono::milliseconds timeout) {
  constexpr const char* kFn = "attn::distributed::make_nccl_group";
  TORCH_CHECK(world >= 1, kFn, ": world must be >= 1, got ", world);
  TORCH_CHECK(rank >= 0 && rank < world, kFn, ": rank must be in [0, ", world, "), got ", rank);
  TORCH_CHECK(store, kFn, ": store is null");
  TORCH_CHECK(timeout.count() > 0, kFn, ": timeout must be positive, got ", timeout.count(), " ms");
#if ATTN_HAVE_NCCL
  const int devices = static_cast<int>(c10::cuda::device_count());
  TORCH_CHECK(device >= 0 && device < devices, kFn, ": rank ", rank, ": device must be in [0, ", devices,
              ") (the CUDA devices this process sees), got ", device);
  // NCCL binds a communicator to the current device when it forms, at the first collective.
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
  store->setTimeout(timeout);
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  try {
    auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, options);
    auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world);
    group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, backend);
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
    return group;
  } catch (const std::exception& error) {
    TORCH_CHECK(false, kFn, ": rank ", rank, " of ", world, ": NCCL's backend could not be made on cuda:", device,
                ". Cause: ", detail::cause_of(error));
  }
#else
  (void)device;
  TORCH_CHECK(false, kFn, ": attn was built without NCCL (it needs a CUDA LibTorch with NCCL and the nccl.h of "
              "its nvidia-nccl wheel; the 2.x lane's torch wheel has both); use make_gloo_group for CPU tensors");
#endif
}

}  // namespace attn::distributed
