// Structured output: JSON Schema / regex / choice / GBNF constraints compiled to token masks,
// checked keyword by keyword (what each allows and forbids), through random walks over real
// SPM and byte-level BPE vocabularies, and through the engine on a random-weight model, with
// weir::tools' JSON Schema validator as the independent check (helpers: structured_util.hpp).
#include "structured_util.hpp"

namespace weir::inference {
namespace {

using namespace structured_testing;

struct Case {
  const char* schema;
  std::vector<const char*> good, bad;
};

TEST(StructuredKeywords, EachKeywordAllowsAndForbids) {
  const std::vector<Case> cases = {
      {R"({"type":"integer"})", {"0", "-12", "123456"}, {"01", "1.5", "\"1\"", "-0", "1e3"}},
      {R"({"type":"integer","minimum":-3,"maximum":17})",
       {"-3", "0", "9", "17"},
       {"-4", "18", "100", "-10"}},
      {R"({"type":"integer","exclusiveMinimum":5,"exclusiveMaximum":8})", {"6", "7"}, {"5", "8"}},
      {R"({"type":"number"})", {"0", "-1.25", "3e10", "2.5E-3"}, {".5", "1.", "+1", "NaN"}},
      {R"({"type":"number","minimum":0,"maximum":2})",
       {"0", "1.75", "2", "0.5"},
       {"-0.5", "2.5", "3"}},
      {R"({"type":"string"})",
       {R"("")", R"("a\"b")", R"("é漢🙂")", R"("\u00e9")"},
       {R"("a)", "\"\n\"", R"("\ud800")"}},
      {R"({"type":"string","minLength":2,"maxLength":3})",
       {R"("ab")", R"("abc")", R"("é漢")"},
       {R"("a")", R"("abcd")"}},
      {R"({"type":"string","pattern":"^[a-z]+-[0-9]{2}$"})",
       {R"("ab-12")"},
       {R"("ab-1")", R"("Ab-12")"}},
      {R"({"type":"string","pattern":"x\\d"})", {R"("x1")", R"("aax9bb")"}, {R"("xx")"}},
      {R"({"type":"string","format":"date"})",
       {R"("2024-02-29")", R"("2000-02-29")", R"("2023-12-31")", R"("2023-04-30")"},
       {R"("2024-13-01")", R"("24-01-01")", R"("2023-02-29")", R"("1900-02-29")", R"("2024-04-31")",
        R"("5493-02-31")", R"("2024-02-30")"}},
      {R"({"type":"string","format":"time"})",
       {R"("23:59:59Z")", R"("01:02:03.5+02:00")"},
       {R"("24:00:00Z")"}},
      {R"({"type":"string","format":"date-time"})",
       {R"("2024-01-02T03:04:05Z")"},
       {R"("2024-01-02 03:04:05Z")"}},
      {R"({"type":"string","format":"uuid"})",
       {R"("123e4567-e89b-12d3-a456-426614174000")"},
       {R"("123e4567")"}},
      {R"({"type":"string","format":"email"})",
       {R"("a.b@example.com")"},
       {R"("a@b")", R"("@x.com")"}},
      {R"({"type":"string","format":"ipv4"})",
       {R"("192.168.0.255")"},
       {R"("256.1.1.1")", R"("1.2.3")"}},
      {R"({"type":"boolean"})", {"true", "false"}, {"1", "\"true\""}},
      {R"({"type":"null"})", {"null"}, {"nul", "0"}},
      {R"({"type":["integer","null"]})", {"3", "null"}, {"\"x\""}},
      {R"({"enum":["a",1,null,{"k":[true]}]})",
       {R"("a")", "1", "null", R"({"k":[true]})"},
       {R"("b")", "2"}},
      {R"({"const":"x"})", {R"("x")"}, {R"("y")"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"]})",
       {R"({"a":1})", R"({"a": 1, "b": "x"})"},
       {R"({})", R"({"b":"x"})", R"({"a":1,"c":2})", R"({"a":"1"})"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})",
       {R"({"a":1,"zz":true})", R"({"x":false})"},
       {R"({"x":1})", R"({"a":true})"}},
      {R"({"type":"object","additionalProperties":false})", {"{}"}, {R"({"a":1})"}},
      {R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
       {"[1]", "[1, 2, 3]"},
       {"[]", "[1,2,3,4]", "[\"a\"]"}},
      {R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
       {R"([])", R"(["a"])", R"(["a",1])"},
       {R"(["a",1,2])", R"([1])"}},
      {R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})",
       {"1", R"("a")"},
       {R"("ab")", "true"}},
      {R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"},"x":{"type":"integer"}},"required":["k","x"]},
                   {"type":"object","properties":{"k":{"const":"b"},"y":{"type":"string"}},"required":["k","y"]}]})",
       {R"({"k":"a","x":1})", R"({"k":"b","y":"s"})"},
       {R"({"k":"a","y":"s"})"}},
      {R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                   {"properties":{"b":{"type":"boolean"}},"required":["b"]}]})",
       {R"({"a":1,"b":true})"},
       {R"({"a":1})", R"({"b":true})"}},
      {R"({"$defs":{"n":{"type":"integer","minimum":0}},"type":"array","items":{"$ref":"#/$defs/n"}})",
       {"[0,5]"},
       {"[-1]"}},
      {R"({"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#"}},"required":["v"],"additionalProperties":false})",
       {R"({"v":1})", R"({"v":1,"next":{"v":2,"next":{"v":3}}})"},
       {R"({"next":{"v":1}})"}},
  };
  auto& t = *tiny().tok;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.schema);
    auto k = schema(c.schema, t);
    ASSERT_TRUE(k) << k.error().message;
    auto v = tools::Schema::compile(json::parse(c.schema));
    ASSERT_TRUE(v);
    for (const char* g : c.good) {
      EXPECT_TRUE(accepts(*k, g)) << "should allow " << g;
      EXPECT_TRUE(v->validate(json::parse(g))) << "test case is wrong: " << g;
    }
    for (const char* b : c.bad) EXPECT_FALSE(accepts(*k, b)) << "should forbid " << b;
  }
}

