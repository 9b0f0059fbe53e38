// Helpers shared by the structured-output tests: the random-weight tiny model, compiling and
// probing constraints, random schemas and random walks through their masks, and weir::tools'
// JSON Schema validator as the independent check of what comes out.
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <future>
#include <random>
#include <set>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "runner/llama_runner.hpp"
#include "weir/inference/constraint.hpp"
#include "weir/inference/engine.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/inference/model.hpp"
#include "weir/inference/tokenizer.hpp"
#include "weir/tools/schema.hpp"

namespace weir::inference::structured_testing {

namespace fs = std::filesystem;
namespace json = boost::json;

// The random-weight tiny model (SPM vocabulary of 512 with byte tokens), written once.
struct TinyModel {
  fs::path path;
  std::shared_ptr<const Model> model;
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};
inline TinyModel& tiny() {
  static TinyModel* m = [] {
    auto* t = new TinyModel;
    t->path =
        fs::temp_directory_path() / ("weir_structured_" + std::to_string(::getpid()) + ".gguf");
    EXPECT_TRUE(write_random_llama(t->path, RandomModelShape::tiny(), GgmlType::f32, 11));
    auto m = Model::load(t->path);
    EXPECT_TRUE(m) << m.error().message;
    t->model = *m;
    auto f = GgufFile::open(t->path);
    t->file = std::move(*f);
    auto k = Tokenizer::from_gguf(*t->file);
    t->tok = std::move(*k);
    return t;
  }();
  return *m;
}

inline Result<std::shared_ptr<const Constraint>> schema(const std::string& text,
                                                        const Tokenizer& t) {
  return compile_constraint({ConstraintSpec::Kind::json_schema, text, {}}, t);
}

// Does the constraint accept exactly `text` (a whole value)?
inline bool accepts(const std::shared_ptr<const Constraint>& c, std::string_view text) {
  ConstraintMatcher m(c);
  return m.accept_bytes(text) && m.complete();
}

inline std::string error_of(const ConstraintSpec& spec) {
  auto r = compile_constraint(spec, *tiny().tok);
  return r ? std::string("(compiled)") : r.error().message;
}
inline std::string schema_error(const std::string& s) {
  return error_of({ConstraintSpec::Kind::json_schema, s, {}});
}

// Schemas whose values are short (bounded strings, arrays and nesting), so that any token
// sequence the mask allows ends within a few dozen tokens.
inline json::value random_schema(std::mt19937_64& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const int kind = depth >= 2 ? pick(6) : pick(9);
  switch (kind) {
    case 0:
      return {{"type", "boolean"}};
    case 1: {
      const int lo = pick(50) - 25;
      return {{"type", "integer"}, {"minimum", lo}, {"maximum", lo + pick(400)}};
    }
    case 2:
      return {{"type", "string"}, {"minLength", pick(2)}, {"maxLength", 2 + pick(5)}};
    case 3:
      return {{"enum", json::array{"alpha", "beta", 3, nullptr}}};
    case 4:
      return {{"type", "number"}, {"minimum", -5}, {"maximum", 5}};
    case 5:
      return {{"type", "string"}, {"format", pick(2) ? "date" : "uuid"}};
    case 6: {
      json::object props;
      json::array req;
      const int n = 1 + pick(3);
      for (int i = 0; i < n; ++i) {
        std::string k = "k" + std::to_string(i);
        props[k] = random_schema(rng, depth + 1);
        if (pick(2)) req.emplace_back(k);
      }
      return {{"type", "object"},
              {"properties", props},
              {"required", req},
              {"additionalProperties", false}};
    }
    case 7:
      return {
          {"type", "array"}, {"items", random_schema(rng, depth + 1)}, {"maxItems", 1 + pick(3)}};
    default:
      return {{"anyOf", json::array{random_schema(rng, depth + 1), {{"type", "null"}}}}};
  }
}

// Walks the mask: picks random allowed tokens (closing ones more often as it gets long) until
// the matcher is finished or complete; returns the bytes.
inline std::string random_walk(const std::shared_ptr<const Constraint>& c, const Tokenizer& t,
                               std::mt19937_64& rng, int max_steps = 400) {
  ConstraintMatcher m(c);
  std::vector<std::uint64_t> mask(mask_words(t.n_vocab()));
  std::string out;
  for (int step = 0; step < max_steps && !m.finished(); ++step) {
    m.fill_mask(mask);
    std::vector<std::int32_t> allowed;
    for (std::int32_t id = 0; id < t.n_vocab(); ++id)
      if ((mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1) allowed.push_back(id);
    EXPECT_FALSE(allowed.empty()) << "dead end after " << out;
    if (allowed.empty()) break;
    if (m.complete() && (step > 10 || rng() % 4 == 0)) break;  // end of generation
    std::int32_t tok = allowed[rng() % allowed.size()];
    if (step > 8) {  // prefer closing
      for (const char* want : {"}", "]", "\"", "0", "null", "true"}) {
        auto it = std::find_if(allowed.begin(), allowed.end(),
                               [&](std::int32_t id) { return t.token_to_piece(id) == want; });
        if (it != allowed.end()) {
          tok = *it;
          break;
        }
      }
    }
    if (t.is_eog(tok)) break;
    EXPECT_TRUE(m.accept(tok));
    out += t.token_to_piece(tok);
  }
  EXPECT_TRUE(m.complete()) << "incomplete: " << out;
  return out;
}

inline void check_valid(const json::value& s, const std::string& out) {
  boost::system::error_code ec;
  json::value v = json::parse(out, ec);
  ASSERT_FALSE(ec) << "does not parse: " << out << "\nschema: " << json::serialize(s);
  auto st = tools::validate(s, v);
  EXPECT_TRUE(st) << (st ? "" : st.error().message) << "\noutput: " << out
                  << "\nschema: " << json::serialize(s);
}
inline Result<GenerateResult> generate(Engine& e, GenerateRequest rq) {
  auto p = std::make_shared<std::promise<Result<GenerateResult>>>();
  auto f = p->get_future();
  e.submit(std::move(rq), {{}, [p](Result<GenerateResult> r) { p->set_value(std::move(r)); }});
  return f.get();
}

}  // namespace weir::inference::structured_testing
