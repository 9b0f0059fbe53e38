// bench_structured: structured output (constraint.hpp). Token-mask time per decode step with the
// budget rule active, at four vocabulary sizes (the 15M random model's 32000 tokens, gpt-2's
// 50257 from ../shared/testdata/vocab, and synthetic byte-level BPE vocabularies of 128256 and
// 151936, Llama 3's and Qwen2's sizes); the first mask of a freshly compiled schema; schema
// compile time; engine throughput with and without a JSON Schema constraint, side by side in
// one run; and complete_within_budget: the fraction of (random schema, random budget at least
// its min_tokens) pairs whose output validates, through the engine on the 15M random model.
// Reproduce: build/bin/bench_structured --json [--pairs N]   (see bench/README.md)
#include <algorithm>
#include <cstring>
#include <ctime>
#include <set>
#include <thread>

#include <boost/json.hpp>

#include "bench_util.hpp"
#include "weir/inference/constraint.hpp"
#include "weir/inference/gguf.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/inference/tokenizer.hpp"
#include "weir/tools/schema.hpp"

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

std::unique_ptr<inference::Tokenizer> load_tokenizer(const std::filesystem::path& p);

// The calling thread's CPU time: what a call costs without the time the scheduler gave other
// processes meanwhile (this machine is shared; a preempted call reads milliseconds of wall time).
double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

struct MaskTimes {
  // microseconds: every call; calls that walked the trie; calls where the budget bound (a
  // mask of its own: the budget left less than the plain mask's tokens may need); and every
  // call's thread CPU time
  std::vector<double> all, walks, bound, cpu;
};

// Random walks through the tool schema, each within a random budget of at least its
// min_tokens (random allowed tokens: the budget rule closes the call), timing every fill_mask.
// The constraint is compiled once, as a crew would: the first walks fill its mask cache, later
// ones mostly hit it.
MaskTimes mask_times(const inference::Tokenizer& t, int n_walks) {
  MaskTimes mt;
  auto c = inference::compile_constraint({ConstraintSpec::Kind::json_schema, kToolSchema, {}}, t);
  if (!c) {
    std::fprintf(stderr, "%s\n", c.error().message.c_str());
    std::exit(1);
  }
  const std::int32_t need = (*c)->min_tokens();
  std::vector<std::uint64_t> mask(inference::mask_words(t.n_vocab())), plain(mask.size());
  for (int w = 0; w < n_walks; ++w) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(w) + 1);
    ConstraintMatcher m(*c);
    for (int left = need + static_cast<int>(rng() % 80); left > 0 && !m.finished(); --left) {
      const auto walks0 = (*c)->mask_walks();
      const double cpu0 = thread_cpu_us();
      const auto t0 = Clock::now();
      m.fill_mask(mask, left);
      const double us = seconds_since(t0) * 1e6;
      mt.cpu.push_back(thread_cpu_us() - cpu0);
      mt.all.push_back(us);
      if ((*c)->mask_walks() != walks0) mt.walks.push_back(us);
      m.fill_mask(plain);  // (cached: what the mask would be without the budget)
      if (plain != mask) mt.bound.push_back(us);
      std::vector<std::int32_t> allowed;
      for (std::int32_t id = 0; id < t.n_vocab(); ++id)
        if ((mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1) allowed.push_back(id);
      if (allowed.empty()) break;
      const std::int32_t tok = allowed[rng() % allowed.size()];
      if (t.is_eog(tok) || !m.accept(tok)) break;
    }
  }
  return mt;
}

struct FirstMask {
  std::vector<double> compile_ms, min_tokens_us, first_us;
};

// A freshly compiled schema (the tool schema with a new description: no cache hit), then what a
// request's admission does: its min_tokens, and the first mask within a budget.
FirstMask first_masks(const inference::Tokenizer& t, int n) {
  FirstMask fm;
  std::vector<std::uint64_t> mask(inference::mask_words(t.n_vocab()));
  for (int i = 0; i < n; ++i) {
    auto s = boost::json::parse(kToolSchema).as_object();
    s["description"] = "fresh " + std::to_string(i) + " " + std::to_string(t.n_vocab());
    const std::string text = boost::json::serialize(s);
    auto t0 = Clock::now();
    auto c = inference::compile_constraint({ConstraintSpec::Kind::json_schema, text, {}}, t);
    fm.compile_ms.push_back(seconds_since(t0) * 1e3);
    if (!c) std::exit(1);
    t0 = Clock::now();
    const std::int32_t need = (*c)->min_tokens();
    fm.min_tokens_us.push_back(seconds_since(t0) * 1e6);
    ConstraintMatcher m(*c);
    t0 = Clock::now();
    m.fill_mask(mask, need + 8);
    fm.first_us.push_back(seconds_since(t0) * 1e6);
  }
  return fm;
}

