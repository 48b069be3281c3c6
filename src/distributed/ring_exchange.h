#pragma once
// One hop of a ring: send a buffer to the next rank while receiving one from the previous rank, on tags of
// attn's reserved range, waited for with the call's timeout. A failure (a timeout, a peer that closed its
// connection) becomes an error that says which exchange, which step and which peers.

#include "distributed/ring_plan.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>

namespace attn::distributed::detail {

/// Seconds elapsed since `start`, for RingAttentionStats.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// What travels: K/V in the forward pass, K/V again and the dK/dV accumulators in the backward pass.
enum class Traffic : int { ForwardKeysValues = 0, BackwardKeysValues = 1, Gradients = 2 };

class RingExchange {
 public:
  RingExchange(c10d::ProcessGroup& group, const RingPlan& plan, RingAttentionStats& stats)
      : group_(group), plan_(plan), stats_(stats) {}

  struct Hop {
    c10::intrusive_ptr<c10d::Work> send, recv;
    Traffic traffic = Traffic::ForwardKeysValues;
    int step = 0;
  };

  /// Posts the send of `outgoing` (contiguous; not to be modified until finish) and the receive into
  /// `incoming`. Returns at once: the transport moves the bytes on its own threads.
  Hop start(torch::Tensor& outgoing, torch::Tensor& incoming, Traffic traffic, int step);
  /// Waits for both halves of the hop (time counted as wait_seconds).
  void finish(Hop& hop);

 private:
  c10d::ProcessGroup& group_;
  const RingPlan& plan_;
  RingAttentionStats& stats_;
};

}  // namespace attn::distributed::detail
