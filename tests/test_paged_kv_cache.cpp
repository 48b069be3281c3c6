// The paged KV cache: PagedKVCache's blocks, forks and releases, and attention through its block tables.
// References: a contiguous KVCache holding the same sequences (an independent layout of the same keys), the
// same blocks in another order, and MultiHeadAttention over a KVCache.

#include "support.h"

#include <attn/attn.h>
#include <attn/ops/decode_attention.h>

#include <vector>

namespace attn::test {
namespace {

struct Filled {
  KVCache contiguous;
  PagedKVCache paged;
  std::vector<int64_t> ids;
};

/// The same ragged sequences, written in chunks of 1 to 37 positions, into a KVCache and a PagedKVCache.
Filled fill(torch::Dtype dtype, int64_t block_size, const std::vector<int64_t>& lengths, int64_t H_kv, int64_t d) {
  const int64_t B = static_cast<int64_t>(lengths.size());
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  Filled f{KVCache(KVCacheOptions(1, B, H_kv, d, longest + 8).dtype(dtype)),
           PagedKVCache(PagedKVCacheOptions(1, H_kv, d, 4 * longest / block_size + 8, block_size).dtype(dtype)),
           {}};
  for (int64_t b = 0; b < B; ++b) f.ids.push_back(f.paged.add_sequence());
  const torch::Dtype model = dtype == torch::kInt8 ? torch::kFloat32 : dtype;
  std::vector<int64_t> written(B, 0);
  for (int64_t chunk = 1; written != lengths; chunk = chunk % 37 + 5) {
    const torch::Tensor k = torch::randn({B, H_kv, chunk, d}).to(model), v = torch::randn({B, H_kv, chunk, d}).to(model);
    std::vector<int64_t> counts;
    for (int64_t b = 0; b < B; ++b) {
      counts.push_back(std::min(chunk, lengths[b] - written[b]));
      written[b] += counts.back();
    }
    f.contiguous.append(0, k, v, counts);
    f.paged.append(0, f.ids, k, v, counts);
  }
  return f;
}

// Blocks of 16 (vLLM's size) and of 5 (no divisor of the kernel's 256-key splits), float32, bfloat16 and
// int8, one query and several: the contiguous cache's result, to rounding (a block ends a run of the
// weighted sum, so the partial sums associate differently).
TEST(PagedKVCache, AttentionMatchesTheContiguousCache) {
  torch::NoGradGuard no_grad;
  const std::vector<int64_t> lengths = {700, 1, 260, 33};
  for (torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16, torch::kInt8}) {
    for (int64_t block_size : {16, 5}) {
      for (int64_t tq : {1, 4, 150}) {  // 150: a prompt over the cache, in the op's chunks of queries
        SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << " blocks of " << block_size << " Tq=" << tq);
        torch::manual_seed(8);
        Filled f = fill(dtype, block_size, lengths, 2, 48);
        const torch::Dtype model = dtype == torch::kInt8 ? torch::kFloat32 : dtype;
        const torch::Tensor q = torch::randn({4, 6, tq, 48}).to(model);
        std::vector<int64_t> starts;
        for (int64_t l : lengths) starts.push_back(std::max<int64_t>(l - tq, 0));
        const torch::Tensor expected = attention_with_kv_cache(q, f.contiguous, 0, longs(starts));
        const torch::Tensor paged = attention_with_kv_cache(q, f.paged, f.paged.batch(0, f.ids), longs(starts));
        EXPECT_CLOSE(paged.to(torch::kFloat64), expected.to(torch::kFloat64),
                     dtype == torch::kBFloat16 ? tolerance(torch::kBFloat16) : 1e-5);
        EXPECT_EQ(f.paged.length(0, f.ids[0]), 700);
        EXPECT_EQ(static_cast<int64_t>(f.paged.blocks_of(f.ids[0]).size()), (700 + block_size - 1) / block_size);
      }
    }
  }
}

