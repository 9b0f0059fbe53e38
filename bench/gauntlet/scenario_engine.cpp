// Engine scenarios of the OOM gauntlet: model loaded per request (3), KV overflow on long
// requests (8), batch size misconfiguration (9), fragmentation over time (10). The model is a
// random-weight LLaMA written by write_random_llama (no download): a tiny shape for --quick, a
// small one for the full run.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <random>

#include "gauntlet.hpp"
#include "weir/inference/engine.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/inference/model.hpp"
#include "weir/inference/runner.hpp"

namespace weir::gauntlet {

namespace fs = std::filesystem;
using namespace weir::inference;

namespace {

// Fragmentation: request count and the random length mix (prompt tokens, new tokens).
// Random prompts of 200..599 tokens (no shared prefix), 1..8 new tokens.
constexpr int FRAG_QUICK = 1500, FRAG_FULL = 100000;
constexpr int FRAG_PROMPT_MIN = 200, FRAG_PROMPT_SPAN = 400, FRAG_NEW_MAX = 8;

double r1(double v) {
  return std::round(v * 10) / 10;
}
double r3(double v) {
  return std::round(v * 1000) / 1000;
}

RandomModelShape shape(const Ctx& ctx) {
  // dim, hidden, layers, heads, kv heads, vocab, context
  return ctx.quick ? RandomModelShape{64, 192, 2, 4, 4, 512, 1024}
                   : RandomModelShape{128, 384, 4, 4, 4, 2048, 1024};
}

// `tiny`: the tiny shape whatever the scale (fragmentation pushes 100,000 requests through).
Result<fs::path> model_file(const Ctx& ctx, bool tiny = false) {
  const auto dir = fs::temp_directory_path() / "weir-gauntlet-models-v2";
  std::error_code ec;
  fs::create_directories(dir, ec);
  Ctx small = ctx;
  small.quick = ctx.quick || tiny;
  auto path = dir / (small.quick ? "tiny-f32.gguf" : "small-f32.gguf");
  if (!fs::exists(path)) {
    if (auto st = write_random_llama(path, shape(small), GgmlType::f32, 11); !st)
      return std::move(st).error();
  }
  return path;
}

double file_mb(const fs::path& p) {
  std::error_code ec;
  return static_cast<double>(fs::file_size(p, ec)) / 1048576.0;
}

Result<std::unique_ptr<Engine>> make_engine(std::shared_ptr<const Model> m, EngineConfig cfg) {
  auto r = make_runner(std::move(m), Device::cpu, 0);
  if (!r) return std::move(r).error();
  return Engine::create(std::move(r->runner), std::move(cfg));
}

std::vector<std::int32_t> prompt(std::mt19937& rng, int n, std::int32_t vocab) {
  std::vector<std::int32_t> p(static_cast<std::size_t>(n));
  for (auto& t : p)
    t = 259 + static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(vocab - 259));
  p[0] = 1;
  return p;
}

std::future<Result<GenerateResult>> submit(Engine& e, GenerateRequest rq) {
  auto p = std::make_shared<std::promise<Result<GenerateResult>>>();
  auto f = p->get_future();
  e.submit(std::move(rq), {{}, [p](Result<GenerateResult> r) { p->set_value(std::move(r)); }});
  return f;
}

// Keeps at most `window` requests in flight; counts completions and failures.
class Window {
 public:
  explicit Window(int window) : window_(window) {}
  void submit(Engine& e, GenerateRequest rq) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return in_flight_ < window_; });
      ++in_flight_;
    }
    e.submit(std::move(rq),
             {{}, [this](Result<GenerateResult> r) {
                std::lock_guard lock(mu_);
                --in_flight_;
                if (r && r->finish != FinishReason::error && r->finish != FinishReason::cancelled)
                  ++ok_;
                else {
                  ++failed_;
                  if (!r && first_error_.empty()) first_error_ = r.error().message;
                }
                cv_.notify_all();
              }});
  }
  void drain() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return in_flight_ == 0; });
  }
  int ok() const { return ok_; }
  int failed() const { return failed_; }
  std::string first_error() const { return first_error_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int window_, in_flight_ = 0, ok_ = 0, failed_ = 0;
  std::string first_error_;
};

// Mean RSS of the first and last tenth of [a, z] (sampler time).
std::pair<double, double> tenths(const Sampler& s, double a, double z) {
  const double d = (z - a) / 10.0;
  return {s.mean_rss(a, a + d), s.mean_rss(z - d, z + 1e-9)};
}

