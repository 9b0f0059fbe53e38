// Engine mechanics with a fake model whose "forward pass" stores each token in the paged KV
// pool and derives the next token from every K row of the sequence, read back through its
// block table. Any mistake in block tables, prefix reuse, copy-on-write or recompute after
// preemption changes the tokens, so "batched == alone" is a real check.
#include "weir/inference/engine.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "weir/inference/engine_async.hpp"
#include "weir/runtime/metrics.hpp"

#include <atomic>
#include <future>
#include <limits>
#include <new>
#include <numeric>
#include <random>
#include <thread>

#include <gtest/gtest.h>

namespace weir::inference {
namespace {

constexpr std::int32_t kVocab = 1000;

std::int32_t next_token_of(std::span<const std::int32_t> toks) {
  std::int64_t h = 0;
  for (std::size_t p = 0; p < toks.size(); ++p)
    h = (h * 31 + toks[p] * 7 + static_cast<std::int64_t>(p)) % 1000003;
  return static_cast<std::int32_t>(h % kVocab);
}

class FakeRunner : public StepRunner {
 public:
  explicit FakeRunner(std::int32_t ctx = 512) : ctx_(ctx) {}
  std::int32_t vocab_size() const override { return kVocab; }
  std::int32_t n_layers() const override { return 1; }
  std::int32_t n_kv_heads() const override { return 1; }
  std::int32_t head_dim() const override { return 2; }
  std::int32_t context_length() const override { return ctx_; }
  Status forward(const StepBatch& b, const KvLayout& L, std::span<float> pool,
                 std::span<float> logits) override {
    for (const auto& c : b.copies) {
      for (int kv = 0; kv < 2; ++kv) {
        std::copy_n(&pool[L.row_offset(0, kv, c.src, 0)], L.tile_elems(),
                    &pool[L.row_offset(0, kv, c.dst, 0)]);
      }
    }
    for (std::size_t i = 0; i < b.tokens.size(); ++i) {
      const auto& s = b.seqs[b.seq_index[i]];
      std::int32_t pos = b.positions[i];
      float* row = &pool[L.row_offset(0, 0, s.block_table[pos / L.block_size], pos % L.block_size)];
      row[0] = static_cast<float>(b.tokens[i]);
      row[1] = static_cast<float>(pos);
    }
    std::fill(logits.begin(), logits.end(), 0.0f);
    for (std::size_t r = 0; r < b.logit_rows.size(); ++r) {
      std::int32_t i = b.logit_rows[r];
      const auto& s = b.seqs[b.seq_index[i]];
      std::vector<std::int32_t> toks;
      for (std::int32_t p = 0; p <= b.positions[i]; ++p) {
        const float* row =
            &pool[L.row_offset(0, 0, s.block_table[p / L.block_size], p % L.block_size)];
        if (row[1] != static_cast<float>(p))
          return Error(Errc::model_error, "KV row holds the wrong position");
        toks.push_back(static_cast<std::int32_t>(row[0]));
      }
      logits[r * kVocab + next_token_of(toks)] = 1.0f;
    }
    ++calls;
    return {};
  }
  std::int32_t ctx_;
  int calls = 0;
};

std::vector<std::int32_t> expected_alone(std::vector<std::int32_t> toks, int n) {
  std::vector<std::int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(next_token_of(toks));
    toks.push_back(out.back());
  }
  return out;
}

std::unique_ptr<Engine> make_engine(EngineConfig cfg, std::int32_t ctx = 512) {
  auto e = Engine::create(std::make_unique<FakeRunner>(ctx), std::move(cfg));
  EXPECT_TRUE(e) << e.error().message;
  return std::move(*e);
}

std::future<Result<GenerateResult>> submit(Engine& e, GenerateRequest req,
                                           std::function<void(std::int32_t)> on_token = {}) {
  auto p = std::make_shared<std::promise<Result<GenerateResult>>>();
  auto f = p->get_future();
  e.submit(std::move(req),
           {std::move(on_token), [p](Result<GenerateResult> r) { p->set_value(std::move(r)); }});
  return f;
}

GenerateRequest req(std::vector<std::int32_t> prompt, int n) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = n;
  return r;
}

