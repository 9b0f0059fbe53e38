// bench_engine: continuous batching on the paged KV cache, 15M shape, F32 and Q8_0; with
// --shape 1b, on the TinyLlama-1.1B shape, Q8_0 and Q4_K_M (random weights).
// Reproduce: build/bin/bench_engine --json [--shape 15m,1b]   (bench/README.md: what each key
// means)
#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include <boost/json.hpp>

#include "bench_util.hpp"
#include "weir/inference/runner.hpp"
#include "weir/runtime/json_write.hpp"
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
// --kv-cache-type: the engines' KV element type; budgets stay in bytes (sized for F32 blocks
// below), so F16 holds twice the tokens in each.
inference::KvType g_kv_type = inference::KvType::f32;

// An engine on its own runner; `runner_out`, when given, gets the runner (the engine owns it).
std::unique_ptr<Engine> make(std::shared_ptr<const inference::Model> m, std::size_t kv_bytes,
                             std::int64_t max_model_len, int max_num_seqs = 64,
                             inference::StepRunner** runner_out = nullptr,
                             inference::KvType kv_type = g_kv_type) {
  auto runner = inference::make_runner(std::move(m), g_device, kThreads);
  if (!runner) {
    std::fprintf(stderr, "%s\n", runner.error().message.c_str());
    std::exit(1);
  }
  if (runner_out) *runner_out = runner->runner.get();
  auto e = Engine::create(std::move(runner->runner), {.max_num_seqs = max_num_seqs,
                                                      .max_num_batched_tokens = 2048,
                                                      .max_model_len = max_model_len,
                                                      .block_size = 16,
                                                      .kv_cache_bytes = kv_bytes,
                                                      .kv_cache_type = kv_type,
                                                      .max_waiting = 100000});
  if (!e) {
    std::fprintf(stderr, "%s\n", e.error().message.c_str());
    std::exit(1);
  }
  return std::move(*e);
}

// Generated tokens per second with `n` sequences in flight (prompts of `prompt` tokens, `fresh`
// new each); samples KV waste while it runs.
double throughput(Engine& e, int n, std::int32_t vocab, double* waste_pct, int prompt = kPrompt,
                  int fresh = kNew) {
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
  // Built first, then submitted back to back: the engine starts stepping on the first request
  // it sees, so requests that trickle in start their prompt steps later, out of phase, and
  // the decode steps carry fewer tokens than `n` (a faster engine made that worse).
  std::vector<GenerateRequest> rqs(static_cast<std::size_t>(n));
  for (auto& rq : rqs) {
    rq.prompt = random_prompt(rng, prompt, vocab);
    rq.max_new_tokens = fresh;
  }
  auto t0 = Clock::now();
  for (auto& rq : rqs) fs.push_back(submit(e, std::move(rq)));
  std::size_t tokens = 0;
  for (auto& f : fs) tokens += f.get()->tokens.size();
  const double s = seconds_since(t0);
  done = true;
  sampler.join();
  if (waste_pct) *waste_pct = samples ? 100.0 * waste_sum / samples : 0.0;
  return static_cast<double>(tokens) / s;
}

// Multiply-adds a token costs in the weight matmuls of the layers, and in the output projection.
std::pair<double, double> matmul_macs(const inference::Model& m) {
  auto n = [](const inference::Weight& w) { return static_cast<double>(w.rows * w.cols); };
  double layers = 0;
  for (const auto& l : m.layers())
    layers += n(l.wq) + n(l.wk) + n(l.wv) + n(l.wo) + n(l.w_gate) + n(l.w_up) + n(l.w_down);
  return {layers, n(m.output())};
}

