// The local adapter and a crew end to end on weir's engine, with the fixture model from
// ../shared/models (skipped when absent).
#include "weir/agents/local_model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include "../trace/captured_spans.hpp"
#include "weir/agents/crew.hpp"
#include "weir/inference/constraint.hpp"
#include "weir/inference/engine.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/inference/gguf.hpp"
#include "weir/inference/tokenizer.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/registry.hpp"

namespace weir::agents {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;

const fs::path kModel = fs::path(WEIR_SHARED_DIR) / "models" / "stories260K-gqa.gguf";

class LocalModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kModel)) GTEST_SKIP() << "fixture model absent: " << kModel;
    LocalModelOptions o;
    o.max_model_len = 512;
    o.kv_cache_bytes = 8u << 20;
    auto m = LocalChatModel::open(engines_, kModel, o);
    ASSERT_TRUE(m) << m.error().message;
    model_ = std::move(*m);
  }
  inference::EngineRegistry engines_;
  std::shared_ptr<LocalChatModel> model_;
};

TEST_F(LocalModelTest, PromptDescribesToolsAndWrapsToolResults) {
  ToolSpec calc{
      "calculator", "Evaluates arithmetic.",
      json::object{{"type", "object"}, {"properties", {{"expression", {{"type", "string"}}}}}}};
  Message call = Message::assistant("");
  call.tool_calls.push_back({"call_1", "calculator", json::object{{"expression", "2+2"}}});
  Message result;
  result.role = Role::tool;
  result.name = "calculator";
  result.content = "4";
  std::string p = model_->render_prompt(
      {Message::system("You are a mathematician."), Message::user("2+2?"), call, result}, {calc});
  EXPECT_NE(p.find("You are a mathematician.\n\nYou can call these tools:\n- calculator: "
                   "Evaluates arithmetic."),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("<tool_call>{\"name\":\"calculator\",\"arguments\":{\"expression\":\"2+2\"}}"
                   "</tool_call>"),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("<tool_response name=\"calculator\">\n4\n</tool_response>"), std::string::npos)
      << p;
}

// With tools, what follows "<tool_call>" is constrained to {"name": a tool, "arguments": its
// parameters}; a tool schema the constraint cannot enforce leaves calls unconstrained.
TEST_F(LocalModelTest, ToolCallsAreConstrainedToTheToolSchemas) {
  ToolSpec calc{"calculator", "Evaluates arithmetic.",
                json::object{{"type", "object"},
                             {"properties", {{"expression", {{"type", "string"}}}}},
                             {"required", json::array{"expression"}}}};
  ToolSpec search{"search", "Searches.",
                  json::object{{"type", "object"},
                               {"properties", {{"k", {{"type", "integer"}, {"minimum", 1}}}}},
                               {"required", json::array{"k"}}}};
  auto c = model_->tool_call_constraint({calc, search});
  ASSERT_TRUE(c);
  auto accepts = [&](std::string_view text) {
    inference::ConstraintMatcher m(*c);
    return m.accept_bytes(text) && m.complete();
  };
  EXPECT_TRUE(accepts(R"({"name": "calculator", "arguments": {"expression": "2+2"}})"));
  EXPECT_TRUE(accepts(R"({"name":"search","arguments":{"k":3}})"));
  EXPECT_FALSE(accepts(R"({"name": "search", "arguments": {"expression": "2+2"}})"));
  EXPECT_FALSE(accepts(R"({"name": "search", "arguments": {"k": 0}})"));
  EXPECT_FALSE(accepts(R"({"name": "shell", "arguments": {}})"));
  ToolSpec odd{"odd", "?", json::object{{"type", "object"}, {"not", json::object{}}}};
  auto refused = model_->tool_call_constraint({calc, odd});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message.rfind("tool 'odd': ", 0), 0u) << refused.error().message;
  EXPECT_NE(refused.error().message.find("'not'"), std::string::npos) << refused.error().message;
}

// Text is text: "</s>" or "<s>" in a system prompt, a user message or a tool's output is those
// characters, never end-of-sequence (this vocabulary has <s> and </s> as control tokens and no
// chatml markers, so the whole prompt is text: BOS and then the plain tokens of the rendering).
TEST_F(LocalModelTest, MessageTextNeverBecomesASpecialToken) {
  const auto& tok = model_->tokenizer();
  Message result;
  result.role = Role::tool;
  result.name = "fetch";
  result.content = "page text</s><s>more";
  const std::vector<Message> msgs = {Message::system("Be brief.</s>"), Message::user("a</s>b<s>c"),
                                     result};
  const auto ids = model_->encode_prompt(msgs, {});
  EXPECT_EQ(ids, tok.encode(model_->render_prompt(msgs, {}), true, false));
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], tok.bos());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.bos()), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.eos()), 0);
}

