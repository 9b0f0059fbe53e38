// bench_serve: weir serve over loopback. Closed loops of streaming clients (64-token prompts,
// 64 new tokens, random 15M model) at concurrency 1, 8, 32, 64: tokens/s, time to first token,
// inter-token latency, SSE events per request (one per token when tokens stream); the same
// engine driven in-process at 32 for the HTTP overhead, and at one client for the time to first
// token side by side with the server's (target: at most 1.2 times the in-process one); and an
// overload burst of 10x the admission queue at once. Prints one JSON object (--json).
//
//   build/bin/bench_serve --json [--quick]
#include <atomic>
#include <cstring>
#include <future>
#include <thread>

#include <boost/json.hpp>

#include "../tests/serve/http_client.hpp"
#include "bench_util.hpp"
#include "weir/inference/runner.hpp"
#include "weir/serve/service.hpp"

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace weir;
using bench::Clock;

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

std::string prompt_body(int seed, int max_tokens) {
  json::array p;
  p.push_back(1);
  for (int i = 1; i < 64; ++i) p.push_back(100 + (seed * 131 + i * 17) % 20000);
  return json::serialize(json::object{
      {"prompt", p}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", true}});
}

struct Level {
  double tok_s = 0;
  std::vector<double> ttft_ms, itl_ms;
  long requests = 0, events = 0;  // SSE events with tokens, over all requests
};

Level closed_loop(std::uint16_t port, int clients, double seconds) {
  std::atomic<long> tokens{0}, requests{0}, events{0};
  std::vector<std::vector<double>> ttft(clients), itl(clients);
  const auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int c = 0; c < clients; ++c) {
    ts.emplace_back([&, c] {
      int k = 0;
      while (bench::seconds_since(t0) < seconds) {
        testing_http::Conn conn(port);
        auto start = Clock::now();
        if (!conn.request("POST", "/v1/completions", prompt_body(c * 1000 + k++, 64))) return;
        testing_http::Reply head;
        if (!conn.read_head(head) || head.status != 200) return;
        auto last = start;
        bool first = true;
        for (std::string ch; !(ch = conn.next_chunk()).empty();) {
          if (ch.find("\"text\"") == std::string::npos) continue;
          auto now = Clock::now();
          int n = 0;  // events in this chunk: one per token when tokens stream
          for (std::size_t at = 0; (at = ch.find("data: {", at)) != std::string::npos; ++at) ++n;
          events += n;
          if (first) {
            ttft[c].push_back(std::chrono::duration<double, std::milli>(now - start).count());
            first = false;
          } else if (n > 0) {
            itl[c].push_back(std::chrono::duration<double, std::milli>(now - last).count() / n);
          }
          last = now;
        }
        tokens += 64;
        ++requests;
      }
    });
  }
  for (auto& t : ts) t.join();
  Level l;
  l.tok_s = static_cast<double>(tokens) / bench::seconds_since(t0);
  l.requests = requests;
  l.events = events;
  for (int c = 0; c < clients; ++c) {
    l.ttft_ms.insert(l.ttft_ms.end(), ttft[c].begin(), ttft[c].end());
    l.itl_ms.insert(l.itl_ms.end(), itl[c].begin(), itl[c].end());
  }
  return l;
}

std::unique_ptr<inference::Engine> engine_like_the_server(const fs::path& path) {
  auto model = inference::Model::load(path);
  auto runner = inference::make_runner(*model, inference::Device::cpu, 0);
  inference::EngineConfig cfg;
  cfg.max_num_seqs = 64;
  cfg.kv_cache_bytes = 256u << 20;
  cfg.max_model_len = 1024;
  return std::move(*inference::Engine::create(std::move(runner->runner), cfg));
}

inference::GenerateRequest request_of(int seed) {
  auto body = json::parse(prompt_body(seed, 64));
  inference::GenerateRequest rq;
  for (const auto& t : body.at("prompt").as_array())
    rq.prompt.push_back(static_cast<int>(t.as_int64()));
  rq.max_new_tokens = 64;
  return rq;
}

// One client in-process, one request after the other: the time from submit to the first
// sampled token, for the server's to be compared with (its prefill, nothing else).
std::vector<double> in_process_ttft(const fs::path& path, double seconds) {
  auto engine = engine_like_the_server(path);
  std::vector<double> ttft;
  const auto t0 = Clock::now();
  for (int k = 0; bench::seconds_since(t0) < seconds; ++k) {
    std::promise<void> done;
    std::atomic<bool> first{true};
    const auto start = Clock::now();
    double ms = 0;
    inference::RequestCallbacks cb;
    cb.on_token = [&](std::int32_t) {
      if (first.exchange(false))
        ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    };
    cb.on_done = [&](Result<inference::GenerateResult>) { done.set_value(); };
    engine->submit(request_of(k), std::move(cb));
    done.get_future().wait();
    ttft.push_back(ms);
  }
  return ttft;
}

// The same work in-process: `clients` requests always in flight on an engine of the same
// settings.
double in_process(const fs::path& path, int clients, double seconds) {
  auto engine = engine_like_the_server(path);
  std::atomic<long> tokens{0};
  std::atomic<int> live{0};
  const auto t0 = Clock::now();
  std::function<void(int)> submit = [&](int k) {
    inference::GenerateRequest rq = request_of(k);
    ++live;
    engine->submit(rq, {{}, [&, k](Result<inference::GenerateResult> r) {
                          if (r) tokens += static_cast<long>(r->tokens.size());
                          if (bench::seconds_since(t0) < seconds) submit(k + 1000);
                          --live;
                        }});
  };
  for (int c = 0; c < clients; ++c) submit(c);
  while (live > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return static_cast<double>(tokens) / bench::seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) quick |= std::strcmp(argv[i], "--quick") == 0;
  const double secs = quick ? 2.0 : 10.0;
  const fs::path dir = fs::temp_directory_path() / "weir-bench";
  bench::model_15m(inference::GgmlType::f32, dir);  // writes the file once
  const fs::path path = dir / (std::string("weir-15m-") +
                               inference::ggml_type_name(inference::GgmlType::f32) + ".gguf");
  serve::ServeConfig c;
  c.models.push_back({"15m", path});
  c.port = 0;
  c.ignore_eos = true;
  c.max_num_seqs = 64;
  c.max_model_len = 1024;
  c.kv_cache_bytes = 256u << 20;
  json::object tok_s, ttft50, ttft99, itl50, itl99, events_per_request;
  double http32 = 0;
  {
    auto svc = serve::Service::start(c);
    if (!svc || !(*svc)->wait_ready()) {
      std::fprintf(stderr, "bench_serve: the server did not start\n");
      return 1;
    }
    for (int conc : {1, 8, 32, 64}) {
      auto l = closed_loop((*svc)->port(), conc, secs);
      const std::string k = std::to_string(conc);
      tok_s[k] = l.tok_s;
      ttft50[k] = pct(l.ttft_ms, 0.5);
      ttft99[k] = pct(l.ttft_ms, 0.99);
      itl50[k] = pct(l.itl_ms, 0.5);
      itl99[k] = pct(l.itl_ms, 0.99);
      events_per_request[k] =
          l.requests ? static_cast<double>(l.events) / static_cast<double>(l.requests) : 0.0;
      if (conc == 32) http32 = l.tok_s;
      std::fprintf(stderr, "concurrency %d: %.0f tok/s\n", conc, l.tok_s);
    }
    (*svc)->shutdown(std::chrono::milliseconds(0));
  }
  const double inproc32 = in_process(path, 32, secs);
  const auto inproc_ttft = in_process_ttft(path, secs);
  const double http_ttft1 = ttft50["1"].as_double();
  const double inproc_ttft1 = pct(inproc_ttft, 0.5);
  // Overload: 10x the queue at once against a small admission window.
  serve::ServeConfig o = c;
  o.max_num_seqs = 8;
  o.max_queued_requests = 16;
  long submitted = 160, completed = 0, rejected = 0, failed = 0;
  {
    auto svc = serve::Service::start(o);
    if (!svc || !(*svc)->wait_ready()) return 1;
    std::atomic<long> ok{0}, r429{0}, bad{0};
    std::vector<std::thread> ts;
    for (long i = 0; i < submitted; ++i) {
      ts.emplace_back([&, i] {
        auto body = prompt_body(static_cast<int>(i), 16);
        auto r = testing_http::call((*svc)->port(), "POST", "/v1/completions", body);
        if (r.status == 200 && r.body.find("[DONE]") != std::string::npos)
          ++ok;
        else if (r.status == 429)
          ++r429;
        else
          ++bad;
      });
    }
    for (auto& t : ts) t.join();
    completed = ok, rejected = r429, failed = bad;
    (*svc)->shutdown(std::chrono::milliseconds(0));
  }
  json::object out{{"bench", "serve"},
                   {"model", "15m random f32"},
                   {"quick", quick},
                   {"seconds_per_level", secs},
                   {"tok_s", tok_s},
                   {"ttft_ms_p50", ttft50},
                   {"ttft_ms_p99", ttft99},
                   {"itl_ms_p50", itl50},
                   {"itl_ms_p99", itl99},
                   {"events_per_request", events_per_request},
                   {"inprocess_ttft_ms_p50_1", inproc_ttft1},
                   {"http_vs_inprocess_ttft_1", inproc_ttft1 > 0 ? http_ttft1 / inproc_ttft1 : 0.0},
                   {"inprocess_tok_s_32", inproc32},
                   {"http_vs_inprocess_tok_s_32", inproc32 > 0 ? http32 / inproc32 : 0.0},
                   {"overload",
                    {{"submitted", submitted},
                     {"completed", completed},
                     {"rejected_429", rejected},
                     {"failed", failed},
                     {"peak_rss_mb", bench::peak_rss_mb()}}}};
  std::printf("%s\n", json::serialize(out).c_str());
  return failed == 0 ? 0 : 2;
}