// A vector unit's peak on a shared host: measure() reads it on all kThreads threads and on one;
// best() is the largest of all-thread readings and kThreads x the largest one-thread reading. On
// a 2-vCPU host where another process holds one core now and then, an all-thread reading taken
// then is one core's worth (half the peak), while one thread still finds a whole core: so a
// fraction of best() is never a fraction of a one-core reading on two threads.
class Peak {
 public:
  explicit Peak(double (*measure_gop_s)(int threads)) : measure_(measure_gop_s) {}
  // One reading on all threads (returned) and one on a single thread.
  double measure() {
    const double all = measure_(kThreads), one = measure_(1);
    all_.push_back(all);
    one_.push_back(one);
    return all;
  }
  double per_core() const { return one_.empty() ? 0 : *std::max_element(one_.begin(), one_.end()); }
  double best() const {
    double b = kThreads * per_core();
    for (double a : all_) b = std::max(b, a);
    return b;
  }
  // {"gop_s": best(), "all_threads": [...], "one_thread": [...]}, the readings in order.
  boost::json::object to_json() const {
    boost::json::array all, one;
    for (double a : all_) all.push_back(a);
    for (double o : one_) one.push_back(o);
    return {{"gop_s", best()}, {"all_threads", all}, {"one_thread", one}};
  }

 private:
  double (*measure_)(int);
  std::vector<double> all_, one_;
};

// Where the 32-sequence run's steps of one kind went (StepPhases, per step), and the matmuls'
// rate against the measured peak of the unit they run on (`peak_gop_s`: F32 FMA or int8 dot).
// `logit_rows`: rows of the output projection a step computes (decode: every token; prompt
// steps: one per sequence that samples, about 32 a run).
boost::json::object step_breakdown(const inference::StepPhases& p, const inference::Model& m,
                                   double peak_gop_s, double logit_rows_per_step) {
  boost::json::object o;
  if (p.steps == 0) return o;
  const double steps = static_cast<double>(p.steps);
  const auto [layer_macs, logit_macs] = matmul_macs(m);
  const double tokens = static_cast<double>(p.tokens) / steps;
  const double gemm_ms = (p.matmul_ms + p.logits_ms) / steps;
  const double rows = logit_rows_per_step > 0 ? logit_rows_per_step : tokens;
  const double gop_s = 2.0 * (tokens * layer_macs + rows * logit_macs) / (gemm_ms / 1e3) / 1e9;
  o["steps"] = p.steps;
  o["tokens_per_step"] = tokens;
  o["step_ms"] = p.total_ms() / steps;
  o["matmul_ms"] = p.matmul_ms / steps;
  o["attention_ms"] = p.attention_ms / steps;
  o["logits_ms"] = p.logits_ms / steps;
  o["rest_ms"] = p.rest_ms / steps;
  o["matmul_gop_s"] = gop_s;
  o["matmul_fraction_of_peak"] = peak_gop_s > 0 ? gop_s / peak_gop_s : 0.0;
  return o;
}

// The Q8_0 KV cache against the F32 one, side by side: 32 sequences on two engines that differ
// only in the cache's type (the same bytes, so Q8_0 has 3.8 times the blocks), alternated five
// times. Short: the standard 32 + 32 tokens. Long: 480-token prompts, 32 new, where attention
// reads the most. Also the decode step's attention time of each, from the step profile.
boost::json::object kv_q8_vs_f32(std::shared_ptr<const inference::Model> model,
                                 std::size_t block_bytes) {
  const auto& hp = model->hp();
  inference::StepRunner *rf = nullptr, *rq = nullptr;
  auto f32 = make(model, block_bytes * 1100, 1024, 64, &rf, inference::KvType::f32);
  auto q8 = make(model, block_bytes * 1100, 1024, 64, &rq, inference::KvType::q8_0);
  boost::json::object out;
  for (const auto& [name, prompt] : {std::pair{"short", kPrompt}, std::pair{"long", 480}}) {
    throughput(*f32, 32, hp.n_vocab, nullptr, prompt, kNew);  // warm-up
    throughput(*q8, 32, hp.n_vocab, nullptr, prompt, kNew);
    std::vector<double> ratios;
    double tf = 0, tq = 0, att_f = 0, att_q = 0;
    for (int pair = 0; pair < 5; ++pair) {
      const bool profile =
          pair == 0 && rf->set_step_profiling(true) && rq->set_step_profiling(true);
      const double a = throughput(*f32, 32, hp.n_vocab, nullptr, prompt, kNew);
      const double b = throughput(*q8, 32, hp.n_vocab, nullptr, prompt, kNew);
      if (profile) {
        auto per_step = [](const inference::StepPhases& p) {
          return p.steps ? p.attention_ms / static_cast<double>(p.steps) : 0.0;
        };
        att_f = per_step(rf->step_profile().decode), att_q = per_step(rq->step_profile().decode);
        rf->set_step_profiling(false), rq->set_step_profiling(false);
      }
      tf += a / 5, tq += b / 5;
      ratios.push_back(b / a);
    }
    std::sort(ratios.begin(), ratios.end());
    out[name] = boost::json::object{{"prompt_tokens", prompt},
                                    {"tok_s_f32", tf},
                                    {"tok_s_q8_0", tq},
                                    {"decode_attention_ms_f32", att_f},
                                    {"decode_attention_ms_q8_0", att_q},
                                    {"ratio_median", ratios[2]},
                                    {"ratio_min", ratios.front()},
                                    {"ratio_max", ratios.back()}};
    std::fprintf(stderr,
                 "  KV q8_0 / f32, 32 sequences, %d-token prompts: %.2fx (%.2f-%.2f over 5 "
                 "pairs); decode attention %.2f vs %.2f ms a step\n",
                 prompt, ratios[2], ratios.front(), ratios.back(), att_q, att_f);
  }
  return out;
}

