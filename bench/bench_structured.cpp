// bench_structured: structured output (constraint.hpp). Token-mask time per decode step on the
// 15M random model's 32000-token vocabulary and the largest vocabulary in
// ../shared/testdata/vocab, schema compile time, and engine throughput with and without a
// JSON Schema constraint, side by side in one run.
// Reproduce: build/bin/bench_structured --json   (see bench/README.md)
#include <algorithm>
#include <cstring>
#include <thread>

#include <boost/json.hpp>

#include "bench_util.hpp"
#include "weir/inference/constraint.hpp"
#include "weir/inference/gguf.hpp"
#include "weir/inference/tokenizer.hpp"

using namespace weir;
using namespace weir::bench;
using inference::ConstraintMatcher;
using inference::ConstraintSpec;

namespace {

// A tool call as agents send it: {"name": one of three tools, "arguments": that tool's schema}.
const char* kToolSchema = R"({"anyOf":[
 {"type":"object","properties":{"name":{"const":"search"},"arguments":{"type":"object","properties":{
   "query":{"type":"string","maxLength":64},"k":{"type":"integer","minimum":1,"maximum":50},
   "lang":{"enum":["en","fr","de"]}},"required":["query"],"additionalProperties":false}},
   "required":["name","arguments"],"additionalProperties":false},
 {"type":"object","properties":{"name":{"const":"calculator"},"arguments":{"type":"object","properties":{
   "expression":{"type":"string"}},"required":["expression"],"additionalProperties":false}},
   "required":["name","arguments"],"additionalProperties":false},
 {"type":"object","properties":{"name":{"const":"read_file"},"arguments":{"type":"object","properties":{
   "path":{"type":"string","pattern":"^[a-z0-9_/.-]{1,40}$"},"offset":{"type":"integer","minimum":0},
   "when":{"type":"string","format":"date-time"}},"required":["path"],"additionalProperties":false}},
   "required":["name","arguments"],"additionalProperties":false}]})";

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

struct MaskTimes {
  std::vector<double> all, walks;  // microseconds: every call; calls that walked the trie
};

// Random walks through the tool schema (random allowed tokens, closing ones preferred as the
// output grows), timing every fill_mask. The constraint is compiled once, as a crew would: the
// first walks fill its mask cache, later ones mostly hit it.
MaskTimes mask_times(const inference::Tokenizer& t, int n_walks) {
  MaskTimes mt;
  auto c = inference::compile_constraint({ConstraintSpec::Kind::json_schema, kToolSchema, {}}, t);
  if (!c) {
    std::fprintf(stderr, "%s\n", c.error().message.c_str());
    std::exit(1);
  }
  std::vector<std::uint64_t> mask(inference::mask_words(t.n_vocab()));
  std::vector<std::string> pieces(static_cast<std::size_t>(t.n_vocab()));
  for (std::int32_t i = 0; i < t.n_vocab(); ++i)
    pieces[static_cast<std::size_t>(i)] = t.token_to_piece(i);
  for (int w = 0; w < n_walks; ++w) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(w) + 1);
    ConstraintMatcher m(*c);
    for (int step = 0; step < 200 && !m.finished(); ++step) {
      const auto walks0 = (*c)->mask_walks();
      const auto t0 = Clock::now();
      m.fill_mask(mask);
      const double us = seconds_since(t0) * 1e6;
      mt.all.push_back(us);
      if ((*c)->mask_walks() != walks0) mt.walks.push_back(us);
      std::vector<std::int32_t> allowed;
      for (std::int32_t id = 0; id < t.n_vocab(); ++id)
        if ((mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1) allowed.push_back(id);
      if (allowed.empty() || m.complete()) break;
      std::int32_t tok = allowed[rng() % allowed.size()];
      if (step > 12) {
        for (const char* want : {"}", "\"", "]", "1"}) {
          auto it = std::find_if(allowed.begin(), allowed.end(), [&](std::int32_t id) {
            return pieces[static_cast<std::size_t>(id)] == want;
          });
          if (it != allowed.end()) {
            tok = *it;
            break;
          }
        }
      }
      if (t.is_eog(tok) || !m.accept(tok)) break;
    }
  }
  return mt;
}

