#include "distributed/ring_exchange.h"

#include "distributed/error_text.h"

#include <chrono>

namespace attn::distributed::detail {
namespace {

const char* name(Traffic traffic) {
  switch (traffic) {
    case Traffic::ForwardKeysValues: return "forward K/V";
    case Traffic::BackwardKeysValues: return "backward K/V";
    case Traffic::Gradients: return "dK/dV accumulator";
  }
  return "?";
}

}  // namespace

RingExchange::Hop RingExchange::start(torch::Tensor& outgoing, torch::Tensor& incoming, Traffic traffic, int step) {
  TORCH_INTERNAL_ASSERT(outgoing.is_contiguous() && incoming.is_contiguous());
  const int tag = kRingTagBase + 3 * step + static_cast<int>(traffic);
  Hop hop;
  hop.traffic = traffic;
  hop.step = step;
  std::vector<torch::Tensor> out{outgoing};
  std::vector<torch::Tensor> in{incoming};
  try {
    hop.recv = group_.recv(in, plan_.previous(), tag);
    hop.send = group_.send(out, plan_.next(), tag);
  } catch (const std::exception& error) {
    TORCH_CHECK(false, "attn::distributed::ring_attention: rank ", plan_.rank, ": could not post the ", name(traffic),
                " exchange of step ", step, " (to rank ", plan_.next(), ", from rank ", plan_.previous(),
                "): ", cause_of(error));
  }
  stats_.bytes_sent += outgoing.numel() * outgoing.element_size();
  stats_.bytes_received += incoming.numel() * incoming.element_size();
  return hop;
}

void RingExchange::finish(Hop& hop) {
  const auto start = std::chrono::steady_clock::now();
  try {
    // One deadline for both halves: the hop takes at most the timeout.
    hop.send->wait(plan_.timeout);
    const auto left = plan_.timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::steady_clock::now() - start);
    hop.recv->wait(std::max(left, std::chrono::milliseconds(1)));
  } catch (const std::exception& error) {
    TORCH_CHECK(false, "attn::distributed::ring_attention: rank ", plan_.rank, " of ", plan_.world, ": the ",
                name(hop.traffic), " exchange of step ", hop.step, " (sending to rank ", plan_.next(),
                ", receiving from rank ", plan_.previous(), ") failed within the timeout of ", plan_.timeout.count(),
                " ms: a peer died, stopped calling, or is calling something else. Every rank must call "
                "ring_attention (and its backward pass) collectively, in the same order. Cause: ",
                cause_of(error));
  }
  const double waited = seconds_since(start);
  stats_.wait_seconds += waited;
  if (hop.traffic != Traffic::Gradients) stats_.keys_values_wait_seconds += waited;
  stats_.hops += 1;
}

}  // namespace attn::distributed::detail