// A synthetic byte-level BPE vocabulary of `n` tokens (gpt-2's byte alphabet): the 256 bytes,
// JSON punctuation runs, numbers of up to 3 digits, whitespace runs, pseudo-words from
// syllables (bare, with a leading space, capitalised, snake_case), and multi-byte characters;
// written once as a vocabulary-only GGUF and loaded like any model's tokenizer.
std::unique_ptr<inference::Tokenizer> synthetic_bpe(std::int32_t n,
                                                    const std::filesystem::path& dir) {
  const auto path = dir / ("weir-bpe-" + std::to_string(n) + ".gguf");
  if (!std::filesystem::exists(path)) {
    std::vector<std::string> raw;
    std::set<std::string> seen;
    auto add = [&](std::string p) {
      if (static_cast<std::int32_t>(raw.size()) < n - 1 && !p.empty() && seen.insert(p).second)
        raw.push_back(std::move(p));
    };
    for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
    for (const char* p : {"\":",   "\",",   "\"}",    "{\"",   "\":\"", "\"],", "},{\"",
                          " {\"",  "\": ",  "\", \"", "\"}}",  "}}",    "]}",   "[{\"",
                          "\"]",   "\":[",  "\":{\"", "\",\"", "\"},",  "null", "true",
                          "false", " null", " true",  " false"})
      add(p);
    for (int i = 0; i < 1000; ++i) add(std::to_string(i));
    for (int k = 1; k <= 16; ++k) add(std::string(static_cast<std::size_t>(k), ' '));
    for (int k = 1; k <= 4; ++k) add(std::string(static_cast<std::size_t>(k), '\n'));
    for (int c = 0xC0; c < 0x250; ++c) {  // accented Latin
      std::string u;
      u += static_cast<char>(0xC0 | (c >> 6));
      u += static_cast<char>(0x80 | (c & 0x3F));
      add(u);
    }
    const char* onset[] = {"",   "b",  "c",  "d",  "f",  "g",  "h",  "j",  "k",  "l",
                           "m",  "n",  "p",  "r",  "s",  "t",  "v",  "w",  "z",  "ch",
                           "sh", "th", "st", "tr", "pl", "gr", "br", "cl", "qu", "sp"};
    const char* vowel[] = {"a", "e", "i", "o", "u", "ai", "ea", "ou", "io", "y", "ee", "oo"};
    const char* coda[] = {"", "", "n", "r", "s", "t", "l", "ng", "st", "nd", "ck", "m", "x"};
    std::mt19937_64 rng(static_cast<std::uint64_t>(n));
    auto pick = [&](auto& arr) { return std::string(arr[rng() % std::size(arr)]); };
    for (int guard = 0; static_cast<std::int32_t>(raw.size()) < n - 1 && guard < 50 * n; ++guard) {
      std::string w;
      const int syllables = 1 + static_cast<int>(rng() % 3) + (rng() % 4 == 0);
      for (int k = 0; k < syllables; ++k) w += pick(onset) + pick(vowel) + pick(coda);
      switch (rng() % 8) {
        case 0:
          add(w);
          break;
        case 1:
          w[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(w[0])));
          add(" " + w);
          break;
        case 2:
          add(w + "_" + pick(onset) + pick(vowel));
          break;
        case 3: {  // a CJK character
          const std::uint32_t cp = 0x4E00 + static_cast<std::uint32_t>(rng() % 0x5000);
          std::string u;
          u += static_cast<char>(0xE0 | (cp >> 12));
          u += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
          u += static_cast<char>(0x80 | (cp & 0x3F));
          add(u);
          break;
        }
        default:
          add(" " + w);
          break;
      }
    }
    // gpt-2's byte alphabet: printable bytes as themselves, the others as U+0100 onwards.
    std::string map[256];
    for (int b = 0, extra = 0; b < 256; ++b) {
      const bool direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const std::uint32_t cp =
          direct ? static_cast<std::uint32_t>(b) : 256u + static_cast<std::uint32_t>(extra++);
      if (cp < 0x80)
        map[b] = std::string(1, static_cast<char>(cp));
      else
        map[b] = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
    std::vector<std::string> tokens;
    std::vector<std::int32_t> types;
    for (const auto& r : raw) {
      std::string t;
      for (unsigned char c : r) t += map[c];
      tokens.push_back(std::move(t));
      types.push_back(1);
    }
    tokens.push_back("<|endoftext|>");
    types.push_back(3);
    inference::GgufWriter g;
    g.add_string("general.architecture", "llama");
    g.add_string("tokenizer.ggml.model", "gpt2");
    g.add_strings("tokenizer.ggml.tokens", tokens);
    g.add_i32s("tokenizer.ggml.token_type", types);
    g.add_strings("tokenizer.ggml.merges", {map[' '] + " t"});
    g.add_u32("tokenizer.ggml.eos_token_id", static_cast<std::uint32_t>(tokens.size() - 1));
    g.add_u32("tokenizer.ggml.bos_token_id", static_cast<std::uint32_t>(tokens.size() - 1));
    std::filesystem::create_directories(dir);
    if (auto st = g.write(path); !st) {
      std::fprintf(stderr, "%s\n", st.error().message.c_str());
      std::exit(1);
    }
  }
  auto t = load_tokenizer(path);
  if (!t) {
    std::fprintf(stderr, "cannot read the synthetic vocabulary %s\n", path.c_str());
    std::exit(1);
  }
  return t;
}