// 3. 1,000 requests whose handler asks the registry for the model each time.
json::object model_per_request(Ctx& ctx) {
  const int n = ctx.quick ? 200 : 1000;
  auto path = model_file(ctx);
  if (!path) return {{"pass", false}, {"error", path.error().message}};
  EngineRegistry reg;  // the scenario's engines (ctx.budget outlives it)
  const auto loads_before = reg.loads();
  EngineRegistry::Factory factory = [&](std::shared_ptr<const Model> m) {
    return make_engine(std::move(m),
                       {.max_num_seqs = 64, .max_model_len = 256, .budget = &ctx.budget});
  };
  std::mt19937 rng(5);
  std::deque<std::future<Result<GenerateResult>>> in_flight;
  int ok = 0, failed = 0;
  std::string error;
  std::vector<double> rss;
  rss.reserve(static_cast<std::size_t>(n));
  const auto t0 = Clock::now();
  auto settle = [&] {
    auto r = in_flight.front().get();
    in_flight.pop_front();
    if (r && r->tokens.size() == 8) {
      ++ok;
      rss.push_back(rss_mb());
    } else {
      ++failed;
      if (!r && error.empty()) error = r.error().message;
    }
  };
  std::int32_t vocab = 0;
  for (int i = 0; i < n; ++i) {
    auto e = reg.get(*path, factory);  // the handler asks for the model on every request
    if (!e) {
      ++failed;
      if (error.empty()) error = e.error().message;
      continue;
    }
    if (i == 0) {
      ctx.sampler.attach(e->get());
      vocab = (*e)->vocab_size();
    }
    GenerateRequest rq;
    rq.prompt = prompt(rng, 16 + static_cast<int>(rng() % 32), vocab);
    rq.max_new_tokens = 8;
    in_flight.push_back(submit(**e, std::move(rq)));
    if (in_flight.size() >= 16) settle();
  }
  while (!in_flight.empty()) settle();
  const double secs = seconds_since(t0);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  ctx.sampler.detach_all();
  const auto loads = reg.loads() - loads_before;
  // RSS after each request, from the first completion on: first tenth against last tenth.
  const std::size_t k = std::max<std::size_t>(1, rss.size() / 10);
  double first = 0, last = 0;
  for (std::size_t i = 0; i < k && i < rss.size(); ++i)
    first += rss[i] / k, last += rss[rss.size() - 1 - i] / k;
  const double drift = first > 0 ? 100.0 * (last - first) / first : 0.0;
  json::object out{{"pass", ok == n && loads == 1 && std::abs(drift) <= 5.0},
                   {"completed", ok},
                   {"failed", failed},
                   {"n", n},
                   {"model_loads", loads},
                   {"elapsed_s", r3(secs)},
                   {"throughput", r1(ok / secs)},
                   {"throughput_unit", "requests/s"},
                   {"rss_first_tenth_mb", r1(first)},
                   {"rss_last_tenth_mb", r1(last)},
                   {"rss_drift_pct", r3(drift)},
                   {"weights_mb", r1(file_mb(*path))}};
  if (!error.empty()) out["error"] = error;
  return out;
}