TEST(StructuredErrors, UnsupportedKeywordsNameKeywordAndPointer) {
  EXPECT_EQ(schema_error(R"({"type":"object","properties":{"x":{"not":{"type":"string"}}}})"),
            "unsupported JSON Schema keyword 'not' at /properties/x/not");
  EXPECT_EQ(schema_error(R"({"type":"integer","multipleOf":3})"),
            "unsupported JSON Schema keyword 'multipleOf' at /multipleOf");
  EXPECT_EQ(schema_error(R"({"type":"object","patternProperties":{"^a":{}}})"),
            "unsupported JSON Schema keyword 'patternProperties' at /patternProperties");
  EXPECT_EQ(schema_error(R"({"type":"array","uniqueItems":true})"),
            "unsupported JSON Schema keyword 'uniqueItems' at (root)/uniqueItems");
  EXPECT_EQ(schema_error(R"({"type":"string","format":"hostname"})"),
            "unsupported JSON Schema format 'hostname' at (root)/format (supported: date, time, "
            "date-time, uuid, email, ipv4)");
  EXPECT_EQ(schema_error(R"({"oneOf":[{"type":"integer"},{"type":"number"}]})"),
            "JSON Schema keyword 'oneOf' at /oneOf: branches 0 and 1 may both match; weir enforces "
            "oneOf only when the branches differ in type or in a required const property (use "
            "anyOf)");
  EXPECT_EQ(schema_error(R"({"$ref":"http://x/y"})"),
            "JSON Schema keyword '$ref' at (root): only local references (\"#/...\") are "
            "supported, got 'http://x/y'");
  EXPECT_EQ(schema_error(R"({"$ref":"#/$defs/missing"})"),
            "JSON Schema keyword '$ref' at (root): '#/$defs/missing' does not resolve");
  EXPECT_EQ(schema_error(R"({"type":"string","pattern":"(a)\\1"})"),
            "JSON Schema keyword 'pattern' at (root)/pattern: regex at offset 4: back-references "
            "are not supported");
  EXPECT_EQ(schema_error(R"({"type":"object","properties":{"a":{"type":"strin"}}})"),
            "JSON Schema keyword 'type' at /properties/a: unknown type 'strin'");
  // A recursion that never ends (a required self-reference) has no finite value.
  EXPECT_EQ(schema_error(R"({"type":"object","properties":{"c":{"$ref":"#"}},"required":["c"]})"),
            "the constraint matches no finite output: the '$ref' to '#' never ends (every value "
            "it allows contains another one)");
  EXPECT_EQ(schema_error(R"({"type":"string","maxLength":1000000})"),
            "JSON Schema keyword 'maxLength' at (root) is 1000000, over the 400000 repetitions "
            "weir's grammar can hold; lower it");
  EXPECT_NE(schema_error("{\"type\": "), "(compiled)");  // malformed JSON
}

TEST(StructuredErrors, RegexAndGbnfGivePositions) {
  EXPECT_EQ(error_of({ConstraintSpec::Kind::regex, "ab(?=c)", {}}),
            "regex at offset 3: lookaround and inline flags ((?=, (?!, (?<=, (?i) ...) are not "
            "supported");
  EXPECT_EQ(error_of({ConstraintSpec::Kind::regex, "a[b", {}}),
            "regex at offset 3: unterminated character class");
  EXPECT_EQ(error_of({ConstraintSpec::Kind::gbnf, "root ::= \"a\" b\n", {}}),
            "gbnf line 1 column 14: undefined rule 'b'");
  EXPECT_EQ(error_of({ConstraintSpec::Kind::gbnf, "root ::= \"a\"\nx ::= [a-\n", {}}),
            "gbnf line 2 column 7: unterminated character class");
  EXPECT_EQ(error_of({ConstraintSpec::Kind::gbnf, "root ::= root \"a\" | \"b\"\n", {}}),
            "rule 'root' is left-recursive (it can start with itself); rewrite it with "
            "repetition, e.g. x ::= y (\",\" y)*");
  EXPECT_EQ(error_of({ConstraintSpec::Kind::gbnf, "expr ::= \"a\"\n", {}}),
            "gbnf: no 'root' rule (the start rule must be named root)");
  EXPECT_EQ(error_of({ConstraintSpec::Kind::choice, "", {}}), "choice: no choices given");
}

TEST(StructuredOther, RegexChoiceGbnfAndJsonObject) {
  auto& t = *tiny().tok;
  auto re = compile_constraint({ConstraintSpec::Kind::regex, "(yes|no)-[0-9]{2,3}", {}}, t);
  ASSERT_TRUE(re);
  EXPECT_TRUE(accepts(*re, "yes-12"));
  EXPECT_TRUE(accepts(*re, "no-123"));
  EXPECT_FALSE(accepts(*re, "no-1"));
  EXPECT_FALSE(accepts(*re, "maybe-12"));
  auto ch = compile_constraint({ConstraintSpec::Kind::choice, "", {"red", "green", "rouge"}}, t);
  ASSERT_TRUE(ch);
  EXPECT_TRUE(accepts(*ch, "rouge"));
  EXPECT_FALSE(accepts(*ch, "ro"));
  EXPECT_FALSE(accepts(*ch, "blue"));
  const char* g = R"(# a list of words
root ::= "[" ws word ("," ws word)* "]"
word ::= [a-z]+ | "\u00e9t\u00e9"
ws   ::= [ ]?
)";
  auto gb = compile_constraint({ConstraintSpec::Kind::gbnf, g, {}}, t);
  ASSERT_TRUE(gb) << gb.error().message;
  EXPECT_TRUE(accepts(*gb, "[ab, été,c]"));
  EXPECT_FALSE(accepts(*gb, "[ab,]"));
  EXPECT_FALSE(accepts(*gb, "[Ab]"));
  auto obj = compile_constraint({ConstraintSpec::Kind::json_object, "", {}}, t);
  ASSERT_TRUE(obj);
  EXPECT_TRUE(accepts(*obj, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_FALSE(accepts(*obj, "[1]"));
  // The same spec compiles once: the cache returns the same object.
  auto again = compile_constraint({ConstraintSpec::Kind::regex, "(yes|no)-[0-9]{2,3}", {}}, t);
  EXPECT_EQ(re->get(), again->get());
}

// --- random schemas --------------------------------------------------------------------------

TEST(StructuredRandom, RandomWalksOverRandomSchemasValidate) {
  auto& t = *tiny().tok;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    std::mt19937_64 rng(seed);
    json::value s = random_schema(rng, 0);
    SCOPED_TRACE(json::serialize(s));
    auto c = schema(json::serialize(s), t);
    ASSERT_TRUE(c) << c.error().message;
    check_valid(s, random_walk(*c, t, rng));
  }
}

// The shared vocabularies: SentencePiece (llama-spm, phi-3) and byte-level BPE (gpt-2,
// starcoder, deepseek-coder): tokens spanning several JSON tokens, multi-byte characters.
TEST(StructuredRandom, RealVocabulariesSpmAndBpe) {
  const fs::path dir = fs::path(WEIR_SHARED_DIR) / "testdata/vocab";
  if (!fs::exists(dir / "ggml-vocab-gpt-2.gguf"))
    GTEST_SKIP() << "tokenizer vocabularies not found in " << dir << " (../shared absent)";
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"enum":["a","b","été"]},"maxItems":3}},"required":["name","age"],"additionalProperties":false})",
      R"({"type":"string","pattern":"^[é漢a-z]+$"})",
      R"({"anyOf":[{"type":"number","minimum":-1,"maximum":1},{"type":"string","format":"date-time"}]})",
  };
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                           "ggml-vocab-phi-3.gguf", "ggml-vocab-starcoder.gguf"}) {
    SCOPED_TRACE(name);
    auto f = GgufFile::open(dir / name);
    ASSERT_TRUE(f);
    auto t = Tokenizer::from_gguf(**f);
    ASSERT_TRUE(t) << t.error().message;
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      for (const char* s : schemas) {
        SCOPED_TRACE(s);
        auto c = schema(s, **t);
        ASSERT_TRUE(c) << c.error().message;
        std::mt19937_64 rng(seed);
        check_valid(json::parse(s), random_walk(*c, **t, rng));
      }
    }
    // Multi-token JSON: a token like `":` or `"},` must be allowed where it fits.
    auto c = schema(schemas[0], **t);
    auto ids = (*t)->encode(R"({"name":"Zoë","age":42})", false);
    ConstraintMatcher m(*c);
    std::vector<std::uint64_t> mask(mask_words((*t)->n_vocab()));
    for (std::int32_t id : ids) {
      m.fill_mask(mask);
      ASSERT_TRUE((mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1)
          << "token '" << (*t)->token_to_piece(id) << "' masked out";
      ASSERT_TRUE(m.accept(id));
    }
    EXPECT_TRUE(m.finished());
  }
}