// Batching on `model`: tokens/s with 1, 8, 32 and 64 sequences in flight (32-token prompts, 32
// new), the 32-sequence run's steps by phase against `peak` (read again right before and right
// after that run: Peak::best() of all its readings), and the 32 / 1 ratio from `pairs` adjacent
// pairs of runs. Fills out's tok_s, step_32, prompt_32, peak_32 and ratio_32_1; returns the
// 32-sequence run's KV waste (%).
double batching(const std::shared_ptr<const inference::Model>& model, Peak& peak, int pairs,
                boost::json::object& out) {
  const auto& hp = model->hp();
  const std::size_t block_bytes = static_cast<std::size_t>(
      inference::KvLayout{hp.n_layers, hp.n_kv_heads, hp.head_dim, 16, 0}.block_bytes(4));
  boost::json::object tok;
  double waste = 0;
  {
    inference::StepRunner* runner = nullptr;
    auto e = make(model, block_bytes * 320, 256, 64, &runner);  // room for 64 x 64 tokens
    // Warm up with the largest batch: the runner's buffers grow to their largest step once
    // here, not inside a measured run (the first 512-token prompt step paid ~4 ms for it).
    throughput(*e, 64, hp.n_vocab, nullptr);
    for (int n : {1, 8, 32, 64}) {
      double w = 0;
      const bool profiled = n == 32 && runner->set_step_profiling(true);
      if (n == 32) peak.measure();
      tok[std::to_string(n)] = throughput(*e, n, hp.n_vocab, n == 32 ? &w : nullptr);
      if (n == 32) waste = w;
      std::fprintf(stderr, "  %2d sequences: %8.1f tok/s\n", n, tok[std::to_string(n)].as_double());
      if (profiled) {
        peak.measure();
        const double peak_gop_s = peak.best();
        out["peak_32"] = peak.to_json();
        const auto prof = runner->step_profile();
        out["step_32"] = step_breakdown(prof.decode, *model, peak_gop_s, 0);
        // The prompts: 32 sampled rows in all (each prompt's last token), spread over the steps.
        out["prompt_32"] =
            step_breakdown(prof.prompt, *model, peak_gop_s,
                           prof.prompt.steps ? 32.0 / static_cast<double>(prof.prompt.steps) : 0);
        runner->set_step_profiling(false);
        const auto& s = out["step_32"].as_object();
        if (!s.empty()) {
          std::fprintf(stderr,
                       "      a 32-sequence decode step: %.2f ms = matmuls %.2f + attention %.2f "
                       "+ logits %.2f + rest %.2f; matmuls at %.2f of the unit's peak\n",
                       s.at("step_ms").as_double(), s.at("matmul_ms").as_double(),
                       s.at("attention_ms").as_double(), s.at("logits_ms").as_double(),
                       s.at("rest_ms").as_double(), s.at("matmul_fraction_of_peak").as_double());
        }
        const auto& pr = out["prompt_32"].as_object();
        if (!pr.empty()) {
          std::fprintf(stderr,
                       "      its prompts: %lld step(s) of %.0f tokens, %.2f ms each = matmuls "
                       "%.2f + attention %.2f + logits %.2f + rest %.2f\n",
                       static_cast<long long>(pr.at("steps").as_int64()),
                       pr.at("tokens_per_step").as_double(), pr.at("step_ms").as_double(),
                       pr.at("matmul_ms").as_double(), pr.at("attention_ms").as_double(),
                       pr.at("logits_ms").as_double(), pr.at("rest_ms").as_double());
        }
      }
    }
    // The 32 / 1 ratio from adjacent runs: one sequence four times over, then 32 at once,
    // alternated five times. On a shared machine the load moves between the runs above, so a
    // ratio of rates measured seconds apart swings with it; adjacent pairs see the same load.
    // The same runs also give the decode steps' own rate (a step's tokens / its forward time,
    // from the step profile): the ratio without the prompts, which at 32 sequences are half
    // the run's tokens and at one sequence one step.
    std::vector<double> ratios, decode_ratios;
    double decode_one_sum = 0, decode_32_sum = 0;
    auto decode_rate = [&] {
      const auto d = runner->step_profile().decode;
      return d.total_ms() > 0 ? static_cast<double>(d.tokens) / d.total_ms() * 1e3 : 0.0;
    };
    for (int pair = 0; pair < pairs; ++pair) {
      double one = 0;
      const bool profiled = runner->set_step_profiling(true);
      for (int i = 0; i < 4; ++i) one += throughput(*e, 1, hp.n_vocab, nullptr) / 4;
      const double decode_one = profiled ? decode_rate() : 0;
      runner->set_step_profiling(profiled);  // a fresh profile for the 32
      ratios.push_back(throughput(*e, 32, hp.n_vocab, nullptr) / one);
      const double decode_32 = profiled ? decode_rate() : 0;
      runner->set_step_profiling(false);
      if (decode_one > 0 && decode_32 > 0) {
        decode_ratios.push_back(decode_32 / decode_one);
        decode_one_sum += decode_one, decode_32_sum += decode_32;
      }
    }
    auto summary = [](std::vector<double>& r) {
      std::sort(r.begin(), r.end());
      return boost::json::object{{"median", r.empty() ? 0.0 : r[r.size() / 2]},
                                 {"min", r.empty() ? 0.0 : r.front()},
                                 {"max", r.empty() ? 0.0 : r.back()}};
    };
    out["ratio_32_1"] = summary(ratios);
    std::fprintf(stderr, "  32 / 1 from adjacent runs: median %.2fx (%.2f-%.2f over %d pairs)\n",
                 ratios[ratios.size() / 2], ratios.front(), ratios.back(), pairs);
    if (!decode_ratios.empty()) {
      const auto n = static_cast<double>(decode_ratios.size());
      out["decode_ratio_32_1"] = summary(decode_ratios);
      out["decode_tok_s"] =
          boost::json::object{{"1", decode_one_sum / n}, {"32", decode_32_sum / n}};
      std::fprintf(stderr,
                   "  decode steps alone: 1 sequence %.1f tok/s, 32 sequences %.1f tok/s, 32 / 1 "
                   "median %.2fx (%.2f-%.2f)\n",
                   decode_one_sum / n, decode_32_sum / n, decode_ratios[decode_ratios.size() / 2],
                   decode_ratios.front(), decode_ratios.back());
    }
  }
  out["tok_s"] = tok;
  return waste;
}