// One query per row, every key allowed: the paged cache gives the contiguous cache's bits whether a row's blocks
// follow each other in the pool (each sequence written alone, or 16 positions at a time in turn with the
// default runs: the kernel reads such a split as a contiguous one) or alternate with another row's (written in
// turn a block at a time, run_positions(1): gathered through the table, and for float32 scored in four sweeps
// side by side). A key's score and the weighted sum's order are the same either way. Float32 and int8 (head
// size 64, which the int8 dot products take where the CPU has them); lengths whose last splits leave keys past
// the sweeps.
TEST(PagedKVCache, DecodingGivesTheContiguousCachesBitsWhereverTheBlocksLie) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  const std::vector<int64_t> lengths = {701, 333};
  const int64_t H_kv = 2, d = 64;
  std::vector<torch::Tensor> keys, values;
  for (int64_t l : lengths) keys.push_back(torch::randn({1, H_kv, l, d})), values.push_back(torch::randn({1, H_kv, l, d}));
  const torch::Tensor q = torch::randn({2, 8, 1, d});
  const torch::Tensor starts = longs({700, 332});
  for (torch::Dtype dtype : {torch::kFloat32, torch::kInt8}) {
    KVCache contiguous(KVCacheOptions(1, 2, H_kv, d, 704).dtype(dtype));
    for (int64_t b = 0; b < 2; ++b) {
      std::vector<int64_t> counts = {0, 0};
      counts[b] = lengths[b];
      const torch::Tensor pad = torch::zeros({1, H_kv, lengths[b], d});
      contiguous.append(0, b == 0 ? torch::cat({keys[b], pad}) : torch::cat({pad, keys[b]}),
                        b == 0 ? torch::cat({values[b], pad}) : torch::cat({pad, values[b]}), counts);
    }
    const torch::Tensor expected = attention_with_kv_cache(q, contiguous, 0, starts);
    // Whole sequences; 16 positions in turn, in runs of a split; 16 positions in turn, a block at a time.
    for (const auto& [step, run] : std::vector<std::pair<int64_t, int64_t>>{{1000, 0}, {16, 0}, {16, 1}}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << ", written " << step << " positions at a time"
                                        << (run == 1 ? ", a block at a time" : ""));
      PagedKVCacheOptions options = PagedKVCacheOptions(1, H_kv, d, 200, 16).dtype(dtype);
      if (run > 0) options.run_positions(run);
      PagedKVCache paged(options);
      const std::vector<int64_t> ids = {paged.add_sequence(), paged.add_sequence()};
      std::vector<int64_t> written = {0, 0};
      while (written[0] < lengths[0] || written[1] < lengths[1]) {
        for (int64_t b = 0; b < 2; ++b) {
          const int64_t n = std::min(step, lengths[b] - written[b]);
          if (n > 0) paged.append(0, {ids[b]}, keys[b].narrow(2, written[b], n), values[b].narrow(2, written[b], n));
          written[b] += n;
        }
      }
      // Row 0's adjacent blocks while both rows grow: all of them written alone; within each split's run in
      // turn; none a block at a time.
      const std::vector<int64_t> blocks = paged.blocks_of(ids[0]);
      const int64_t split_blocks = (dtype == torch::kInt8 ? ops::kDecodeSplitKeysInt8 : ops::kDecodeSplitKeys) / 16;
      int64_t adjacent = 0, expected_adjacent = 0;
      for (size_t i = 1; i < paged.blocks_of(ids[1]).size(); ++i) {
        adjacent += blocks[i] == blocks[i - 1] + 1;
        expected_adjacent += step == 1000 || (run == 0 && i % split_blocks != 0);
      }
      EXPECT_EQ(adjacent, expected_adjacent);
      EXPECT_TRUE(torch::equal(attention_with_kv_cache(q, paged, paged.batch(0, ids), starts), expected));
    }
  }
}

