// The fast paged forward pass and the engine on the real reference models: the same logits as
// the scalar reference, and the goldens' greedy tokens when every prompt runs at once, through
// preemption, and with the prefix cache.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "runner/forward_ref.hpp"
#include "runner/llama_runner.hpp"
#include "weir/inference/engine.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/inference/tokenizer.hpp"

namespace weir::inference {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::vector<std::int32_t> prompt, greedy;
};

std::vector<Case> goldens(const std::string& model) {
  std::ifstream in(fs::path(WEIR_SHARED_DIR) / "models" / (model + ".golden.json"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<Case> out;
  const auto doc = boost::json::parse(ss.str());  // kept alive: range-for would not extend it
  for (const auto& c : doc.at("cases").as_array()) {
    Case k;
    for (const auto& t : c.at("prompt_tokens").as_array())
      k.prompt.push_back(static_cast<std::int32_t>(t.as_int64()));
    for (const auto& t : c.at("greedy_tokens").as_array())
      k.greedy.push_back(static_cast<std::int32_t>(t.as_int64()));
    out.push_back(std::move(k));
  }
  return out;
}

std::shared_ptr<const Model> load(const std::string& name) {
  auto r = Model::load(fs::path(WEIR_SHARED_DIR) / "models" / (name + ".gguf"));
  EXPECT_TRUE(r) << r.error().message;
  return r ? *r : nullptr;
}

#define REQUIRE_MODELS()                                                   \
  if (!fs::exists(fs::path(WEIR_SHARED_DIR) / "models/aidreams260K.gguf")) \
  GTEST_SKIP() << "reference models not found in " << WEIR_SHARED_DIR      \
               << "/models (../shared absent)"

class LlamaEngine : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Two sequences fed in interleaved chunks through scattered blocks: the largest difference,
// over every position and vocabulary entry, between the paged forward pass's logits (KV cache of
// `type`) and the reference path's.
double max_logit_error(const std::string& name, int threads, KvType type) {
  auto model = load(name);
  auto runner = make_llama_runner(model, threads);
  const auto& hp = model->hp();
  KvLayout L{hp.n_layers, hp.n_kv_heads, hp.head_dim, 4, 64, type};
  std::vector<float> pool(static_cast<std::size_t>((L.total_bytes() + 3) / 4), NAN);
  auto cases = goldens(name);
  std::vector<std::int32_t> seqs[2] = {cases[0].prompt, cases[1].prompt};
  for (int s = 0; s < 2; ++s)
    seqs[s].insert(seqs[s].end(), cases[s].greedy.begin(), cases[s].greedy.begin() + 10);
  std::vector<BlockId> tables[2];
  for (BlockId blk = 0; blk < 64; ++blk) tables[blk % 2].push_back(63 - blk);
  std::vector<std::vector<float>> want[2];
  for (int s = 0; s < 2; ++s) {
    ReferenceSession ref(*model);
    for (std::size_t p = 0; p < seqs[s].size(); ++p)
      want[s].push_back(ref.step(seqs[s][p], static_cast<std::int32_t>(p)));
  }
  double worst = 0;
  std::int32_t done[2] = {0, 0};
  while (done[0] < static_cast<std::int32_t>(seqs[0].size()) ||
         done[1] < static_cast<std::int32_t>(seqs[1].size())) {
    StepBatch b;
    for (int s = 0; s < 2; ++s) {
      std::int32_t len = static_cast<std::int32_t>(seqs[s].size());
      std::int32_t n = std::min(s == 0 ? 5 : 3, len - done[s]);
      b.seqs.push_back({tables[s], done[s] + n});
      for (std::int32_t p = done[s]; p < done[s] + n; ++p) {
        b.tokens.push_back(seqs[s][static_cast<std::size_t>(p)]);
        b.positions.push_back(p);
        b.seq_index.push_back(s);
        b.logit_rows.push_back(
            static_cast<std::int32_t>(b.tokens.size() - 1));  // every row, to compare
      }
      done[s] += n;
    }
    std::vector<float> logits(b.logit_rows.size() * static_cast<std::size_t>(hp.n_vocab));
    EXPECT_TRUE(runner->forward(b, L, pool, logits));
    for (std::size_t r = 0; r < b.logit_rows.size(); ++r) {
      const int s = b.seq_index[r];
      const auto& w = want[s][static_cast<std::size_t>(b.positions[r])];
      for (std::int32_t i = 0; i < hp.n_vocab; ++i) {
        const double d = std::abs(logits[r * hp.n_vocab + i] - w[static_cast<std::size_t>(i)]);
        worst = std::isnan(d) ? INFINITY : std::max(worst, d);
      }
    }
  }
  return worst;
}

TEST_P(LlamaEngine, PagedForwardMatchesReferenceLogits) {
  REQUIRE_MODELS();
  auto [name, threads] = GetParam();
  EXPECT_LE(max_logit_error(name, threads, KvType::f32), 2e-4);
}

// With the KV cache in F16 (K and V rounded to 11 significant bits) the logits stay within
// 0.05 of the F32 reference: measured 2.3e-3 (aidreams260K) and 2.2e-2 (stories260K-gqa).
TEST_P(LlamaEngine, F16KvCacheLogitsStayNearTheReference) {
  REQUIRE_MODELS();
  auto [name, threads] = GetParam();
  EXPECT_LE(max_logit_error(name, threads, KvType::f16), 0.05);
}

// Every golden prompt at once through a KV pool too small for all of them: preemptions
// happen and every output is still the golden.
// With the KV cache in F16 the blocks are half the size: the same 14 blocks take half the bytes.
// min_same: with the KV cache in F16 or Q8_0, the golden tokens each case must begin with (or
// all, when fewer): greedy decoding may take the other side of a near-tie after them.
void all_goldens_together(const std::string& name, int threads, KvType type,
                          std::size_t min_same = 0) {
  auto model = load(name);
  const auto& hp = model->hp();
  auto cases = goldens(name);
  const KvLayout one{hp.n_layers, hp.n_kv_heads, hp.head_dim, 16, 0, type};
  const std::size_t block_bytes = static_cast<std::size_t>(one.type_block_bytes());
  auto engine =
      Engine::create(make_llama_runner(model, threads), {.max_num_seqs = 16,
                                                         .max_num_batched_tokens = 64,
                                                         .max_model_len = 128,
                                                         .block_size = 16,
                                                         .kv_cache_bytes = block_bytes * 14,
                                                         .kv_cache_type = type,
                                                         .eog_tokens = {2}});
  ASSERT_TRUE(engine) << engine.error().message;
  std::vector<std::future<Result<GenerateResult>>> fs;
  for (const auto& c : cases) {
    auto p = std::make_shared<std::promise<Result<GenerateResult>>>();
    fs.push_back(p->get_future());
    GenerateRequest rq;
    rq.prompt = c.prompt;
    rq.max_new_tokens = static_cast<std::int32_t>(c.greedy.size());
    (*engine)->submit(rq, {{}, [p](Result<GenerateResult> r) { p->set_value(std::move(r)); }});
  }
  for (std::size_t i = 0; i < cases.size(); ++i) {
    auto r = fs[i].get();
    ASSERT_TRUE(r) << r.error().message;
    if (type != KvType::f32) {
      const auto& want = cases[i].greedy;
      const auto diverge =
          std::mismatch(r->tokens.begin(), r->tokens.end(), want.begin(), want.end());
      const auto same = static_cast<std::size_t>(diverge.first - r->tokens.begin());
      EXPECT_GE(same, std::min(min_same, want.size()))
          << "case " << i << ": the first " << same << " of " << want.size()
          << " tokens are the golden's";
      continue;
    }
    EXPECT_EQ(r->tokens, cases[i].greedy) << "case " << i;
  }
  auto st = (*engine)->stats();
  if (name == "aidreams260K") {
    EXPECT_GT(st.sched.preemptions, 0u);
  }
  EXPECT_EQ(st.kv.used_blocks, 0);
  EXPECT_EQ(st.kv_pool_bytes, static_cast<std::int64_t>(block_bytes * 14));
}

TEST_P(LlamaEngine, AllGoldensTogetherWithPreemption) {
  REQUIRE_MODELS();
  auto [name, threads] = GetParam();
  all_goldens_together(name, threads, KvType::f32);
}

// The goldens' greedy tokens with the KV cache in F16: each case's first 32 tokens (or all,
// when shorter) are the golden's. Measured: all 7 cases of aidreams260K whole; stories260K-gqa
// 2 of 3 whole, the third the same for 37 of its 64 tokens (a near-tie in a repetitive loop).
TEST_P(LlamaEngine, AllGoldensWithF16KvCache) {
  REQUIRE_MODELS();
  auto [name, threads] = GetParam();
  all_goldens_together(name, threads, KvType::f16, 32);
}

// With the KV cache in Q8_0 (per block of a head's values, steps of 1/127 of the largest) the
// logits stay within 0.1 of the F32 reference on aidreams260K (measured 0.064) and within 1.0 on
// stories260K-gqa (measured 0.61: its heads of 8 attend sharply, so a small error in a key moves
// the weights; see bench/README.md).
TEST_P(LlamaEngine, Q8KvCacheLogitsStayNearTheReference) {
  REQUIRE_MODELS();
  auto [name, threads] = GetParam();
  EXPECT_LE(max_logit_error(name, threads, KvType::q8_0), name == "aidreams260K" ? 0.1 : 1.0);
}

// The goldens' greedy tokens with the KV cache in Q8_0. Measured: all 7 cases of aidreams260K
// whole; stories260K-gqa's follow the golden for 13, 35 and 12 of their 64 tokens. Required: 32
// (aidreams260K) and 10 (stories260K-gqa) tokens of each case, or all when shorter.
TEST_P(LlamaEngine, AllGoldensWithQ8KvCache) {
  REQUIRE_MODELS();
  auto [name, threads] = GetParam();
  all_goldens_together(name, threads, KvType::q8_0, name == "aidreams260K" ? 32 : 10);
}

INSTANTIATE_TEST_SUITE_P(Models, LlamaEngine,
                         ::testing::Combine(::testing::Values("aidreams260K", "stories260K-gqa"),
                                            ::testing::Values(1, 2)));

// The CPU runner's step profile (what bench_engine reports for its 32-sequence run): while it
// is on, every step is timed by phase, as a decode step or a prompt step; the tokens do not
// change.
TEST(LlamaRunnerProfile, TimesStepsByKindAndPhaseOnlyWhileOn) {
  REQUIRE_MODELS();
  auto model = load("stories260K-gqa");
  auto runner = make_llama_runner(model, 2);
  StepRunner* raw = runner.get();
  auto engine = Engine::create(std::move(runner), {.max_num_seqs = 8,
                                                   .max_num_batched_tokens = 256,
                                                   .max_model_len = 128,
                                                   .block_size = 16,
                                                   .kv_cache_bytes = 4u << 20});
  ASSERT_TRUE(engine) << engine.error().message;
  // Four 3-token prompts, 8 new tokens each and no end token: 12 prompt tokens and 28 decoded
  // ones, all forwarded once (the last token generated is not). When the four start together,
  // one prompt step of 12 tokens and 7 decode steps of 4; a request the engine admits before the
  // others arrive shares steps with their prompts, which are then prompt steps.
  auto generate = [&] {
    std::vector<std::future<Result<GenerateResult>>> fs;
    for (int i = 0; i < 4; ++i) {
      auto p = std::make_shared<std::promise<Result<GenerateResult>>>();
      fs.push_back(p->get_future());
      GenerateRequest rq;
      rq.prompt = {1, 10 + i, 20 + i};
      rq.max_new_tokens = 8;
      (*engine)->submit(rq, {{}, [p](Result<GenerateResult> r) { p->set_value(std::move(r)); }});
    }
    std::vector<std::vector<std::int32_t>> out;
    for (auto& f : fs) {
      auto r = f.get();
      EXPECT_TRUE(r) << r.error().message;
      out.push_back(r ? r->tokens : std::vector<std::int32_t>{});
    }
    return out;
  };
  const auto plain = generate();
  EXPECT_EQ(raw->step_profile().decode.steps, 0) << "profiling is off by default";

  ASSERT_TRUE(raw->set_step_profiling(true));
  EXPECT_EQ(generate(), plain);
  const StepProfile p = raw->step_profile();
  EXPECT_EQ(p.prompt.tokens + p.decode.tokens, 12 + 28) << "each forwarded token counted once";
  EXPECT_GE(p.prompt.steps, 1);
  EXPECT_GE(p.prompt.tokens, 12);
  EXPECT_GE(p.decode.steps, 1);
  EXPECT_LE(p.decode.tokens, 4 * p.decode.steps);
  for (const StepPhases* k : {&p.decode, &p.prompt}) {
    EXPECT_GT(k->matmul_ms, 0);
    EXPECT_GT(k->attention_ms, 0);
    EXPECT_GT(k->logits_ms, 0);
    EXPECT_GE(k->rest_ms, 0);
    EXPECT_DOUBLE_EQ(k->total_ms(), k->matmul_ms + k->attention_ms + k->logits_ms + k->rest_ms);
  }

  raw->set_step_profiling(false);
  generate();
  EXPECT_EQ(raw->step_profile().decode.steps, p.decode.steps) << "steps run while off: not added";
  EXPECT_EQ(raw->step_profile().prompt.steps, p.prompt.steps);
  raw->set_step_profiling(true);
  EXPECT_EQ(raw->step_profile().decode.steps, 0) << "turning it on starts a new sum";
}

// Copy-on-write of a shared partial block (a fork) copies the whole block, with Q8_0's scales: a
// sequence that continues in the copy gets the logits it gets in the original.
TEST(LlamaRunnerKv, AContinuationInACopiedBlockSeesTheSameKv) {
  REQUIRE_MODELS();
  auto model = load("aidreams260K");
  const auto& hp = model->hp();
  const auto c = goldens("aidreams260K")[0];
  std::vector<std::int32_t> prompt = c.prompt;  // the prompt, then its greedy tokens
  prompt.insert(prompt.end(), c.greedy.begin(), c.greedy.end());
  ASSERT_GE(prompt.size(), 4u);
  for (KvType type : {KvType::f32, KvType::f16, KvType::q8_0}) {
    SCOPED_TRACE(kv_type_name(type));
    const KvLayout L{hp.n_layers, hp.n_kv_heads, hp.head_dim, 4, 8, type};
    auto next_logits = [&](bool copy) {
      auto runner = make_llama_runner(model, 1);
      std::vector<float> pool(static_cast<std::size_t>((L.total_bytes() + 3) / 4), NAN);
      const std::vector<BlockId> first = {3}, second = {copy ? 5 : 3};
      StepBatch a;  // three tokens into block 3
      a.tokens = {prompt[0], prompt[1], prompt[2]};
      a.positions = {0, 1, 2};
      a.seq_index = {0, 0, 0};
      a.seqs = {{first, 3}};
      a.logit_rows = {2};
      std::vector<float> logits(static_cast<std::size_t>(hp.n_vocab));
      EXPECT_TRUE(runner->forward(a, L, pool, logits));
      StepBatch b;  // the fourth, in block 5 once block 3 is copied there
      b.tokens = {prompt[3]};
      b.positions = {3};
      b.seq_index = {0};
      b.seqs = {{second, 4}};
      b.logit_rows = {0};
      if (copy) b.copies = {{3, 5}};
      EXPECT_TRUE(runner->forward(b, L, pool, logits));
      return logits;
    };
    const auto want = next_logits(false), got = next_logits(true);
    ASSERT_FALSE(std::isnan(want[0]));
    EXPECT_EQ(got, want);
  }
}

// Requests sharing a long prefix: the cache hit gives the same tokens as computing it.
TEST(LlamaEngineCache, PrefixHitGivesTheSameTokensAsAMiss) {
  REQUIRE_MODELS();
  auto model = load("aidreams260K");
  auto cases = goldens("aidreams260K");
  std::vector<std::int32_t> shared = cases[0].prompt;
  shared.insert(shared.end(), cases[0].greedy.begin(), cases[0].greedy.begin() + 40);  // 40+ tokens
  auto run = [&](bool caching) {
    auto e = Engine::create(make_llama_runner(model, 1), {.max_num_seqs = 8,
                                                          .block_size = 8,
                                                          .kv_cache_bytes = 1 << 20,
                                                          .enable_prefix_caching = caching});
    std::vector<std::vector<std::int32_t>> outs;
    std::int64_t cached = 0;
    for (int i = 0; i < 3; ++i) {
      auto p = std::make_shared<std::promise<Result<GenerateResult>>>();
      auto f = p->get_future();
      GenerateRequest rq;
      rq.prompt = shared;
      rq.prompt.push_back(300 + i);
      rq.max_new_tokens = 12;
      (*e)->submit(rq, {{}, [p](Result<GenerateResult> r) { p->set_value(std::move(r)); }});
      auto r = f.get();
      outs.push_back(r->tokens);
      cached += r->usage.cached_prompt_tokens;
    }
    return std::pair(outs, cached);
  };
  auto [hit, cached] = run(true);
  auto [miss, none] = run(false);
  EXPECT_EQ(hit, miss);
  EXPECT_EQ(none, 0);
  EXPECT_EQ(cached, 2 * 40);  // requests 2 and 3 reuse 5 full blocks of 8
}

// A stop string spanning several tokens ends generation with finish reason stop.
TEST(LlamaEngineStop, StopStringsEndGeneration) {
  REQUIRE_MODELS();
  auto path = fs::path(WEIR_SHARED_DIR) / "models/aidreams260K.gguf";
  auto model = load("aidreams260K");
  auto file = GgufFile::open(path);
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok);
  const Tokenizer* t = tok->get();
  auto e = Engine::create(make_llama_runner(model, 1),
                          {.max_num_seqs = 2,
                           .block_size = 16,
                           .kv_cache_bytes = 1 << 20,
                           .token_text = [t](std::int32_t id) { return t->token_to_piece(id); }});
  GenerateRequest rq;
  rq.prompt = t->encode("I dream of");
  rq.max_new_tokens = 64;
  rq.stop_strings = {
      "softly"};  // the golden text: " 0.000000. Dimensions unfold, as I softly refine, ..."
  auto p = std::make_shared<std::promise<Result<GenerateResult>>>();
  auto f = p->get_future();
  (*e)->submit(rq, {{}, [p](Result<GenerateResult> r) { p->set_value(std::move(r)); }});
  auto r = f.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->finish, FinishReason::stop);
  std::string text = t->decode(r->tokens);
  EXPECT_EQ(text.substr(text.size() - 6), "softly") << text;
  EXPECT_LT(r->tokens.size(), 64u);
}

