// Fan-out over HTTP (scenario 1 with a remote model): the same 3-node agent chain as `fanout`,
// but its two model calls go to `weir serve` (a Service in this process, real HTTP on
// loopback) through agents::OpenAIChatModel with max_concurrency 32. Checked: every run
// completes; the server's /metrics (scraped every 20 ms) never shows more than 32 requests
// running; no 429 reaches a run (the server counts none); RSS within the budget's target.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "gauntlet.hpp"
#include "weir/agents/openai_model.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/http/client.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/serve/service.hpp"

namespace weir::gauntlet {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace weir::graph;

namespace {

constexpr std::size_t kClientConcurrency = 32;

double r1(double v) {
  return std::round(v * 10) / 10;
}

// The sum of a metric's samples (every label set) in Prometheus text; -1 when absent.
double metric(const std::string& text, const std::string& name) {
  double sum = -1;
  for (std::size_t at = 0; (at = text.find(name, at)) != std::string::npos; at += name.size()) {
    if (at > 0 && text[at - 1] != '\n') continue;  // a HELP/TYPE line, or a longer name
    const char next = text[at + name.size()];
    if (next != ' ' && next != '{') continue;
    const auto eol = text.find('\n', at);
    const auto sp = text.rfind(' ', eol);
    sum = std::max(sum, 0.0) + std::strtod(text.c_str() + sp + 1, nullptr);
  }
  return sum;
}

json::object fanout_http(Ctx& ctx) {
  const int n = ctx.quick ? 2000 : 10000;
  const auto model_path = ctx.scratch / "fanout-http.gguf";
  if (auto st = inference::write_random_llama(model_path, inference::RandomModelShape::tiny(),
                                              inference::GgmlType::f32, 11);
      !st)
    return {{"pass", false}, {"error", st.error().message}};
  serve::ServeConfig sc;
  sc.models.push_back({"tiny", model_path});
  sc.port = 0;
  sc.max_num_seqs = 64;  // more than the client's 32: the client's fence is what holds
  sc.kv_cache_bytes = 16u << 20;
  sc.ignore_eos = true;
  auto svc = serve::Service::start(sc);
  if (!svc) return {{"pass", false}, {"error", svc.error().message}};
  if (auto r = (*svc)->wait_ready(); !r) return {{"pass", false}, {"error", r.error().message}};
  const std::string base = "http://127.0.0.1:" + std::to_string((*svc)->port());

  agents::OpenAIModelOptions mo;
  mo.base_url = base + "/v1";
  mo.model = "tiny";
  mo.max_concurrency = kClientConcurrency;
  mo.max_queued = static_cast<std::size_t>(2 * n);
  auto model = agents::OpenAIChatModel::open(mo);
  if (!model) return {{"pass", false}, {"error", model.error().message}};

  // The server's running requests, scraped from /metrics every 20 ms on a thread of its own.
  std::atomic<bool> done{false};
  std::atomic<int> max_running{0}, scrapes{0};
  std::atomic<double> rejected{0};
  std::thread scraper([&] {
    asio::io_context io;
    http::Client client;
    auto url = http::parse_url(base);
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          asio::steady_timer t(io);
          while (!done.load()) {
            // (The request is a named object: GCC 12 miscompiles an aggregate temporary here.)
            http::ClientRequest get;
            get.method = "GET";
            get.target = "/metrics";
            auto r = co_await client.async_request(*url, std::move(get));
            if (r && r->status == 200) {
              const double running = metric(r->body, "weir_serve_requests_running");
              max_running = std::max(max_running.load(), static_cast<int>(running));
              rejected = metric(r->body, "weir_serve_requests_rejected_total");
              ++scrapes;
            }
            t.expires_after(std::chrono::milliseconds(20));
            co_await t.async_wait(asio::use_awaitable);
          }
        },
        asio::detached);
    io.run();
  });

  StateGraph b;
  b.add_channel("input").add_channel("plan").add_channel("answer");
  auto call = [m = *model](std::string prompt) -> asio::awaitable<Result<std::string>> {
    agents::ChatParams p;
    p.max_tokens = 4;
    std::vector<agents::Message> msgs;
    msgs.push_back(agents::Message::user(std::move(prompt)));
    std::vector<agents::ToolSpec> no_tools;  // a local: no temporary inside a co_await (GCC 12)
    auto r = co_await m->async_chat(std::move(msgs), std::move(no_tools), p);
    if (!r) co_return std::move(r).error();
    co_return std::move(r->message.content);
  };
  b.add_async_node("planner", [=](StateView s, NodeContext&) -> asio::awaitable<Result<Update>> {
    std::string prompt = "plan: " + std::string(s.get("input").as_string());
    auto r = co_await call(std::move(prompt));
    if (!r) co_return std::move(r).error();
    co_return Update().set("plan", json::string(*r));
  });
  b.add_async_node("actor", [=](StateView s, NodeContext&) -> asio::awaitable<Result<Update>> {
    std::string prompt = "act on: " + std::string(s.get("plan").as_string());
    auto r = co_await call(std::move(prompt));
    if (!r) co_return std::move(r).error();
    co_return Update().set("answer", json::string(*r));
  });
  b.add_node("reporter", [](const StateView& s, NodeContext&) -> Result<Update> {
    return Update().set("answer",
                        s.get("answer").as_string().subview(
                            0, std::min<std::size_t>(16, s.get("answer").as_string().size())));
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
  int ok = 0, failed = 0, overloaded = 0;
  std::string first_error;
  auto one = [&](int i) -> asio::awaitable<void> {
    json::object in;
    in["input"] = "task " + std::to_string(i);
    auto r = co_await rt.async_invoke(*g, std::move(in));
    if (r) {
      ++ok;
    } else {
      if (r.error().message.find("429") != std::string::npos) ++overloaded;
      if (first_error.empty()) first_error = r.error().message;
      ++failed;
    }
  };
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) asio::co_spawn(io, one(i), asio::detached);
  io.run();
  const double s = seconds_since(t0);
  ctx.sampler.detach_all();
  done = true;
  scraper.join();
  (*svc)->shutdown(std::chrono::milliseconds(2000));

  const bool pass = ok == n && max_running.load() <= static_cast<int>(kClientConcurrency) &&
                    rejected.load() <= 0 && overloaded == 0 && scrapes.load() > 0;
  json::object out{{"pass", pass},
                   {"completed", ok},
                   {"failed", failed},
                   {"n", n},
                   {"model_calls", 2 * ok},
                   {"elapsed_s", std::round(s * 1000) / 1000},
                   {"throughput", r1(ok / s)},
                   {"throughput_unit", "runs/s"},
                   {"client_max_concurrency", static_cast<std::int64_t>(kClientConcurrency)},
                   {"server_max_num_seqs", sc.max_num_seqs},
                   {"server_max_running_seen", max_running.load()},
                   {"server_429_total", rejected.load()},
                   {"runs_failed_with_429", overloaded},
                   {"metrics_scrapes", scrapes.load()}};
  if (!first_error.empty()) out["first_error"] = first_error;
  return out;
}

}  // namespace

void register_http_scenarios() {
  register_scenario("fanout_http", fanout_http);
}

}  // namespace weir::gauntlet
