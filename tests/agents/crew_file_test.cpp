#include "weir/agents/crew_file.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <boost/json.hpp>

#include "weir/runtime/artifact_store.hpp"
#include "weir/tools/registry.hpp"

namespace weir::agents {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

const fs::path kSamples = fs::path(WEIR_SOURCE_DIR) / "samples" / "crews";

TEST(CrewFile, ResearchCrewSampleLoadsAndItsToolsBuild) {
  auto f = load_agents_file(kSamples / "research_crew.json");
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->kind, AgentsFileKind::crew);
  EXPECT_EQ(f->name, "research_crew");
  ASSERT_EQ(f->crew.agents.size(), 3u);
  ASSERT_EQ(f->crew.tasks.size(), 3u);
  EXPECT_EQ(f->crew.tasks[0].prefetch.at(0).name, "doc_search");
  EXPECT_EQ(f->crew.tasks[2].context, (std::vector<std::string>{"research", "write"}));
  EXPECT_EQ(f->crew.agents[0].max_iter, 4);
  EXPECT_EQ(f->crew.limits.token_budget, 100000);
  auto store = *ArtifactStore::open({{}, 16u << 20, 0, 100, nullptr});
  auto tools = build_tools(*f, store.get());
  ASSERT_TRUE(tools) << tools.error().message;
  EXPECT_EQ((*tools)->names(), (std::vector<std::string>{"artifacts", "doc_search"}));
}

TEST(CrewFile, GroupChatSampleLoads) {
  auto f = load_agents_file(kSamples / "group_chat.json");
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->kind, AgentsFileKind::group_chat);
  EXPECT_EQ(f->chat.agents.size(), 3u);
  EXPECT_EQ(f->chat.termination.describe(),
            "((max_messages(9) || text_mention(\"APPROVED\")) || token_usage(20000))");
  EXPECT_EQ(f->chat.window.max_messages, 8);
  EXPECT_EQ(f->task, "Write a design note on {{topic}}.");
}

TEST(CrewFile, EveryProblemIsReportedWithItsPosition) {
  const std::string text = R"({
  "weir": 1,
  "kind": "crew",
  "name": "bad",
  "agents": [
    {"name": "a", "role": "r", "max_itr": 3, "tools": [1]}
  ],
  "tasks": [
    {"name": "t", "agent": "a"}
  ],
  "process": "parallel"
})";
  auto f = parse_agents_file(text, "bad.json");
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, Errc::invalid_workflow);
  EXPECT_EQ(f.error().message,
            "bad.json:6:43: /agents/0/max_itr: unknown key 'max_itr'; did you mean 'max_iter'?\n"
            "bad.json:6:56: /agents/0/tools/0: expected a string, got an integer\n"
            "bad.json:11:14: /process: unknown process 'parallel' (sequential, hierarchical)\n"
            "bad.json:9:5: /tasks/0: missing required key 'description'");
}

TEST(CrewFile, MalformedJsonAndMissingFilesAreClearErrors) {
  auto f = parse_agents_file("{\"weir\": 1,\n \"kind\": }", "x.json");
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, Errc::invalid_workflow);
  EXPECT_EQ(f.error().message.rfind("x.json:2:10:", 0), 0u) << f.error().message;
  auto missing = load_agents_file("/nonexistent/crew.json");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Errc::not_found);
  EXPECT_EQ(missing.error().message,
            "/nonexistent/crew.json: cannot read: No such file or directory");
}

TEST(CrewFile, ToolFoldersAreCheckedAndUnknownToolsRefused) {
  const fs::path dir = fs::temp_directory_path() / "weir-crew-file-test";
  fs::create_directories(dir);
  std::ofstream(dir / "c.json") << R"({"weir": 1, "kind": "crew", "name": "c",
    "tools": {"doc_search": {"folder": "missing"}},
    "agents": [{"name": "a", "role": "r"}], "tasks": [{"name": "t", "agent": "a", "description": "d"}]})";
  auto f = load_agents_file(dir / "c.json");
  ASSERT_TRUE(f) << f.error().message;
  auto tools = build_tools(*f, nullptr);
  ASSERT_FALSE(tools);
  EXPECT_EQ(tools.error().message,
            "tool 'doc_search': folder '" + (dir / "missing").string() + "' does not exist");
  std::ofstream(dir / "d.json") << R"({"weir": 1, "kind": "crew", "name": "c",
    "tools": {"web": {}},
    "agents": [{"name": "a", "role": "r"}], "tasks": [{"name": "t", "agent": "a", "description": "d"}]})";
  auto g = load_agents_file(dir / "d.json");
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("/tools/web: unknown key 'web' (expected one of: calculator, "
                                   "files, artifacts, doc_search, lorem, sleep)"),
            std::string::npos)
      << g.error().message;
  fs::remove_all(dir);
}

