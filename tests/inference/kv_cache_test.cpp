#include "engine/kv_cache.hpp"

#include <numeric>
#include <random>

#include <gtest/gtest.h>

namespace weir::inference {
namespace {

std::vector<std::int32_t> iota_tokens(int n, int start = 100) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(KvCache, AllocatesBlocksOnDemandAndWasteIsOnlyTheLastBlock) {
  KvCacheManager kv({.num_blocks = 10, .block_size = 4});
  auto toks = iota_tokens(6);
  EXPECT_EQ(kv.add_sequence(1, toks), 0);
  ASSERT_TRUE(kv.allocate(1, 6));
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  EXPECT_EQ(kv.num_free_blocks(), 8);
  auto st = kv.stats();
  EXPECT_EQ(st.allocated_slots, 8);
  EXPECT_EQ(st.filled_slots, 6);
  EXPECT_DOUBLE_EQ(st.waste(), 2.0 / 8.0);
  ASSERT_TRUE(kv.allocate(1, 2));  // fills block 2 exactly: no new block
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  ASSERT_TRUE(kv.allocate(1, 1));
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  kv.free(1);
  EXPECT_EQ(kv.num_free_blocks(), 10);
}

TEST(KvCache, AllocationFailsWithoutSideEffectsWhenPoolIsDry) {
  KvCacheManager kv({.num_blocks = 3, .block_size = 4});
  auto toks = iota_tokens(20);
  kv.add_sequence(1, toks);
  EXPECT_FALSE(kv.allocate(1, 13));  // needs 4 blocks
  EXPECT_EQ(kv.num_free_blocks(), 3);
  EXPECT_EQ(kv.filled(1), 0);
  EXPECT_TRUE(kv.allocate(1, 12));
  EXPECT_EQ(kv.num_free_blocks(), 0);
}

TEST(KvCache, PrefixCacheReusesFullBlocksOfASharedPrompt) {
  KvCacheManager kv({.num_blocks = 16, .block_size = 4});
  auto sys = iota_tokens(10);  // 2 full blocks + 2 tokens
  kv.add_sequence(1, sys);
  ASSERT_TRUE(kv.allocate(1, 10));
  kv.commit(1, sys);
  auto blocks1 = std::vector<BlockId>(kv.block_table(1).begin(), kv.block_table(1).end());

  auto other = sys;
  other.push_back(7);
  other.push_back(8);
  EXPECT_EQ(kv.add_sequence(2, other), 8);  // two cached blocks
  EXPECT_EQ(kv.block_table(2)[0], blocks1[0]);
  EXPECT_EQ(kv.block_table(2)[1], blocks1[1]);
  EXPECT_EQ(kv.ref_count(blocks1[0]), 2);
  ASSERT_TRUE(kv.allocate(2, 4));
  EXPECT_NE(kv.block_table(2)[2], blocks1[2]);  // the partial block is private
  auto st = kv.stats();
  EXPECT_EQ(st.prefix_hits, 2u);

  // A different prompt with the same second block but another first block: no hit at all.
  auto diff = sys;
  diff[0] = 999;
  EXPECT_EQ(kv.add_sequence(3, diff), 0);
}

TEST(KvCache, AtLeastOneTokenIsAlwaysComputed) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 4});
  auto p = iota_tokens(8);  // exactly two full blocks
  kv.add_sequence(1, p);
  ASSERT_TRUE(kv.allocate(1, 8));
  kv.commit(1, p);
  kv.free(1);
  // Same prompt again: the first block is reused, the last is recomputed for its logits.
  EXPECT_EQ(kv.add_sequence(2, p), 4);
}