// The mask is exactly the set of tokens the matcher accepts, token by token: the trie walk's
// shortcuts (plain runs of string characters, shared transitions) neither drop nor add one.
// Bounded and unbounded strings (walked to their maxLength), a pattern, a format, an enum; any
// JSON object; GBNF and regex classes that hold all printable ASCII, part of it, or more.
TEST(StructuredRandom, MaskIsExactlyTheTokensTheMatcherAccepts) {
  const fs::path dir = fs::path(WEIR_SHARED_DIR) / "testdata/vocab";
  if (!fs::exists(dir / "ggml-vocab-gpt-2.gguf"))
    GTEST_SKIP() << "tokenizer vocabularies not found in " << dir << " (../shared absent)";
  using K = ConstraintSpec::Kind;
  const ConstraintSpec specs[] = {
      {K::json_schema,
       R"({"type":"object","properties":{"q":{"type":"string","maxLength":40},"s":{"type":"string"},"k":{"type":"integer","minimum":1,"maximum":50},"lang":{"enum":["en","fr"]}},"required":["q","s"],"additionalProperties":false})",
       {}},
      {K::json_schema,
       R"({"type":"object","properties":{"p":{"type":"string","pattern":"^[a-z0-9_/.-]{1,30}$"},"n":{"type":"string","minLength":3,"maxLength":9},"w":{"type":"string","format":"date-time"}},"required":["p","n","w"]})",
       {}},
      {K::json_object, "", {}},
      {K::gbnf, "root ::= \"say: \" [ -~]{0,12} \"!\" | \"n: \" [0-9]+ [^\\n]{0,5}\n", {}},
      {K::regex, "[a-z ]{2,30}(x|yz)", {}},
  };
  // (phi-3, starcoder and deepseek-coder pass too; left out for time: 3 s per vocabulary.)
  for (const char* name : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"}) {
    SCOPED_TRACE(name);
    auto f = GgufFile::open(dir / name);
    ASSERT_TRUE(f);
    auto t = Tokenizer::from_gguf(**f);
    ASSERT_TRUE(t) << t.error().message;
    for (const auto& spec : specs) {
      SCOPED_TRACE(spec.text);
      auto c = compile_constraint(spec, **t);
      ASSERT_TRUE(c) << c.error().message;
      std::mt19937_64 rng(7);
      ConstraintMatcher m(*c);
      std::vector<std::uint64_t> mask(mask_words((*t)->n_vocab()));
      for (int step = 0; step < 20 && !m.finished(); ++step) {
        m.fill_mask(mask);
        std::vector<std::int32_t> allowed;
        for (std::int32_t id = 0; id < (*t)->n_vocab(); ++id) {
          const bool in_mask = (mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1;
          ConstraintMatcher copy = m;
          ASSERT_EQ(in_mask, copy.accept(id))
              << "token '" << (*t)->token_to_piece(id) << "' after step " << step;
          if (in_mask && !(*t)->is_eog(id)) allowed.push_back(id);
        }
        if (allowed.empty()) break;
        ASSERT_TRUE(m.accept(allowed[rng() % allowed.size()]));
      }
    }
  }
}

// --- through the engine ----------------------------------------------------------------------

TEST(StructuredEngine, RandomSchemasTimesSeedsAlwaysValidate) {
  auto& tm = tiny();
  auto e = Engine::create(
      make_llama_runner(tm.model, 1),
      {.max_num_seqs = 8, .kv_cache_bytes = 8 << 20, .eog_tokens = tm.tok->eog_tokens()});
  ASSERT_TRUE(e);
  int finished = 0;
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    std::mt19937_64 rng(seed * 7);
    json::value s = random_schema(rng, 0);
    SCOPED_TRACE(json::serialize(s));
    auto c = schema(json::serialize(s), *tm.tok);
    ASSERT_TRUE(c) << c.error().message;
    GenerateRequest rq;
    rq.prompt = tm.tok->encode("JSON:");
    rq.max_new_tokens = 200;
    rq.sampling.temperature = seed % 3 == 0 ? 0.0f : 1.0f;
    rq.sampling.seed = seed;
    rq.constraint = *c;
    auto r = generate(**e, rq);
    ASSERT_TRUE(r) << r.error().message;
    const std::string out = tm.tok->decode(r->tokens);
    if (r->finish == FinishReason::length) continue;  // a random model may babble in a string
    ++finished;
    check_valid(s, out);
  }
  EXPECT_GE(finished, 12);
}

