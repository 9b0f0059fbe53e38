// bench_inference: single-sequence prefill and decode speed of the CPU forward pass, 1 thread
// and all hardware threads, per shape:
//   15m  llama2.c's 15M shape, F32, Q8_0, Q4_0 and Q4_K (the Q4_K_M mix). Its dim (288) is not
//        a multiple of 256, so its Q4_K file is mostly Q4_0 (the mix's fallback, as in
//        llama.cpp); `*_d256` rows run the same shape with dim 256 (8 heads), where every
//        matrix is Q4_K or Q6_K, against Q4_0 on that shape.
//   1b   the TinyLlama-1.1B shape (dim 2048, 22 layers, 32 heads, 4 KV heads, hidden 5632,
//        vocab 32000) in Q4_K (the Q4_K_M mix), Q8_0 and Q4_0, random weights, written once
//        into $TMPDIR/weir-bench-models-v2. Decoding one token streams every weight from DRAM,
//        so beside it the run measures the machine's read bandwidth (a streaming sum over a
//        buffer far larger than the last-level cache; the best of a probe before each type and
//        one at the end) and reports
//          roofline_fraction = decode tok/s x weight bytes read per token / stream_read_gb_s,
//        and the same against a sum over the model's own weights (model_read_gb_s_1b,
//        roofline_fraction_model_1b), measured right after each decode,
//        and prefill (512 tokens) in GFLOP/s (2 x weights x tokens, attention left out).
// Reproduce: build/bin/bench_inference --json [--shapes 15m,1b]   (default: 15m)
// For profiling one configuration of the 1b shape: --types q4_k,q8_0,q4_0 (default: all three),
// --threads N (1 or all hardware threads; default: both) and --prompt N (the prefill's tokens;
// default 512 with all threads, 64 with one). --file-layout keeps every weight as the file has
// it (ModelOptions::cpu_layout off: Q4_K, Q6_K and Q4_0 not rearranged for the VNNI kernels),
// for comparing.
//
// Cold start (1b, per type; --load-only skips the decode and prefill measurements): each load
// runs in a fresh child process (this binary again), so its peak RSS is its own (wait4):
//   load_s            Model::load reading the rearranged copy beside the file (median of 3)
//   load_floor_s      the floor, what llama.cpp's load costs on x86 for Q8_0: mmap the file
//                     with MAP_POPULATE and touch every page (median of 3, interleaved with the
//                     above); load_ratio = load_s / load_floor_s
//   load_rearrange_s  Model::load with WEIR_MODEL_CACHE=off: reading the file and rearranging
//                     on every thread (median of 3)
//   load_first_s      the first load: rearranging (the copy is written in the background);
//                     load_first_process_s that child's whole life, writing and flushing the
//                     copy included
//   load_peak_rss_mb  the cached load's peak RSS; load_steady_rss_mb its RSS once loaded;
//                     load_rearrange_peak_rss_mb and load_floor_peak_rss_mb likewise
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>
#include <thread>

#include <boost/json.hpp>

#include "bench_util.hpp"
#include "weir/runtime/json_write.hpp"

using namespace weir;
using namespace weir::bench;
using inference::GgmlType;