// A model whose logits go non-finite (NaN weights) fails its request with model_error instead
// of returning arbitrary tokens as a success; the engine goes on serving.
class NanRunner : public FakeRunner {
 public:
  Status forward(const StepBatch& b, const KvLayout& L, std::span<float> pool,
                 std::span<float> logits) override {
    auto st = FakeRunner::forward(b, L, pool, logits);
    if (poison) std::fill(logits.begin(), logits.end(), std::numeric_limits<float>::quiet_NaN());
    return st;
  }
  std::atomic<bool> poison{true};
};

// A runner with no layers (a model file that said 0) has no KV cache to size: an error, where
// sizing the pool divided by its 0-byte blocks (SIGFPE).
TEST(Engine, ARunnerWithoutLayersIsRefused) {
  struct NoLayers : FakeRunner {
    std::int32_t n_layers() const override { return 0; }
  };
  auto e = Engine::create(std::make_unique<NoLayers>(), {});
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, Errc::model_error);
  EXPECT_EQ(e.error().message,
            "engine: the model has 0 layers of 1 KV heads of 2: no KV cache to size");
}

TEST(Engine, NonFiniteLogitsFailTheRequestWithModelError) {
  auto runner = std::make_unique<NanRunner>();
  NanRunner* raw = runner.get();
  auto e = Engine::create(std::move(runner), {});
  ASSERT_TRUE(e) << e.error().message;
  for (float temp : {0.0f, 0.8f}) {
    auto rq = req({1, 5, 9}, 8);
    rq.sampling.temperature = temp;
    auto r = submit(**e, rq).get();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::model_error);
    EXPECT_EQ(r.error().message,
              "the model computed a non-finite logit (NaN or infinity) after 0 generated tokens: "
              "its weights hold NaN/Inf or its activations overflow; check the model file");
  }
  raw->poison = false;
  auto ok = submit(**e, req({1, 5, 9}, 4)).get();
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->tokens, expected_alone({1, 5, 9}, 4));
  EXPECT_EQ((*e)->stats().kv.used_blocks, 0);
}

TEST(Engine, GeneratesAndStreamsTokens) {
  auto e = make_engine({.max_num_seqs = 4, .block_size = 4, .kv_cache_bytes = 64 * 1024});
  std::vector<std::int32_t> streamed;
  auto f = submit(*e, req({1, 2, 3, 4, 5, 6}, 10), [&](std::int32_t t) { streamed.push_back(t); });
  auto r = f.get();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->tokens, expected_alone({1, 2, 3, 4, 5, 6}, 10));
  EXPECT_EQ(streamed, r->tokens);
  EXPECT_EQ(r->finish, FinishReason::length);
  EXPECT_EQ(r->usage.prompt_tokens, 6);
  EXPECT_EQ(r->usage.completion_tokens, 10);
}

// Many requests at once through a small KV pool: preemptions happen, every output equals the
// same prompt generated alone, and every block comes back.
TEST(Engine, BatchedWithPreemptionEqualsAlone) {
  auto e = make_engine({.max_num_seqs = 32,
                        .max_num_batched_tokens = 64,
                        .max_model_len = 128,
                        .block_size = 4,
                        .kv_cache_bytes = 40 * 4 * 2 * 2 * sizeof(float)});
  ASSERT_EQ(e->kv_layout().num_blocks, 40);
  std::mt19937 rng(3);
  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<std::future<Result<GenerateResult>>> fs;
  for (int i = 0; i < 40; ++i) {
    std::vector<std::int32_t> p(1 + rng() % 30);
    for (auto& t : p) t = static_cast<std::int32_t>(rng() % kVocab);
    prompts.push_back(p);
    fs.push_back(submit(*e, req(p, 20)));
  }
  for (int i = 0; i < 40; ++i) {
    auto r = fs[i].get();
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->tokens, expected_alone(prompts[i], 20)) << "request " << i;
  }
  auto st = e->stats();
  EXPECT_GT(st.sched.preemptions, 0u);
  EXPECT_EQ(st.kv.used_blocks, 0);
  EXPECT_EQ(st.requests_completed, 40u);
}