std::unique_ptr<inference::Tokenizer> load_tokenizer(const std::filesystem::path& p) {
  auto f = inference::GgufFile::open(p);
  if (!f) return nullptr;
  auto t = inference::Tokenizer::from_gguf(**f);
  return t ? std::move(*t) : nullptr;
}

double throughput(inference::Engine& e, int n, std::int32_t vocab,
                  std::shared_ptr<const inference::Constraint> c, double* mean_len) {
  std::mt19937 rng(static_cast<unsigned>(n));
  std::vector<std::future<Result<inference::GenerateResult>>> fs;
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    inference::GenerateRequest rq;
    rq.prompt = random_prompt(rng, 32, vocab);
    rq.max_new_tokens = 64;
    // Greedy: temperature sampling without top-k sorts the whole vocabulary per token, which
    // would dominate both sides (and favours the masked side, whose -inf entries sort fast).
    rq.sampling.temperature = 0.0f;
    rq.constraint = c;
    fs.push_back(submit(e, rq));
  }
  std::size_t tokens = 0;
  for (auto& f : fs) {
    auto r = f.get();
    if (r) tokens += r->tokens.size();
  }
  if (mean_len) *mean_len = static_cast<double>(tokens) / n;
  return static_cast<double>(tokens) / seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  bool as_json = false;
  for (int i = 1; i < argc; ++i) as_json |= std::strcmp(argv[i], "--json") == 0;
  const auto dir = std::filesystem::temp_directory_path() / "weir-bench";
  auto model = model_15m(inference::GgmlType::f32, dir);
  const auto model_path = dir / "weir-15m-F32.gguf";
  auto tok15 = load_tokenizer(model_path);
  if (!tok15) {
    std::fprintf(stderr, "cannot read the tokenizer of %s\n", model_path.c_str());
    return 1;
  }
  boost::json::object out, p50, p99, walk50, walk99;

  // Masks: the 15M model's vocabulary and the largest shared one.
  std::vector<std::pair<std::string, const inference::Tokenizer*>> vocabs = {
      {std::to_string(tok15->n_vocab()), tok15.get()}};
  std::unique_ptr<inference::Tokenizer> big;
  std::string big_name;
  const std::filesystem::path vdir = std::filesystem::path(WEIR_SHARED_DIR) / "testdata/vocab";
  if (std::filesystem::exists(vdir)) {
    std::int32_t best = 0;
    for (const auto& e : std::filesystem::directory_iterator(vdir)) {
      if (e.path().extension() != ".gguf") continue;
      auto t = load_tokenizer(e.path());
      if (t && t->n_vocab() > best)
        best = t->n_vocab(), big = std::move(t), big_name = e.path().filename();
    }
    if (big) vocabs.emplace_back(std::to_string(big->n_vocab()), big.get());
  } else {
    std::fprintf(stderr, "%s absent: masks measured on the 15M vocabulary only\n", vdir.c_str());
  }
  for (const auto& [name, t] : vocabs) {
    auto mt = mask_times(*t, 40);
    p50[name] = pct(mt.all, 0.50);
    p99[name] = pct(mt.all, 0.99);
    walk50[name] = pct(mt.walks, 0.50);
    walk99[name] = pct(mt.walks, 0.99);
    std::fprintf(stderr,
                 "masks, vocab %s: %zu calls, p50 %.1f us, p99 %.1f us; %zu trie walks p50 %.1f us "
                 "p99 %.1f us\n",
                 name.c_str(), mt.all.size(), p50[name].as_double(), p99[name].as_double(),
                 mt.walks.size(), walk50[name].as_double(), walk99[name].as_double());
  }
  out["mask_us_p50"] = p50;
  out["mask_us_p99"] = p99;
  out["mask_walk_us_p50"] = walk50;  // masks not in the cache (a trie walk), same runs
  out["mask_walk_us_p99"] = walk99;
  if (!big_name.empty()) out["largest_vocab_file"] = big_name;

  // Compile: 100 properties of mixed types (a fresh text each time, so no cache hit).
  {
    std::vector<double> ms;
    for (int rep = 0; rep < 7; ++rep) {
      boost::json::object props;
      boost::json::array req;
      for (int i = 0; i < 100; ++i) {
        const std::string k = "field_" + std::to_string(i);
        switch (i % 5) {
          case 0:
            props[k] = {{"type", "string"}, {"maxLength", 32}};
            break;
          case 1:
            props[k] = {{"type", "integer"}, {"minimum", 0}, {"maximum", 1000}};
            break;
          case 2:
            props[k] = {{"enum", boost::json::array{"a", "b", "c"}}};
            break;
          case 3:
            props[k] = {{"type", "array"}, {"items", {{"type", "number"}}}, {"maxItems", 4}};
            break;
          default:
            props[k] = {{"type", "boolean"}};
            break;
        }
        if (i % 2 == 0) req.emplace_back(k);
      }
      boost::json::object s = {{"type", "object"},
                               {"properties", props},
                               {"required", req},
                               {"additionalProperties", false},
                               {"description", std::to_string(rep)}};
      const std::string text = boost::json::serialize(s);
      const auto t0 = Clock::now();
      auto c = inference::compile_constraint({ConstraintSpec::Kind::json_schema, text, {}}, *tok15);
      ms.push_back(seconds_since(t0) * 1e3);
      if (!c) {
        std::fprintf(stderr, "%s\n", c.error().message.c_str());
        return 1;
      }
    }
    out["compile_ms_100_props"] = pct(ms, 0.5);
    std::fprintf(stderr, "compile, 100 properties: %.2f ms (median of 7)\n", pct(ms, 0.5));
  }

  // Throughput, free and constrained, side by side on one engine.
  {
    const auto& hp = model->hp();
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const std::size_t block_bytes = static_cast<std::size_t>(
        inference::KvLayout{hp.n_layers, hp.n_kv_heads, hp.head_dim, 16, 0}.block_bytes(4));
    auto e = inference::Engine::create(inference::make_llama_runner(model, threads),
                                       {.max_num_seqs = 64,
                                        .max_num_batched_tokens = 2048,
                                        .max_model_len = 256,
                                        .block_size = 16,
                                        .kv_cache_bytes = block_bytes * 320});
    if (!e) {
      std::fprintf(stderr, "%s\n", e.error().message.c_str());
      return 1;
    }
    auto c =
        inference::compile_constraint({ConstraintSpec::Kind::json_schema, kToolSchema, {}}, *tok15);
    throughput(**e, 4, hp.n_vocab, nullptr, nullptr);  // warm up
    throughput(**e, 4, hp.n_vocab, *c, nullptr);
    boost::json::object free_s, con_s, len_s;
    for (int n : {1, 32}) {
      double f = 0, k = 0, len = 0;
      for (int rep = 0; rep < 2; ++rep) {  // interleaved, best of two each
        f = std::max(f, throughput(**e, n, hp.n_vocab, nullptr, nullptr));
        k = std::max(k, throughput(**e, n, hp.n_vocab, *c, &len));
      }
      free_s[std::to_string(n)] = f;
      con_s[std::to_string(n)] = k;
      len_s[std::to_string(n)] = len;
      std::fprintf(stderr,
                   "%2d sequences: free %.1f tok/s, constrained %.1f tok/s (mean %.1f tokens)\n", n,
                   f, k, len);
    }
    out["tok_s_free"] = free_s;
    out["tok_s_constrained"] = con_s;
    out["constrained_mean_tokens"] = len_s;
    out["constrained_vs_free_32"] = con_s["32"].as_double() / free_s["32"].as_double();
  }
  out["threads"] = static_cast<int>(std::thread::hardware_concurrency());
  if (as_json) std::printf("%s\n", boost::json::serialize(out).c_str());
  return 0;
}