// A crew file's tools, engine and agents are read by the readers workflow files use
// (tools::parse_builtin_tool, parse_engine_settings, parse_agent): one set of rules and
// defaults. A tool's settings were once not checked at all, and the engine took three keys.
TEST(CrewFile, ToolSettingsAndTheEngineAreReadByTheSharedReaders) {
  auto bad = parse_agents_file(R"({"weir": 1, "kind": "crew", "name": "c",
    "tools": {"files": {"rot": "x"}, "calculator": 3},
    "engine": {"max_num_seqs": 5000},
    "agents": [{"name": "a", "role": "r"}], "tasks": [{"name": "t", "agent": "a", "description": "d"}]})",
                               "c.json");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "c.json:2:32: /tools/files/rot: unknown key 'rot'; did you mean 'root'?\n"
            "c.json:2:24: /tools/files: the files tool needs a \"root\" folder (relative to this "
            "file)\n"
            "c.json:2:52: /tools/calculator: expected the tool's settings, {} or like {\"root\": "
            "\"../data\"}, got an integer\n"
            "c.json:3:32: /engine/max_num_seqs: must be at most 4096, got 5000");
  auto good = parse_agents_file(R"({"weir": 1, "kind": "crew", "name": "c",
    "tools": {"calculator": {"timeout_ms": 500, "max_concurrency": 2}, "lorem": {}},
    "engine": {"block_size": 32, "kv_cache_type": "f16"},
    "agents": [{"name": "a", "role": "r", "history": {"max_summary_bytes": 128}}],
    "tasks": [{"name": "t", "agent": "a", "description": "d"}]})",
                                "c.json");
  ASSERT_TRUE(good) << good.error().message;
  LocalModelOptions mo;
  good->engine.apply(mo);
  EXPECT_EQ(mo.block_size, 32);
  EXPECT_EQ(mo.kv_cache_type, "f16");
  EXPECT_EQ(mo.max_num_seqs, 64);  // LocalModelOptions' default: the one place it is written
  EXPECT_EQ(good->crew.agents[0].history.max_summary_bytes, 128u);
  auto tools = build_tools(*good, nullptr);
  ASSERT_TRUE(tools) << tools.error().message;
  EXPECT_EQ((*tools)->names(), (std::vector<std::string>{"calculator", "lorem"}));
  const auto o = (*tools)->find("calculator")->options();
  EXPECT_EQ(o.timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(o.max_concurrency, 2);
  EXPECT_TRUE(o.json_output);  // the calculator's own option stays
}

TEST(CrewFile, KeysOfTheOtherKindAndAnEmptyKindAreErrors) {
  auto f = parse_agents_file(R"({"weir": 1, "kind": "crew", "name": "c", "task": "x",
    "agents": [{"name": "a", "role": "r"}], "tasks": [{"name": "t", "agent": "a", "description": "d"}]})",
                             "c.json");
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().message.find("/task: 'task' belongs to group-chat files, not to a crew"),
            std::string::npos)
      << f.error().message;
  auto g = parse_agents_file(R"({"weir": 1, "kind": "", "name": "c", "agents": [], "tasks": []})",
                             "g.json");
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("/kind: unknown kind '' (crew, group_chat)"), std::string::npos)
      << g.error().message;
  auto h = parse_agents_file(R"({"weir": 1, "kind": "group_chat", "name": "g", "task": "t",
    "agents": [{"name": "a", "role": "r"}],
    "termination": {"any": [{"max_messages": 3}, {"text_mention": ""}]}})",
                             "h.json");
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().message.find("/termination/any/1: text_mention must be a non-empty string"),
            std::string::npos)
      << h.error().message;
}

TEST(CrewFile, RecognisesAgentsDocuments) {
  EXPECT_TRUE(is_agents_document(json::parse(R"({"kind": "crew"})")));
  EXPECT_TRUE(is_agents_document(json::parse(R"({"kind": "group_chat"})")));
  EXPECT_FALSE(is_agents_document(json::parse(R"({"nodes": []})")));
}

// A crew file served as a workflow: a chat turn fills the input its tasks name first (the
// research crew has two inputs, `topic` and `topics`: its tasks name `topic`), each input is
// a channel with the file's default, and the model is the one given.
TEST(CrewWorkflowText, AChatTurnFillsTheInputTheTasksName) {
  const fs::path file = kSamples / "research_crew.json";
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto wf = crew_workflow_text(text, file, "/models/m.gguf");
  ASSERT_TRUE(wf) << wf.error().message;
  const json::value v = json::parse(*wf);
  const auto& node = v.at("nodes").at("research_crew");
  EXPECT_EQ(node.at("kind"), "crew");
  EXPECT_EQ(node.at("chat_input"), "topic");
  EXPECT_EQ(node.at("inputs").at("topic"), "{{state.topic}}");
  EXPECT_EQ(v.at("state").at("topic").at("default"), "paged KV caches");
  EXPECT_EQ(v.at("models").at("crew").at("path"), "/models/m.gguf");
  EXPECT_EQ(json::serialize(v.at("input")), R"(["messages","topic","topics"])");
  auto chat = crew_workflow_text(
      R"({"weir": 1, "kind": "group_chat", "name": "g", "agents": [], "task": "t"})",
      kSamples / "g.json", "/models/m.gguf");
  ASSERT_FALSE(chat);
  EXPECT_TRUE(chat.error().is(Errc::unsupported));
}

}  // namespace
}  // namespace weir::agents