TEST(KvCache, FreedPrefixesStayCachedUntilTheirSpaceIsNeeded) {
  KvCacheManager kv({.num_blocks = 4, .block_size = 2});
  auto p = iota_tokens(5);
  kv.add_sequence(1, p);
  ASSERT_TRUE(kv.allocate(1, 5));
  kv.commit(1, p);
  kv.free(1);
  auto st = kv.stats();
  EXPECT_EQ(st.free_blocks, 4);
  EXPECT_EQ(st.cached_blocks, 2);
  // Another request takes the uncached free blocks first, so the cached prefix survives it.
  auto q = iota_tokens(3, 500);
  kv.add_sequence(2, q);
  ASSERT_TRUE(kv.allocate(2, 3));
  EXPECT_EQ(kv.add_sequence(3, p), 4);
  kv.free(3);
  kv.free(2);
  // A request that needs all 4 blocks evicts the cached ones.
  auto big = iota_tokens(8, 900);
  kv.add_sequence(4, big);
  ASSERT_TRUE(kv.allocate(4, 8));
  EXPECT_EQ(kv.stats().cached_blocks, 0);
  kv.free(4);
  EXPECT_EQ(kv.add_sequence(5, p), 0);  // evicted: no hit
}

TEST(KvCache, ForkSharesBlocksAndCopiesThePartialBlockOnWrite) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 4});
  auto p = iota_tokens(6);
  kv.add_sequence(1, p);
  ASSERT_TRUE(kv.allocate(1, 6));
  kv.fork(1, 2);
  EXPECT_EQ(kv.ref_count(kv.block_table(1)[1]), 2);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  ASSERT_TRUE(kv.allocate(2, 1));  // writes into the shared partial block
  auto copies = kv.take_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, kv.block_table(1)[1]);
  EXPECT_EQ(copies[0].dst, kv.block_table(2)[1]);
  EXPECT_EQ(kv.block_table(1)[0], kv.block_table(2)[0]);  // the full block stays shared
  EXPECT_EQ(kv.ref_count(kv.block_table(1)[1]), 1);
  ASSERT_TRUE(kv.allocate(1, 1));  // now private: no copy
  EXPECT_TRUE(kv.take_copies().empty());
  kv.free(1);
  kv.free(2);
  EXPECT_EQ(kv.num_free_blocks(), 8);
}

// Random traffic: the pool's counts stay consistent and everything returns at the end.
TEST(KvCache, RandomTrafficKeepsInvariants) {
  KvCacheManager kv({.num_blocks = 64, .block_size = 8});
  std::mt19937 rng(7);
  std::vector<std::pair<SeqId, std::vector<std::int32_t>>> live;
  SeqId next = 0;
  for (int step = 0; step < 5000; ++step) {
    int op = static_cast<int>(rng() % 3);
    if (op == 0 || live.empty()) {
      // One of three shared system prompts, then a random tail: many shared prefixes.
      std::vector<std::int32_t> t(static_cast<std::size_t>(8 * (1 + rng() % 3)),
                                  static_cast<std::int32_t>(rng() % 3));
      for (std::size_t k = rng() % 20; k > 0; --k)
        t.push_back(static_cast<std::int32_t>(rng() % 50));
      SeqId id = next++;
      auto cached = kv.add_sequence(id, t);
      if (kv.allocate(id, static_cast<std::int64_t>(t.size()) - cached)) {
        kv.commit(id, t);
        live.emplace_back(id, t);
      } else {
        kv.free(id);
      }
    } else if (op == 1) {
      auto& [id, t] = live[rng() % live.size()];
      if (kv.allocate(id, 1)) {
        t.push_back(static_cast<std::int32_t>(rng() % 4));
        kv.commit(id, t);
      }
    } else {
      std::size_t i = rng() % live.size();
      kv.free(live[i].first);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    auto st = kv.stats();
    ASSERT_EQ(st.used_blocks + st.free_blocks, 64);
    ASSERT_LE(st.filled_slots, st.allocated_slots);
  }
  for (auto& [id, t] : live) kv.free(id);
  EXPECT_EQ(kv.num_free_blocks(), 64);
  EXPECT_GT(kv.stats().prefix_hits, 0u);
}

}  // namespace
}  // namespace weir::inference
