#include "engine/scheduler.hpp"

#include <numeric>

#include <gtest/gtest.h>

namespace weir::inference {
namespace {

std::vector<std::int32_t> prompt(int n, int start = 10) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Plays the engine: marks chunks computed and appends a token for each sampled sequence.
void complete(Scheduler& s, const SchedulerOutput& out, std::int32_t tok = 1) {
  for (const auto& c : out.chunks) {
    s.on_computed(c);
    if (c.sample) s.append_token(c.seq, tok);
  }
}

TEST(Scheduler, RejectsPromptsThatCanNeverRunWithClearErrors) {
  KvCacheManager kv({.num_blocks = 4, .block_size = 4});
  Scheduler s(
      {.max_num_seqs = 4, .max_num_batched_tokens = 64, .max_model_len = 32, .max_waiting = 1}, kv);
  auto long_prompt = s.add(1, prompt(33));
  ASSERT_FALSE(long_prompt);
  EXPECT_EQ(long_prompt.error().to_string(),
            "invalid_argument: the prompt has 33 tokens, more than max_model_len=32; shorten it "
            "(trim history), or raise max_model_len up to the model's context length "
            "(--max-model-len N; files: \"engine\": {\"max_model_len\": N})");
  auto too_big = s.add(2, prompt(17));
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().to_string(),
            "kv_cache_exhausted: the prompt needs 5 KV blocks but the pool has 4; raise the "
            "kv_cache memory budget");
  EXPECT_FALSE(s.add(3, {}));
  ASSERT_TRUE(s.add(4, prompt(3)));
  auto full = s.add(5, prompt(3));
  ASSERT_FALSE(full);
  EXPECT_TRUE(full.error().is(Errc::overloaded));
}

TEST(Scheduler, ChunkedPrefillMixesWithDecodesUnderTheTokenBudget) {
  KvCacheManager kv({.num_blocks = 64, .block_size = 4});
  Scheduler s({.max_num_seqs = 8, .max_num_batched_tokens = 10, .max_model_len = 128}, kv);
  ASSERT_TRUE(s.add(1, prompt(3)));
  auto o1 = s.schedule();
  ASSERT_EQ(o1.chunks.size(), 1u);
  EXPECT_TRUE(o1.chunks[0].sample);
  complete(s, o1);
  ASSERT_TRUE(s.add(2, prompt(25)));  // longer than the budget: chunked
  auto o2 = s.schedule();
  ASSERT_EQ(o2.chunks.size(), 2u);
  EXPECT_EQ(o2.chunks[0].seq, 1);  // the decode first
  EXPECT_EQ(o2.chunks[0].count, 1);
  EXPECT_EQ(o2.chunks[1].seq, 2);
  EXPECT_EQ(o2.chunks[1].count, 9);
  EXPECT_FALSE(o2.chunks[1].sample);
  EXPECT_EQ(o2.num_tokens, 10);
  complete(s, o2);
  auto o3 = s.schedule();
  EXPECT_EQ(o3.chunks[1].start, 9);
  EXPECT_EQ(o3.chunks[1].count, 9);
  complete(s, o3);
  auto o4 = s.schedule();
  EXPECT_EQ(o4.chunks[1].start, 18);
  EXPECT_EQ(o4.chunks[1].count, 7);
  EXPECT_TRUE(o4.chunks[1].sample);
}

TEST(Scheduler, CapsRunningSequences) {
  KvCacheManager kv({.num_blocks = 64, .block_size = 4});
  Scheduler s({.max_num_seqs = 2, .max_num_batched_tokens = 100, .max_model_len = 64}, kv);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s.add(i, prompt(4)));
  auto o = s.schedule();
  EXPECT_EQ(o.chunks.size(), 2u);
  EXPECT_EQ(s.stats().running, 2u);
  EXPECT_EQ(s.stats().waiting, 3u);
  s.finish(0);
  complete(s, o);
  auto o2 = s.schedule();
  EXPECT_EQ(o2.chunks.size(), 2u);  // seq 1 decodes, seq 2 admitted
}

