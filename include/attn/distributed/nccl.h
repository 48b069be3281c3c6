#pragma once
// A c10d process group on NCCL (CUDA tensors, GPU to GPU), for ring_attention on CUDA and anything else that
// takes a c10d::ProcessGroup.

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

namespace attn::distributed {

/// True when attn was built with NCCL's headers (a CUDA LibTorch with NCCL and the nccl.h of its wheel, or of
/// the CUDA toolkit), so that make_nccl_group works.
bool nccl_available();

/// Rank `rank` of a `world`-rank NCCL group on CUDA device `device` (each rank usually on a GPU of its own:
/// rank r on device r of its machine). The ranks meet through `store` (a c10d::TCPStore, or a c10d::FileStore
/// on a path no earlier run used); NCCL forms its communicator at the first collective, which every rank must
/// call. `timeout` bounds each collective. Collective: every rank calls it.
c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_group(int rank, int world, const c10::intrusive_ptr<c10d::Store>& store,
                                                       int device,
                                                       std::chrono::milliseconds timeout = std::chrono::minutes(5));

}  // namespace attn::distributed