// A thousand callers asking for the model by path, from 8 threads, share one load and one
// engine (the per-request model load the seeds warn about cannot happen).
TEST(EngineRegistryTest, OneEnginePerModelFile) {
  REQUIRE_MODELS();
  EngineRegistry reg;
  auto path = fs::path(WEIR_SHARED_DIR) / "models/aidreams260K.gguf";
  auto make = [](std::shared_ptr<const Model> m) {
    return Engine::create(make_llama_runner(std::move(m), 1),
                          {.max_num_seqs = 4, .block_size = 16, .kv_cache_bytes = 1 << 20});
  };
  std::vector<std::thread> ts;
  std::atomic<int> same{0};
  auto first = reg.get(path, make);
  ASSERT_TRUE(first);
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < 125; ++i) {
        auto e = reg.get(fs::path(WEIR_SHARED_DIR) / "models/../models/aidreams260K.gguf", make);
        if (e && e->get() == first->get()) ++same;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(same.load(), 1000);
  EXPECT_EQ(reg.loads(), 1u);
  auto missing = reg.get("/nonexistent/m.gguf", make);
  ASSERT_FALSE(missing);
  EXPECT_EQ(reg.size(), 1u);
}

// A registry belongs to whoever made it: destroying it drops its references, and an engine
// stops (its KV pool back in the budget) when its last holder lets go; a second registry loads
// the file again for its own engine.
TEST(EngineRegistryTest, AnEngineLivesAsLongAsItsRegistryOrAHolder) {
  REQUIRE_MODELS();
  MemoryBudget budget;
  auto path = fs::path(WEIR_SHARED_DIR) / "models/aidreams260K.gguf";
  auto make = [&](std::shared_ptr<const Model> m) {
    return Engine::create(
        make_llama_runner(std::move(m), 1),
        {.max_num_seqs = 4, .block_size = 16, .kv_cache_bytes = 1 << 20, .budget = &budget});
  };
  std::shared_ptr<Engine> held;
  {
    EngineRegistry a, b;
    auto ea = a.get(path, make), eb = b.get(path, make);
    ASSERT_TRUE(ea && eb);
    EXPECT_NE(ea->get(), eb->get());
    EXPECT_EQ(budget.used(BudgetCategory::kv_cache), std::size_t{2} << 20);
    held = *ea;
  }
  EXPECT_EQ(budget.used(BudgetCategory::kv_cache), std::size_t{1} << 20);  // b's engine is gone
  GenerateRequest rq;
  rq.prompt = {1, 2, 3};
  rq.max_new_tokens = 2;
  std::promise<Result<GenerateResult>> done;
  held->submit(rq, {{}, [&](Result<GenerateResult> r) { done.set_value(std::move(r)); }});
  auto r = done.get_future().get();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->tokens.size(), 2u);
  held.reset();
  EXPECT_EQ(budget.used(BudgetCategory::kv_cache), 0u);
}

}  // namespace
}  // namespace weir::inference