// 8. Near-max_model_len and short requests at high concurrency with a KV pool of two long
// sequences. Nothing fails, preemptions are counted, sampled outputs equal the same prompts
// generated alone.
json::object kv_overflow(Ctx& ctx) {
  auto path = model_file(ctx);
  if (!path) return {{"pass", false}, {"error", path.error().message}};
  auto model = Model::load(*path);
  if (!model) return {{"pass", false}, {"error", model.error().message}};
  const auto& hp = (*model)->hp();
  const std::int64_t max_len = 512;
  const std::size_t block_bytes = static_cast<std::size_t>(
      KvLayout{hp.n_layers, hp.n_kv_heads, hp.head_dim, 16, 0}.block_bytes(4));
  const std::size_t kv_bytes = block_bytes * (2 * max_len / 16);  // two long sequences
  auto hold = ctx.budget.try_reserve(BudgetCategory::kv_cache, kv_bytes);
  if (!hold) return {{"pass", false}, {"error", hold.error().message}};
  auto e = make_engine(*model, {.max_num_seqs = 64,
                                .max_num_batched_tokens = 512,
                                .max_model_len = max_len,
                                .kv_cache_bytes = kv_bytes,
                                .max_waiting = 10000});
  if (!e) return {{"pass", false}, {"error", e.error().message}};
  ctx.sampler.attach(e->get());
  const int n_long = ctx.quick ? 8 : 24, n_short = ctx.quick ? 24 : 72;
  std::mt19937 rng(8);
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < n_long + n_short; ++i) {
    GenerateRequest rq;
    const bool lng = i < n_long;
    rq.prompt =
        prompt(rng, lng ? 440 + static_cast<int>(rng() % 50) : 12 + static_cast<int>(rng() % 30),
               hp.n_vocab);
    rq.max_new_tokens = 16;
    reqs.push_back(rq);
  }
  std::vector<std::size_t> order(reqs.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::future<Result<GenerateResult>>> fs(reqs.size());
  const auto t0 = Clock::now();
  for (auto i : order) fs[i] = submit(**e, reqs[i]);
  std::vector<std::vector<std::int32_t>> outs(reqs.size());
  int ok = 0, failed = 0;
  std::int64_t tokens = 0;
  std::string error;
  for (std::size_t i = 0; i < fs.size(); ++i) {
    auto r = fs[i].get();
    if (r && r->finish == FinishReason::length) {
      ++ok;
      outs[i] = r->tokens;
      tokens += static_cast<std::int64_t>(r->tokens.size());
    } else {
      ++failed;
      if (!r && error.empty()) error = r.error().message;
    }
  }
  const double secs = seconds_since(t0);
  const auto preemptions = (*e)->stats().sched.preemptions;
  // The sample: 4 long and 4 short prompts, generated alone one at a time.
  int matched = 0, sampled = 0;
  for (std::size_t i : {0, 1, 2, 3}) {
    for (std::size_t j : {i, static_cast<std::size_t>(n_long) + i}) {
      auto r = submit(**e, reqs[j]).get();
      ++sampled;
      if (r && r->tokens == outs[j]) ++matched;
    }
  }
  ctx.sampler.detach_all();
  json::object out{{"pass", failed == 0 && preemptions > 0 && matched == sampled},
                   {"completed", ok},
                   {"failed", failed},
                   {"long_requests", n_long},
                   {"short_requests", n_short},
                   {"max_model_len", max_len},
                   {"kv_pool_blocks", static_cast<std::int64_t>(2 * max_len / 16)},
                   {"preemptions", preemptions},
                   {"sample_matched", matched},
                   {"sample_size", sampled},
                   {"elapsed_s", r3(secs)},
                   {"throughput", r1(tokens / secs)},
                   {"throughput_unit", "generated tokens/s"},
                   {"weights_mb", r1(static_cast<double>((*model)->weight_bytes()) / 1048576.0)}};
  if (!error.empty()) out["error"] = error;
  return out;
}

