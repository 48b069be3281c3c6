// Which kernel calls one ring step makes: global causality turned into the kernel's causal offset, and
// fully allowed segment pairs grouped into as few calls as possible (larger tiles, fewer merges).

#include "distributed/ring_plan.h"

namespace attn::distributed::detail {
namespace {

enum class Relation { Blocked, Full, Diagonal };

/// How a query segment relates to a key segment under the mask: every pair blocked, every pair allowed, or
/// a diagonal (key j allowed for query i iff k.start + j <= q.start + i).
Relation relate(const SequenceSegment& q, const SequenceSegment& k, bool is_causal) {
  if (!is_causal) return Relation::Full;
  if (k.start > q.start + q.length - 1) return Relation::Blocked;  // every key after every query
  if (k.start + k.length - 1 <= q.start) return Relation::Full;    // every key at or before every query
  return Relation::Diagonal;
}

int64_t total_length(const std::vector<SequenceSegment>& segments) {
  int64_t n = 0;
  for (const auto& s : segments) n += s.length;
  return n;
}

}  // namespace

std::vector<BlockCall> block_calls(const std::vector<SequenceSegment>& query_segments,
                                   const std::vector<SequenceSegment>& key_segments, bool is_causal) {
  const size_t nq = query_segments.size();
  const size_t nk = key_segments.size();
  const int64_t tq = total_length(query_segments);
  const int64_t tk = total_length(key_segments);
  std::vector<std::vector<Relation>> relation(nq, std::vector<Relation>(nk));
  bool all_full = true;
  for (size_t i = 0; i < nq; ++i) {
    for (size_t j = 0; j < nk; ++j) {
      relation[i][j] = relate(query_segments[i], key_segments[j], is_causal);
      all_full = all_full && relation[i][j] == Relation::Full;
    }
  }
  if (nq == 0 || nk == 0) return {};
  if (all_full) return {{0, tq, 0, tk, false, 0}};

  std::vector<BlockCall> calls;
  std::vector<std::vector<bool>> done(nq, std::vector<bool>(nk, false));
  // A key segment that every query sees in full: one call with all the queries.
  for (size_t j = 0; j < nk; ++j) {
    bool column_full = true;
    for (size_t i = 0; i < nq; ++i) column_full = column_full && relation[i][j] == Relation::Full;
    if (!column_full) continue;
    calls.push_back({0, tq, key_segments[j].local_start, key_segments[j].length, false, 0});
    for (size_t i = 0; i < nq; ++i) done[i][j] = true;
  }
  // A query segment that sees every key in full (none taken above): one call with all the keys.
  for (size_t i = 0; i < nq; ++i) {
    bool row_full = true;
    for (size_t j = 0; j < nk; ++j) row_full = row_full && !done[i][j] && relation[i][j] == Relation::Full;
    if (!row_full) continue;
    calls.push_back({query_segments[i].local_start, query_segments[i].length, 0, tk, false, 0});
    for (size_t j = 0; j < nk; ++j) done[i][j] = true;
  }
  for (size_t i = 0; i < nq; ++i) {
    for (size_t j = 0; j < nk; ++j) {
      if (done[i][j] || relation[i][j] == Relation::Blocked) continue;
      const SequenceSegment& q = query_segments[i];
      const SequenceSegment& k = key_segments[j];
      const bool diagonal = relation[i][j] == Relation::Diagonal;
      calls.push_back({q.local_start, q.length, k.local_start, k.length, diagonal, diagonal ? q.start - k.start : 0});
    }
  }
  return calls;
}

}  // namespace attn::distributed::detail
