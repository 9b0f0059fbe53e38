// Graph scenarios of the OOM gauntlet: fan-out without backpressure (1), growing chat history
// (2), graph state as a dump truck (5), runaway loops (6). The stub model is an async node that
// returns a fixed-size reply after a fixed delay, the same as the LangGraph.js peer's
// (peer/scenarios.mjs: keep the parameters in step).
#include <algorithm>
#include <cstdio>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "gauntlet.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/runtime/artifact_store.hpp"

namespace weir::gauntlet {

namespace asio = boost::asio;
using namespace weir::graph;

namespace {

asio::awaitable<void> sleep_ms(int ms) {
  asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(ms));
  co_await t.async_wait(asio::use_awaitable);
}

// The stub model: `bytes` of reply after `delay_ms`.
asio::awaitable<std::string> stub_model(int delay_ms, std::size_t bytes) {
  co_await sleep_ms(delay_ms);
  co_return std::string(bytes, 'x');
}

double r1(double v) {
  return std::round(v * 10) / 10;
}
double r3(double v) {
  return std::round(v * 1000) / 1000;
}

// 1. 10,000 invocations of a 3-node agent chain submitted at once. Admission (max concurrent
// runs + a bounded queue) is the backpressure the peer lacks.
json::object fanout(Ctx& ctx) {
  const int n = ctx.quick ? 2000 : 10000, delay = 5;
  const std::size_t bytes = 2048;
  StateGraph b;
  b.add_channel("input").add_channel("plan").add_channel("answer");
  b.add_async_node("planner", [=](StateView s, NodeContext&) -> asio::awaitable<Result<Update>> {
    co_return Update().set("plan", json::string(co_await stub_model(delay, bytes)));
  });
  b.add_async_node("actor", [=](StateView s, NodeContext&) -> asio::awaitable<Result<Update>> {
    co_return Update().set("answer", json::string(co_await stub_model(delay, bytes)));
  });
  b.add_node("reporter", [](const StateView& s, NodeContext&) -> Result<Update> {
    return Update().set("answer", s.get("answer").as_string().subview(0, 16));
  });
  b.add_edge("START", "planner").add_edge("planner", "actor").add_edge("actor", "reporter");
  b.add_edge("reporter", "END");
  auto g = b.compile();
  if (!g) return {{"pass", false}, {"error", g.error().message}};
  GraphRuntime rt({.budget = &ctx.budget,
                   .artifacts = nullptr,
                   .max_concurrent_runs = 256,
                   .max_queued_runs = static_cast<std::size_t>(n)});
  ctx.sampler.attach(&rt);
  asio::io_context io;
  int ok = 0, failed = 0;
  std::string first_error;
  auto one = [&](int i) -> asio::awaitable<void> {
    json::object in;
    in["input"] = "task " + std::to_string(i);
    auto r = co_await rt.async_invoke(*g, std::move(in));
    if (r && r->state.at("answer").as_string().size() == 16) {
      ++ok;
    } else {
      if (first_error.empty()) first_error = r ? "wrong answer" : r.error().message;
      ++failed;
    }
  };
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) asio::co_spawn(io, one(i), asio::detached);
  io.run();
  const double s = seconds_since(t0);
  ctx.sampler.detach_all();
  json::object out{
      {"pass", ok == n},
      {"completed", ok},
      {"failed", failed},
      {"n", n},
      {"elapsed_s", r3(s)},
      {"throughput", r1(ok / s)},
      {"throughput_unit", "runs/s"},
      {"max_concurrent_runs", 256},
      {"peak_state_mb",
       r3(static_cast<double>(ctx.budget.peak(BudgetCategory::run_state)) / 1048576.0)}};
  if (!first_error.empty()) out["first_error"] = first_error;
  return out;
}

// Rough tokens of a prompt: 4 bytes per token.
std::int64_t approx_tokens(std::size_t bytes) {
  return static_cast<std::int64_t>((bytes + 3) / 4);
}