TEST(Engine, SharedPrefixIsComputedOnce) {
  auto e = make_engine({.max_num_seqs = 32,
                        .max_num_batched_tokens = 2048,
                        .block_size = 16,
                        .kv_cache_bytes = 1 << 20});
  std::vector<std::int32_t> sys(500);
  std::iota(sys.begin(), sys.end(), 1);
  auto first = sys;
  first.push_back(900);
  ASSERT_TRUE(submit(*e, req(first, 2)).get());
  std::vector<std::future<Result<GenerateResult>>> fs;
  for (int i = 0; i < 15; ++i) {
    auto p = sys;
    p.push_back(901 + i);
    fs.push_back(submit(*e, req(p, 2)));
  }
  for (int i = 0; i < 15; ++i) {
    auto r = fs[i].get();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->usage.cached_prompt_tokens, 496);
    auto p = sys;
    p.push_back(901 + i);
    EXPECT_EQ(r->tokens, expected_alone(p, 2));
  }
  EXPECT_EQ(e->stats().prompt_tokens_computed, 501u + 15u * 5u);
}

TEST(Engine, CancelEndsRequestAndFreesBlocks) {
  auto e = make_engine({.max_num_seqs = 4, .block_size = 4, .kv_cache_bytes = 64 * 1024});
  // The first token holds the engine thread until the cancel is queued, so the request
  // cannot finish its 400 tokens first however the threads are scheduled.
  std::promise<void> first_token, cancel_sent;
  auto sent = cancel_sent.get_future();
  bool once = false;
  auto p = std::make_shared<std::promise<Result<GenerateResult>>>();
  auto f = p->get_future();
  RequestId id = e->submit(req({5, 6, 7}, 400),
                           {[&](std::int32_t) {
                              if (!once) {
                                once = true;
                                first_token.set_value();
                                sent.wait();
                              }
                            },
                            [p](Result<GenerateResult> r) { p->set_value(std::move(r)); }});
  first_token.get_future().wait();
  e->cancel(id);
  cancel_sent.set_value();
  auto r = f.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->finish, FinishReason::cancelled);
  EXPECT_LT(r->tokens.size(), 400u);
  // The engine keeps serving after a cancellation.
  auto r2 = submit(*e, req({1}, 3)).get();
  ASSERT_TRUE(r2);
  EXPECT_EQ(e->stats().kv.used_blocks, 0);
}

TEST(Engine, BadRequestsGetClearErrorsAndTheEngineKeepsServing) {
  auto e = make_engine(
      {.max_num_seqs = 4, .max_model_len = 64, .block_size = 4, .kv_cache_bytes = 64 * 1024});
  auto bad_tok = submit(*e, req({1, 5000}, 3)).get();
  ASSERT_FALSE(bad_tok);
  EXPECT_EQ(bad_tok.error().to_string(),
            "invalid_argument: prompt token id 5000 is outside the vocabulary (size 1000)");
  auto too_long = submit(*e, req(std::vector<std::int32_t>(65, 1), 3)).get();
  ASSERT_FALSE(too_long);
  EXPECT_TRUE(too_long.error().is(Errc::invalid_argument));
  auto ok = submit(*e, req({1, 2}, 3)).get();
  EXPECT_TRUE(ok);
}

TEST(Engine, StopsAtEndOfGenerationAndModelLength) {
  auto e0 = make_engine({.max_num_seqs = 4, .block_size = 4, .kv_cache_bytes = 64 * 1024});
  auto probe = submit(*e0, req({1, 2, 3}, 5)).get();
  ASSERT_TRUE(probe);
  std::int32_t third = probe->tokens[2];
  auto e = make_engine({.max_num_seqs = 4,
                        .max_model_len = 10,
                        .block_size = 4,
                        .kv_cache_bytes = 64 * 1024,
                        .eog_tokens = {third}});
  auto r = submit(*e, req({1, 2, 3}, 50)).get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->finish, FinishReason::eos);
  EXPECT_EQ(r->tokens.size(), 3u);
  auto len = submit(*e, req({7, 7, 7}, 50)).get();
  ASSERT_TRUE(len);
  EXPECT_EQ(len->finish, FinishReason::length);
  EXPECT_EQ(len->tokens.size(), 7u);  // 3 + 7 = max_model_len
}