namespace {

// The 15M shape with dim 256 and 8 heads of 32 (rows of 256 and 768), seed 42.
std::shared_ptr<const inference::Model> model_d256(GgmlType type,
                                                   const std::filesystem::path& dir) {
  auto shape = inference::RandomModelShape::stories15m();
  shape.dim = 256, shape.n_heads = shape.n_kv_heads = 8;
  return random_model(type, dir, "15m-d256", shape);
}

std::string type_key(GgmlType type) {
  std::string t = inference::ggml_type_name(type);
  for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return t;
}

// Read bandwidth: each thread sums its own slice of a 1 GiB buffer (8 bytes at a time, four
// accumulators so the adds do not serialise); the best of 5 passes.
// GB/s of a streaming sum over `words` 64-bit words with `threads` threads, best of `passes`.
double read_gb_s(const std::uint64_t* buf, std::size_t words, int threads, int passes) {
  double best = 0;
  std::vector<std::uint64_t> sums(static_cast<std::size_t>(threads));
  for (int pass = 0; pass < passes; ++pass) {
    auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const std::size_t lo =
            words * static_cast<std::size_t>(t) / static_cast<std::size_t>(threads);
        const std::size_t hi =
            words * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(threads);
        std::uint64_t a = 0, b = 0, c = 0, d = 0;
        for (std::size_t i = lo; i + 4 <= hi; i += 4) {
          a += buf[i], b += buf[i + 1], c += buf[i + 2], d += buf[i + 3];
        }
        sums[static_cast<std::size_t>(t)] = a + b + c + d;
      });
    }
    for (auto& th : pool) th.join();
    best = std::max(best,
                    static_cast<double>(words * sizeof(std::uint64_t)) / seconds_since(t0) / 1e9);
  }
  if (std::accumulate(sums.begin(), sums.end(), std::uint64_t{0}) == 42) std::fputs("", stderr);
  return best;
}

double stream_read_gb_s(int threads) {
  const std::size_t n = (std::size_t{1} << 30) / sizeof(std::uint64_t);
  static std::vector<std::uint64_t> buf;
  if (buf.empty()) {
    buf.resize(n);
    std::iota(buf.begin(), buf.end(), std::uint64_t{1});  // touched: real pages, not zero pages
  }
  return read_gb_s(buf.data(), n, threads, 5);
}

// The same sum over the model's own weights (the tensors' bytes in its mapping), best of 3.
// On the development VM the probe's buffer and the model's pages can land in memory of
// different speed (one run: the probe 51 GB/s, decode reading 32 GB/s, as in every run whose
// probe read 33), so this says what the model's bytes allow.
double model_read_gb_s(const inference::Model& m, int threads) {
  const auto& ts = m.gguf().tensors();
  const std::byte* lo = ts.front().data;
  const std::byte* hi = lo;
  for (const auto& t : ts) {
    lo = std::min(lo, t.data);
    hi = std::max(hi, t.data + t.n_bytes);
  }
  const auto first = (reinterpret_cast<std::uintptr_t>(lo) + 7) & ~std::uintptr_t{7};
  const std::size_t words = (reinterpret_cast<std::uintptr_t>(hi) - first) / 8;
  return read_gb_s(reinterpret_cast<const std::uint64_t*>(first), words, threads, 3);
}

// Bytes a decode step reads: every matrix once, but only one row of the token embedding.
double weight_bytes_per_token(const inference::Model& m) {
  const auto& e = m.token_embd();
  const double embd = static_cast<double>(e.row_bytes()) * static_cast<double>(e.rows);
  const double tied = m.hp().tied_output ? embd : 0;  // the classifier reads it whole then
  return static_cast<double>(m.weight_bytes()) - embd + tied + static_cast<double>(e.row_bytes());
}

// Weights of the matrices a token goes through (the embedding is a lookup, not a product).
double matrix_params(const inference::Model& m) {
  auto n = [](const inference::Weight& w) { return static_cast<double>(w.rows * w.cols); };
  double total = n(m.output());
  for (const auto& l : m.layers())
    total += n(l.wq) + n(l.wk) + n(l.wv) + n(l.wo) + n(l.w_gate) + n(l.w_up) + n(l.w_down);
  return total;
}

struct Speeds {
  double prefill_tok_s = 0, decode_tok_s = 0;
};

