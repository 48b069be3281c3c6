// The one definition of which positions each rank holds (contiguous or zigzag chunks).

#include <attn/distributed/sequence_layout.h>

#include <torch/torch.h>

namespace attn::distributed {
namespace {

/// Chunk c of n over seq_len positions: [c·T/n, (c+1)·T/n).
SequenceSegment chunk(int64_t seq_len, int64_t n, int64_t c) {
  const int64_t begin = c * seq_len / n;
  const int64_t end = (c + 1) * seq_len / n;
  return {begin, end - begin, 0};
}

void check_rank(const char* fn, int64_t seq_len, int64_t rank, int64_t world) {
  TORCH_CHECK(world >= 1, fn, ": world must be >= 1, got ", world);
  TORCH_CHECK(rank >= 0 && rank < world, fn, ": rank must be in [0, ", world, "), got ", rank);
  TORCH_CHECK(seq_len >= 0, fn, ": seq_len must be >= 0, got ", seq_len);
}

}  // namespace

const char* to_string(SequenceLayout layout) {
  switch (layout) {
    case SequenceLayout::Contiguous: return "contiguous";
    case SequenceLayout::Zigzag: return "zigzag";
  }
  return "unknown";
}

std::vector<SequenceSegment> shard_segments(int64_t seq_len, int64_t rank, int64_t world, SequenceLayout layout) {
  check_rank("attn::distributed::shard_segments", seq_len, rank, world);
  std::vector<SequenceSegment> chunks;
  if (layout == SequenceLayout::Contiguous) {
    chunks.push_back(chunk(seq_len, world, rank));
  } else {
    chunks.push_back(chunk(seq_len, 2 * world, rank));
    chunks.push_back(chunk(seq_len, 2 * world, 2 * world - 1 - rank));
  }
  std::vector<SequenceSegment> segments;
  int64_t local = 0;
  for (SequenceSegment s : chunks) {
    if (s.length == 0) continue;
    s.local_start = local;
    local += s.length;
    segments.push_back(s);
  }
  return segments;
}

std::vector<int64_t> shard_lengths(int64_t seq_len, int64_t world, SequenceLayout layout) {
  std::vector<int64_t> lengths;
  for (int64_t r = 0; r < world; ++r) {
    int64_t n = 0;
    for (const SequenceSegment& s : shard_segments(seq_len, r, world, layout)) n += s.length;
    lengths.push_back(n);
  }
  return lengths;
}

torch::Tensor shard_positions(int64_t seq_len, int64_t rank, int64_t world, SequenceLayout layout) {
  std::vector<torch::Tensor> parts;
  for (const SequenceSegment& s : shard_segments(seq_len, rank, world, layout)) {
    parts.push_back(torch::arange(s.start, s.start + s.length, torch::kLong));
  }
  return parts.empty() ? torch::empty({0}, torch::kLong) : torch::cat(parts);
}

torch::Tensor shard_sequence(const torch::Tensor& x, int64_t dim, int64_t rank, int64_t world,
                             SequenceLayout layout) {
  TORCH_CHECK(x.defined(), "attn::distributed::shard_sequence: x is undefined");
  TORCH_CHECK(x.dim() >= 1, "attn::distributed::shard_sequence: x must have at least one dimension, got a scalar");
  dim = c10::maybe_wrap_dim(dim, x.dim());
  std::vector<torch::Tensor> parts;
  for (const SequenceSegment& s : shard_segments(x.size(dim), rank, world, layout)) {
    parts.push_back(x.narrow(dim, s.start, s.length));
  }
  if (parts.empty()) {
    auto sizes = x.sizes().vec();
    sizes[dim] = 0;
    return torch::empty(sizes, x.options());
  }
  return torch::cat(parts, dim).contiguous();
}

torch::Tensor unshard_sequence(const std::vector<torch::Tensor>& shards, int64_t dim, SequenceLayout layout) {
  const char* fn = "attn::distributed::unshard_sequence";
  TORCH_CHECK(!shards.empty(), fn, ": no shards given");
  const int64_t world = static_cast<int64_t>(shards.size());
  TORCH_CHECK(shards[0].defined() && shards[0].dim() >= 1, fn, ": shards[0] must be a tensor with a dimension");
  dim = c10::maybe_wrap_dim(dim, shards[0].dim());
  int64_t seq_len = 0;
  for (const auto& s : shards) {
    TORCH_CHECK(s.defined() && s.dim() == shards[0].dim(), fn, ": every shard must have ", shards[0].dim(),
                " dimensions like shards[0]");
    seq_len += s.size(dim);
  }
  const std::vector<int64_t> expected = shard_lengths(seq_len, world, layout);
  // Each global chunk, in order, taken from the rank that holds it.
  std::vector<std::pair<int64_t, torch::Tensor>> pieces;
  for (int64_t r = 0; r < world; ++r) {
    TORCH_CHECK(shards[r].size(dim) == expected[r], fn, ": shards[", r, "] has ", shards[r].size(dim),
                " positions along dim ", dim, ", but the ", to_string(layout), " layout of ", seq_len,
                " positions over ", world, " ranks gives rank ", r, " ", expected[r]);
    for (const SequenceSegment& s : shard_segments(seq_len, r, world, layout)) {
      pieces.emplace_back(s.start, shards[r].narrow(dim, s.local_start, s.length));
    }
  }
  std::sort(pieces.begin(), pieces.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<torch::Tensor> ordered;
  for (auto& p : pieces) ordered.push_back(p.second);
  if (ordered.empty()) return shards[0].clone();
  return torch::cat(ordered, dim);
}

}  // namespace attn::distributed