TEST(StructuredEngine, RecursiveSchemaTerminatesAndEndsWhenComplete) {
  auto& tm = tiny();
  auto e = Engine::create(
      make_llama_runner(tm.model, 1),
      {.max_num_seqs = 4, .kv_cache_bytes = 8 << 20, .eog_tokens = tm.tok->eog_tokens()});
  ASSERT_TRUE(e);
  const char* tree =
      R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":0,"maximum":9},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"],"additionalProperties":false}},
      "$ref":"#/$defs/node"})";
  auto c = schema(tree, *tm.tok);
  ASSERT_TRUE(c) << c.error().message;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    GenerateRequest rq;
    rq.prompt = tm.tok->encode("tree:");
    rq.max_new_tokens = 120;
    rq.sampling.temperature = 1.0f;
    rq.sampling.seed = seed;
    rq.constraint = *c;
    auto r = generate(**e, rq);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->finish == FinishReason::stop || r->finish == FinishReason::length);
    if (r->finish == FinishReason::stop) check_valid(json::parse(tree), tm.tok->decode(r->tokens));
  }
  // A choice ends as soon as it is complete (finish reason stop, no end token needed).
  auto ch = compile_constraint({ConstraintSpec::Kind::choice, "", {"approve", "reject"}}, *tm.tok);
  GenerateRequest rq;
  rq.prompt = tm.tok->encode("verdict:");
  rq.max_new_tokens = 50;
  rq.constraint = *ch;
  auto r = generate(**e, rq);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->finish, FinishReason::stop);
  const std::string text = tm.tok->decode(r->tokens);
  EXPECT_TRUE(text == "approve" || text == "reject") << text;
}

