// bench_inference: single-sequence prefill and decode speed of the CPU forward pass on the
// 15M shape, F32, Q8_0, Q4_0 and Q4_K (the Q4_K_M mix), 1 thread and all hardware threads.
// The 15M shape's dim (288) is not a multiple of 256, so its Q4_K file is mostly Q4_0 (the
// mix's fallback, as in llama.cpp); `*_d256` rows run the same shape with dim 256 (8 heads),
// where every matrix is Q4_K or Q6_K, against Q4_0 on that shape.
// Reproduce: build/bin/bench_inference --json
#include <cctype>
#include <cstring>
#include <thread>

#include <boost/json.hpp>

#include "bench_util.hpp"

using namespace weir;
using namespace weir::bench;

// The 15M shape with dim 256 and 8 heads of 32 (rows of 256 and 768), seed 42.
std::shared_ptr<const inference::Model> model_d256(inference::GgmlType type,
                                                   const std::filesystem::path& dir) {
  auto shape = inference::RandomModelShape::stories15m();
  shape.dim = 256, shape.n_heads = shape.n_kv_heads = 8;
  return random_model(type, dir, "15m-d256", shape);
}

int main(int argc, char** argv) {
  const bool as_json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
  const auto dir = std::filesystem::temp_directory_path() / "weir-bench-models";
  boost::json::object decode, prefill, weights;
  std::mt19937 rng(5);
  const int all = std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  using inference::GgmlType;
  const std::pair<GgmlType, bool> configs[] = {{GgmlType::f32, false},  {GgmlType::q8_0, false},
                                               {GgmlType::q4_0, false}, {GgmlType::q4_k, false},
                                               {GgmlType::q4_0, true},  {GgmlType::q4_k, true}};
  for (auto [type, d256] : configs) {
    auto model = d256 ? model_d256(type, dir) : model_15m(type, dir);
    std::string tname = inference::ggml_type_name(type);
    for (auto& c : tname) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (d256) tname += "_d256";
    weights[tname] = model->weight_bytes();
    for (int threads : {1, all}) {
      auto engine = *inference::Engine::create(inference::make_llama_runner(model, threads),
                                               {.max_num_seqs = 1,
                                                .max_num_batched_tokens = 256,
                                                .block_size = 16,
                                                .kv_cache_bytes = 64u << 20});
      double best_prefill = 0, best_decode = 0;
      for (int rep = 0; rep < 5; ++rep) {
        inference::GenerateRequest p;
        p.prompt = random_prompt(rng, 128, model->hp().n_vocab);
        p.max_new_tokens = 1;
        auto t0 = Clock::now();
        auto r = submit(*engine, p).get();
        best_prefill = std::max(best_prefill, 128 / seconds_since(t0));
        inference::GenerateRequest d;
        d.prompt = random_prompt(rng, 8, model->hp().n_vocab);
        d.max_new_tokens = 200;
        auto res = submit(*engine, d).get();
        const double decode_s = (res->timings.total_ms - res->timings.first_token_ms) / 1000.0;
        best_decode = std::max(best_decode, (res->tokens.size() - 1) / decode_s);
      }
      const std::string key = tname + "_" + std::to_string(threads) + "t";
      prefill[key] = best_prefill;
      decode[key] = best_decode;
      std::fprintf(stderr, "%-8s prefill %8.1f tok/s   decode %8.1f tok/s\n", key.c_str(),
                   best_prefill, best_decode);
    }
  }
  boost::json::object out{{"decode_tok_s", decode},
                          {"prefill_tok_s", prefill},
                          {"weights_bytes", weights},
                          {"peak_rss_mb", peak_rss_mb()}};
  (void)as_json;
  std::printf("%s\n", boost::json::serialize(out).c_str());
}
