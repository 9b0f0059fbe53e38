#include <cstdio>
#include <future>

#include <boost/json.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "weir/inference/engine.hpp"
#include "weir/inference/runner.hpp"
#include "weir/inference/tokenizer.hpp"

namespace weir::cli {

int cmd_generate(Args args) {
  Flags f("generate",
          {"--model", "--prompt", "-n", "--temp", "--seed", "--top-k", "--top-p", "--min-p",
           "--threads", "--device"},
          {"--json"});
  if (!f.parse(args)) return kExitInvalidInput;
  auto path = f.get("--model");
  auto prompt = f.get("--prompt");
  if (!path || !prompt)
    return f.fail("--model FILE and --prompt TEXT are required"), kExitInvalidInput;
  double n = 128, temp = 0, seed = 0, top_k = 0, top_p = 1, min_p = 0, threads = 0;
  for (auto [flag, dst] : {std::pair{"-n", &n},
                           {"--temp", &temp},
                           {"--seed", &seed},
                           {"--top-k", &top_k},
                           {"--top-p", &top_p},
                           {"--min-p", &min_p},
                           {"--threads", &threads}}) {
    if (!f.number(flag, *dst)) return kExitInvalidInput;
  }
  if (n < 1) return f.fail("-n must be at least 1"), kExitInvalidInput;
  auto device = inference::parse_device(f.get("--device").value_or("auto"));
  if (!device) return f.fail(device.error().message), kExitInvalidInput;

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
  auto runner = inference::make_runner(*model, *device, static_cast<int>(threads));
  if (!runner)
    return std::fprintf(stderr, "weir generate: %s\n", runner.error().message.c_str()),
           kExitInvalidInput;
  auto engine =
      inference::Engine::create(std::move(runner->runner), {.max_num_seqs = 1,
                                                            .block_size = 16,
                                                            .kv_cache_bytes = 256u << 20,
                                                            .eog_tokens = (*tok)->eog_tokens()});
  if (!engine)
    return std::fprintf(stderr, "weir generate: %s\n", engine.error().message.c_str()),
           kExitRunFailed;

  inference::GenerateRequest rq;
  rq.prompt = (*tok)->encode(*prompt);
  rq.max_new_tokens = static_cast<std::int32_t>(n);
  rq.sampling = {.temperature = static_cast<float>(temp),
                 .top_k = static_cast<std::int32_t>(top_k),
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
  boost::json::array toks;
  for (auto t : r->tokens) toks.push_back(t);
  boost::json::object out{
      {"prompt_tokens", r->usage.prompt_tokens},
      {"tokens", toks},
      {"text", (*tok)->decode(r->tokens)},
      {"finish_reason", inference::finish_reason_name(r->finish)},
      {"device", runner->description},
      {"timings",
       {{"first_token_ms", r->timings.first_token_ms},
        {"total_ms", r->timings.total_ms},
        {"decode_tok_s",
         r->tokens.size() > 1
             ? (r->tokens.size() - 1) * 1000.0 / (r->timings.total_ms - r->timings.first_token_ms)
             : 0.0}}}};
  std::printf("%s\n", boost::json::serialize(out).c_str());
  return kExitOk;
}

}  // namespace weir::cli