boost::json::object run(inference::GgmlType type, const std::filesystem::path& dir, Peak peak) {
  auto model = model_15m(type, dir);
  const auto& hp = model->hp();
  const std::size_t block_bytes = static_cast<std::size_t>(
      inference::KvLayout{hp.n_layers, hp.n_kv_heads, hp.head_dim, 16, 0}.block_bytes(4));
  boost::json::object out;
  const double waste = batching(model, peak, 5, out);
  if (g_device == inference::Device::cpu) out["kv_q8_0_vs_f32"] = kv_q8_vs_f32(model, block_bytes);
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
namespace cu = inference::cuda;

// Seconds per call of f (after one warm-up call), or -1 when a call fails.
template <class F>
double time_gpu(F&& f, int reps, cu::Stream& stream) {
  if (!f() || !stream.synchronize()) return -1;
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i)
    if (!f()) return -1;
  if (!stream.synchronize()) return -1;
  return seconds_since(t0) / reps;
}

// Achieved bandwidth of paged decode attention: `seqs` sequences at `ctx` positions each,
// 32 heads of 128 over 8 KV heads, FP32 KV, split over the context as the runner would
// (cuda_plan.hpp). Bytes counted: the K and V rows read once per KV head.
boost::json::object decode_attention(int seqs, int ctx, cu::Stream& stream) {
  boost::json::object out;
  const int heads = 32, kv_heads = 8, hd = 128, bs = 16;
  inference::KvLayout L{1, kv_heads, hd, bs, seqs * ctx / bs};
  const auto split =
      cu::plan_attention_split(static_cast<long long>(seqs) * heads, ctx, cu::sm_count());
  auto pool = cu::DeviceBuffer::allocate(static_cast<std::size_t>(L.total_elems()) * 4);
  auto q = cu::DeviceBuffer::allocate(static_cast<std::size_t>(seqs) * heads * hd * 4);
  auto o = cu::DeviceBuffer::allocate(static_cast<std::size_t>(seqs) * heads * hd * 4);
  auto part = cu::DeviceBuffer::allocate(std::max<std::size_t>(
      4, static_cast<std::size_t>(seqs) * heads * split.splits * (hd + 2) * 4));
  std::vector<std::int32_t> pos(seqs, ctx - 1), seq(seqs),
      tables(static_cast<std::size_t>(seqs) * (ctx / bs));
  for (int i = 0; i < seqs; ++i) seq[i] = i;
  for (std::size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<std::int32_t>(i);
  auto dpos = cu::DeviceBuffer::allocate(pos.size() * 4),
       dseq = cu::DeviceBuffer::allocate(seq.size() * 4),
       dtab = cu::DeviceBuffer::allocate(tables.size() * 4);
  if (!pool || !q || !o || !part || !dpos || !dseq || !dtab ||
      !cu::copy_to_device(dpos->get(), pos.data(), pos.size() * 4) ||
      !cu::copy_to_device(dseq->get(), seq.data(), seq.size() * 4) ||
      !cu::copy_to_device(dtab->get(), tables.data(), tables.size() * 4) ||
      !cu::fill_bytes(pool->get(), 0, pool->bytes()) || !cu::fill_bytes(q->get(), 0, q->bytes())) {
    out["error"] = "allocation or upload failed";
    return out;
  }
  if (!cu::synchronize()) {  // the fills ran on the legacy stream
    out["error"] = "synchronize failed";
    return out;
  }
  cu::PagedBatch pb{dpos->as<std::int32_t>(), dseq->as<std::int32_t>(), dtab->as<std::int32_t>(),
                    ctx / bs, seqs};
  const double t = time_gpu(
      [&] {
        return cu::paged_attention(pool->as<float>(), L, 0, pb, q->as<float>(), o->as<float>(),
                                   heads, 0.088f, split, part->as<float>(), stream.get());
      },
      20, stream);
  const double kv_bytes = double(seqs) * ctx * kv_heads * hd * 4 * 2;
  out["sequences"] = seqs;
  out["context"] = ctx;
  out["splits"] = split.splits;
  out["gb_s"] = t > 0 ? kv_bytes / t / 1e9 : -1.0;
  return out;
}

// GPU extras: paged decode attention bandwidth (64 x 2048 positions, unsplit; 4 x 32768,
// split-K) and GEMM TFLOP/s at 4096^3 in exact FP32 and in BF16 with FP32 accumulation.
boost::json::object gpu_extras() {
  boost::json::object out;
  auto stream = cu::Stream::create();
  if (!stream) {
    out["error"] = stream.error().message;
    return out;
  }
  auto batch = decode_attention(64, 2048, *stream);
  auto long_ctx = decode_attention(4, 32768, *stream);
  out["paged_decode_attention_gb_s"] = batch["gb_s"];
  out["paged_decode_attention_long_context_gb_s"] = long_ctx["gb_s"];
  out["paged_decode_attention"] = std::move(batch);
  out["paged_decode_attention_long_context"] = std::move(long_ctx);

  const int N = 4096;
  auto blas = cu::Blas::create(stream->get());
  auto a = cu::DeviceBuffer::allocate(std::size_t(N) * N * 4),
       b = cu::DeviceBuffer::allocate(std::size_t(N) * N * 4),
       c = cu::DeviceBuffer::allocate(std::size_t(N) * N * 4),
       a16 = cu::DeviceBuffer::allocate(std::size_t(N) * N * 2),
       b16 = cu::DeviceBuffer::allocate(std::size_t(N) * N * 2);
  if (!blas || !a || !b || !c || !a16 || !b16 || !cu::fill_bytes(a->get(), 0, a->bytes()) ||
      !cu::fill_bytes(b->get(), 0, b->bytes()) || !cu::fill_bytes(a16->get(), 0, a16->bytes()) ||
      !cu::fill_bytes(b16->get(), 0, b16->bytes())) {
    out["error"] = blas ? "GEMM buffers could not be allocated" : blas.error().message;
    return out;
  }
  if (!cu::synchronize()) {
    out["error"] = "synchronize failed";
    return out;
  }
  const double flop = 2.0 * N * N * N;
  const double t32 = time_gpu(
      [&] { return blas->gemm_f32(a->as<float>(), b->as<float>(), c->as<float>(), N, N, N); }, 10,
      *stream);
  const double t16 = time_gpu(
      [&] {
        return blas->gemm_bf16(a16->as<std::uint16_t>(), b16->as<std::uint16_t>(), c->as<float>(),
                               N, N, N);
      },
      20, *stream);
  out["gemm_fp32_tflop_s"] = t32 > 0 ? flop / t32 / 1e12 : -1.0;
  out["gemm_bf16_tflop_s"] = t16 > 0 ? flop / t16 / 1e12 : -1.0;
  out["device"] = cu::device_info().name;
  out["sm_count"] = cu::sm_count();
  return out;
}
#endif

// The 1B shape (--shape 1b), per weight type: batching at 1, 8, 32 and 64 sequences, against the
// int8 dot-product peak (the unit both types' matmuls run on), 3 adjacent pairs for 32 / 1.
boost::json::object run_1b(const std::filesystem::path& dir, const Peak& dot_peak) {
  boost::json::object tok, ratio, decode_ratio, fraction, steps;
  for (auto type : {inference::GgmlType::q8_0, inference::GgmlType::q4_k}) {
    const std::string key = type == inference::GgmlType::q4_k ? "q4_k_m" : "q8_0";
    std::fprintf(stderr, "1b %s (%d threads)\n", key.c_str(), kThreads);
    auto model = random_model(type, dir, "1b", inference::RandomModelShape::tinyllama1b());
    boost::json::object out;
    Peak peak = dot_peak;  // each type's fractions against readings beside its own run
    batching(model, peak, 3, out);
    tok[key] = out["tok_s"];
    ratio[key] = out["ratio_32_1"].as_object()["median"];
    const auto& step = out["step_32"].as_object();
    fraction[key] = step.contains("matmul_fraction_of_peak") ? step.at("matmul_fraction_of_peak")
                                                             : boost::json::value(0.0);
    if (out.contains("decode_ratio_32_1"))
      decode_ratio[key] = out["decode_ratio_32_1"].as_object()["median"];
    steps[key] = boost::json::object{
        {"step_32", out["step_32"]},           {"prompt_32", out["prompt_32"]},
        {"ratio_32_1", out["ratio_32_1"]},     {"decode_ratio_32_1", out["decode_ratio_32_1"]},
        {"decode_tok_s", out["decode_tok_s"]}, {"peak_32", out["peak_32"]}};
  }
  return {{"tok_s_1b", tok},
          {"ratio_32_1_1b", ratio},
          {"decode_ratio_32_1_1b", decode_ratio},
          {"matmul_peak_fraction_1b", fraction},
          {"steps_1b", steps}};
}

int main(int argc, char** argv) {
  bool run_f32 = true, run_q8 = true;       // --types
  bool shape_15m = true, shape_1b = false;  // --shape
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      auto d = inference::parse_device(argv[++i]);
      if (!d) {
        std::fprintf(stderr, "bench_engine: %s\n", d.error().message.c_str());
        return 1;
      }
      g_device = *d;
    } else if (std::strcmp(argv[i], "--kv-cache-type") == 0 && i + 1 < argc) {
      auto t = inference::parse_kv_type(argv[++i]);
      if (!t) {
        std::fprintf(stderr, "bench_engine: %s\n", t.error().message.c_str());
        return 1;
      }
      g_kv_type = *t;
    } else if (std::strcmp(argv[i], "--types") == 0 && i + 1 < argc) {
      const std::string list = argv[++i];
      run_f32 = list.find("f32") != std::string::npos;
      run_q8 = list.find("q8_0") != std::string::npos;
      if (!run_f32 && !run_q8) {
        std::fprintf(stderr, "bench_engine: --types takes f32, q8_0 or f32,q8_0, not '%s'\n",
                     list.c_str());
        return 1;
      }
    } else if (std::strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
      const std::string list = argv[++i];
      shape_15m = list.find("15m") != std::string::npos;
      shape_1b = list.find("1b") != std::string::npos;
      if (!shape_15m && !shape_1b) {
        std::fprintf(stderr, "bench_engine: --shape takes 15m, 1b or 15m,1b, not '%s'\n",
                     list.c_str());
        return 1;
      }
    } else if (std::strcmp(argv[i], "--json") != 0) {  // the JSON is always printed
      std::fprintf(stderr,
                   "usage: bench_engine [--device cpu|cuda] [--kv-cache-type f32|f16|q8_0] "
                   "[--types f32,q8_0] [--shape 15m,1b] [--json]\n");
      return 1;
    }
  }
  const auto dir = std::filesystem::temp_directory_path() / "weir-bench-models-v2";
  // The units the batched matmuls run on, measured: F32 FMA (F32 weights) and int8 dot products
  // (Q8_0 weights, AVX-512 VNNI), all threads.
  // Each measured once here on all threads and on one (per core); the runs measure theirs again
  // beside their 32-sequence runs (Peak).
  Peak fma_peak(measured_fma_gflop_s), dot_peak(measured_int8_dot_gop_s);
  const double fma = fma_peak.measure(), dot = dot_peak.measure();
  std::fprintf(stderr,
               "peaks (%d threads): F32 FMA %.0f GFLOP/s, int8 dot %.0f Gop/s; one core: %.0f, "
               "%.0f\n",
               kThreads, fma, dot, fma_peak.per_core(), dot_peak.per_core());
  boost::json::object out;
  if (shape_15m && run_f32) {
    std::fprintf(stderr, "F32 (%d threads)\n", kThreads);
    out = run(inference::GgmlType::f32, dir, fma_peak);
  }
  if (shape_15m && run_q8) {
    std::fprintf(stderr, "Q8_0 (%d threads)\n", kThreads);
    out["q8_0"] = run(inference::GgmlType::q8_0, dir, dot_peak);
  }
  if (shape_1b) {
    for (auto& [k, v] : run_1b(dir, dot_peak)) out[k] = v;
    out["load_average"] = load_average_1m();
  }
  out["kv_cache_type"] = inference::kv_type_name(g_kv_type);
  out["peak_fma_gflop_s"] = fma;
  out["peak_int8_dot_gop_s"] = dot;
  out["peak_fma_gflop_s_per_core"] = fma_peak.per_core();
  out["peak_int8_dot_gop_s_per_core"] = dot_peak.per_core();
  out["threads"] = kThreads;
  out["device"] = g_device == inference::Device::cuda ? "cuda" : "cpu";
#if WEIR_BENCH_CUDA
  if (g_device == inference::Device::cuda) out["gpu"] = gpu_extras();
#endif
  out["peak_rss_mb"] = peak_rss_mb();
  std::printf("%s\n", to_json_text(out).c_str());
}