TEST(Engine, KvPoolComesFromTheMemoryBudget) {
  BudgetLimits lim;
  lim.category[static_cast<int>(BudgetCategory::kv_cache)] = 4096;
  MemoryBudget budget(lim);
  {
    auto e =
        make_engine({.max_num_seqs = 4, .max_model_len = 64, .block_size = 4, .budget = &budget});
    EXPECT_EQ(e->kv_layout().num_blocks, 4096 / (4 * 2 * 2 * 4));
    EXPECT_EQ(budget.used(BudgetCategory::kv_cache), 4096u);
  }
  EXPECT_EQ(budget.used(BudgetCategory::kv_cache), 0u);
  BudgetLimits small;
  small.category[static_cast<int>(BudgetCategory::kv_cache)] = 512;
  MemoryBudget tiny(small);
  auto e = Engine::create(std::make_unique<FakeRunner>(),
                          {.max_model_len = 64, .block_size = 4, .budget = &tiny});
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().to_string(),
            "memory_budget_exceeded: the KV cache budget of 0 KiB holds 8 blocks of 4 tokens (64 "
            "bytes each), but one sequence of max_model_len=64 needs 16; raise the KV cache "
            "budget (weir serve: --kv-cache-mb N; files: \"limits\": {\"memory\": "
            "{\"kv_cache\": ...}}) or lower max_model_len (--max-model-len N; files: "
            "\"engine\": {\"max_model_len\": N})");
}

// Once on_done reports a request cancelled, no step computes it again: the engine's counters
// move only by what a request submitted afterwards needs (one step for its prompt and first
// token, one for its second).
TEST(Engine, ACancelledSequenceIsNeverSteppedAgain) {
  auto e = make_engine({.max_num_seqs = 4, .block_size = 4, .kv_cache_bytes = 64 * 1024});
  // The engine thread waits in the first token's callback until the cancel is queued, so the
  // request cannot finish its 400 tokens first.
  std::promise<void> first_token, cancel_sent;
  auto sent = cancel_sent.get_future();
  bool once = false;
  auto p = std::make_shared<std::promise<Result<GenerateResult>>>();
  auto f = p->get_future();
  const RequestId id = e->submit(req({1, 2, 3}, 400),
                                 {[&](std::int32_t) {
                                    if (!once) {
                                      once = true;
                                      first_token.set_value();
                                      sent.wait();
                                    }
                                  },
                                  [p](Result<GenerateResult> r) { p->set_value(std::move(r)); }});
  first_token.get_future().wait();
  e->cancel(id);
  cancel_sent.set_value();
  auto r = f.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->finish, FinishReason::cancelled);
  EXPECT_EQ(r->usage.completion_tokens, static_cast<std::int64_t>(r->tokens.size()));
  const EngineStats before = e->stats();
  auto short_run = submit(*e, req({4, 5}, 2)).get();
  ASSERT_TRUE(short_run);
  const EngineStats after = e->stats();
  EXPECT_EQ(after.steps - before.steps, 2u);
  EXPECT_EQ(after.tokens_generated - before.tokens_generated, 2u);
  EXPECT_EQ(after.kv.used_blocks, 0);
}

// A request still running when the engine is destroyed gets on_done once, cancelled, with the
// tokens it generated so far. (Each step takes 5 ms: its 4,000 tokens would take 20 s.)
class SlowRunner : public FakeRunner {
 public:
  using FakeRunner::FakeRunner;
  Status forward(const StepBatch& b, const KvLayout& L, std::span<float> pool,
                 std::span<float> logits) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return FakeRunner::forward(b, L, pool, logits);
  }
};

TEST(Engine, DestroyingTheEngineCancelsWhatRunsWithItsTokens) {
  std::future<Result<GenerateResult>> f;
  {
    auto e = Engine::create(std::make_unique<SlowRunner>(4096),
                            {.max_num_seqs = 4, .block_size = 4, .kv_cache_bytes = 64 * 1024});
    ASSERT_TRUE(e) << e.error().message;
    std::promise<void> started;
    std::atomic<int> seen{0};
    f = submit(**e, req({1, 2, 3}, 4000), [&](std::int32_t) {
      if (seen.fetch_add(1) == 2) started.set_value();
    });
    started.get_future().wait();
  }
  auto r = f.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->finish, FinishReason::cancelled);
  EXPECT_GE(r->tokens.size(), 3u);
  EXPECT_LT(r->tokens.size(), 4000u);
  EXPECT_EQ(r->usage.completion_tokens, static_cast<std::int64_t>(r->tokens.size()));
  EXPECT_EQ(r->usage.prompt_tokens, 3);
}