// Where the blocks lie does not matter: the same blocks in a random order, with the table renamed, give the
// same bits.
TEST(PagedKVCache, ARandomPermutationOfTheBlocksGivesTheSameBits) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  Filled f = fill(torch::kFloat32, 16, {500, 90, 333}, 2, 32);
  const PagedBatch batch = f.paged.batch(0, f.ids);
  const int64_t blocks = f.paged.key_blocks(0).size(0);
  const torch::Tensor order = torch::randperm(blocks, torch::kLong);  // new block i holds old block order[i]
  const torch::Tensor where = torch::empty_like(order).scatter_(0, order, torch::arange(blocks, torch::kLong));
  const torch::Tensor q = torch::randn({3, 4, 2, 32});
  const torch::Tensor starts = batch.lengths - 2;
  const torch::Tensor expected = ops::decode_attention(q, f.paged.key_blocks(0), f.paged.value_blocks(0), starts,
                                                       batch.lengths, true, c10::nullopt, -1, -1, 0.0, c10::nullopt,
                                                       c10::nullopt, c10::nullopt, c10::nullopt, batch.block_table);
  const torch::Tensor permuted = ops::decode_attention(
      q, f.paged.key_blocks(0).index_select(0, order), f.paged.value_blocks(0).index_select(0, order), starts,
      batch.lengths, true, c10::nullopt, -1, -1, 0.0, c10::nullopt, c10::nullopt, c10::nullopt, c10::nullopt,
      where.index({batch.block_table}));
  EXPECT_TRUE(torch::equal(permuted, expected));
  ASSERT_FALSE(torch::equal(order, torch::arange(blocks, torch::kLong)));
}

// A sequence's rows read back through its block table: key_blocks[table[j / S]] at position j % S.
torch::Tensor gathered(const PagedKVCache& cache, const torch::Tensor& pool, int64_t id) {
  const PagedBatch batch = cache.batch(0, {id});
  const int64_t length = batch.lengths[0].item<int64_t>(), S = pool.size(2);
  std::vector<torch::Tensor> positions;
  for (int64_t j = 0; j < length; ++j) {
    positions.push_back(pool[batch.block_table[0][j / S].item<int64_t>()].narrow(1, j % S, 1));
  }
  return torch::cat(positions, 1);
}

// Appended rows of every layout land in the blocks as they are: contiguous, a projection's head split (a
// position H·d apart), strided channels, an expanded position; ragged counts across blocks of 3 positions.
// float32 and bfloat16 hold the rows exactly; int8 holds each row rotated (by the float64 Hadamard matrix) to
// within one step of its scale.
TEST(PagedKVCache, AppendTakesRowsOfAnyLayout) {
  torch::manual_seed(5);
  for (torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16, torch::kInt8}) {
    const torch::Dtype model = dtype == torch::kInt8 ? torch::kFloat32 : dtype;
    const int64_t B = 2, H = 3, d = 8, T = 4;
    for (const torch::Tensor& rows : rows_of_every_layout(B, H, T, d, model)) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << " strides " << rows.strides());
      PagedKVCache paged(PagedKVCacheOptions(1, H, d, 16, 3).dtype(dtype).run_positions(1));
      const std::vector<int64_t> ids{paged.add_sequence(), paged.add_sequence()};
      const torch::Tensor first = torch::randn({B, H, T, d}).to(model);
      const std::vector<int64_t> first_counts{3, 1}, counts{4, 2};
      paged.append(0, ids, first, first, first_counts);
      paged.append(0, ids, rows, rows, counts);
      for (int64_t b = 0; b < B; ++b) {
        const torch::Tensor expected =
            torch::cat({first[b].narrow(1, 0, first_counts[b]), rows[b].narrow(1, 0, counts[b])}, 1);
        const torch::Tensor keys = gathered(paged, paged.key_blocks(0), ids[b]);
        const torch::Tensor values = gathered(paged, paged.value_blocks(0), ids[b]);
        if (dtype != torch::kInt8) {
          EXPECT_TRUE(torch::equal(keys, expected));
          EXPECT_TRUE(torch::equal(values, expected));
          continue;
        }
        const torch::Tensor scales = gathered(paged, paged.key_scales(0).unsqueeze(-1), ids[b]).squeeze(-1);
        const torch::Tensor rotated = torch::matmul(expected.to(torch::kFloat64), float64_hadamard(d));
        const torch::Tensor step = rotated.abs().amax(-1) / 127.0;
        EXPECT_TRUE(((dequantized(keys, scales) - rotated).abs() <= step.unsqueeze(-1)).all().item<bool>());
        EXPECT_TRUE(torch::allclose(scales.to(torch::kFloat64), step, 1e-5, 0.0));
      }
    }
  }
}