// Best of `reps`: prefill of `prompt` tokens (1 generated), then decode of `gen` tokens.
Speeds measure(const std::shared_ptr<const inference::Model>& model, int threads, int prompt,
               int gen, int reps, std::mt19937& rng) {
  auto engine = *inference::Engine::create(
      inference::make_llama_runner(model, threads),
      {.max_num_seqs = 1,
       .max_num_batched_tokens = std::max(256, prompt),
       .max_model_len = std::min<std::int64_t>(model->hp().context_length, 2048),
       .block_size = 16,
       .kv_cache_bytes = std::size_t{256} << 20});
  Speeds s;
  for (int rep = 0; rep < reps; ++rep) {
    inference::GenerateRequest p;
    p.prompt = random_prompt(rng, prompt, model->hp().n_vocab);
    p.max_new_tokens = 1;
    auto t0 = Clock::now();
    auto r = submit(*engine, p).get();
    s.prefill_tok_s = std::max(s.prefill_tok_s, prompt / seconds_since(t0));
    inference::GenerateRequest d;
    d.prompt = random_prompt(rng, 8, model->hp().n_vocab);
    d.max_new_tokens = gen;
    auto res = submit(*engine, d).get();
    const double decode_s = (res->timings.total_ms - res->timings.first_token_ms) / 1000.0;
    s.decode_tok_s = std::max(s.decode_tok_s, (res->tokens.size() - 1) / decode_s);
  }
  return s;
}

}  // namespace

// ---- Cold start, measured in child processes ----

double rss_mb_now() {
  std::ifstream f("/proc/self/statm");
  double pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

// The child: `--load-child weir|floor PATH [--file-layout]`; prints "seconds rss_mb".
int load_child(const std::string& mode, const std::filesystem::path& path) {
  const auto t0 = Clock::now();
  if (mode == "floor") {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    const auto size = static_cast<std::size_t>(std::filesystem::file_size(path));
    void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) return 1;
    unsigned sum = 0;
    for (std::size_t i = 0; i < size; i += 4096) sum += static_cast<const unsigned char*>(m)[i];
    const double s = seconds_since(t0);
    std::printf("%.6f %.1f %u\n", s, rss_mb_now(), sum & 0);
    return 0;
  }
  auto model = inference::Model::load(path, bench_model_options());
  if (!model) {
    std::fprintf(stderr, "%s\n", model.error().message.c_str());
    return 1;
  }
  const double s = seconds_since(t0);
  std::printf("%.6f %.1f\n", s, rss_mb_now());
  return 0;
}

struct ChildLoad {
  double seconds = -1, rss_mb = 0, peak_rss_mb = 0, process_s = 0;
};