// Two engines on one budget without limits (weir serve with two models) each get the pool they
// were configured with; on a budget with a kv_cache limit, a pool never exceeds what the budget
// still grants, and an engine that cannot get one sequence's worth is refused by name.
TEST(Engine, EachEngineOnOneBudgetGetsItsConfiguredPoolAndNoMore) {
  constexpr std::size_t kBlock = 4 * 2 * 2 * 4;  // 4 tokens x (K, V) x 2 floats
  MemoryBudget unlimited;
  {
    auto a = make_engine(
        {.max_model_len = 64, .block_size = 4, .kv_cache_bytes = 64 << 10, .budget = &unlimited});
    auto b = make_engine(
        {.max_model_len = 64, .block_size = 4, .kv_cache_bytes = 64 << 10, .budget = &unlimited});
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->kv_layout().num_blocks, (64 << 10) / kBlock);
    EXPECT_EQ(b->kv_layout().num_blocks, (64 << 10) / kBlock);
    EXPECT_EQ(unlimited.used(BudgetCategory::kv_cache), std::size_t{128} << 10);
  }
  EXPECT_EQ(unlimited.used(BudgetCategory::kv_cache), 0u);
  BudgetLimits lim;
  lim.category[static_cast<int>(BudgetCategory::kv_cache)] = 96 << 10;
  MemoryBudget finite(lim);
  auto a = make_engine(
      {.max_model_len = 64, .block_size = 4, .kv_cache_bytes = 64 << 10, .budget = &finite});
  auto b = make_engine(
      {.max_model_len = 64, .block_size = 4, .kv_cache_bytes = 64 << 10, .budget = &finite});
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->kv_layout().num_blocks, (64 << 10) / kBlock);
  EXPECT_EQ(b->kv_layout().num_blocks, (32 << 10) / kBlock);  // what the first one left
  EXPECT_EQ(finite.used(BudgetCategory::kv_cache), std::size_t{96} << 10);
  auto c = Engine::create(
      std::make_unique<FakeRunner>(),
      {.max_model_len = 64, .block_size = 4, .kv_cache_bytes = 64 << 10, .budget = &finite});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().to_string(),
            "memory_budget_exceeded: the KV cache budget of 0 KiB holds 0 blocks of 4 tokens (64 "
            "bytes each), but one sequence of max_model_len=64 needs 16; raise the KV cache "
            "budget (weir serve: --kv-cache-mb N; files: \"limits\": {\"memory\": "
            "{\"kv_cache\": ...}}) or lower max_model_len (--max-model-len N; files: "
            "\"engine\": {\"max_model_len\": N})");
}

// A KV pool the machine cannot hold is an error that names the setting, never a crash: a host
// pool larger than the RAM is refused before it is touched, and a failed allocation
// (std::bad_alloc, here from a runner that keeps its own pool) becomes an error too.
class WideRunner : public FakeRunner {  // 64 layers x 4096: 32 MiB a block of 16 tokens
 public:
  std::int32_t n_layers() const override { return 64; }
  std::int32_t head_dim() const override { return 4096; }
};
class PoolOwningRunner : public FakeRunner {
 public:
  bool owns_kv_pool() const override { return true; }
  Status allocate_kv_pool(const KvLayout&) override { throw std::bad_alloc(); }
};

TEST(Engine, AKvPoolTheMachineCannotHoldIsAnErrorNamingTheSetting) {
  auto huge = Engine::create(std::make_unique<WideRunner>(),
                             {.max_model_len = 64, .kv_cache_bytes = std::size_t{1} << 50});
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().code, Errc::memory_budget_exceeded);
  EXPECT_EQ(huge.error().message.rfind("the KV cache of 1048576.0 GiB is more than this "
                                       "machine's memory (",
                                       0),
            0u)
      << huge.error().message;
  EXPECT_NE(huge.error().message.find("); lower the KV cache size (kv_cache_bytes: weir serve "
                                      "--kv-cache-mb, or the memory budget's limits.kv_cache)"),
            std::string::npos)
      << huge.error().message;
  MemoryBudget budget;
  auto owned = Engine::create(
      std::make_unique<PoolOwningRunner>(),
      {.max_model_len = 64, .block_size = 4, .kv_cache_bytes = 64 << 10, .budget = &budget});
  ASSERT_FALSE(owned);
  EXPECT_EQ(owned.error().to_string(),
            "memory_budget_exceeded: the KV cache of 64.0 KiB could not be allocated: the machine "
            "does not have that much free memory; lower the KV cache size (kv_cache_bytes: weir "
            "serve --kv-cache-mb, or the memory budget's limits.kv_cache)");
  EXPECT_EQ(budget.used(BudgetCategory::kv_cache), 0u);  // the reservation went back
}