// When the pool runs dry the newest sequence is preempted, later readmitted and recomputed;
// nothing fails and every sequence completes.
TEST(Scheduler, PreemptsNewestByRecomputeWhenBlocksRunOut) {
  KvCacheManager kv({.num_blocks = 6, .block_size = 4});
  Scheduler s({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 24}, kv);
  ASSERT_TRUE(s.add(1, prompt(8)));
  ASSERT_TRUE(s.add(2, prompt(8, 50)));
  ASSERT_TRUE(s.add(3, prompt(4, 90)));
  auto o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 3u);  // 2 + 2 + 1 blocks = 5 of 6
  complete(s, o);
  int generated[4] = {};
  std::uint64_t preempted = 0;
  for (int step = 0; step < 200 && s.has_work(); ++step) {
    auto out = s.schedule();
    preempted += out.preempted.size();
    for (const auto& c : out.chunks) {
      s.on_computed(c);
      if (c.sample) {
        s.append_token(c.seq, 7);
        if (++generated[c.seq] >= 10) s.finish(c.seq);
      }
    }
    auto st = kv.stats();
    ASSERT_LE(st.used_blocks, 6);
  }
  EXPECT_FALSE(s.has_work());
  EXPECT_GT(preempted, 0u);
  EXPECT_GE(s.stats().preemptions, preempted);
  EXPECT_EQ(kv.num_free_blocks(), 6);
}

TEST(Scheduler, PreemptedSequenceKeepsItsGeneratedTokens) {
  KvCacheManager kv({.num_blocks = 3, .block_size = 4});
  Scheduler s({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 12}, kv);
  ASSERT_TRUE(s.add(1, prompt(4)));
  ASSERT_TRUE(s.add(2, prompt(4, 40)));
  complete(s, s.schedule(), 101);  // each: 1 block, one token generated
  complete(s, s.schedule(), 102);  // each needs a second block: 3 blocks for 4 -> preempt #2
  auto toks = std::vector<std::int32_t>(s.tokens(2).begin(), s.tokens(2).end());
  EXPECT_EQ(s.preemptions(2), 1);
  EXPECT_EQ(toks.size(), 5u);  // prompt + the first generated token, kept for recompute
  EXPECT_EQ(toks.back(), 101);
}

TEST(Scheduler, SharedSystemPromptIsPrefilledOnce) {
  KvCacheManager kv({.num_blocks = 256, .block_size = 16});
  Scheduler s({.max_num_seqs = 32, .max_num_batched_tokens = 4096, .max_model_len = 1024}, kv);
  auto sys = prompt(500);
  auto first = sys;
  first.push_back(1);
  ASSERT_TRUE(s.add(0, first));
  complete(s, s.schedule());
  std::int64_t computed = 0;
  for (int i = 1; i <= 15; ++i) {
    auto p = sys;
    p.push_back(1000 + i);
    ASSERT_TRUE(s.add(i, p));
  }
  auto o = s.schedule();
  for (const auto& c : o.chunks) {
    if (c.seq != 0) computed += c.count;
  }
  // Each of 15 prompts recomputes only its tail past the 31 cached full blocks (496 tokens).
  EXPECT_EQ(computed, 15 * (501 - 496));
  EXPECT_EQ(s.cached_prompt_tokens(7), 496);
}

// Sixteen requests with one system prompt, submitted together: the first computes the
// prefix and the others, admitted in the same step, share its blocks at once.
TEST(Scheduler, SimultaneousRequestsShareAPrefixInTheSameStep) {
  KvCacheManager kv({.num_blocks = 512, .block_size = 16});
  Scheduler s({.max_num_seqs = 32, .max_num_batched_tokens = 8192, .max_model_len = 1024}, kv);
  auto sys = prompt(500);
  for (int i = 0; i < 16; ++i) {
    auto p = sys;
    p.push_back(2000 + i);
    ASSERT_TRUE(s.add(i, p));
  }
  auto o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 16u);
  EXPECT_EQ(o.num_tokens, 501 + 15 * 5);
  EXPECT_EQ(s.cached_prompt_tokens(9), 496);
}

}  // namespace
}  // namespace weir::inference