// 2. One conversation of 1,000 turns, checkpointed per superstep. The messages channel is a
// window of 20 messages, so the prompt (the whole window) stays bounded.
json::object history(Ctx& ctx) {
  const int turns = ctx.quick ? 200 : 1000, delay = 1, window = 20;
  const std::size_t bytes = 512;
  // Window: 20 messages of at most 16 + 512 bytes of content, plus JSON framing (role, and the
  // id the messages reducer gives a message that has none: "id":"msg-<16 hex>").
  const std::int64_t window_tokens = approx_tokens(window * (bytes + 96));
  std::int64_t max_prompt_tokens = 0;
  StateGraph b;
  b.add_channel("messages", {.reducer = ReducerKind::messages, .max_messages = window});
  b.add_async_node("model", [&](StateView s, NodeContext& c) -> asio::awaitable<Result<Update>> {
    const std::string prompt = json::serialize(s.get("messages"));  // the window is the prompt
    const auto tokens = approx_tokens(prompt.size());
    max_prompt_tokens = std::max(max_prompt_tokens, tokens);
    std::string reply = co_await stub_model(delay, bytes);
    co_return Update().set("messages", json::object{{"role", "assistant"}, {"content", reply}});
  });
  b.add_edge("START", "model").add_edge("model", "END");
  auto g = b.compile();
  if (!g) return {{"pass", false}, {"error", g.error().message}};
  auto cp = make_memory_checkpointer();
  GraphRuntime rt({.budget = &ctx.budget});
  ctx.sampler.attach(&rt);
  asio::io_context io;
  std::vector<double> lat;
  std::string error;
  auto chat = [&]() -> asio::awaitable<void> {
    for (int t = 1; t <= turns; ++t) {
      const auto s = Clock::now();
      json::object in;
      in["messages"] =
          json::object{{"role", "user"},
                       {"content", "turn " + std::to_string(t) + ": " + std::string(bytes, 'x')}};
      RunOptions o;
      o.checkpointer = cp.get();
      o.thread_id = "chat";
      auto r = co_await rt.async_invoke(*g, std::move(in), std::move(o));
      if (!r) {
        error = r.error().message;
        co_return;
      }
      lat.push_back(seconds_since(s) * 1000.0);
    }
  };
  const auto t0 = Clock::now();
  asio::co_spawn(io, chat(), asio::detached);
  io.run();
  const double secs = seconds_since(t0);
  ctx.sampler.detach_all();
  auto avg = [&](int a, int z) {
    double sum = 0;
    int k = 0;
    for (int i = std::max(0, a); i < std::min<int>(z, static_cast<int>(lat.size())); ++i)
      sum += lat[i], ++k;
    return k ? sum / k : 0.0;
  };
  // The latency of turn N: the median of the 10 turns around it (turns 6..15, the last 10), so
  // one scheduler hiccup on a shared machine does not decide the verdict; the means are reported.
  auto median = [&](int a, int z) {
    std::vector<double> v(lat.begin() + std::max(0, a),
                          lat.begin() + std::min<int>(z, static_cast<int>(lat.size())));
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  const double l10 = median(5, 15), llast = median(turns - 10, turns);
  const double ratio = l10 > 0 ? llast / l10 : 0.0;
  const double mean_ratio = avg(5, 15) > 0 ? avg(turns - 10, turns) / avg(5, 15) : 0.0;
  std::size_t last_cp_bytes = 0;
  if (auto latest = cp->latest("chat"); latest && *latest)
    last_cp_bytes = json::serialize((*latest)->writes).size();
  json::object out{{"pass", error.empty() && static_cast<int>(lat.size()) == turns &&
                                max_prompt_tokens <= window_tokens && ratio <= 1.5},
                   {"completed", static_cast<std::int64_t>(lat.size())},
                   {"turns", turns},
                   {"elapsed_s", r3(secs)},
                   {"throughput", r1(lat.size() / secs)},
                   {"throughput_unit", "turns/s"},
                   {"max_prompt_tokens", max_prompt_tokens},
                   {"window_tokens", window_tokens},
                   {"turn10_ms", r3(l10)},
                   {"last_turn_ms", r3(llast)},
                   {"latency_ratio_last_vs_10", r3(ratio)},
                   {"latency_ratio_last_vs_10_means", r3(mean_ratio)},
                   {"last_checkpoint_bytes", last_cp_bytes}};
  if (!error.empty()) out["error"] = error;
  return out;
}

// 5. A retrieval node returns 20 documents of 200 KB on each of 100 turns. Each document moves
// to the artifact store as it enters state (over inline_limit); state keeps the references of
// the latest retrieval (an append channel capped at 20 items), the checkpoints stay small.
json::object dumptruck(Ctx& ctx) {
  const int turns = ctx.quick ? 10 : 100, docs = 20;
  const std::size_t doc_bytes = 204800;
  auto store = ArtifactStore::open(
      {ctx.scratch / "artifacts", std::size_t{16} << 20, std::size_t{4} << 30, 200, &ctx.budget});
  if (!store) return {{"pass", false}, {"error", store.error().message}};
  StateGraph b;
  b.add_channel("query").add_channel("answer");
  b.add_channel("documents", {.reducer = ReducerKind::append, .max_items = docs});
  b.add_node("retrieve", [&](const StateView& s, NodeContext&) -> Result<Update> {
    Update u;  // one write per document: each is offloaded on its own
    for (int i = 0; i < docs; ++i) {
      std::string d =
          "doc " + std::string(s.get("query").as_string()) + "-" + std::to_string(i) + ": ";
      d.resize(doc_bytes, 'x');
      u.set("documents", json::string(d));
    }
    return u;
  });
  std::size_t fetched = 0;
  b.add_node("respond", [&](const StateView& s, NodeContext& c) -> Result<Update> {
    const auto& d = s.get("documents").as_array();
    for (const auto& ref : d) {  // nodes read what they need, on demand
      auto head = c.fetch(ref, 0, 1024);
      if (!head) return std::move(head).error();
      fetched += head->size();
    }
    return Update().set("answer", json::string("read " + std::to_string(d.size()) + " documents"));
  });
  b.add_edge("START", "retrieve").add_edge("retrieve", "respond").add_edge("respond", "END");
  auto g = b.compile();
  if (!g) return {{"pass", false}, {"error", g.error().message}};
  auto cp = make_memory_checkpointer();
  GraphRuntime rt({.budget = &ctx.budget, .artifacts = store->get()});
  ctx.sampler.attach(&rt);
  ctx.sampler.attach(store->get());
  asio::io_context io;
  std::string error;
  int done = 0;
  std::size_t max_cp = 0, offloaded = 0;
  auto loop = [&]() -> asio::awaitable<void> {
    for (int t = 0; t < turns; ++t) {
      json::object in;
      in["query"] = "q" + std::to_string(t);
      RunOptions o;
      o.checkpointer = cp.get();
      o.thread_id = "rag";
      auto r = co_await rt.async_invoke(*g, std::move(in), std::move(o));
      if (!r) {
        error = r.error().message;
        co_return;
      }
      offloaded += r->offloaded;
      ++done;
    }
  };
  const auto t0 = Clock::now();
  asio::co_spawn(io, loop(), asio::detached);
  io.run();
  const double secs = seconds_since(t0);
  ctx.sampler.detach_all();
  if (auto all = cp->list("rag", 100000); all) {
    for (const auto& c : *all) {
      json::object whole{{"writes", c.writes}, {"pending", c.pending}, {"metadata", c.metadata}};
      max_cp = std::max(max_cp, json::serialize(whole).size());
    }
  }
  auto st = (*store)->stats();
  json::object out{
      {"pass", error.empty() && done == turns && max_cp <= 64 * 1024 &&
                   offloaded == static_cast<std::size_t>(turns * docs)},
      {"completed", done},
      {"turns", turns},
      {"elapsed_s", r3(secs)},
      {"throughput", r1(done / secs)},
      {"throughput_unit", "turns/s"},
      {"max_checkpoint_bytes", max_cp},
      {"documents_offloaded", offloaded},
      {"bytes_fetched_by_nodes", fetched},
      {"artifact_memory_mb", r1(st.memory_bytes / 1048576.0)},
      {"artifact_disk_mb", r1(st.disk_bytes / 1048576.0)},
      {"peak_state_mb",
       r3(static_cast<double>(ctx.budget.peak(BudgetCategory::run_state)) / 1048576.0)}};
  if (!error.empty()) out["error"] = error;
  return out;
}

// 6. 1,000 concurrent runs of a graph whose conditional edge always routes back. Each ends at
// recursion_limit with step_limit_exceeded; afterwards RSS is back within 5% of the baseline
// (taken after a warm-up round, so allocator arenas and thread stacks are in it).
json::object runaway_loops(Ctx& ctx) {
  const int n = 1000;
  StateGraph b;
  b.add_channel("notes", {.reducer = ReducerKind::append});
  b.add_async_node("think", [](StateView s, NodeContext&) -> asio::awaitable<Result<Update>> {
    co_await sleep_ms(1);
    co_return Update().set("notes", json::string(std::string(1000, 'n')));
  });
  b.add_edge("START", "think");
  b.add_conditional_edges("think",
                          [](const StateView&) { return std::vector<std::string>{"think"}; },
                          {"think", "END"});
  auto g = b.compile({.recursion_limit = 25});
  if (!g) return {{"pass", false}, {"error", g.error().message}};
  GraphRuntime rt({.budget = &ctx.budget, .max_concurrent_runs = 2000});
  ctx.sampler.attach(&rt);
  int typed = 0, other = 0;
  std::string message;
  auto round = [&](bool count) {
    asio::io_context io;
    auto one = [&]() -> asio::awaitable<void> {
      json::object input;  // a local: no temporary inside a co_await (GCC 12)
      auto r = co_await rt.async_invoke(*g, std::move(input));
      if (!count) co_return;
      if (!r && r.error().is(Errc::step_limit_exceeded)) {
        ++typed;
        if (message.empty()) message = r.error().message;
      } else {
        ++other;
      }
    };
    for (int i = 0; i < n; ++i) asio::co_spawn(io, one(), asio::detached);
    io.run();
  };
  round(false);  // warm-up
  trim_heap();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double baseline = rss_mb();
  const auto t0 = Clock::now();
  round(true);
  const double secs = seconds_since(t0);
  const double peak_during = ctx.sampler.samples().empty() ? 0.0 : [&] {
    double p = 0;
    for (const auto& s : ctx.sampler.samples()) p = std::max(p, s.rss_mb);
    return p;
  }();
  trim_heap();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double after = rss_mb();
  ctx.sampler.detach_all();
  const double diff_pct = 100.0 * (after - baseline) / baseline;
  return {{"pass", typed == n && other == 0 && std::abs(diff_pct) <= 5.0 &&
                       ctx.budget.used(BudgetCategory::run_state) == 0},
          {"completed", typed},
          {"untyped_or_finished", other},
          {"n", n},
          {"elapsed_s", r3(secs)},
          {"throughput", r1(n / secs)},
          {"throughput_unit", "runs/s (each stopped at its limit)"},
          {"typed_error", "step_limit_exceeded"},
          {"error_message", message},
          {"baseline_mb", r1(baseline)},
          {"peak_during_mb", r1(peak_during)},
          {"after_mb", r1(after)},
          {"after_vs_baseline_pct", r3(diff_pct)},
          {"state_bytes_after", ctx.budget.used(BudgetCategory::run_state)}};
}

}  // namespace

void register_graph_scenarios() {
  register_scenario("fanout", fanout);
  register_scenario("history", history);
  register_scenario("dumptruck", dumptruck);
  register_scenario("runaway_loops", runaway_loops);
}

}  // namespace weir::gauntlet