// A reply streamed piece by piece (StreamDecoder, each piece made valid UTF-8) joins into the
// whole reply made valid: a piece never ends inside a character that the whole holds, even
// where a lead byte is followed by one that continues nothing (a random model's bytes: a lead
// took the next character's lead as its own, and the pieces showed U+FFFD where the stored
// reply had the character).
TEST(ToValidUtf8, StreamedPiecesJoinIntoTheWholeReply) {
  if (!fs::exists(kModel)) GTEST_SKIP() << "fixture model absent: " << kModel;
  auto file = inference::GgufFile::open(kModel);
  ASSERT_TRUE(file);
  auto tok = inference::Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok);
  std::vector<std::int32_t> bytes, words;  // byte tokens of 0x80 and up; plain ASCII pieces
  for (std::int32_t id = 0; id < (*tok)->n_vocab(); ++id) {
    if ((*tok)->is_control(id)) continue;
    const std::string p = (*tok)->token_to_piece(id);
    if (p.size() == 1 && static_cast<unsigned char>(p[0]) >= 0x80) bytes.push_back(id);
    if (!p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c > 0x20; }))
      words.push_back(id);
  }
  ASSERT_GE(bytes.size(), 64u);
  ASSERT_FALSE(words.empty());
  std::uint64_t seed = 42;
  auto next = [&] { return seed = seed * 6364136223846793005ULL + 1442695040888963407ULL; };
  for (int round = 0; round < 2000; ++round) {
    std::vector<std::int32_t> ids;
    for (int n = 0; n < 12; ++n)
      ids.push_back(next() % 4 ? bytes[(next() >> 33) % bytes.size()]
                               : words[(next() >> 33) % words.size()]);
    ids.push_back(words[0]);  // ends on a whole character: nothing waits
    inference::StreamDecoder sd(**tok);
    std::string streamed;
    for (auto id : ids) streamed += to_valid_utf8(sd.push(id));
    ASSERT_EQ(streamed, to_valid_utf8((*tok)->decode(ids))) << "round " << round;
  }
}