// The random schemas of complete_within_budget: strings without bounds (a random model never
// closes one by itself), arrays and objects of any size, optional members, enums of unequal
// lengths, numbers, formats, nesting.
boost::json::value random_schema(std::mt19937_64& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  switch (depth >= 2 ? pick(7) : pick(11)) {
    case 0:
      return {{"type", "string"}};
    case 1:
      return {{"type", "string"}, {"minLength", pick(4)}};
    case 2:
      return {{"type", "integer"}, {"minimum", pick(100) - 50}};
    case 3:
      return {{"type", "number"}};
    case 4:
      return {{"enum", boost::json::array{"short", "a much longer choice", 12345, nullptr}}};
    case 5:
      return {{"type", "boolean"}};
    case 6:
      return {{"type", "string"}, {"format", pick(2) ? "date-time" : "email"}};
    case 7: {
      boost::json::object props;
      boost::json::array req;
      const int n = 1 + pick(4);
      for (int i = 0; i < n; ++i) {
        std::string k = i == 0 ? "name" : "field_" + std::to_string(i);
        props[k] = random_schema(rng, depth + 1);
        if (pick(2)) req.emplace_back(k);
      }
      boost::json::object o{{"type", "object"}, {"properties", props}, {"required", req}};
      o["additionalProperties"] = pick(3) == 0 ? random_schema(rng, depth + 1) : false;
      return o;
    }
    case 8: {
      boost::json::object a{{"type", "array"}, {"items", random_schema(rng, depth + 1)}};
      if (pick(2)) a["minItems"] = pick(3);
      return a;
    }
    case 9:
      return {{"type", "object"}};
    default:
      return {{"anyOf",
               boost::json::array{random_schema(rng, depth + 1), random_schema(rng, depth + 1)}}};
  }
}

struct Completion {
  int pairs = 0, valid = 0, refused = 0, stopped = 0;
  double mean_tokens = 0, mean_budget = 0;
};