// Runs this binary as a load child; `no_cache` sets WEIR_MODEL_CACHE=off for it.
ChildLoad run_load_child(const std::string& mode, const std::filesystem::path& path,
                         bool no_cache) {
  const auto t0 = Clock::now();
  int out[2];
  if (::pipe(out) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::close(out[1]);
    if (no_cache) ::setenv("WEIR_MODEL_CACHE", "off", 1);
    const std::string p = path.string();
    const char* layout = bench_model_options().cpu_layout ? nullptr : "--file-layout";
    ::execl("/proc/self/exe", "bench_inference", "--load-child", mode.c_str(), p.c_str(), layout,
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  char buf[256];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, buf + n);
  ::close(out[0]);
  int status = 0;
  rusage ru{};
  ::wait4(pid, &status, 0, &ru);
  ChildLoad r;
  std::istringstream in(text);
  if (!(in >> r.seconds >> r.rss_mb) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return {};
  r.peak_rss_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;
  r.process_s = seconds_since(t0);
  return r;
}

double median3(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], "--load-child") == 0) {
    if (argc >= 5 && std::strcmp(argv[4], "--file-layout") == 0)
      bench_model_options().cpu_layout = false;
    return load_child(argv[2], argv[3]);
  }
  std::string shapes = "15m", types = "q4_k,q8_0,q4_0";
  int only_threads = 0, prompt = 0;
  bool load_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--shapes") == 0 && i + 1 < argc) shapes = argv[++i];
    if (std::strcmp(argv[i], "--types") == 0 && i + 1 < argc) types = argv[++i];
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) only_threads = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--prompt") == 0 && i + 1 < argc) prompt = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--file-layout") == 0) bench_model_options().cpu_layout = false;
    if (std::strcmp(argv[i], "--load-only") == 0) load_only = true;
  }
  const auto dir = std::filesystem::temp_directory_path() / "weir-bench-models-v2";
  boost::json::object decode, prefill, weights, out;
  std::mt19937 rng(5);
  const int all = std::max(2, static_cast<int>(std::thread::hardware_concurrency()));

  if (shapes.find("15m") != std::string::npos) {
    const std::pair<GgmlType, bool> configs[] = {{GgmlType::f32, false},  {GgmlType::q8_0, false},
                                                 {GgmlType::q4_0, false}, {GgmlType::q4_k, false},
                                                 {GgmlType::q4_0, true},  {GgmlType::q4_k, true}};
    for (auto [type, d256] : configs) {
      auto model = d256 ? model_d256(type, dir) : model_15m(type, dir);
      const std::string tname = type_key(type) + (d256 ? "_d256" : "");
      weights[tname] = model->weight_bytes();
      for (int threads : {1, all}) {
        auto s = measure(model, threads, 128, 200, 5, rng);
        const std::string key = tname + "_" + std::to_string(threads) + "t";
        prefill[key] = s.prefill_tok_s;
        decode[key] = s.decode_tok_s;
        std::fprintf(stderr, "%-10s prefill %8.1f tok/s   decode %8.1f tok/s\n", key.c_str(),
                     s.prefill_tok_s, s.decode_tok_s);
      }
    }
    out["decode_tok_s"] = decode;
    out["prefill_tok_s"] = prefill;
    out["weights_bytes"] = weights;
  }

  if (shapes.find("1b") != std::string::npos) {
    boost::json::object bw, dec1b, roof, bytes1b, pre1b, gflops, load, model1b, roof_model;
    boost::json::object load_s, load_floor, load_ratio, load_rearr, load_first, load_peak,
        load_steady, load_rearr_peak, load_floor_peak, load_first_process;
    load["start"] = load_average_1m();
    // The read bandwidth is probed before each type and the best probe kept: on a shared machine
    // one probe can land in a busy moment, and the roofline should be what the machine can do.
    const std::string all_t = std::to_string(all) + "t";
    auto probe = [&] {
      for (const auto& [t, n] : {std::pair{std::string("1t"), 1}, std::pair{all_t, all}}) {
        const double g = stream_read_gb_s(n);
        if (!bw.contains(t) || g > bw[t].as_double()) bw[t] = g;
      }
      std::fprintf(stderr,
                   "stream read (best so far): %.1f GB/s (1 thread), %.1f GB/s (%d threads)\n",
                   bw["1t"].as_double(), bw[all_t].as_double(), all);
    };
    std::vector<std::pair<std::string, double>> decoded;  // key, decode bytes per second
    for (GgmlType type : {GgmlType::q4_k, GgmlType::q8_0, GgmlType::q4_0}) {
      if (types.find(type_key(type)) == std::string::npos) continue;
      const std::string tk = type_key(type);
      const auto path = dir / ("weir-1b-" + std::string(inference::ggml_type_name(type)) + ".gguf");
      if (!std::filesystem::exists(path))
        random_model(type, dir, "1b", inference::RandomModelShape::tinyllama1b());
      {
        // The first load after the copy is removed writes it; then 3 rounds, interleaved.
        std::filesystem::remove(path.string() + ".weir-x16");
        const ChildLoad first = run_load_child("weir", path, false);
        std::vector<double> cached, floor, rearr;
        ChildLoad c, f, r;
        for (int round = 0; round < 3; ++round) {
          f = run_load_child("floor", path, false);
          c = run_load_child("weir", path, false);
          r = run_load_child("weir", path, true);
          floor.push_back(f.seconds), cached.push_back(c.seconds), rearr.push_back(r.seconds);
        }
        load_first[tk] = first.seconds;
        load_first_process[tk] = first.process_s;
        load_s[tk] = median3(cached);
        load_floor[tk] = median3(floor);
        load_ratio[tk] = median3(cached) / median3(floor);
        load_rearr[tk] = median3(rearr);
        load_peak[tk] = c.peak_rss_mb;
        load_steady[tk] = c.rss_mb;
        load_rearr_peak[tk] = r.peak_rss_mb;
        load_floor_peak[tk] = f.peak_rss_mb;
        std::fprintf(stderr,
                     "1b %-5s load %.3f s (floor %.3f s: %.2fx; rearranging %.3f s; first, writing "
                     "the copy, %.3f s, %.3f s with it); peak RSS %.0f MB, %.0f MB once loaded "
                     "(load avg %.2f)\n",
                     tk.c_str(), median3(cached), median3(floor), median3(cached) / median3(floor),
                     median3(rearr), first.seconds, first.process_s, c.peak_rss_mb, c.rss_mb,
                     load_average_1m());
      }
      if (load_only) continue;
      auto model = random_model(type, dir, "1b", inference::RandomModelShape::tinyllama1b());
      probe();
      const double per_token = weight_bytes_per_token(*model);
      bytes1b[type_key(type)] = per_token;
      for (int threads : {1, all}) {
        if (only_threads != 0 && threads != only_threads) continue;
        const std::string t = std::to_string(threads) + "t";
        auto s = measure(model, threads, prompt ? prompt : threads == all ? 512 : 64, 32, 2, rng);
        const std::string key = type_key(type) + "_" + t;
        dec1b[key] = s.decode_tok_s;
        decoded.emplace_back(key, s.decode_tok_s * per_token);
        pre1b[key] = s.prefill_tok_s;
        // A token of prefill costs 2 FLOPs a matrix weight (attention over <= 512 positions is
        // small beside 1.1 B weights).
        gflops[key] = s.prefill_tok_s * 2.0 * matrix_params(*model) / 1e9;
        const double mbw = model_read_gb_s(*model, threads);
        model1b[key] = mbw;
        roof_model[key] = s.decode_tok_s * per_token / 1e9 / mbw;
        std::fprintf(stderr,
                     "1b %-8s decode %6.2f tok/s (%.1f GB/s; a sum over its weights: %.1f GB/s)  "
                     "prefill %6.1f tok/s\n",
                     key.c_str(), s.decode_tok_s, s.decode_tok_s * per_token / 1e9, mbw,
                     s.prefill_tok_s);
      }
    }
    if (!load_only) probe();
    for (const auto& [key, bytes_s] : decoded) {
      roof[key] = bytes_s / 1e9 / bw[key.substr(key.rfind('_') + 1)].as_double();
      std::fprintf(stderr, "1b %-8s %.2f of the roofline\n", key.c_str(), roof[key].as_double());
    }
    load["end"] = load_average_1m();
    out["stream_read_gb_s"] = bw;
    out["decode_tok_s_1b"] = dec1b;
    out["roofline_fraction_1b"] = roof;
    out["model_read_gb_s_1b"] = model1b;
    out["roofline_fraction_model_1b"] = roof_model;
    out["weight_bytes_per_token_1b"] = bytes1b;
    out["prefill_tok_s_1b"] = pre1b;
    out["prefill_gflop_s_1b"] = gflops;
    out["fma_peak_gflop_s"] = boost::json::object{
        {"1t", measured_fma_gflop_s(1)}, {std::to_string(all) + "t", measured_fma_gflop_s(all)}};
    out["load_average_1m"] = load;
    out["load_s"] = load_s;
    out["load_floor_s"] = load_floor;
    out["load_ratio"] = load_ratio;
    out["load_rearrange_s"] = load_rearr;
    out["load_first_s"] = load_first;
    out["load_first_process_s"] = load_first_process;
    out["load_peak_rss_mb"] = load_peak;
    out["load_steady_rss_mb"] = load_steady;
    out["load_rearrange_peak_rss_mb"] = load_rearr_peak;
    out["load_floor_peak_rss_mb"] = load_floor_peak;
    if (load_only) {
      out.erase("stream_read_gb_s");
      out.erase("fma_peak_gflop_s");
    }
  }
  out["peak_rss_mb"] = peak_rss_mb();
  out["cpu_layout"] = bench_model_options().cpu_layout;
  std::printf("%s\n", to_json_text(out).c_str());
}