// Rows that are a view of the cache's own blocks are read as they were before the call. Here the one block of
// the pool, released by the sequence that wrote it, is taken again by the append that reads a transposed view
// of it: the append completes with the rows as they were. (It once threw, in LibTorch's refusal to copy
// overlapping memory, after it had taken the block and advanced the length.)
TEST(PagedKVCache, AppendOfAViewOfItsOwnBlocksStoresTheRowsAsTheyWere) {
  torch::NoGradGuard no_grad;
  PagedKVCache cache(PagedKVCacheOptions(1, 1, 4, 1, 4));
  const int64_t first = cache.add_sequence();
  cache.append(0, {first}, torch::randn({1, 1, 4, 4}), torch::randn({1, 1, 4, 4}));
  cache.release(first);
  const torch::Tensor key = cache.key_blocks(0).transpose(2, 3), value = cache.value_blocks(0);
  const torch::Tensor key_before = key.clone(), value_before = value.clone();
  const int64_t second = cache.add_sequence();
  cache.append(0, {second}, key, value);
  EXPECT_EQ(cache.length(0, second), 4);
  EXPECT_TRUE(torch::equal(gathered(cache, cache.key_blocks(0), second), key_before[0]));
  EXPECT_TRUE(torch::equal(gathered(cache, cache.value_blocks(0), second), value_before[0]));
}

// A fork shares every block of its parent: no new block until one of them writes into a shared block, then
// exactly one copy; the parent's keys are untouched. A release gives back only the blocks nobody shares.
TEST(PagedKVCache, ForkSharesThePrefixUntilTheFirstDivergentBlock) {
  torch::NoGradGuard no_grad;
  PagedKVCache cache(PagedKVCacheOptions(2, 1, 4, 20, 8));
  const int64_t parent = cache.add_sequence();
  for (int64_t l = 0; l < 2; ++l) cache.append(l, {parent}, torch::randn({1, 1, 20, 4}), torch::randn({1, 1, 20, 4}));
  EXPECT_EQ(cache.blocks_in_use(), 3);  // 20 positions in blocks of 8
  const torch::Tensor parent_keys = cache.key_blocks(1).clone();
  const int64_t child = cache.fork(parent);
  EXPECT_EQ(cache.blocks_in_use(), 3);
  EXPECT_EQ(cache.blocks_of(child), cache.blocks_of(parent));
  EXPECT_EQ(cache.length(1, child), 20);

  // The child writes position 20, inside the shared third block: one copy, for every layer.
  cache.append(0, {child}, torch::ones({1, 1, 1, 4}), torch::ones({1, 1, 1, 4}));
  EXPECT_EQ(cache.blocks_in_use(), 4);
  const std::vector<int64_t> pb = cache.blocks_of(parent), cb = cache.blocks_of(child);
  EXPECT_EQ(pb[0], cb[0]);
  EXPECT_EQ(pb[1], cb[1]);
  EXPECT_NE(pb[2], cb[2]);
  EXPECT_TRUE(torch::equal(cache.key_blocks(1)[cb[2]].narrow(1, 0, 4), parent_keys[pb[2]].narrow(1, 0, 4)));
  EXPECT_TRUE(torch::equal(cache.key_blocks(1).index_select(0, longs(pb)), parent_keys.index_select(0, longs(pb))));
  // Layer 1 of the child then writes into its own copy: no further block.
  cache.append(1, {child}, torch::ones({1, 1, 1, 4}), torch::ones({1, 1, 1, 4}));
  EXPECT_EQ(cache.blocks_in_use(), 4);

  // A prefix that ends on a block boundary: the fork's next position opens a new block, nothing is copied.
  const int64_t aligned = cache.add_sequence();
  cache.append(0, {aligned}, torch::randn({1, 1, 16, 4}), torch::randn({1, 1, 16, 4}));
  const int64_t twin = cache.fork(aligned);
  EXPECT_EQ(cache.blocks_in_use(), 6);
  cache.append(0, {twin}, torch::randn({1, 1, 3, 4}), torch::randn({1, 1, 3, 4}));
  EXPECT_EQ(cache.blocks_in_use(), 7);

  cache.release(parent);  // its first two blocks are still the child's
  EXPECT_EQ(cache.blocks_in_use(), 6);
  cache.release(child);
  EXPECT_EQ(cache.blocks_in_use(), 3);
  EXPECT_EQ(cache.sequences(), (std::vector<int64_t>{aligned, twin}));
}