// complete_within_budget: `pairs` (random schema, random budget >= its min_tokens) requests
// through the engine, 64 at a time, temperature 1; each output parsed and checked with
// weir::tools' validator.
Completion complete_within_budget(inference::Engine& e, const inference::Tokenizer& t, int pairs) {
  Completion out;
  std::mt19937_64 rng(2026);
  std::mt19937 prompt_rng(7);
  double tokens = 0, budgets = 0;
  for (int done = 0; done < pairs;) {
    struct Pending {
      boost::json::value schema;
      std::future<Result<inference::GenerateResult>> f;
    };
    std::vector<Pending> batch;
    for (; done < pairs && batch.size() < 64; ++done) {
      boost::json::value s = random_schema(rng, 0);
      auto c = inference::compile_constraint(
          {ConstraintSpec::Kind::json_schema, boost::json::serialize(s), {}}, t);
      if (!c) {
        std::fprintf(stderr, "%s\n", c.error().message.c_str());
        std::exit(1);
      }
      inference::GenerateRequest rq;
      rq.prompt = random_prompt(prompt_rng, 16, t.n_vocab());
      rq.max_new_tokens = (*c)->min_tokens() + static_cast<std::int32_t>(rng() % 48);
      rq.sampling.temperature = 1.0f;
      rq.sampling.seed = rng();
      rq.constraint = *c;
      budgets += rq.max_new_tokens;
      batch.push_back({std::move(s), submit(e, rq)});
    }
    for (auto& p : batch) {
      ++out.pairs;
      auto r = p.f.get();
      if (!r) {
        ++out.refused;
        continue;
      }
      tokens += static_cast<double>(r->tokens.size());
      out.stopped +=
          r->finish == inference::FinishReason::stop || r->finish == inference::FinishReason::eos;
      boost::system::error_code ec;
      auto v = boost::json::parse(t.decode(r->tokens), ec);
      if (!ec && tools::validate(p.schema, v)) ++out.valid;
    }
  }
  out.mean_tokens = tokens / std::max(1, out.pairs - out.refused);
  out.mean_budget = budgets / std::max(1, out.pairs);
  return out;
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

// Masks at four vocabulary sizes: the 15M model's, gpt-2's (synthetic when ../shared is
// absent), and synthetic byte-level BPE at Llama 3's and Qwen2's sizes.
void bench_masks(const inference::Tokenizer& tok15, const std::filesystem::path& dir,
                 boost::json::object& out) {
  boost::json::object p50, p99, walk50, walk99, bound50, bound99, first50, first_max, min_us,
      vocab_src, cpu50, cpu99;
  std::vector<std::unique_ptr<inference::Tokenizer>> owned;
  std::vector<std::pair<std::string, const inference::Tokenizer*>> vocabs = {
      {std::to_string(tok15.n_vocab()), &tok15}};
  vocab_src[std::to_string(tok15.n_vocab())] = "15M random model (SentencePiece)";
  const auto gpt2 = std::filesystem::path(WEIR_SHARED_DIR) / "testdata/vocab/ggml-vocab-gpt-2.gguf";
  if (auto t = std::filesystem::exists(gpt2) ? load_tokenizer(gpt2) : nullptr) {
    vocab_src[std::to_string(t->n_vocab())] = "ggml-vocab-gpt-2.gguf";
    owned.push_back(std::move(t));
  } else {
    vocab_src["50257"] = "synthetic byte-level BPE";
    owned.push_back(synthetic_bpe(50257, dir));
  }
  vocabs.emplace_back(std::to_string(owned.back()->n_vocab()), owned.back().get());
  for (std::int32_t n : {128256, 151936}) {
    owned.push_back(synthetic_bpe(n, dir));
    vocabs.emplace_back(std::to_string(n), owned.back().get());
    vocab_src[std::to_string(n)] = "synthetic byte-level BPE";
  }
  for (const auto& [name, t] : vocabs) {
    auto mt = mask_times(*t, 40);
    p50[name] = pct(mt.all, 0.50);
    p99[name] = pct(mt.all, 0.99);
    walk50[name] = pct(mt.walks, 0.50);
    walk99[name] = pct(mt.walks, 0.99);
    bound50[name] = pct(mt.bound, 0.50);
    bound99[name] = pct(mt.bound, 0.99);
    cpu50[name] = pct(mt.cpu, 0.50);
    cpu99[name] = pct(mt.cpu, 0.99);
    auto fm = first_masks(*t, 15);
    first50[name] = pct(fm.first_us, 0.50);
    first_max[name] = *std::max_element(fm.first_us.begin(), fm.first_us.end());
    min_us[name] = pct(fm.min_tokens_us, 0.50);
    std::fprintf(
        stderr,
        "masks, vocab %s: %zu calls, p50 %.1f us, p99 %.1f us; %zu trie walks p50 %.1f us "
        "p99 %.1f us; %zu bound by the budget p50 %.1f us p99 %.1f us; thread CPU p50 %.1f us "
        "p99 %.1f us; first mask of a fresh schema p50 %.1f us max %.1f us (min_tokens "
        "%.1f us)\n",
        name.c_str(), mt.all.size(), p50[name].as_double(), p99[name].as_double(), mt.walks.size(),
        walk50[name].as_double(), walk99[name].as_double(), mt.bound.size(),
        bound50[name].as_double(), bound99[name].as_double(), cpu50[name].as_double(),
        cpu99[name].as_double(), first50[name].as_double(), first_max[name].as_double(),
        min_us[name].as_double());
  }
  out["mask_us_p50"] = p50;  // every fill_mask with the budget rule active
  out["mask_us_p99"] = p99;
  out["mask_walk_us_p50"] = walk50;  // masks not in the cache (a trie walk), same runs
  out["mask_walk_us_p99"] = walk99;
  out["mask_budget_us_p50"] = bound50;  // masks the budget changed, same runs
  out["mask_budget_us_p99"] = bound99;
  out["mask_cpu_us_p50"] = cpu50;  // the same calls' thread CPU time (no preemption)
  out["mask_cpu_us_p99"] = cpu99;
  out["first_mask_us_p50"] = first50;  // of a freshly compiled schema, within a budget
  out["first_mask_us_max"] = first_max;
  out["min_tokens_us_p50"] = min_us;  // a fresh schema's min_tokens (a request's admission)
  out["vocabularies"] = vocab_src;
}

// Compile: 100 properties of mixed types (a fresh text each time, so no cache hit).
bool bench_compile(const inference::Tokenizer& tok15, boost::json::object& out) {
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
    auto c = inference::compile_constraint({ConstraintSpec::Kind::json_schema, text, {}}, tok15);
    ms.push_back(seconds_since(t0) * 1e3);
    if (!c) {
      std::fprintf(stderr, "%s\n", c.error().message.c_str());
      return false;
    }
  }
  out["compile_ms_100_props"] = pct(ms, 0.5);
  std::fprintf(stderr, "compile, 100 properties: %.2f ms (median of 7)\n", pct(ms, 0.5));
  return true;
}