// A runner that keeps its KV cache in F32 only (the CUDA runner; FakeRunner here) refuses an F16
// or Q8_0 cache by name; an unknown type name is refused with the choices.
TEST(Engine, AnF16KvCacheNeedsARunnerThatTakesIt) {
  auto e = Engine::create(std::make_unique<FakeRunner>(),
                          {.max_model_len = 64, .block_size = 4, .kv_cache_type = KvType::f16});
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().to_string(),
            "unsupported: engine: this model runner keeps its KV cache in F32 only; the KV cache "
            "type f16 is for the CPU runner");
  EXPECT_EQ(parse_kv_type("f16").value(), KvType::f16);
  EXPECT_EQ(parse_kv_type("q8_0").value(), KvType::q8_0);
  EXPECT_EQ(parse_kv_type("q4_0").error().to_string(),
            "invalid_argument: unknown KV cache type 'q4_0' (choose f32, f16 or q8_0)");
}

// The engine's fences show up in the metrics registry (Prometheus text) while it lives.
TEST(Engine, ReportsItsFencesAsMetrics) {
  {
    auto e = make_engine({.max_num_seqs = 4,
                          .block_size = 4,
                          .kv_cache_bytes = 64 * 1024,
                          .metrics_name = "test-engine"});
    // Before any request, the pool's blocks are all free (they read 0 until a first step).
    const auto free = e->stats().kv.free_blocks;
    EXPECT_GT(free, 0);
    EXPECT_NE(Registry::global().prometheus().find("weir_kv_blocks_free{engine=\"test-engine\"} " +
                                                   std::to_string(free) + "\n"),
              std::string::npos)
        << Registry::global().prometheus();
    auto r = submit(*e, req({1, 2, 3, 4, 5}, 4)).get();
    ASSERT_TRUE(r);
    auto text = Registry::global().prometheus();
    EXPECT_NE(text.find("weir_kv_blocks_used{engine=\"test-engine\"} 0"), std::string::npos)
        << text;
    EXPECT_NE(text.find("weir_engine_tokens_generated{engine=\"test-engine\"} 4"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("# HELP weir_kv_waste_ratio"), std::string::npos);
  }
  EXPECT_EQ(Registry::global().prometheus().find("test-engine"), std::string::npos);
}

namespace asio = boost::asio;

// Coroutines await results without holding a thread; completions arrive on their executor.
TEST(EngineAsync, CoroutinesAwaitResultsOnTheirOwnExecutor) {
  auto e = make_engine({.max_num_seqs = 16, .block_size = 4, .kv_cache_bytes = 256 * 1024});
  asio::io_context io;
  int done = 0;
  auto task = [&](int i) -> asio::awaitable<void> {
    std::vector<std::int32_t> p = {i + 1, i + 2, i + 3};
    auto r = co_await async_generate(*e, req(p, 8), asio::use_awaitable);
    EXPECT_TRUE(r);
    EXPECT_EQ(r->tokens, expected_alone(p, 8));
    EXPECT_TRUE(io.get_executor().running_in_this_thread());
    ++done;
  };
  for (int i = 0; i < 50; ++i) asio::co_spawn(io, task(i), asio::detached);
  io.run();
  EXPECT_EQ(done, 50);
}

TEST(EngineAsync, CancellingTheAwaitingOperationCancelsTheRequest) {
  auto e = make_engine({.max_num_seqs = 4, .block_size = 4, .kv_cache_bytes = 256 * 1024}, 16384);
  asio::io_context io;
  asio::cancellation_signal sig;
  std::optional<GenerateResult> got;
  std::function<void(std::int32_t)> ignore = [](std::int32_t) {};
  auto task = [&]() -> asio::awaitable<void> {
    // (An initializer list inside a co_await expression trips a GCC 12 bug: build it first.)
    GenerateRequest long_request = req({1, 2}, 16000);
    auto r = co_await async_generate(*e, std::move(long_request), asio::use_awaitable, ignore);
    if (r) got = *r;
  };
  asio::co_spawn(io, task(), asio::bind_cancellation_slot(sig.slot(), asio::detached));
  io.poll();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  sig.emit(asio::cancellation_type::terminal);
  io.run();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->finish, FinishReason::cancelled);
  EXPECT_EQ(e->stats().kv.used_blocks, 0);
}

}  // namespace
}  // namespace weir::inference