TEST(ToValidUtf8, ReplacesInvalidSequences) {
  EXPECT_EQ(to_valid_utf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(to_valid_utf8("a\xC3"), "a\xEF\xBF\xBD");                                // truncated
  EXPECT_EQ(to_valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(to_valid_utf8(std::string("x\0y", 3)), "x\xEF\xBF\xBDy");
}

TEST_F(LocalModelTest, OneEnginePerModelFile) {
  auto again = LocalChatModel::open(engines_, kModel);
  ASSERT_TRUE(again);
  EXPECT_EQ(&(*again)->engine(), &model_->engine());
  EXPECT_EQ(engines_.loads(), 1u);
  EXPECT_GT(model_->count_tokens("Once upon a time"), 2);
  // Another registry (another program's composition root) has engines of its own.
  inference::EngineRegistry other;
  auto elsewhere = LocalChatModel::open(other, kModel);
  ASSERT_TRUE(elsewhere);
  EXPECT_NE(&(*elsewhere)->engine(), &model_->engine());
}

// An engine lives exactly as long as its registry or a model on it: when both are gone its KV
// pool is back in the budget (nothing to release by hand, nothing kept by a global).
TEST(LocalModelLifetime, TheEngineGoesWithItsRegistryAndItsModels) {
  if (!fs::exists(kModel)) GTEST_SKIP() << "fixture model absent: " << kModel;
  MemoryBudget budget;
  std::shared_ptr<LocalChatModel> kept;
  std::size_t pool = 0;  // the engine's KV pool: at most kv_cache_bytes, whole blocks
  {
    inference::EngineRegistry engines;
    LocalModelOptions o;
    o.max_model_len = 512;
    o.kv_cache_bytes = 8u << 20;
    o.budget = &budget;
    auto m = LocalChatModel::open(engines, kModel, o);
    ASSERT_TRUE(m) << m.error().message;
    kept = *m;
    pool = budget.used(BudgetCategory::kv_cache);
    EXPECT_GT(pool, std::size_t{7} << 20);
    EXPECT_LE(pool, std::size_t{8} << 20);
  }
  // The registry is gone; the model still holds the engine, which still answers.
  EXPECT_EQ(budget.used(BudgetCategory::kv_cache), pool);
  EXPECT_GT(kept->count_tokens("Once upon a time"), 2);
  kept.reset();
  EXPECT_EQ(budget.used(BudgetCategory::kv_cache), 0u);
}

// Chats that do not fit the KV pool together are preempted and recomputed; each chat span says
// how often its sequence was (a weir.fence.preemption event), and the spans add up to the
// engine's count (issue 31: the event was tested at the tracer only).
TEST(LocalModelTrace, APreemptedChatSaysSoOnItsSpan) {
  if (!fs::exists(kModel)) GTEST_SKIP() << "fixture model absent: " << kModel;
  inference::EngineRegistry engines;
  LocalModelOptions o;
  o.max_model_len = 128;
  o.block_size = 16;
  o.max_num_seqs = 8;
  o.kv_cache_bytes = 320u << 10;  // about 256 tokens of this model: two chats' worth
  o.ignore_eog = true;
  auto m = LocalChatModel::open(engines, kModel, o);
  ASSERT_TRUE(m) << m.error().message;
  auto text = std::make_shared<std::string>();
  auto tracer_owned = testing::captured_tracer(text);
  trace::Tracer& tracer = *tracer_owned;
  constexpr int kChats = 8;
  std::vector<trace::Span> spans;
  for (int i = 0; i < kChats; ++i)
    spans.push_back(tracer.start_span("chat local", nullptr, trace::SpanKind::client));
  asio::io_context io;
  int ok = 0;
  // One lambda for all the chats, alive until io.run() returns (a coroutine lambda's captures
  // live in the lambda, not in the frame); the chat's number is a parameter, copied.
  auto one = [&](int i) -> asio::awaitable<void> {
    ChatParams params;
    params.max_tokens = 96;
    params.span = &spans[static_cast<std::size_t>(i)];
    std::vector<Message> msgs{Message::user("Tell story " + std::to_string(i))};
    auto op = (*m)->async_chat(std::move(msgs), {}, params);
    auto r = co_await std::move(op);
    if (r) ++ok;
  };
  for (int i = 0; i < kChats; ++i) asio::co_spawn(io, one(i), asio::detached);
  io.run();
  EXPECT_EQ(ok, kChats);
  for (auto& s : spans) s.end();
  const auto preempted = (*m)->engine().stats().sched.preemptions;
  ASSERT_GT(preempted, 0u) << "the pool was meant to be too small for the chats together";
  ASSERT_TRUE(tracer.flush(std::chrono::seconds(10)));
  auto read = trace::parse_otlp_json_lines(*text, "captured");
  ASSERT_TRUE(read) << read.error().message;
  ASSERT_EQ(read->size(), static_cast<std::size_t>(kChats));
  std::uint64_t told = 0;
  for (const auto& rs : *read)
    for (const auto& e : rs.span.events) {
      ASSERT_EQ(e.name, "weir.fence.preemption");
      ASSERT_EQ(e.attributes.size(), 1u);
      EXPECT_EQ(e.attributes[0].key, "weir.preemptions");
      told += static_cast<std::uint64_t>(std::get<std::int64_t>(e.attributes[0].value));
    }
  EXPECT_EQ(told, preempted);
}

TEST_F(LocalModelTest, ACrewRunsEndToEndOnTheEngine) {
  auto store = *ArtifactStore::open({{}, 16u << 20, 0, 100, nullptr});
  auto tools = std::make_shared<tools::ToolRegistry>();
  ASSERT_TRUE(tools->add(tools::make_calculator()));
  AgentSpec teller;
  teller.name = "teller";
  teller.role = "a storyteller";
  teller.max_iter = 2;
  teller.max_tokens_per_turn = 24;
  teller.history.max_tokens = 256;  // the fixture's context is 512 tokens: no tool descriptions
  AgentSpec editor = teller;
  editor.name = "editor";
  editor.role = "an editor";
  editor.tools = {};
  CrewSpec spec;
  spec.name = "story";
  spec.agents = {teller, editor};
  spec.tasks = {{"tell",
                 "Tell a story about {{animal}}.",
                 "",
                 "teller",
                 {},
                 false,
                 {{"", "calculator", json::object{{"expression", "3*7"}}}}},
                {"edit", "Shorten the story.", "", "editor", {}, false, {}}};
  auto crew = Crew::create(spec, model_, tools, {.artifacts = store.get()});
  ASSERT_TRUE(crew) << crew.error().message;
  graph::GraphRuntime rt({.artifacts = store.get()});
  asio::io_context io;
  Result<CrewResult> r = Error(Errc::cancelled, "not run");
  auto task = [&]() -> asio::awaitable<void> {
    json::object in{{"animal", "a cat"}};
    graph::RunOptions opt;
    auto op = (*crew)->async_kickoff(rt, std::move(in), opt);
    r = co_await std::move(op);
  };
  asio::co_spawn(io, task(), asio::detached);
  io.run();
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->tasks.size(), 2u);
  EXPECT_GE(r->iterations, 2);
  EXPECT_GT(r->prompt_tokens, 20);
  EXPECT_GT(r->completion_tokens, 0);
  EXPECT_EQ(r->tasks[0].loop.tool_calls, 1);  // the prefetch
  for (const auto& t : r->tasks) {
    ASSERT_FALSE(t.artifact_id.empty());
    EXPECT_TRUE(store->get(t.artifact_id));
  }
  // Every sequence finished and gave its blocks back.
  EXPECT_EQ(model_->engine().stats().kv.used_blocks, 0);
}

}  // namespace
}  // namespace weir::agents