// Throughput, free and constrained, side by side on one engine.
bool bench_throughput(const std::shared_ptr<const inference::Model>& model,
                      const inference::Tokenizer& tok15, boost::json::object& out) {
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
    return false;
  }
  auto c =
      inference::compile_constraint({ConstraintSpec::Kind::json_schema, kToolSchema, {}}, tok15);
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
  return true;
}

// complete_within_budget: random schemas and budgets through the engine (15M random model).
bool bench_complete(const std::shared_ptr<const inference::Model>& model,
                    const inference::Tokenizer& tok15, int pairs, boost::json::object& out) {
  const auto& hp = model->hp();
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto e = inference::Engine::create(
      inference::make_llama_runner(model, threads),
      {.max_num_seqs = 64,
       .max_num_batched_tokens = 2048,
       .max_model_len = 256,
       .kv_cache_bytes = static_cast<std::size_t>(
           inference::KvLayout{hp.n_layers, hp.n_kv_heads, hp.head_dim, 16, 0}.block_bytes(4) * 16 *
           64),
       .eog_tokens = tok15.eog_tokens()});
  if (!e) {
    std::fprintf(stderr, "%s\n", e.error().message.c_str());
    return false;
  }
  const auto t0 = Clock::now();
  Completion c = complete_within_budget(**e, tok15, pairs);
  out["complete_within_budget"] = static_cast<double>(c.valid) / c.pairs;
  out["complete_pairs"] = c.pairs;
  out["complete_refused"] = c.refused;
  out["complete_stopped"] = c.stopped;  // finish reason stop or eos (never length)
  out["complete_mean_tokens"] = c.mean_tokens;
  out["complete_mean_budget"] = c.mean_budget;
  std::fprintf(stderr,
               "complete_within_budget: %d of %d valid (%d refused, %d ended stop/eos), mean %.1f "
               "tokens of a mean budget of %.1f, %.1f s\n",
               c.valid, c.pairs, c.refused, c.stopped, c.mean_tokens, c.mean_budget,
               seconds_since(t0));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bool as_json = false;
  int pairs = 1000;
  std::string only;  // one section: masks, compile, throughput or complete
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      as_json = true;
    } else if (std::strcmp(argv[i], "--pairs") == 0 && i + 1 < argc) {
      pairs = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: bench_structured [--json] [--pairs N] "
                   "[--only masks|compile|throughput|complete]\n");
      return 1;
    }
  }
  auto run = [&](const char* section) { return only.empty() || only == section; };
  const auto dir = std::filesystem::temp_directory_path() / "weir-bench";
  auto model = model_15m(inference::GgmlType::f32, dir);
  const auto model_path = dir / "weir-15m-F32.gguf";
  auto tok15 = load_tokenizer(model_path);
  if (!tok15) {
    std::fprintf(stderr, "cannot read the tokenizer of %s\n", model_path.c_str());
    return 1;
  }
  boost::json::object out;
  if (run("masks")) bench_masks(*tok15, dir, out);
  if (run("compile") && !bench_compile(*tok15, out)) return 1;
  if (run("throughput") && !bench_throughput(model, *tok15, out)) return 1;
  if (run("complete") && !bench_complete(model, *tok15, pairs, out)) return 1;
  out["threads"] = static_cast<int>(std::thread::hardware_concurrency());
  if (as_json) std::printf("%s\n", boost::json::serialize(out).c_str());
  return 0;
}
