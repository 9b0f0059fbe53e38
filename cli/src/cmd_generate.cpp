#include <cstdio>
#include <fstream>
#include <future>
#include <limits>
#include <sstream>

#include <boost/json.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "weir/agents/local_model.hpp"  // to_valid_utf8
#include "weir/inference/constraint.hpp"
#include "weir/inference/engine.hpp"
#include "weir/inference/runner.hpp"
#include "weir/inference/tokenizer.hpp"
#include "weir/runtime/json_write.hpp"

namespace weir::cli {

namespace {

// The structured-output flags: at most one of --json-schema FILE, --grammar FILE.gbnf,
// --regex RE, --choice a,b,c. False (the message printed) for a bad use; `spec` stays empty
// without one.
bool constraint_flags(Flags& f, std::optional<inference::ConstraintSpec>& spec) {
  int n_constraints = 0;
  auto read_file = [&](const std::string& p) -> std::optional<std::string> {
    std::ifstream in(p, std::ios::binary);
    if (!in) return std::nullopt;
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  for (const char* flag : {"--json-schema", "--grammar"}) {
    if (auto p = f.get(flag)) {
      ++n_constraints;
      auto text = read_file(*p);
      if (!text) return f.fail(std::string(flag) + ": cannot read " + *p), false;
      spec = inference::ConstraintSpec{std::string_view(flag) == "--grammar"
                                           ? inference::ConstraintSpec::Kind::gbnf
                                           : inference::ConstraintSpec::Kind::json_schema,
                                       *text,
                                       {}};
    }
  }
  if (auto re = f.get("--regex")) {
    ++n_constraints;
    spec = inference::ConstraintSpec{inference::ConstraintSpec::Kind::regex, *re, {}};
  }
  if (auto ch = f.get("--choice")) {
    ++n_constraints;
    spec = inference::ConstraintSpec{inference::ConstraintSpec::Kind::choice, "", {}};
    std::string cur;
    for (char c : *ch + ",") {
      if (c != ',') {
        cur += c;
      } else if (!cur.empty()) {
        spec->choices.push_back(cur);
        cur.clear();
      }
    }
  }
  if (n_constraints > 1)
    return f.fail("use at most one of --json-schema, --grammar, --regex and --choice"), false;
  return true;
}

// --json's one object: the tokens, text, finish reason, device and timings.
boost::json::object result_json(const inference::GenerateResult& r, const inference::Tokenizer& tok,
                                const std::string& device) {
  boost::json::array toks;
  for (auto t : r.tokens) toks.push_back(t);
  return {
      {"prompt_tokens", r.usage.prompt_tokens},
      {"tokens", toks},
      {"text", agents::to_valid_utf8(tok.decode(r.tokens))},  // a byte token can split a character
      {"finish_reason", inference::finish_reason_name(r.finish)},
      {"device", device},
      {"timings",
       {{"first_token_ms", r.timings.first_token_ms},
        {"total_ms", r.timings.total_ms},
        {"decode_tok_s", r.tokens.size() > 1 ? (r.tokens.size() - 1) * 1000.0 /
                                                   (r.timings.total_ms - r.timings.first_token_ms)
                                             : 0.0}}}};
}

}  // namespace

int cmd_generate(Args args) {
  Flags f("generate",
          {"--model", "--prompt", "-n", "--temp", "--seed", "--top-k", "--top-p", "--min-p",
           "--threads", "--device", "--kv-cache-type", "--json-schema", "--grammar", "--regex",
           "--choice"},
          {"--json", "--parse-special"});
  if (!f.parse(args)) return kExitInvalidInput;
  auto path = f.get("--model");
  auto prompt = f.get("--prompt");
  if (!path || !prompt)
    return f.fail("--model FILE and --prompt TEXT are required"), kExitInvalidInput;
  std::int32_t n = 128, top_k = 0, threads = 0;
  std::int64_t seed = 0;
  double temp = 0, top_p = 1, min_p = 0;
  if (!f.integer("-n", n, 1, 1 << 20) || !f.integer("--top-k", top_k, 0, 1 << 20) ||
      !f.integer("--threads", threads, 0, 1024) ||
      !f.integer("--seed", seed, std::int64_t{0}, std::numeric_limits<std::int64_t>::max()) ||
      !f.real("--temp", temp, 0, 100) || !f.real("--top-p", top_p, 0, 1) ||
      !f.real("--min-p", min_p, 0, 1))
    return kExitInvalidInput;
  auto device = inference::parse_device(f.get("--device").value_or("auto"));
  if (!device) return f.fail(device.error().message), kExitInvalidInput;
  auto kv_type = inference::parse_kv_type(f.get("--kv-cache-type").value_or("f32"));
  if (!kv_type) return f.fail("--kv-cache-type: " + kv_type.error().message), kExitInvalidInput;

  auto file = inference::GgufFile::open(*path);
  if (!file)
    return std::fprintf(stderr, "weir generate: %s\n", file.error().message.c_str()),
           kExitInvalidInput;
  auto tok = inference::Tokenizer::from_gguf(**file);
  if (!tok)
    return std::fprintf(stderr, "weir generate: %s\n", tok.error().message.c_str()),
           kExitInvalidInput;
  auto model = inference::Model::from_gguf(std::move(*file));
  if (!model)
    return std::fprintf(stderr, "weir generate: %s\n", model.error().message.c_str()),
           kExitInvalidInput;
  auto runner = inference::make_runner(*model, *device, threads);
  if (!runner)
    return std::fprintf(stderr, "weir generate: %s\n", runner.error().message.c_str()),
           kExitInvalidInput;
  auto engine =
      inference::Engine::create(std::move(runner->runner), {.max_num_seqs = 1,
                                                            .block_size = 16,
                                                            .kv_cache_bytes = 256u << 20,
                                                            .kv_cache_type = *kv_type,
                                                            .eog_tokens = (*tok)->eog_tokens()});
  if (!engine)
    return std::fprintf(stderr, "weir generate: %s\n", engine.error().message.c_str()),
           kExitRunFailed;

  std::optional<inference::ConstraintSpec> spec;
  if (!constraint_flags(f, spec)) return kExitInvalidInput;

  inference::GenerateRequest rq;
  if (spec) {
    auto c = inference::compile_constraint(*spec, **tok);
    if (!c)
      return std::fprintf(stderr, "weir generate: %s\n", c.error().message.c_str()),
             kExitInvalidInput;
    rq.constraint = *c;
  }
  // The prompt is text ("</s>" in it is four characters) unless --parse-special asks for
  // special-token texts (e.g. "<|im_start|>") to become their ids.
  rq.prompt = (*tok)->encode(*prompt, true, f.has("--parse-special"));
  rq.max_new_tokens = n;
  rq.sampling = {.temperature = static_cast<float>(temp),
                 .top_k = top_k,
                 .top_p = static_cast<float>(top_p),
                 .min_p = static_cast<float>(min_p),
                 .seed = static_cast<std::uint64_t>(seed)};
  const bool json = f.has("--json");
  inference::StreamDecoder sd(**tok);
  std::promise<Result<inference::GenerateResult>> done;
  (*engine)->submit(rq,
                    {[&](std::int32_t t) {
                       if (json) return;
                       std::string s = sd.push(t);  // runs on the engine thread; stdout is ours
                       std::fwrite(s.data(), 1, s.size(), stdout);
                       std::fflush(stdout);
                     },
                     [&](Result<inference::GenerateResult> r) { done.set_value(std::move(r)); }});
  auto r = done.get_future().get();
  if (!r)
    return std::fprintf(stderr, "\nweir generate: %s\n", r.error().to_string().c_str()),
           kExitRunFailed;
  if (!json) {
    std::string tail = sd.flush();
    std::printf("%s\n", tail.c_str());
    return kExitOk;
  }
  std::printf("%s\n", to_json_text(result_json(*r, **tok, runner->description)).c_str());
  return kExitOk;
}

}  // namespace weir::cli
