// bench_engine: continuous batching on the paged KV cache, 15M shape, F32 and Q8_0.
// Reproduce: build/bin/bench_engine --json   (see bench/README.md for what each key means)
#include <atomic>
#include <cstring>
#include <thread>

#include <boost/json.hpp>

#include "bench_util.hpp"

using namespace weir;
using namespace weir::bench;
using inference::Engine;
using inference::GenerateRequest;

namespace {

constexpr int kPrompt = 32, kNew = 32;
const int kThreads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

std::unique_ptr<Engine> make(std::shared_ptr<const inference::Model> m, std::size_t kv_bytes,
                             std::int64_t max_model_len, int max_num_seqs = 64) {
  auto e = Engine::create(inference::make_llama_runner(std::move(m), kThreads),
                          {.max_num_seqs = max_num_seqs,
                           .max_num_batched_tokens = 2048,
                           .max_model_len = max_model_len,
                           .block_size = 16,
                           .kv_cache_bytes = kv_bytes,
                           .max_waiting = 100000});
  if (!e) {
    std::fprintf(stderr, "%s\n", e.error().message.c_str());
    std::exit(1);
  }
  return std::move(*e);
}

// Generated tokens per second with `n` sequences in flight; samples KV waste while it runs.
double throughput(Engine& e, int n, std::int32_t vocab, double* waste_pct) {
  std::mt19937 rng(static_cast<unsigned>(n));
  std::vector<std::future<Result<inference::GenerateResult>>> fs;
  std::atomic<bool> done{false};
  double waste_sum = 0;
  int samples = 0;
  std::thread sampler([&] {
    while (!done) {
      auto st = e.stats().kv;
      if (st.used_blocks > 0) waste_sum += st.waste(), ++samples;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    GenerateRequest rq;
    rq.prompt = random_prompt(rng, kPrompt, vocab);
    rq.max_new_tokens = kNew;
    fs.push_back(submit(e, rq));
  }
  std::size_t tokens = 0;
  for (auto& f : fs) tokens += f.get()->tokens.size();
  const double s = seconds_since(t0);
  done = true;
  sampler.join();
  if (waste_pct) *waste_pct = samples ? 100.0 * waste_sum / samples : 0.0;
  return static_cast<double>(tokens) / s;
}

boost::json::object run(inference::GgmlType type, const std::filesystem::path& dir) {
  auto model = model_15m(type, dir);
  const auto& hp = model->hp();
  const std::size_t block_bytes = static_cast<std::size_t>(
      inference::KvLayout{hp.n_layers, hp.n_kv_heads, hp.head_dim, 16, 0}.block_bytes(4));
  boost::json::object out, tok;
  double waste = 0;
  {
    auto e = make(model, block_bytes * 320, 256);  // room for 64 x 64 tokens
    throughput(*e, 4, hp.n_vocab, nullptr);        // warm up
    for (int n : {1, 8, 32, 64}) {
      double w = 0;
      tok[std::to_string(n)] = throughput(*e, n, hp.n_vocab, n == 32 ? &w : nullptr);
      if (n == 32) waste = w;
      std::fprintf(stderr, "  %2d sequences: %8.1f tok/s\n", n, tok[std::to_string(n)].as_double());
    }
  }
  out["tok_s"] = tok;
  out["kv_waste_pct_short"] = waste;  // 64-token sequences: half a 16-slot block is ~12%

  // Waste on realistic lengths: 16 sequences of 250..350 prompt tokens generating 100 each.
  {
    auto e = make(model, block_bytes * 512, 1024);
    std::mt19937 rng(17);
    std::atomic<bool> done{false};
    double sum = 0;
    int samples = 0;
    std::thread sampler([&] {
      while (!done) {
        auto st = e->stats().kv;
        if (st.used_blocks > 0) sum += st.waste(), ++samples;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
    std::vector<std::future<Result<inference::GenerateResult>>> fs;
    for (int i = 0; i < 16; ++i) {
      GenerateRequest rq;
      rq.prompt = random_prompt(rng, 250 + static_cast<int>(rng() % 100), hp.n_vocab);
      rq.max_new_tokens = 100;
      fs.push_back(submit(*e, rq));
    }
    for (auto& f : fs) (void)f.get();
    done = true;
    sampler.join();
    out["kv_waste_pct"] = samples ? 100.0 * sum / samples : 0.0;
  }

  // Capacity: a KV budget that holds 4 sequences of max_model_len=256 if each reserved its
  // worst case. Paged admission holds as many as the blocks they really use allow.
  {
    const std::size_t budget = block_bytes * 64;  // 1024 token slots = 4 x 256
    auto e = make(model, budget, 256, 1000);
    std::mt19937 rng(9);
    std::vector<std::future<Result<inference::GenerateResult>>> fs;
    for (int i = 0; i < 200; ++i) {
      GenerateRequest rq;
      rq.prompt = random_prompt(rng, 8 + static_cast<int>(rng() % 40), hp.n_vocab);  // a mix: 8..47
      rq.max_new_tokens = 8 + static_cast<int>(rng() % 24);  // and 8..31 new
      fs.push_back(submit(*e, rq));
    }
    std::size_t peak = 0;
    std::atomic<bool> done{false};
    std::thread sampler([&] {
      while (!done) {
        peak = std::max(peak, e->stats().sched.running);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    for (auto& f : fs) (void)f.get();
    done = true;
    sampler.join();
    out["capacity_sequences_paged"] = peak;
    out["capacity_sequences_reserved"] = 4;
    out["capacity_ratio_vs_reservation"] = static_cast<double>(peak) / 4.0;
    out["preemptions"] = e->stats().sched.preemptions;
  }

  // 16 requests sharing a 500-token system prompt, submitted at once.
  {
    auto e = make(model, block_bytes * 1024, 1024);
    std::mt19937 rng(3);
    auto system = random_prompt(rng, 500, hp.n_vocab);
    std::vector<std::future<Result<inference::GenerateResult>>> fs;
    std::int64_t total_prompt = 0;
    for (int i = 0; i < 16; ++i) {
      GenerateRequest rq;
      rq.prompt = system;
      auto tail = random_prompt(rng, 12, hp.n_vocab);
      rq.prompt.insert(rq.prompt.end(), tail.begin() + 1, tail.end());
      rq.max_new_tokens = 4;
      total_prompt += static_cast<std::int64_t>(rq.prompt.size());
      fs.push_back(submit(*e, rq));
    }
    for (auto& f : fs) (void)f.get();
    const double computed = static_cast<double>(e->stats().prompt_tokens_computed);
    out["prefix_prefill_saved_pct"] = 100.0 * (1.0 - computed / static_cast<double>(total_prompt));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  (void)argc, (void)argv;
  const auto dir = std::filesystem::temp_directory_path() / "weir-bench-models";
  std::fprintf(stderr, "F32 (%d threads)\n", kThreads);
  auto out = run(inference::GgmlType::f32, dir);
  std::fprintf(stderr, "Q8_0 (%d threads)\n", kThreads);
  out["q8_0"] = run(inference::GgmlType::q8_0, dir);
  out["threads"] = kThreads;
  out["peak_rss_mb"] = peak_rss_mb();
  std::printf("%s\n", boost::json::serialize(out).c_str());
}
