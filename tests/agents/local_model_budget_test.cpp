// Local-model turns under a budget, on a random-weight model (its text never ends a value by
// itself): an output_schema answer is valid for any max_tokens its shortest value fits, and a
// smaller max_tokens is refused naming both numbers and the knob. (Tool calls get the same
// budget through the engine's trigger: structured_budget_test.cpp.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>

#include "weir/agents/local_model.hpp"
#include "weir/inference/constraint.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/tools/schema.hpp"

namespace weir::agents {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;

std::shared_ptr<LocalChatModel> random_model() {
  static inference::EngineRegistry engines;  // this test program's composition root
  static std::shared_ptr<LocalChatModel> m = [] {
    const fs::path path =
        fs::temp_directory_path() / ("weir_agents_budget_" + std::to_string(::getpid()) + ".gguf");
    auto shape = inference::RandomModelShape::tiny();
    shape.context_length = 1024;
    EXPECT_TRUE(inference::write_random_llama(path, shape, inference::GgmlType::f32, 5));
    LocalModelOptions o;
    o.kv_cache_bytes = 8u << 20;
    o.ignore_eog = true;
    auto r = LocalChatModel::open(engines, path, o);
    EXPECT_TRUE(r) << r.error().message;
    return *r;
  }();
  return m;
}

Result<ChatResponse> chat(LocalChatModel& m, std::vector<ToolSpec> tools, ChatParams p) {
  asio::io_context io;
  auto f = asio::co_spawn(
      io, m.async_chat({Message::user("Describe a book as JSON.")}, std::move(tools), p),
      asio::use_future);
  io.run();
  return f.get();
}

const json::object kBook = json::parse(R"({"type":"object","properties":{
  "title":{"type":"string"},"pages":{"type":"integer","minimum":1},
  "authors":{"type":"array","items":{"type":"string"},"minItems":1}},
  "required":["title","pages","authors"],"additionalProperties":false})")
                               .as_object();

TEST(LocalModelBudget, OutputSchemaAnswersAreValidWithinMaxTokens) {
  auto m = random_model();
  ASSERT_TRUE(m);
  auto c = inference::compile_constraint(
      {inference::ConstraintSpec::Kind::json_schema, json::serialize(kBook), {}}, m->tokenizer());
  ASSERT_TRUE(c);
  const std::int32_t need = (*c)->min_tokens();
  for (std::int32_t max_tokens : {need, need + 3, need + 20, need + 80}) {
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE("max_tokens " + std::to_string(max_tokens));
      ChatParams p;
      p.max_tokens = max_tokens;
      p.temperature = 1.0f;
      p.seed = seed;
      p.response_schema = kBook;
      auto r = chat(*m, {}, p);
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_EQ(r->finish_reason, "stop");
      boost::system::error_code ec;
      auto v = json::parse(r->message.content, ec);
      ASSERT_FALSE(ec) << r->message.content;
      EXPECT_TRUE(tools::validate(kBook, v)) << r->message.content;
    }
  }
  ChatParams p;
  p.max_tokens = need - 1;
  p.response_schema = kBook;
  auto r = chat(*m, {}, p);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            m->name() + ": output_schema: its shortest valid value takes " + std::to_string(need) +
                " tokens of this model's vocabulary, but the turn may have " +
                std::to_string(need - 1) +
                " (max_tokens; an agent's max_tokens_per_turn); raise it to at least " +
                std::to_string(need));
}

}  // namespace
}  // namespace weir::agents
