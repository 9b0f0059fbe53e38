// The research crew of samples/crews/research_crew.json, written in C++: researcher -> writer ->
// reviewer over the notes in samples/data, with document search and artifacts.
//
//   build/bin/research_crew [MODEL.gguf] [TOPIC]
//
// Without a model path it uses $WEIR_MODEL. The model needs room for the tools' descriptions
// and the notes: 4096 tokens of context or more (a chat model such as a small Qwen or Llama;
// or, to see the mechanics, the random-weight model `weir demo` writes to
// /tmp/weir-default-model-v2.gguf). It prints each task's bounded summary and artifact
// reference, then the reviewer's full output read back from the store.
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include "weir/agents/crew.hpp"
#include "weir/agents/local_model.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/doc_index.hpp"
#include "weir/tools/registry.hpp"

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using namespace weir;

int main(int argc, char** argv) {
  const char* env = std::getenv("WEIR_MODEL");
  if (argc < 2 && !(env && *env)) {
    std::fprintf(stderr, "usage: research_crew MODEL.gguf [TOPIC]   (or set WEIR_MODEL)\n");
    return 1;
  }
  const fs::path model_path = argc >= 2 ? fs::path(argv[1]) : fs::path(env);
  const std::string topic = argc >= 3 ? argv[2] : "paged KV caches";

  // One memory budget; the KV cache and the artifacts are charged to it.
  BudgetLimits limits;
  limits.total = std::size_t{512} << 20;
  limits.category[static_cast<int>(BudgetCategory::kv_cache)] = std::size_t{64} << 20;
  MemoryBudget budget(limits);
  auto store = ArtifactStore::open({{}, std::size_t{16} << 20, 0, 100, &budget});
  if (!store) return std::fprintf(stderr, "%s\n", store.error().message.c_str()), 2;

  // The program's engines, one per model file; their KV pools are reserved from `budget`,
  // declared first so that it outlives them.
  inference::EngineRegistry engines;
  agents::LocalModelOptions mo;
  mo.budget = &budget;
  auto model = agents::LocalChatModel::open(engines, model_path, mo);
  if (!model) return std::fprintf(stderr, "%s\n", model.error().message.c_str()), 2;

  // Tools: BM25 search over the sample notes, and slices of artifacts.
  auto index = tools::DocumentIndex::build(fs::path(WEIR_SOURCE_DIR) / "samples" / "data");
  if (!index) return std::fprintf(stderr, "%s\n", index.error().message.c_str()), 2;
  auto registry = std::make_shared<tools::ToolRegistry>();
  (void)registry->add(tools::make_doc_search_tool(*index));
  (void)registry->add(tools::make_artifacts_tool(**store));

  agents::AgentSpec researcher;
  researcher.name = "researcher";
  researcher.role = "a research analyst";
  researcher.goal = "find the facts about the topic in the local documents and cite the files";
  researcher.tools = {"doc_search", "artifacts"};
  researcher.max_iter = 4;
  researcher.max_tokens_per_turn = 96;
  agents::AgentSpec writer = researcher;
  writer.name = "writer";
  writer.role = "a technical writer";
  writer.goal = "turn research notes into a short, clear explanation";
  writer.tools = {"artifacts"};
  agents::AgentSpec reviewer = writer;
  reviewer.name = "reviewer";
  reviewer.role = "a demanding reviewer";
  reviewer.goal = "check the explanation against the notes; answer APPROVED or list corrections";

  agents::CrewSpec spec;
  spec.name = "research_crew";
  spec.agents = {researcher, writer, reviewer};
  spec.tasks = {{"research",
                 "Research how {{topic}} works, with sources.",
                 "5 to 8 bullet points",
                 "researcher",
                 {},
                 false,
                 {{"", "doc_search", json::object{{"query", "{{topic}}"}, {"k", 3}}}}},
                {"write",
                 "Explain {{topic}} to engineers.",
                 "three short paragraphs",
                 "writer",
                 {},
                 false,
                 {}},
                {"review",
                 "Review the explanation of {{topic}}.",
                 "APPROVED or corrections",
                 "reviewer",
                 {"research", "write"},
                 false,
                 {}}};
  spec.limits.token_budget = 100000;

  graph::RuntimeOptions ropt;
  ropt.budget = &budget;
  ropt.artifacts = store->get();
  auto crew = agents::Crew::create(spec, *model, registry, ropt);
  if (!crew) return std::fprintf(stderr, "%s\n", crew.error().message.c_str()), 1;

  graph::GraphRuntime runtime(ropt);
  asio::io_context io;
  Result<agents::CrewResult> result = Error(Errc::cancelled, "not run");
  auto run = [&]() -> asio::awaitable<void> {
    json::object inputs{{"topic", topic}};
    graph::RunOptions options;
    auto op = (*crew)->async_kickoff(runtime, std::move(inputs), options);
    result = co_await std::move(op);
  };
  asio::co_spawn(io, run(), asio::detached);
  io.run();
  if (!result) return std::fprintf(stderr, "%s\n", result.error().message.c_str()), 2;

  for (const auto& t : result->tasks)
    std::printf("== %s (%s): %d model calls, %d tool calls, artifact %.12s (%llu bytes)\n%s\n\n",
                t.task.c_str(), t.agent.c_str(), t.loop.iterations, t.loop.tool_calls,
                t.artifact_id.c_str(), static_cast<unsigned long long>(t.output_bytes),
                t.summary.c_str());
  if (auto full = (*store)->get(result->tasks.back().artifact_id))
    std::printf("== the review, in full:\n%s\n", full->c_str());
  std::printf("\n%lld prompt and %lld generated tokens; peak KV cache %s\n",
              static_cast<long long>(result->prompt_tokens),
              static_cast<long long>(result->completion_tokens),
              format_bytes(budget.peak(BudgetCategory::kv_cache)).c_str());
  return 0;
}
