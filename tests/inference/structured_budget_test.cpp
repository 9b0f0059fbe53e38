// Budgets: a constrained value always ends within the tokens it is given. Random schemas
// (unbounded strings, arrays and objects included) and random budgets of at least the
// schema's min_tokens(): random walks that take any allowed token (never preferring closing
// ones) end complete within the budget and validate against weir::tools' validator; through
// the engine, a budget below min_tokens() is refused naming both numbers, and every other
// request ends with finish reason stop and a valid value; min_tokens() is the true minimum
// (an exhaustive search over the tiny vocabulary finds no shorter completion); stop strings
// never cut a value; a trigger is not taken when the value after it could not end in time.
#include "constraint/constraint_impl.hpp"
#include "structured_util.hpp"

namespace weir::inference {
namespace {

using namespace structured_testing;

// Schemas whose values can be long or short: unbounded strings, arrays and extra properties,
// nesting, optional members, enums, numbers, formats.
json::value budget_schema(std::mt19937_64& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  switch (depth >= 2 ? pick(7) : pick(11)) {
    case 0:
      return {{"type", "string"}};
    case 1:
      return {{"type", "string"}, {"minLength", pick(4)}};
    case 2:
      return {{"type", "integer"}, {"minimum", pick(100) - 50}};
    case 3:
      return {{"type", "number"}};
    case 4:
      return {{"enum", json::array{"short", "a much longer choice", 12345, nullptr}}};
    case 5:
      return {{"type", "boolean"}};
    case 6:
      return {{"type", "string"}, {"format", pick(2) ? "date-time" : "email"}};
    case 7: {
      json::object props;
      json::array req;
      const int n = 1 + pick(4);
      for (int i = 0; i < n; ++i) {
        std::string k = i == 0 ? "name" : "field_" + std::to_string(i);
        props[k] = budget_schema(rng, depth + 1);
        if (pick(2)) req.emplace_back(k);
      }
      json::object o{{"type", "object"}, {"properties", props}, {"required", req}};
      if (pick(3) == 0)
        o["additionalProperties"] = budget_schema(rng, depth + 1);
      else
        o["additionalProperties"] = false;
      return o;
    }
    case 8: {
      json::object a{{"type", "array"}, {"items", budget_schema(rng, depth + 1)}};
      if (pick(2)) a["minItems"] = pick(3);
      return a;
    }
    case 9:
      return {{"type", "object"}};
    default:
      return {{"anyOf", json::array{budget_schema(rng, depth + 1), budget_schema(rng, depth + 1)}}};
  }
}

std::string piece(const Tokenizer& t, std::int32_t id) {
  return t.token_to_piece(id);
}

// Any allowed token, uniformly (ending only sometimes when ending is allowed), within a budget
// that shrinks by one each token. Returns the output and whether it completed in time.
struct Walk {
  std::string out;
  int tokens = 0;
  bool complete = false;
};
Walk budget_walk(const std::shared_ptr<const Constraint>& c, const Tokenizer& t,
                 std::mt19937_64& rng, int budget) {
  ConstraintMatcher m(c);
  std::vector<std::uint64_t> mask(mask_words(t.n_vocab()));
  Walk w;
  for (int left = budget; left > 0 && !m.finished(); --left) {
    m.fill_mask(mask, left);
    std::vector<std::int32_t> allowed;
    for (std::int32_t id = 0; id < t.n_vocab(); ++id)
      if ((mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1) allowed.push_back(id);
    if (allowed.empty()) break;
    const std::int32_t tok = allowed[rng() % allowed.size()];
    if (t.is_eog(tok)) break;
    EXPECT_TRUE(m.accept(tok));
    w.out += piece(t, tok);
    ++w.tokens;
  }
  w.complete = m.complete();
  return w;
}

void walks_on(const Tokenizer& t, int schemas, int budgets_each, std::uint64_t seed0) {
  int walked = 0;
  for (std::uint64_t seed = seed0; seed < seed0 + static_cast<std::uint64_t>(schemas); ++seed) {
    std::mt19937_64 rng(seed);
    json::value s = budget_schema(rng, 0);
    SCOPED_TRACE(json::serialize(s));
    auto c = schema(json::serialize(s), t);
    ASSERT_TRUE(c) << c.error().message;
    const std::int32_t min = (*c)->min_tokens();
    ASSERT_GT(min, 0);
    ASSERT_LT(min, kNoCompletion);
    for (int k = 0; k < budgets_each; ++k) {
      const int budget = min + (k == 0 ? 0 : static_cast<int>(rng() % 40));
      SCOPED_TRACE("budget " + std::to_string(budget) + ", min " + std::to_string(min));
      Walk w = budget_walk(*c, t, rng, budget);
      EXPECT_TRUE(w.complete) << "incomplete after " << w.tokens << " tokens: " << w.out;
      EXPECT_LE(w.tokens, budget);
      check_valid(s, w.out);
      ++walked;
    }
  }
  EXPECT_EQ(walked, schemas * budgets_each);
}

TEST(StructuredBudget, RandomWalksEndWithinRandomBudgetsAndValidate) {
  walks_on(*tiny().tok, 150, 4, 1);
}

// The same on real vocabularies: a byte-level BPE one (gpt-2, 50257 tokens) and SentencePiece
// (llama), where one token can be a whole `": "` or a long word that no budget fits.
TEST(StructuredBudget, RealVocabulariesEndWithinBudget) {
  const fs::path dir = fs::path(WEIR_SHARED_DIR) / "testdata/vocab";
  if (!fs::exists(dir / "ggml-vocab-gpt-2.gguf"))
    GTEST_SKIP() << "tokenizer vocabularies not found in " << dir << " (../shared absent)";
  for (const char* name : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"}) {
    SCOPED_TRACE(name);
    auto f = GgufFile::open(dir / name);
    ASSERT_TRUE(f);
    auto t = Tokenizer::from_gguf(**f);
    ASSERT_TRUE(t) << t.error().message;
    walks_on(**t, 25, 2, 1000);
  }
}

// The tiny vocabulary and gpt-2's (../shared/testdata; left out when absent), loaded once.
std::vector<const Tokenizer*> tiny_and_gpt2() {
  static const std::unique_ptr<Tokenizer> gpt2 = []() -> std::unique_ptr<Tokenizer> {
    const fs::path path = fs::path(WEIR_SHARED_DIR) / "testdata/vocab/ggml-vocab-gpt-2.gguf";
    if (!fs::exists(path)) return nullptr;
    auto f = GgufFile::open(path);
    if (!f) return nullptr;
    auto t = Tokenizer::from_gguf(**f);
    return t ? std::move(*t) : nullptr;
  }();
  std::vector<const Tokenizer*> v = {tiny().tok.get()};
  if (gpt2) v.push_back(gpt2.get());
  return v;
}

// The mask under a budget is exactly the tokens the matcher accepts after which a completion
// still fits (the walk's shortcuts over whole subtrees, by bytes or by tokens, are exact), on
// the tiny vocabulary and on gpt-2's.
TEST(StructuredBudget, BudgetMaskIsExactlyTheTokensThatStillFit) {
  const std::vector<const Tokenizer*> vocabs = tiny_and_gpt2();
  for (const Tokenizer* t : vocabs) {
    SCOPED_TRACE(t->n_vocab());
    const int n_schemas = t->n_vocab() > 1000 ? 4 : 30;
    for (std::uint64_t seed = 1; seed <= static_cast<std::uint64_t>(n_schemas); ++seed) {
      std::mt19937_64 rng(seed * 101);
      json::value s = budget_schema(rng, 0);
      SCOPED_TRACE(json::serialize(s));
      auto c = schema(json::serialize(s), *t);
      ASSERT_TRUE(c) << c.error().message;
      ConstraintMatcher m(*c);
      std::vector<std::uint64_t> mask(mask_words(t->n_vocab()));
      int budget = (*c)->min_tokens() + static_cast<int>(rng() % 4);
      for (int step = 0; budget > 0 && !m.finished(); ++step, --budget) {
        m.fill_mask(mask, budget);
        std::vector<std::int32_t> allowed;
        for (std::int32_t id = 0; id < t->n_vocab(); ++id) {
          const bool in_mask = (mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1;
          ConstraintMatcher copy = m;
          const bool fits = copy.accept(id) && (t->is_eog(id) || copy.min_tokens() <= budget - 1);
          ASSERT_EQ(in_mask, fits) << "token '" << t->token_to_piece(id) << "' at step " << step
                                   << ", budget " << budget;
          if (in_mask && !t->is_eog(id)) allowed.push_back(id);
        }
        if (allowed.empty()) break;
        ASSERT_TRUE(m.accept(allowed[rng() % allowed.size()]));
      }
      EXPECT_TRUE(m.complete());
    }
  }
}

// Planning stops past kMaxPlanBytes of what the search itself adds, not of what its DFA held
// before (found by the breaking pass: a DFA kept across walks of an 800-item untyped array held
// earlier searches' states, every later search stopped at once, and the mask refused every
// token mid-value: a 500). A DFA as full as the bound still plans.
TEST(StructuredBudget, AWarmDfaStillPlans) {
  auto& t = *tiny().tok;
  auto c = schema(R"({"type":"array","minItems":50})", t);
  ASSERT_TRUE(c) << c.error().message;
  const auto& impl = (*c)->impl();
  Constraint::Impl::Dfa dfa;
  dfa.bytes = Constraint::Impl::kMaxPlanBytes;  // as if earlier walks had filled it
  const std::int32_t sid = dfa.intern(constraint::Stacks{impl.grammar}, impl.initial);
  EXPECT_EQ(impl.min_tokens(dfa, sid), (*c)->min_tokens());
  EXPECT_FALSE(dfa.plan_cut);
  EXPECT_LT((*c)->min_tokens(), kNoCompletion);
}

// The mask cache: a state met first under a budget gets that budget's walk alone, kept as its
// plain mask too when the budget refused nothing. Every later mask of the state (without a
// budget, under one that binds, under a larger one) is still exactly the tokens that fit: met
// first under a budget that cuts nothing, then one that cuts; first under one that cuts, then
// none.
TEST(StructuredBudget, AStateFirstMaskedUnderABudgetServesEveryOtherBudgetExactly) {
  const std::vector<const Tokenizer*> vocabs = tiny_and_gpt2();
  for (const Tokenizer* t : vocabs) {
    SCOPED_TRACE(t->n_vocab());
    const int n_schemas = t->n_vocab() > 1000 ? 2 : 20;
    for (std::uint64_t seed = 1; seed <= static_cast<std::uint64_t>(n_schemas); ++seed) {
      std::mt19937_64 rng(seed * 7919);
      json::value s = budget_schema(rng, 0);
      // (A description of its own: a schema no other test compiled, so no state is cached.)
      s.as_object()["description"] = "first under a budget " + std::to_string(seed);
      SCOPED_TRACE(json::serialize(s));
      auto c = schema(json::serialize(s), *t);
      ASSERT_TRUE(c) << c.error().message;
      ConstraintMatcher m(*c);
      std::vector<std::uint64_t> mask(mask_words(t->n_vocab()));
      std::vector<std::int32_t> after(static_cast<std::size_t>(t->n_vocab()));  // -1: refused
      int budget = (*c)->min_tokens() + 2 + static_cast<int>(rng() % 6);
      for (int step = 0; budget > 0 && !m.finished(); ++step, --budget) {
        for (std::int32_t id = 0; id < t->n_vocab(); ++id) {
          ConstraintMatcher copy = m;
          after[static_cast<std::size_t>(id)] = !copy.accept(id) ? -1
                                                : t->is_eog(id)  ? 0
                                                                 : copy.min_tokens();
        }
        // Alternately a large budget first (it cuts nothing), then one that binds, then none;
        // and the binding one first.
        const std::vector<std::int32_t> order =
            step % 2 == 0 ? std::vector<std::int32_t>{budget + 40, budget, kNoBudget, 1}
                          : std::vector<std::int32_t>{budget, kNoBudget, budget + 40, 1};
        for (const std::int32_t b : order) {
          m.fill_mask(mask, b);
          for (std::int32_t id = 0; id < t->n_vocab(); ++id) {
            const bool in_mask = (mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1;
            const std::int32_t a = after[static_cast<std::size_t>(id)];
            const bool fits = a >= 0 && (b == kNoBudget || a < b);
            ASSERT_EQ(in_mask, fits)
                << "token '" << t->token_to_piece(id) << "' at step " << step << ", budget " << b
                << " (order from budget " << order[0] << ")";
          }
        }
        m.fill_mask(mask, budget);
        std::vector<std::int32_t> allowed;
        for (std::int32_t id = 0; id < t->n_vocab(); ++id)
          if (((mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1) && !t->is_eog(id))
            allowed.push_back(id);
        if (allowed.empty()) break;
        ASSERT_TRUE(m.accept(allowed[rng() % allowed.size()]));
      }
      EXPECT_TRUE(m.complete());
    }
  }
}

// min_tokens() is the fewest tokens of any completion: a breadth-first search over every
// token sequence (parse states merged) on the tiny vocabulary finds none shorter, and finds
// one of that length.
TEST(StructuredBudget, MinTokensIsTheTrueMinimum) {
  auto& t = *tiny().tok;
  std::vector<std::uint64_t> mask(mask_words(t.n_vocab()));
  int checked = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    std::mt19937_64 rng(seed);
    json::value s = budget_schema(rng, 1);
    SCOPED_TRACE(json::serialize(s));
    auto c = schema(json::serialize(s), t);
    ASSERT_TRUE(c) << c.error().message;
    const std::int32_t min = (*c)->min_tokens();
    if (min > 14) continue;
    std::vector<ConstraintMatcher> layer = {ConstraintMatcher(*c)};
    std::int32_t found = -1;
    for (std::int32_t depth = 0; depth <= min && found < 0 && !layer.empty(); ++depth) {
      std::vector<ConstraintMatcher> next;
      std::set<std::string> seen;
      for (const auto& m : layer) {
        if (m.complete()) {
          found = depth;
          break;
        }
        m.fill_mask(mask);
        for (std::int32_t id = 0; id < t.n_vocab(); ++id) {
          if (!((mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1) || t.is_eog(id))
            continue;
          ConstraintMatcher n = m;
          ASSERT_TRUE(n.accept(id));
          if (seen.insert(n.state_key()).second) next.push_back(std::move(n));
        }
      }
      ASSERT_LT(next.size(), 200000u) << "search too wide";
      layer = std::move(next);
    }
    EXPECT_EQ(found, min);
    ++checked;
  }
  EXPECT_GE(checked, 30);
}

GenerateRequest budget_request(const std::shared_ptr<const Constraint>& c, std::int32_t budget,
                               std::uint64_t seed) {
  GenerateRequest rq;
  rq.prompt = tiny().tok->encode("JSON:");
  rq.max_new_tokens = budget;
  rq.sampling.temperature = 1.0f;
  rq.sampling.seed = seed;
  rq.constraint = c;
  return rq;
}

// Through the engine: a budget below the minimum is refused before anything is generated,
// naming both numbers; any other ends with "stop" and a valid value, never "length".
TEST(StructuredBudget, EngineRefusesOrCompletesWithinMaxTokens) {
  auto& tm = tiny();
  auto e = Engine::create(
      make_llama_runner(tm.model, 1),
      {.max_num_seqs = 8, .kv_cache_bytes = 8 << 20, .eog_tokens = tm.tok->eog_tokens()});
  ASSERT_TRUE(e);
  int completed = 0, refused = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed * 13);
    json::value s = budget_schema(rng, 0);
    SCOPED_TRACE(json::serialize(s));
    auto c = schema(json::serialize(s), *tm.tok);
    ASSERT_TRUE(c) << c.error().message;
    const std::int32_t min = (*c)->min_tokens();
    for (std::int32_t budget : {min - 1, min, min + 1 + static_cast<std::int32_t>(rng() % 30)}) {
      if (budget < 1) continue;
      SCOPED_TRACE("budget " + std::to_string(budget));
      auto r = generate(**e, budget_request(*c, budget, seed));
      if (budget < min) {
        ASSERT_FALSE(r);
        EXPECT_EQ(r.error().message, "the constraint's shortest valid output takes " +
                                         std::to_string(min) +
                                         " tokens of this vocabulary, but the request allows " +
                                         std::to_string(budget) + " (max_new_tokens)");
        ++refused;
        continue;
      }
      ASSERT_TRUE(r) << r.error().message;
      // Complete: "stop" (nothing can follow, or the budget ran out on a whole value) or "eos"
      // (the model ended a whole value); never "length".
      EXPECT_TRUE(r->finish == FinishReason::stop || r->finish == FinishReason::eos)
          << finish_reason_name(r->finish) << ": " << tm.tok->decode(r->tokens);
      EXPECT_LE(static_cast<std::int32_t>(r->tokens.size()), budget);
      std::string out = tm.tok->decode(r->tokens);
      check_valid(s, out);
      ++completed;
    }
  }
  EXPECT_GE(completed, 70);
  EXPECT_GE(refused, 30);
}

// The context is a budget too: a prompt that leaves fewer tokens than max_new_tokens asks.
TEST(StructuredBudget, TheContextIsABudget) {
  auto& tm = tiny();  // context 256
  auto e = Engine::create(
      make_llama_runner(tm.model, 1),
      {.max_num_seqs = 2, .kv_cache_bytes = 8 << 20, .eog_tokens = tm.tok->eog_tokens()});
  ASSERT_TRUE(e);
  const char* text =
      R"({"type":"object","properties":{"title":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}},"required":["title","tags"]})";
  auto c = schema(text, *tm.tok);
  ASSERT_TRUE(c);
  const std::int32_t min = (*c)->min_tokens();
  for (std::int32_t room : {min - 1, min, min + 5}) {
    SCOPED_TRACE("room " + std::to_string(room));
    GenerateRequest rq = budget_request(*c, 200, 7);
    rq.prompt.assign(static_cast<std::size_t>(256 - room), rq.prompt.back());
    auto r = generate(**e, rq);
    if (room < min) {
      ASSERT_FALSE(r);
      EXPECT_EQ(r.error().message,
                "the constraint's shortest valid output takes " + std::to_string(min) +
                    " tokens of this vocabulary, but the request allows " + std::to_string(room) +
                    " (what the context leaves after the prompt)");
      continue;
    }
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->finish, FinishReason::stop);
    check_valid(json::parse(text), tm.tok->decode(r->tokens));
  }
}

// Stop strings never cut a value: "," '"' ":" "}" all occur inside any object of this schema.
TEST(StructuredBudget, StopStringsNeverCutAValue) {
  auto& tm = tiny();
  const Tokenizer* t = tm.tok.get();
  auto e = Engine::create(make_llama_runner(tm.model, 1),
                          {.max_num_seqs = 4,
                           .kv_cache_bytes = 8 << 20,
                           .eog_tokens = t->eog_tokens(),
                           .token_text = [t](std::int32_t id) { return t->token_to_piece(id); }});
  ASSERT_TRUE(e);
  const char* text =
      R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"}},"required":["name","n"]})";
  for (auto kind : {ConstraintSpec::Kind::json_schema, ConstraintSpec::Kind::json_object}) {
    auto c = compile_constraint({kind, text, {}}, *t);
    ASSERT_TRUE(c);
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      GenerateRequest rq = budget_request(*c, 40, seed);
      rq.stop_strings = {",", "\"", ":", "}", "{"};
      auto r = generate(**e, rq);
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_EQ(r->finish, FinishReason::stop);
      const std::string out = t->decode(r->tokens);
      boost::system::error_code ec;
      json::value v = json::parse(out, ec);
      ASSERT_FALSE(ec) << out;
      if (kind == ConstraintSpec::Kind::json_schema) check_valid(json::parse(text), out);
      EXPECT_TRUE(v.is_object()) << out;
    }
  }
}

// With a trigger, free text may go on to the end of the budget, but a value that starts ends
// within it: near the end the trigger is refused.
TEST(StructuredBudget, ATriggerIsNotTakenWhenItsValueCannotEnd) {
  auto& tm = tiny();
  const Tokenizer* t = tm.tok.get();
  auto e = Engine::create(make_llama_runner(tm.model, 1),
                          {.max_num_seqs = 4, .kv_cache_bytes = 8 << 20});
  ASSERT_TRUE(e);
  const char* text =
      R"({"type":"object","properties":{"query":{"type":"string"},"k":{"type":"integer","minimum":1}},"required":["query","k"]})";
  auto c = schema(text, *t);
  ASSERT_TRUE(c);
  const std::int32_t need = (*c)->min_tokens();
  int calls = 0, plain = 0, late = 0;
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    for (std::int32_t budget : {need, need + 5, need + 20, need + 60}) {
      GenerateRequest rq = budget_request(*c, budget, seed);
      rq.constraint_trigger = "e";
      auto r = generate(**e, rq);
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_LE(static_cast<std::int32_t>(r->tokens.size()), budget);
      std::string out;
      for (std::int32_t id : r->tokens) out += t->token_to_piece(id);
      const auto pos = out.find('e');
      if (pos == std::string::npos) {
        ++plain;
        EXPECT_EQ(r->finish, FinishReason::length) << out;
        continue;
      }
      ++calls;
      // Where the trigger came within `need` tokens of the end, its value still ended in time.
      std::int32_t at = 0;
      for (std::string seen; seen.size() <= pos; ++at) seen += t->token_to_piece(r->tokens[at]);
      late += budget - at < need + 3;
      EXPECT_EQ(r->finish, FinishReason::stop) << out;
      check_valid(json::parse(text), out.substr(pos + 1));
    }
  }
  EXPECT_GT(calls, 30);
  EXPECT_GT(plain, 10);
  EXPECT_GE(late, 1);
  // The boundary, token by token: "e" alone needs the value's min_tokens after it.
  std::optional<std::int32_t> e_id;
  for (std::int32_t id = 0; id < t->n_vocab() && !e_id; ++id)
    if (t->token_to_piece(id) == "e") e_id = id;
  ASSERT_TRUE(e_id);
  std::vector<std::uint64_t> mask(mask_words(t->n_vocab()));
  ConstraintMatcher m(*c, "e");
  auto allowed = [&](std::int32_t id) {
    return (mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1;
  };
  // Far from the end only the tokens whose bytes after "e" start no value are masked.
  std::fill(mask.begin(), mask.end(), ~std::uint64_t{0});
  m.fill_mask(mask, need + 100);
  EXPECT_TRUE(allowed(*e_id));
  for (std::int32_t id = 0; id < t->n_vocab(); ++id) {
    const std::string p = t->token_to_piece(id);
    if (p.find('e') == std::string::npos) EXPECT_TRUE(allowed(id)) << p;
  }
  ASSERT_TRUE(m.fill_mask(mask, need + 1));
  EXPECT_TRUE(allowed(*e_id));
  ASSERT_TRUE(m.fill_mask(mask, need));
  EXPECT_FALSE(allowed(*e_id));
  EXPECT_TRUE(allowed(t->eog_tokens().at(0)));
}

}  // namespace
}  // namespace weir::inference
