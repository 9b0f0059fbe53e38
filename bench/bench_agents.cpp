// bench_agents: research-crew runs per second with the model in process (LocalChatModel) and
// over HTTP to `weir serve` on the same machine (a Service in this process, loopback, through
// OpenAIChatModel), side by side in one run, on the same random-weight model and engine
// settings. Prints one JSON object as its last line.
//
//   build/bin/bench_agents [--instances N] [--concurrency N] [--json]
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include "bench_util.hpp"
#include "weir/agents/crew_file.hpp"
#include "weir/agents/local_model.hpp"
#include "weir/agents/openai_model.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/json_write.hpp"
#include "weir/serve/service.hpp"
#include "weir/tools/registry.hpp"

namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
namespace json = boost::json;
using namespace weir;

struct Measured {
  int completed = 0, failed = 0;
  double seconds = 0;
  std::string first_error;
};

// `instances` kickoffs of the research crew on `model`, `concurrency` admitted at once.
Measured run_crews(const agents::AgentsFile& file, std::shared_ptr<agents::ChatModel> model,
                   int instances, int concurrency) {
  Measured m;
  auto store = ArtifactStore::open({});
  if (!store) return m.first_error = store.error().message, m;
  auto tools = agents::build_tools(file, store->get());
  if (!tools) return m.first_error = tools.error().message, m;
  graph::RuntimeOptions ro;
  ro.artifacts = store->get();
  ro.max_concurrent_runs = static_cast<std::size_t>(concurrency);
  auto crew = agents::Crew::create(file.crew, std::move(model), *tools, ro);
  if (!crew) return m.first_error = crew.error().message, m;
  graph::GraphRuntime runtime(ro);
  asio::io_context io;
  auto one = [&](int i) -> asio::awaitable<void> {
    graph::RunOptions opts;
    opts.run_id = "bench-" + std::to_string(i);
    json::object in = file.inputs;
    auto r = co_await (*crew)->async_kickoff(runtime, std::move(in), opts);
    (*store)->release_owner(opts.run_id);
    if (r) {
      ++m.completed;
    } else {
      ++m.failed;
      if (m.first_error.empty()) m.first_error = r.error().to_string();
    }
  };
  const auto t0 = bench::Clock::now();
  for (int i = 0; i < instances; ++i) asio::co_spawn(io, one(i), asio::detached);
  io.run();
  m.seconds = bench::seconds_since(t0);
  return m;
}

json::object report(const Measured& m) {
  json::object o{{"completed", m.completed},
                 {"failed", m.failed},
                 {"seconds", std::round(m.seconds * 1000) / 1000},
                 {"runs_per_s", m.seconds > 0 ? std::round(m.completed / m.seconds * 10) / 10 : 0}};
  if (!m.first_error.empty()) o["first_error"] = m.first_error;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  int instances = 64, concurrency = 16;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--instances") && i + 1 < argc)
      instances = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--concurrency") && i + 1 < argc)
      concurrency = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--json") != 0)
      return std::fprintf(stderr,
                          "usage: bench_agents [--instances N] [--concurrency N] [--json]\n"),
             2;
  }
  const fs::path crew_path = fs::path(WEIR_SOURCE_DIR) / "samples" / "crews" / "research_crew.json";
  auto file = agents::load_agents_file(crew_path);
  if (!file) return std::fprintf(stderr, "bench_agents: %s\n", file.error().message.c_str()), 1;
  // weir's default demo model: random weights, 4 layers, dim 256, q8_0.
  const fs::path dir = fs::temp_directory_path() / "weir-bench-models";
  fs::create_directories(dir);
  const fs::path model_path = dir / "bench-agents-q8_0.gguf";
  if (!fs::exists(model_path)) {
    inference::RandomModelShape shape{256, 768, 4, 8, 8, 4096, 4096};
    if (auto st = inference::write_random_llama(model_path, shape, inference::GgmlType::q8_0, 7);
        !st)
      return std::fprintf(stderr, "bench_agents: %s\n", st.error().message.c_str()), 1;
  }
  constexpr std::int32_t kSeqs = 64;
  constexpr std::int64_t kContext = 4096;
  constexpr std::size_t kKvBytes = 96u << 20;

  // In process.
  Measured local;
  {
    inference::EngineRegistry engines;  // gone (and its engine with it) before the server starts
    agents::LocalModelOptions mo;
    mo.max_num_seqs = kSeqs;
    mo.max_model_len = kContext;
    mo.kv_cache_bytes = kKvBytes;
    mo.ignore_eog = true;
    auto m = agents::LocalChatModel::open(engines, model_path, mo);
    if (!m) return std::fprintf(stderr, "bench_agents: %s\n", m.error().message.c_str()), 1;
    std::fprintf(stderr, "bench_agents: %d research crews in process ...\n", instances);
    local = run_crews(*file, *m, instances, concurrency);
  }

  // Over HTTP to weir serve (same model, same engine settings).
  Measured remote;
  {
    serve::ServeConfig sc;
    sc.models.push_back({"bench", model_path});
    sc.port = 0;
    sc.max_num_seqs = kSeqs;
    sc.max_model_len = kContext;
    sc.kv_cache_bytes = kKvBytes;
    sc.ignore_eos = true;
    auto svc = serve::Service::start(sc);
    if (!svc) return std::fprintf(stderr, "bench_agents: %s\n", svc.error().message.c_str()), 1;
    if (auto r = (*svc)->wait_ready(); !r)
      return std::fprintf(stderr, "bench_agents: %s\n", r.error().message.c_str()), 1;
    agents::OpenAIModelOptions o;
    o.base_url = "http://127.0.0.1:" + std::to_string((*svc)->port()) + "/v1";
    o.model = "bench";
    o.max_concurrency = kSeqs;
    o.context_length = kContext;
    auto m = agents::OpenAIChatModel::open(o);
    if (!m) return std::fprintf(stderr, "bench_agents: %s\n", m.error().message.c_str()), 1;
    std::fprintf(stderr, "bench_agents: %d research crews over HTTP to weir serve ...\n",
                 instances);
    remote = run_crews(*file, *m, instances, concurrency);
    (*svc)->shutdown(std::chrono::milliseconds(2000));
  }

  json::object out{
      {"bench", "agents"},
      {"crew", "samples/crews/research_crew.json"},
      {"model", "random weights, dim 256, 4 layers, q8_0"},
      {"instances", instances},
      {"concurrency", concurrency},
      {"in_process", report(local)},
      {"over_http", report(remote)},
      {"http_vs_in_process", local.seconds > 0 && remote.seconds > 0
                                 ? std::round((remote.completed / remote.seconds) /
                                              (local.completed / local.seconds) * 1000) /
                                       1000
                                 : 0.0},
      {"peak_rss_mb", std::round(bench::peak_rss_mb() * 10) / 10}};
  std::printf("%s\n", to_json_text(out).c_str());
  return local.failed || remote.failed ? 1 : 0;
}
