#pragma once
// A c10d process group on Gloo (CPU tensors over TCP), for ring_attention and anything else that takes a
// c10d::ProcessGroup.

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace attn::distributed {

/// True when attn was built with Gloo's headers (Debian's libgloo-dev), so that make_gloo_group works.
bool gloo_available();

/// Rank `rank` of a `world`-rank Gloo group. The ranks meet through `store` (a c10d::FileStore on a path no
/// earlier run used, or a c10d::TCPStore) and connect over the interface that `host` names ("127.0.0.1" for
/// one machine). `timeout` bounds the rendezvous (a rank that never starts ends the call on the others with
/// an error naming it) and every later Gloo operation. Collective: every rank calls it.
c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(int rank, int world, const c10::intrusive_ptr<c10d::Store>& store,
                                                       const std::string& host = "127.0.0.1",
                                                       std::chrono::milliseconds timeout = std::chrono::minutes(5));

}  // namespace attn::distributed