// 9. max_num_seqs = 10,000: the KV budget still bounds memory, because a sequence runs only
// when its blocks exist.
json::object batch_misconfig(Ctx& ctx) {
  auto path = model_file(ctx);
  if (!path) return {{"pass", false}, {"error", path.error().message}};
  auto model = Model::load(*path);
  if (!model) return {{"pass", false}, {"error", model.error().message}};
  const auto& hp = (*model)->hp();
  auto e = make_engine(*model, {.max_num_seqs = 10000,
                                .max_num_batched_tokens = 2048,
                                .max_model_len = 512,
                                .budget = &ctx.budget,
                                .max_waiting = 20000});
  if (!e) return {{"pass", false}, {"error", e.error().message}};
  ctx.sampler.attach(e->get());
  const int n = ctx.quick ? 1000 : 4000;
  std::mt19937 rng(9);
  Window w(n);
  std::size_t peak_running = 0;
  std::atomic<bool> done{false};
  std::thread watch([&] {
    while (!done) {
      peak_running = std::max(peak_running, (*e)->stats().sched.running);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    GenerateRequest rq;
    rq.prompt = prompt(rng, 32 + static_cast<int>(rng() % 128), hp.n_vocab);
    rq.max_new_tokens = 8 + static_cast<int>(rng() % 24);
    w.submit(**e, std::move(rq));
  }
  w.drain();
  const double secs = seconds_since(t0);
  done = true;
  watch.join();
  auto st = (*e)->stats();
  ctx.sampler.detach_all();
  const auto kv_limit = ctx.budget.limit(BudgetCategory::kv_cache);
  json::object out{{"pass", w.ok() == n && static_cast<std::size_t>(st.kv_pool_bytes) <= kv_limit},
                   {"completed", w.ok()},
                   {"failed", w.failed()},
                   {"n", n},
                   {"max_num_seqs", 10000},
                   {"peak_running_seqs", peak_running},
                   {"kv_pool_mb", r1(static_cast<double>(st.kv_pool_bytes) / 1048576.0)},
                   {"kv_budget_mb", r1(static_cast<double>(kv_limit) / 1048576.0)},
                   {"preemptions", st.sched.preemptions},
                   {"elapsed_s", r3(secs)},
                   {"throughput", r1(static_cast<double>(st.tokens_generated) / secs)},
                   {"throughput_unit", "generated tokens/s"},
                   {"weights_mb", r1(static_cast<double>((*model)->weight_bytes()) / 1048576.0)}};
  if (!w.first_error().empty()) out["error"] = w.first_error();
  return out;
}

// 10. 100,000 requests of random lengths through one engine: KV waste stays under 4% and the
// last tenth's RSS is within 5% of the first tenth's.
json::object fragmentation(Ctx& ctx) {
  auto path = model_file(ctx, true);
  if (!path) return {{"pass", false}, {"error", path.error().message}};
  auto model = Model::load(*path);
  if (!model) return {{"pass", false}, {"error", model.error().message}};
  const auto& hp = (*model)->hp();
  const std::size_t kv_bytes = std::size_t{16} << 20;  // a quarter of the kv_cache category
  auto hold = ctx.budget.try_reserve(BudgetCategory::kv_cache, kv_bytes);
  if (!hold) return {{"pass", false}, {"error", hold.error().message}};
  auto e = make_engine(*model, {.max_num_seqs = 64,
                                .max_num_batched_tokens = 2048,
                                .max_model_len = 1024,
                                .kv_cache_bytes = kv_bytes,
                                .max_waiting = 4096});
  if (!e) return {{"pass", false}, {"error", e.error().message}};
  ctx.sampler.attach(e->get());
  const int n = ctx.quick ? FRAG_QUICK : FRAG_FULL;
  std::mt19937 rng(10);
  Window w(128);
  const auto t0 = Clock::now();
  const double ts = ctx.sampler.now();
  for (int i = 0; i < n; ++i) {
    GenerateRequest rq;
    rq.prompt =
        prompt(rng, FRAG_PROMPT_MIN + static_cast<int>(rng() % FRAG_PROMPT_SPAN), hp.n_vocab);
    rq.max_new_tokens = 1 + static_cast<int>(rng() % FRAG_NEW_MAX);
    w.submit(**e, std::move(rq));
  }
  w.drain();
  const double secs = seconds_since(t0);
  const double te = ctx.sampler.now();
  auto st = (*e)->stats();
  ctx.sampler.detach_all();
  auto [first, last] = tenths(ctx.sampler, ts, te);
  const double creep = first > 0 ? 100.0 * (last - first) / first : 0.0;
  const double waste = ctx.sampler.mean_kv_waste();
  json::object out{{"pass", w.ok() == n && waste < 4.0 && std::abs(creep) <= 5.0},
                   {"completed", w.ok()},
                   {"failed", w.failed()},
                   {"n", n},
                   {"kv_waste_pct", r3(waste)},
                   {"rss_first_tenth_mb", r1(first)},
                   {"rss_last_tenth_mb", r1(last)},
                   {"rss_creep_pct", r3(creep)},
                   {"preemptions", st.sched.preemptions},
                   {"prompt_tokens_computed", st.prompt_tokens_computed},
                   {"prefix_hit_rate", r3(st.kv.prefix_hit_rate())},
                   {"elapsed_s", r3(secs)},
                   {"throughput", r1(n / secs)},
                   {"throughput_unit", "requests/s"},
                   {"weights_mb", r1(static_cast<double>((*model)->weight_bytes()) / 1048576.0)}};
  if (!w.first_error().empty()) out["error"] = w.first_error();
  return out;
}

}  // namespace

void register_engine_scenarios() {
  register_scenario("model_per_request", model_per_request);
  register_scenario("kv_overflow", kv_overflow);
  register_scenario("batch_misconfig", batch_misconfig);
  register_scenario("fragmentation", fragmentation);
}

}  // namespace weir::gauntlet