// A sequence takes a run of adjacent blocks at a time and reserves the rest of it; the reserved blocks count as
// free, go to another sequence when the pool has no other free block (from the longest run, last block first),
// go back to the pool on release, and stay with the parent on fork.
TEST(PagedKVCache, RunsOfAdjacentBlocksAreReservedButFree) {
  torch::NoGradGuard no_grad;
  PagedKVCache cache(PagedKVCacheOptions(1, 1, 4, 10, 4).run_positions(16));  // runs of 4 blocks
  const auto write = [&](int64_t id, int64_t n) {
    cache.append(0, {id}, torch::randn({1, 1, n, 4}), torch::randn({1, 1, n, 4}));
  };
  const int64_t a = cache.add_sequence(), b = cache.add_sequence();
  write(a, 1);  // block 0; 1-3 reserved
  EXPECT_EQ(cache.blocks_in_use(), 1);
  EXPECT_EQ(cache.free_blocks(), 9);
  write(b, 5);  // blocks 4, 5 of its run 4-7
  write(a, 8);  // blocks 1, 2 of its run
  EXPECT_EQ(cache.blocks_of(a), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(cache.blocks_of(b), (std::vector<int64_t>{4, 5}));
  write(a, 8);  // block 3 ends its run; the next run starts at block 8, where two adjacent blocks are free
  EXPECT_EQ(cache.blocks_of(a), (std::vector<int64_t>{0, 1, 2, 3, 8}));
  EXPECT_EQ(cache.blocks_in_use(), 7);
  const int64_t child = cache.fork(a);  // shares a's five blocks; a keeps its reserved block 9
  write(child, 1);  // copies a's last block: the pool's free blocks are all reserved, so the longest run gives
  EXPECT_EQ(cache.blocks_of(child), (std::vector<int64_t>{0, 1, 2, 3, 7}));  // b's block 7 (b's run: 6, 7)
  write(b, 8);  // block 6, the rest of its run; then a's reserved block 9
  EXPECT_EQ(cache.blocks_of(b), (std::vector<int64_t>{4, 5, 6, 9}));
  EXPECT_EQ(cache.free_blocks(), 0);
  EXPECT_ERROR_CONTAINS(write(a, 4), "the block pool is full");
  cache.release(child);  // its copy, block 7, goes back
  EXPECT_EQ(cache.free_blocks(), 1);
  write(a, 4);
  EXPECT_EQ(cache.blocks_of(a), (std::vector<int64_t>{0, 1, 2, 3, 8, 7}));
  EXPECT_ERROR_CONTAINS(PagedKVCache(PagedKVCacheOptions(1, 1, 4, 10, 4).run_positions(0)),
                        "run_positions must be positive, got 0");

  // A fork holds none of its parent's run: released at once, it gives none of it back (the parent still takes
  // those blocks, and the pool is then full). A released run is a run again for the next sequence.
  PagedKVCache pool(PagedKVCacheOptions(1, 1, 4, 8, 4).run_positions(16));
  const auto put = [&](int64_t id, int64_t n) {
    pool.append(0, {id}, torch::randn({1, 1, n, 4}), torch::randn({1, 1, n, 4}));
  };
  const int64_t parent = pool.add_sequence();
  put(parent, 1);  // block 0; 1-3 reserved
  pool.release(pool.fork(parent));
  EXPECT_EQ(pool.free_blocks(), 7);
  const int64_t other = pool.add_sequence();
  put(other, 16);  // blocks 4-7
  put(parent, 15);  // blocks 1-3, its own run
  EXPECT_EQ(pool.blocks_of(parent), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(pool.blocks_of(other), (std::vector<int64_t>{4, 5, 6, 7}));
  const int64_t late = pool.add_sequence();
  EXPECT_ERROR_CONTAINS(put(late, 1), "the block pool is full");
  pool.release(other);
  put(late, 16);
  EXPECT_EQ(pool.blocks_of(late), (std::vector<int64_t>{4, 5, 6, 7}));

  // With no free block but reserved ones, a sequence takes the tail half of the longest run as a run of its own.
  PagedKVCache full(PagedKVCacheOptions(1, 1, 4, 8, 4).run_positions(32));  // runs of 8 blocks: the whole pool
  const int64_t first = full.add_sequence(), second = full.add_sequence();
  full.append(0, {first}, torch::randn({1, 1, 1, 4}), torch::randn({1, 1, 1, 4}));  // block 0; 1-7 reserved
  full.append(0, {second}, torch::randn({1, 1, 12, 4}), torch::randn({1, 1, 12, 4}));
  EXPECT_EQ(full.blocks_of(second), (std::vector<int64_t>{4, 5, 6}));  // 4-7 of first's 1-7; 7 stays reserved
  full.append(0, {first}, torch::randn({1, 1, 19, 4}), torch::randn({1, 1, 19, 4}));
  EXPECT_EQ(full.blocks_of(first), (std::vector<int64_t>{0, 1, 2, 3, 7}));  // its run 1-3, then second's 7
  EXPECT_EQ(full.free_blocks(), 0);
}

TEST(PagedKVCache, AFullPoolAStaleBatchAndUnknownSequencesAreRefusedCleanly) {
  torch::NoGradGuard no_grad;
  PagedKVCache cache(PagedKVCacheOptions(1, 2, 8, 3, 4));
  const int64_t a = cache.add_sequence(), b = cache.add_sequence();
  cache.append(0, {a, b}, torch::randn({2, 2, 5, 8}), torch::randn({2, 2, 5, 8}), {5, 2});
  EXPECT_EQ(cache.free_blocks(), 0);
  const torch::Tensor keys = cache.key_blocks(0).clone();
  EXPECT_ERROR_CONTAINS(cache.append(0, {a, b}, torch::randn({2, 2, 3, 8}), torch::randn({2, 2, 3, 8})),
                        "the block pool is full: this append needs 1 more block(s) and 0 of 3 are free");
  EXPECT_EQ(cache.length(0, a), 5);
  EXPECT_EQ(cache.length(0, b), 2);
  EXPECT_TRUE(torch::equal(cache.key_blocks(0), keys));
  // b's block has room for 2 more: that append fits.
  cache.append(0, {b}, torch::randn({1, 2, 2, 8}), torch::randn({1, 2, 2, 8}));

  const PagedBatch stale = cache.batch(0, {a});
  cache.release(b);
  EXPECT_ERROR_CONTAINS(attention_with_kv_cache(torch::randn({1, 4, 1, 8}), cache, stale, longs({4})),
                        "the PagedBatch is stale");
  EXPECT_ERROR_CONTAINS(cache.append(0, {b}, torch::randn({1, 2, 1, 8}), torch::randn({1, 2, 1, 8})),
                        "no sequence 1 (never added, or released)");
  EXPECT_ERROR_CONTAINS(cache.append(0, {a, a}, torch::randn({2, 2, 1, 8}), torch::randn({2, 2, 1, 8})),
                        "a sequence is listed twice");
  EXPECT_ERROR_CONTAINS(cache.append(0, {a}, torch::randn({1, 3, 1, 8}), torch::randn({1, 3, 1, 8})),
                        "key must be [B, H_kv, T, head_dim] = [1, 2, T, 8]");
  EXPECT_ERROR_CONTAINS(cache.append(0, {a}, torch::randn({1, 2, 1, 8}, torch::kFloat64), torch::randn({1, 2, 1, 8})),
                        "but the cache holds Float");
  EXPECT_ERROR_CONTAINS(PagedKVCache(PagedKVCacheOptions(1, 2, 8, 0, 4)), "num_blocks must be positive");
  PagedKVCache other(PagedKVCacheOptions(1, 2, 8, 3, 4));
  EXPECT_ERROR_CONTAINS(attention_with_kv_cache(torch::randn({1, 4, 1, 8}), other, cache.batch(0, {a}), longs({4})),
                        "the PagedBatch was made by another PagedKVCache");
  // A query that does not fit the batch is named as the query, against the cache's form.
  EXPECT_ERROR_CONTAINS(attention_with_kv_cache(torch::randn({2, 4, 1, 8}), cache, cache.batch(0, {a}), longs({4, 4})),
                        "query must be [B, H, Tq, d_k] = [1, H, Tq, 8] (the PagedBatch's sequences, the cache's "
                        "head_dim) with H a multiple of the cache's 2 key/value heads, got [2, 4, 1, 8]");
  // The op refuses a table whose blocks are not in the pool.
  const PagedBatch fresh = cache.batch(0, {a});
  torch::Tensor bad = fresh.block_table.clone();
  bad[0][1] = 7;
  EXPECT_ERROR_CONTAINS(ops::decode_attention(torch::randn({1, 4, 1, 8}), cache.key_blocks(0), cache.value_blocks(0),
                                              longs({4}), fresh.lengths, true, c10::nullopt, -1, -1, 0.0, c10::nullopt,
                                              c10::nullopt, c10::nullopt, c10::nullopt, bad),
                        "block_table[0, 1] = 7 is not a block in [0, 3)");
}

// MultiHeadAttention over a PagedKVCache: a prefill and decode steps of two sequences, one forked from the other,
// give what the module gives over a KVCache holding the same rows; float32 and int8 (whose rotated rows both read
// alike). An int8 prompt into an empty KVCache attends over its rows as computed, where the paged one reads its
// int8 blocks, so that step is compared within the int8 rows' error.
TEST(PagedKVCache, ModuleDecodingMatchesTheContiguousCache) {
  torch::NoGradGuard no_grad;
  for (torch::Dtype dtype : {torch::kFloat32, torch::kInt8}) {
    SCOPED_TRACE(c10::toString(dtype));
    torch::manual_seed(12);
    MultiHeadAttention mha(
        MultiHeadAttentionOptions(64, 4).num_kv_heads(2).causal(true).rotary(RotaryEmbeddingOptions(16)));
    PagedKVCache paged(mha->paged_cache_options(1, 32, 16).dtype(dtype));
    KVCache contiguous(mha->cache_options(1, 2, 96).dtype(dtype));
    const torch::Tensor prompt = torch::randn({1, 37, 64});
    const int64_t first = paged.add_sequence();
    const torch::Tensor prefill = mha->forward_with_cache(prompt, paged, 0, {first});
    const int64_t second = paged.fork(first);
    const torch::Tensor reference_prefill =
        mha->forward_with_cache(prompt.expand({2, 37, 64}).contiguous(), contiguous, 0);
    EXPECT_CLOSE(prefill, reference_prefill.narrow(0, 0, 1), dtype == torch::kInt8 ? 2e-2 : 1e-5);
    for (int step = 0; step < 5; ++step) {
      const torch::Tensor x = torch::randn({2, 1 + step % 2, 64});
      const torch::Tensor out = mha->forward_with_cache(x, paged, 0, {first, second});
      EXPECT_CLOSE(out, mha->forward_with_cache(x, contiguous, 0), 1e-5) << "step " << step;
    }
    EXPECT_EQ(paged.length(0, second), 37 + 7);
  }
}

TEST(KVCacheErgonomics, OptionsFromTheModuleAndOneModulePerLayer) {
  torch::NoGradGuard no_grad;
  MultiHeadAttention mha(MultiHeadAttentionOptions(48, 6).num_kv_heads(3).head_dim(8));
  mha->to(torch::kBFloat16);
  const KVCacheOptions o = mha->cache_options(4, 2, 100);
  EXPECT_EQ(o.num_kv_heads(), 3);
  EXPECT_EQ(o.head_dim(), 8);
  EXPECT_EQ(o.value_dim(), std::optional<int64_t>(8));
  EXPECT_EQ(o.dtype(), torch::kBFloat16);
  EXPECT_EQ(o.device(), torch::Device(torch::kCPU));
  EXPECT_EQ(mha->paged_cache_options(4, 64, 16).dtype(), torch::kBFloat16);
  {  // a paged cache of another module's heads is refused, its blocks described
    MultiHeadAttention two_kv_heads(MultiHeadAttentionOptions(48, 6).num_kv_heads(2).head_dim(8));
    two_kv_heads->to(torch::kBFloat16);
    PagedKVCache paged(mha->paged_cache_options(1, 8, 16));
    const int64_t sequence = paged.add_sequence();
    EXPECT_ERROR_CONTAINS(two_kv_heads->forward_with_cache(torch::randn({1, 1, 48}).to(torch::kBFloat16), paged, 0,
                                                           {sequence}),
                          "the cache holds blocks of [H_kv, block_size, head_dim] = [3, 16, 8] (value_dim 8) for 1 "
                          "sequences, but this call needs [1, 2, ..., 8]");
    EXPECT_ERROR_CONTAINS(mha->forward_with_cache(torch::randn({2, 1, 48}).to(torch::kBFloat16), paged, 0, {sequence}),
                          "attn::MultiHeadAttention: x must have one row per sequence, [1, T, E] for the 1 sequences "
                          "given, got [2, 1, 48]");
    EXPECT_EQ(paged.length(0, sequence), 0);
  }

  MultiHeadAttention other(MultiHeadAttentionOptions(48, 6).num_kv_heads(3).head_dim(8));
  other->to(torch::kBFloat16);
  KVCache cache(o);
  const torch::Tensor x = torch::randn({2, 3, 48}).to(torch::kBFloat16);
  mha->forward_with_cache(x, cache, 1);
  EXPECT_ERROR_CONTAINS(other->forward_with_cache(x, cache, 1), "cache layer 1 was already written by another module");
  EXPECT_EQ(cache.lengths(1)[0].item<int64_t>(), 3);  // refused before anything was written
  other->forward_with_cache(x, cache, 2);
  mha->forward_with_cache(x, cache, 1);  // the same module again: the next step
  EXPECT_ERROR_CONTAINS(mha->forward_with_cache(x, cache, 4),
                        "attn::MultiHeadAttention: layer must be in [0, 4) (the cache's layers), got 4");
  cache.reset();
  other->forward_with_cache(x, cache, 1);  // reset hands the layers out again

  // A call refused before it wrote anything claims nothing; copies of a cache share its claims.
  KVCache fresh(o);
  EXPECT_ERROR_CONTAINS(mha->forward_with_cache(torch::randn({2, 3, 48}), fresh, 0), "x is Float");
  other->forward_with_cache(x, fresh, 0);
  KVCache copy = fresh;
  EXPECT_ERROR_CONTAINS(mha->forward_with_cache(x, copy, 0), "cache layer 0 was already written by another module");

  // The paged cache keeps the same rule, until it holds no sequence.
  PagedKVCache paged(mha->paged_cache_options(2, 8, 4));
  const int64_t a = paged.add_sequence(), b = paged.add_sequence();
  mha->forward_with_cache(x, paged, 1, {a, b});
  EXPECT_ERROR_CONTAINS(other->forward_with_cache(x.narrow(1, 0, 1), paged, 1, {a, b}),
                        "cache layer 1 was already written by another module since the cache was built or last held "
                        "no sequence");
  EXPECT_EQ(paged.length(1, a), 3);  // refused before anything was written
  other->forward_with_cache(x, paged, 0, {a, b});
  mha->forward_with_cache(x.narrow(1, 0, 1), paged, 1, {a, b});  // the same module again: the next step
  EXPECT_EQ(paged.length(1, b), 4);
  paged.release(a);
  EXPECT_ERROR_CONTAINS(other->forward_with_cache(x.narrow(0, 0, 1), paged, 1, {b}), "already written by another");
  paged.release(b);
  const int64_t c = paged.add_sequence();
  other->forward_with_cache(x.narrow(0, 0, 1), paged, 1, {c});  // an empty cache hands the layers out again
  EXPECT_EQ(paged.length(1, c), 3);
}

TEST(KVCacheErgonomics, ADeviceThisLibTorchCannotUseIsNamedWithTheBuild) {
  if (!torch::cuda::is_available()) {  // a CPU-only LibTorch, or no GPU: any CUDA device is refused
    EXPECT_ERROR_CONTAINS(KVCache(KVCacheOptions(1, 1, 1, 4, 4).device(torch::Device(torch::kCUDA, 0))),
                          "attn::KVCache: device cuda:0 is not usable: this LibTorch (");
    return;
  }
  const auto count = static_cast<c10::DeviceIndex>(torch::cuda::device_count());  // one past the last GPU
  EXPECT_ERROR_CONTAINS(KVCache(KVCacheOptions(1, 1, 1, 4, 4).device(torch::Device(torch::kCUDA, count))),
                        "CUDA device(s) are visible");
}

}  // namespace
}  // namespace attn::test