// A lazy constraint: free text until the trigger, then a valid value (as agents use it after
// "<tool_call>"). A token that would carry bytes after the trigger that no value starts with
// is never sampled (it was, and cut the output there); the engine needs no token_text for it.
TEST(StructuredEngine, TriggerStartsTheConstraint) {
  auto& tm = tiny();
  const Tokenizer* t = tm.tok.get();
  const char* s =
      R"({"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":9}},"required":["n"],"additionalProperties":false})";
  auto c = schema(s, *t);
  ASSERT_TRUE(c);
  for (bool with_text : {true, false}) {
    SCOPED_TRACE(with_text ? "with token_text" : "without token_text");
    EngineConfig cfg{.max_num_seqs = 4, .kv_cache_bytes = 8 << 20};
    if (with_text) cfg.token_text = [t](std::int32_t id) { return t->token_to_piece(id); };
    auto e = Engine::create(make_llama_runner(tm.model, 1), cfg);
    ASSERT_TRUE(e);
    int triggered = 0;
    for (std::uint64_t seed = 1; seed <= 8; ++seed) {
      GenerateRequest rq;
      rq.prompt = t->encode("call:");
      rq.max_new_tokens = 120;
      rq.sampling.temperature = 1.0f;
      rq.sampling.seed = seed;
      rq.constraint = *c;
      rq.constraint_trigger = "e";
      auto r = generate(**e, rq);
      ASSERT_TRUE(r) << r.error().message;
      std::string text;  // the pieces as the engine saw them (decode drops SPM's leading space)
      for (std::int32_t id : r->tokens) text += t->token_to_piece(id);
      const auto pos = text.find('e');
      if (pos == std::string::npos) continue;
      ++triggered;
      EXPECT_EQ(r->finish, FinishReason::stop) << text;
      check_valid(json::parse(s), text.substr(pos + 1));
    }
    EXPECT_GE(triggered, 6);
  }
}

TEST(StructuredEngine, WrongVocabularyIsAnError) {
  auto& tm = tiny();
  const fs::path gpt2 = fs::path(WEIR_SHARED_DIR) / "testdata/vocab/ggml-vocab-gpt-2.gguf";
  if (!fs::exists(gpt2)) GTEST_SKIP() << "tokenizer vocabularies not found (../shared absent)";
  auto f = GgufFile::open(gpt2);
  auto t = Tokenizer::from_gguf(**f);
  auto c = schema(R"({"type":"integer"})", **t);
  ASSERT_TRUE(c);
  auto e = Engine::create(make_llama_runner(tm.model, 1),
                          {.max_num_seqs = 2, .kv_cache_bytes = 4 << 20});
  GenerateRequest rq;
  rq.prompt = {1, 5};
  rq.constraint = *c;
  auto r = generate(**e, rq);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "the constraint was compiled for a vocabulary of 50257 tokens, but the model has 512");
}

}  // namespace
}  // namespace weir::inference