// bench_engine: continuous batching on the paged KV cache, 15M shape, F32 and Q8_0.
// Reproduce: build/bin/bench_engine --json   (see bench/README.md for what each key means)
#include <atomic>
#include <cstring>
#include <thread>

#include <boost/json.hpp>

#include "bench_util.hpp"
#include "weir/inference/runner.hpp"
#if WEIR_BENCH_CUDA
#include "weir/inference/cuda/cuda_ops.hpp"
#endif

using namespace weir;
using namespace weir::bench;
using inference::Engine;
using inference::GenerateRequest;

namespace {

constexpr int kPrompt = 32, kNew = 32;
const int kThreads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
inference::Device g_device = inference::Device::cpu;

std::unique_ptr<Engine> make(std::shared_ptr<const inference::Model> m, std::size_t kv_bytes,
                             std::int64_t max_model_len, int max_num_seqs = 64) {
  auto runner = inference::make_runner(std::move(m), g_device, kThreads);
  if (!runner) {
    std::fprintf(stderr, "%s\n", runner.error().message.c_str());
    std::exit(1);
  }
  auto e = Engine::create(std::move(runner->runner), {.max_num_seqs = max_num_seqs,
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

#if WEIR_BENCH_CUDA
// GPU extras: achieved bandwidth of paged decode attention (64 sequences x 2048 positions,
// 32 heads of 128 over 8 KV heads) and FP32 GEMM TFLOP/s (4096 x 4096 x 4096, cuBLAS).
boost::json::object gpu_extras() {
  namespace cu = inference::cuda;
  boost::json::object out;
  const int seqs = 64, ctx = 2048, heads = 32, kv_heads = 8, hd = 128, bs = 16;
  inference::KvLayout L{1, kv_heads, hd, bs, seqs * ctx / bs};
  auto pool = cu::DeviceBuffer::allocate(static_cast<std::size_t>(L.total_elems()) * 4);
  std::vector<std::int32_t> pos(seqs, ctx - 1), seq(seqs),
      tables(static_cast<std::size_t>(seqs) * (ctx / bs));
  for (int i = 0; i < seqs; ++i) seq[i] = i;
  for (std::size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<std::int32_t>(i);
  auto up = [](const auto& v) {
    auto b = cu::DeviceBuffer::allocate(v.size() * sizeof(v[0]));
    (void)cu::copy_to_device(b->get(), v.data(), v.size() * sizeof(v[0]));
    return std::move(*b);
  };
  auto dpos = up(pos), dseq = up(seq), dtab = up(tables);
  auto q = cu::DeviceBuffer::allocate(static_cast<std::size_t>(seqs) * heads * hd * 4);
  auto o = cu::DeviceBuffer::allocate(static_cast<std::size_t>(seqs) * heads * hd * 4);
  (void)cu::fill_bytes(pool->get(), 0, pool->bytes());
  (void)cu::fill_bytes(q->get(), 0, q->bytes());
  cu::PagedBatch pb{dpos.as<std::int32_t>(), dseq.as<std::int32_t>(), dtab.as<std::int32_t>(),
                    ctx / bs, seqs};
  auto time = [](auto&& f, int reps) {
    f();
    (void)cu::synchronize();
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) f();
    (void)cu::synchronize();
    return seconds_since(t0) / reps;
  };
  const double t_att = time(
      [&] {
        (void)cu::paged_attention(pool->as<float>(), L, 0, pb, q->as<float>(), o->as<float>(),
                                  heads, 0.088f);
      },
      20);
  const double kv_bytes = double(seqs) * ctx * kv_heads * hd * 4 * 2;
  out["paged_decode_attention_gb_s"] = kv_bytes / t_att / 1e9;
  const int N = 4096;
  auto a = cu::DeviceBuffer::allocate(std::size_t(N) * N * 4),
       b = cu::DeviceBuffer::allocate(std::size_t(N) * N * 4),
       c = cu::DeviceBuffer::allocate(std::size_t(N) * N * 4);
  (void)cu::fill_bytes(a->get(), 0, a->bytes());
  (void)cu::fill_bytes(b->get(), 0, b->bytes());
  const double t_gemm = time(
      [&] { (void)cu::gemm_f32(a->as<float>(), b->as<float>(), c->as<float>(), N, N, N); }, 10);
  out["gemm_fp32_tflop_s"] = 2.0 * N * N * N / t_gemm / 1e12;
  out["device"] = cu::device_info().name;
  return out;
}
#endif

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      auto d = inference::parse_device(argv[++i]);
      if (!d) {
        std::fprintf(stderr, "bench_engine: %s\n", d.error().message.c_str());
        return 1;
      }
      g_device = *d;
    }
  }
  const auto dir = std::filesystem::temp_directory_path() / "weir-bench-models";
  std::fprintf(stderr, "F32 (%d threads)\n", kThreads);
  auto out = run(inference::GgmlType::f32, dir);
  std::fprintf(stderr, "Q8_0 (%d threads)\n", kThreads);
  out["q8_0"] = run(inference::GgmlType::q8_0, dir);
  out["threads"] = kThreads;
  out["device"] = g_device == inference::Device::cuda ? "cuda" : "cpu";
#if WEIR_BENCH_CUDA
  if (g_device == inference::Device::cuda) out["gpu"] = gpu_extras();
#endif
  out["peak_rss_mb"] = peak_rss_mb();
  std::printf("%s\n", boost::json::serialize(out).c_str());
}
