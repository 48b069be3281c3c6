#pragma once
// How a sequence of T positions is split over the N ranks of a context-parallel group.
//
//   Contiguous  rank r holds chunk r of N: positions [r·T/N, (r+1)·T/N).
//   Zigzag      the sequence is cut into 2N chunks and rank r holds chunks r and 2N-1-r, in that order
//               (also called head-tail). Under a causal mask every rank then has the same amount of work;
//               with Contiguous the last rank has 2N-1 times the first's.
//
// Chunk c of n covers [c·T/n, (c+1)·T/n) (integer division), so T need not divide evenly: chunk lengths
// differ by at most one.

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace attn::distributed {

enum class SequenceLayout { Contiguous, Zigzag };

/// "contiguous" or "zigzag".
const char* to_string(SequenceLayout layout);

/// A run of consecutive positions that one rank holds: global positions [start, start + length), stored at
/// local rows [local_start, local_start + length) of the rank's shard.
struct SequenceSegment {
  int64_t start = 0;
  int64_t length = 0;
  int64_t local_start = 0;
};

/// The segments of rank `rank` (non-empty ones only), in local order.
std::vector<SequenceSegment> shard_segments(int64_t seq_len, int64_t rank, int64_t world, SequenceLayout layout);

/// How many positions each of the `world` ranks holds.
std::vector<int64_t> shard_lengths(int64_t seq_len, int64_t world, SequenceLayout layout);

/// The global positions that rank `rank` holds, in local order: int64 [T_local]. Pass them to rotary
/// embeddings (RotaryEmbedding::forward) so that every rank rotates its rows at their true positions.
torch::Tensor shard_positions(int64_t seq_len, int64_t rank, int64_t world, SequenceLayout layout);

/// Rank `rank`'s shard of x along `dim` (x holds the whole sequence there). A new contiguous tensor.
torch::Tensor shard_sequence(const torch::Tensor& x, int64_t dim, int64_t rank, int64_t world,
                             SequenceLayout layout);

/// The whole sequence from every rank's shard (shards[r] from rank r), concatenated back in order along `dim`.
torch::Tensor unshard_sequence(const std::vector<torch::Tensor>& shards, int64_t dim, SequenceLayout layout);

}  // namespace attn::distributed
