// Tool scenarios of the OOM gauntlet, compiled only when weir::tools is built (CMakeLists.txt):
// giant tool outputs (4) and oversized ingestion (7). Without weir::tools,
// scenario_tools_absent.cpp reports them skipped.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "gauntlet.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/tools/doc_index.hpp"
#include "weir/tools/registry.hpp"

namespace weir::gauntlet {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace weir::graph;

namespace {

double r1(double v) {
  return std::round(v * 10) / 10;
}
double r3(double v) {
  return std::round(v * 1000) / 1000;
}

// Hits of a search, whether it returns a container or a Result of one.
template <class T>
std::size_t hit_count(const T& h) {
  if constexpr (requires {
                  h.has_value();
                  h->size();
                })
    return h ? h->size() : 0;
  else
    return h.size();
}

// 4. A tool returning 50 MB, called 100 times concurrently (each call in its own graph run).
// The output goes to the artifact store, the model (state) sees at most max_output_bytes, and
// each run's state stays under its cap.
json::object giant_tool_outputs(Ctx& ctx) {
  const int calls = ctx.quick ? 20 : 100;
  const std::size_t out_bytes = ctx.quick ? (std::size_t{10} << 20) : (std::size_t{50} << 20);
  const std::uint64_t max_output = 4096;
  const std::size_t state_cap = std::size_t{1} << 20;
  auto store = ArtifactStore::open(
      {ctx.scratch / "artifacts", std::size_t{16} << 20, std::size_t{8} << 30, 200, &ctx.budget});
  if (!store) return {{"pass", false}, {"error", store.error().message}};
  tools::ToolRegistry reg;
  boost::json::object schema{
      {"type", "object"},
      {"properties", boost::json::object{{"i", boost::json::object{{"type", "integer"}}}}}};
  auto fn = [out_bytes](boost::json::object args,
                        const tools::ToolContext&) -> asio::awaitable<Result<std::string>> {
    std::string s = "dump " + std::to_string(args["i"].as_int64()) + ": ";  // distinct outputs
    s.resize(out_bytes, 'y');
    co_return s;
  };
  tools::ToolOptions topts;
  topts.max_concurrency = 2;  // at most two 50 MB outputs exist at once
  // 100 calls queue for 2 slots, each slot held while 50 MB is hashed and spilled: the
  // scenario is about memory, so the timeout covers the whole queue.
  topts.timeout = std::chrono::minutes(10);
  topts.max_output_bytes = max_output;
  if (auto st =
          reg.add(tools::make_async_tool("dump", "returns a giant output", schema, fn, topts));
      !st)
    return {{"pass", false}, {"error", st.error().message}};
  StateGraph b;
  b.add_channel("i").add_channel("observation").add_channel("artifact");
  std::uint64_t max_seen = 0;
  int as_artifact = 0;
  b.add_async_node("act", [&](StateView s, NodeContext& c) -> asio::awaitable<Result<Update>> {
    boost::json::object args;
    args["i"] = s.get("i");
    tools::ToolContext tc;
    tc.artifacts = c.artifacts();
    tc.owner = std::string(c.run_id());
    auto r = co_await reg.async_call("dump", std::move(args), std::move(tc));
    if (!r) co_return std::move(r).error();
    max_seen = std::max<std::uint64_t>(max_seen, r->content.size());
    Update u;
    u.set("observation", json::string(r->content));
    if (r->artifact_id) {
      ++as_artifact;
      u.set("artifact", json::string(*r->artifact_id));
    }
    co_return u;
  });
  b.add_edge("START", "act").add_edge("act", "END");
  auto g = b.compile({.inline_limit = 8192, .max_state_bytes = state_cap});
  if (!g) return {{"pass", false}, {"error", g.error().message}};
  GraphRuntime rt({.budget = &ctx.budget, .artifacts = store->get()});
  ctx.sampler.attach(&rt);
  ctx.sampler.attach(store->get());
  asio::io_context io;
  int ok = 0;
  std::size_t peak_state = 0;
  std::string error;
  auto one = [&](int i) -> asio::awaitable<void> {
    json::object in;
    in["i"] = i;
    RunOptions o;
    o.run_id = "dump-" + std::to_string(i);
    auto r = co_await rt.async_invoke(*g, std::move(in), std::move(o));
    if (r) {
      ++ok;
      peak_state = std::max(peak_state, r->peak_state_bytes);
    } else if (error.empty()) {
      error = r.error().message;
    }
    (*store)->release_owner("dump-" + std::to_string(i));  // the run is done with its output
  };
  const auto t0 = Clock::now();
  for (int i = 0; i < calls; ++i) asio::co_spawn(io, one(i), asio::detached);
  io.run();
  const double secs = seconds_since(t0);
  ctx.sampler.detach_all();
  // The model sees the output's head (at most max_output_bytes) plus a short note naming the
  // artifact: allow the note.
  const std::uint64_t note_allowance = 512;
  json::object out{{"pass", ok == calls && max_seen <= max_output + note_allowance &&
                                as_artifact == calls && peak_state <= state_cap},
                   {"completed", ok},
                   {"calls", calls},
                   {"output_mb", r1(static_cast<double>(out_bytes) / 1048576.0)},
                   {"max_output_bytes", max_output},
                   {"max_content_seen_bytes", max_seen},
                   {"outputs_as_artifacts", as_artifact},
                   {"peak_state_bytes", peak_state},
                   {"state_cap_bytes", state_cap},
                   {"elapsed_s", r3(secs)},
                   {"throughput", r1(calls * static_cast<double>(out_bytes) / 1048576.0 / secs)},
                   {"throughput_unit", "MB of tool output/s"}};
  if (!error.empty()) out["error"] = error;
  return out;
}

// 7. 10,000 documents indexed by the document-search tool; memory stays bounded (the index
// streams the folder in chunks) instead of holding the corpus.
json::object ingestion(Ctx& ctx) {
  const int n = ctx.quick ? 1000 : 10000;
  const auto dir = ctx.scratch / "corpus";
  fs::create_directories(dir);
  std::mt19937 rng(7);
  static const char* words[] = {"weir",  "river", "memory", "budget", "graph",  "agent",
                                "token", "cache", "block",  "stream", "index",  "search",
                                "water", "level", "fence",  "queue",  "signal", "artifact"};
  std::uint64_t corpus = 0;
  for (int i = 0; i < n; ++i) {
    std::string text = "document " + std::to_string(i) + "\n";
    const std::size_t len = 4096 + rng() % 16384;
    while (text.size() < len) {
      text += words[rng() % std::size(words)];
      text += rng() % 12 == 0 ? ".\n" : " ";
    }
    std::ofstream(dir / ("doc" + std::to_string(i) + ".txt")) << text;
    corpus += text.size();
  }
  trim_heap();
  const double before = rss_mb();
  const auto t0 = Clock::now();
  auto idx = tools::DocumentIndex::build(dir, tools::DocIndexOptions{});
  const double secs = seconds_since(t0);
  if (!idx) return {{"pass", false}, {"error", idx.error().message}};
  double peak = before;
  for (const auto& s : ctx.sampler.samples()) peak = std::max(peak, s.rss_mb);
  const double growth = peak - before;
  const double index_mb = static_cast<double>((*idx)->memory_bytes()) / 1048576.0;
  const double corpus_mb = static_cast<double>(corpus) / 1048576.0;
  auto hits = (*idx)->search("memory budget", 5);
  const std::size_t found = hit_count(hits);
  const bool bounded = growth <= index_mb + 64.0 && growth < corpus_mb;
  return {{"pass", static_cast<int>((*idx)->doc_count()) == n && found > 0 && bounded},
          {"completed", static_cast<std::int64_t>((*idx)->doc_count())},
          {"documents", n},
          {"corpus_mb", r1(corpus_mb)},
          {"index_mb", r1(index_mb)},
          {"rss_growth_mb", r1(growth)},
          {"search_hits", found},
          {"elapsed_s", r3(secs)},
          {"throughput", r1(n / secs)},
          {"throughput_unit", "documents/s"}};
}

}  // namespace

void register_tool_scenarios() {
  register_scenario("giant_tool_outputs", giant_tool_outputs);
  register_scenario("ingestion", ingestion);
}

}  // namespace weir::gauntlet
