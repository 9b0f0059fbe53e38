#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "agents_run.hpp"
#include "args.hpp"
#include "commands.hpp"
#include "weir/agents/crew_file.hpp"
#include "weir/graph/workflow_graph.hpp"
#include "weir/inference/chat_template.hpp"
#include "weir/inference/engine_async.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/inference/runner.hpp"
#include "weir/inference/tokenizer.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/memory_budget.hpp"

namespace weir::cli {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

// Models of a workflow, loaded on first use through the engine registry (one per file).
struct Models {
  std::map<std::string, fs::path> paths;
  std::mutex mu;
  std::map<fs::path, std::shared_ptr<inference::Tokenizer>> tokenizers;

  asio::awaitable<Result<std::string>> call(std::string model, std::string system,
                                            std::string prompt, std::int32_t max_tokens) {
    auto it = paths.find(model);
    if (it == paths.end()) co_return Error(Errc::not_found, "model '" + model + "' is not defined");
    const fs::path path = it->second;
    std::shared_ptr<inference::Tokenizer> tok;
    {
      std::lock_guard lock(mu);
      auto& t = tokenizers[path];
      if (!t) {
        auto f = inference::GgufFile::open(path);
        if (!f) co_return f.error();
        auto tk = inference::Tokenizer::from_gguf(**f);
        if (!tk) co_return tk.error();
        t = std::move(*tk);
      }
      tok = t;
    }
    auto engine = inference::EngineRegistry::global().get(
        path, [&](std::shared_ptr<const inference::Model> m) {
          auto r = inference::make_runner(m, inference::Device::automatic, 0);
          if (!r) return Result<std::unique_ptr<inference::Engine>>(std::move(r).error());
          return inference::Engine::create(std::move(r->runner), {.max_num_seqs = 64,
                                                                  .block_size = 16,
                                                                  .kv_cache_bytes = 256u << 20,
                                                                  .eog_tokens = tok->eog_tokens()});
        });
    if (!engine) co_return engine.error();
    std::vector<inference::ChatTurn> turns;
    if (!system.empty()) turns.push_back({"system", system});
    turns.push_back({"user", prompt});
    inference::GenerateRequest rq;
    rq.prompt = tok->encode(inference::apply_chat_template(inference::ChatFamily::chatml, turns),
                            true, true);
    rq.max_new_tokens = max_tokens;
    auto r = co_await inference::async_generate(**engine, std::move(rq), asio::use_awaitable);
    if (!r) co_return r.error();
    co_return tok->decode(r->tokens);
  }
};

// --input: a JSON object, or @file holding one.
Result<json::object> read_input_object(std::string text) {
  std::string source = "--input";
  if (!text.empty() && text[0] == '@') {
    source = text.substr(1);
    std::ifstream file(source);
    if (!file) return Error(Errc::not_found, "cannot read input file '" + source + "'");
    std::stringstream ss;
    ss << file.rdbuf();
    text = ss.str();
  }
  auto parsed = parse_json(text, source);
  if (!parsed) return std::move(parsed).error();
  if (!parsed->value.is_object())
    return Error(Errc::invalid_argument, "--input must be a JSON object of channel values");
  return parsed->value.as_object();
}

}  // namespace

int cmd_run(Args args) {
  Flags f("run", {"--input", "--model", "--instances", "--concurrency"}, {"--table"});
  if (!f.parse(args)) return kExitInvalidInput;
  if (f.positional().size() != 1) return f.fail("give one workflow file"), kExitInvalidInput;
  if (is_agents_file(f.positional()[0])) {
    AgentsRunOptions o;
    double instances = 1, concurrency = 16;
    if (!f.number("--instances", instances) || !f.number("--concurrency", concurrency))
      return kExitInvalidInput;
    if (instances < 1 || concurrency < 1)
      return f.fail("--instances and --concurrency must be at least 1"), kExitInvalidInput;
    o.instances = static_cast<int>(instances);
    o.concurrency = static_cast<int>(concurrency);
    o.model = f.get("--model");
    o.table = f.has("--table");
    if (auto in = f.get("--input")) {
      auto parsed = read_input_object(*in);
      if (!parsed)
        return std::fprintf(stderr, "weir run: %s\n", parsed.error().message.c_str()),
               kExitInvalidInput;
      o.inputs = std::move(*parsed);
    }
    return run_agents_file(f.positional()[0], o);
  }
  auto load = graph::load_workflow_file(f.positional()[0]);
  if (!load.ok()) {
    std::fputs(load.report().c_str(), stderr);
    return kExitInvalidInput;
  }
  const graph::WorkflowSpec& spec = *load.spec;
  json::object input;
  if (auto in = f.get("--input")) {
    auto parsed = read_input_object(*in);
    if (!parsed)
      return std::fprintf(stderr, "weir run: %s\n", parsed.error().message.c_str()),
             kExitInvalidInput;
    input = std::move(*parsed);
  }
  auto models = std::make_shared<Models>();
  for (const auto& m : spec.models)
    models->paths[m.name] = f.get("--model") ? fs::path(*f.get("--model")) : m.path;
  auto built = graph::build_workflow_graph(
      spec, [models](std::string m, std::string s, std::string p, std::int32_t n) {
        return models->call(std::move(m), std::move(s), std::move(p), n);
      });
  if (!built) return std::fprintf(stderr, "%s\n", built.error().message.c_str()), kExitInvalidInput;

  // One budget and one artifact store for the run, from the file's limits.
  BudgetLimits limits;
  const auto& mem = spec.limits.memory;
  auto set = [](std::optional<std::int64_t> v, std::size_t& dst) {
    if (v) dst = static_cast<std::size_t>(*v);
  };
  set(mem.total, limits.total);
  set(mem.run_state, limits.category[static_cast<int>(BudgetCategory::run_state)]);
  set(mem.artifacts, limits.category[static_cast<int>(BudgetCategory::artifacts)]);
  MemoryBudget budget(limits);
  const fs::path art_dir = fs::temp_directory_path() / ("weir-run-" + std::to_string(::getpid()));
  auto store =
      ArtifactStore::open({art_dir, std::size_t{64} << 20, std::size_t{4} << 30, 200, &budget});
  if (!store)
    return std::fprintf(stderr, "weir run: %s\n", store.error().message.c_str()), kExitRunFailed;
  graph::RuntimeOptions ropt = built->runtime;
  ropt.budget = &budget;
  ropt.artifacts = store->get();
  int code = kExitOk;
  {
    graph::GraphRuntime runtime(ropt);
    asio::io_context io;
    Result<graph::RunResult> result = Error(Errc::cancelled, "not run");
    auto task = [&]() -> asio::awaitable<void> {
      result = co_await runtime.async_invoke(built->graph, input);
    };
    asio::co_spawn(io, task(), asio::detached);
    io.run();
    if (result) {
      std::printf("%s\n", json::serialize(result->state).c_str());
      std::fprintf(stderr,
                   "weir run: %s finished in %d supersteps; peak run state %s, %zu value%s moved "
                   "to artifacts\n",
                   spec.name.c_str(), result->steps, format_bytes(result->peak_state_bytes).c_str(),
                   result->offloaded, result->offloaded == 1 ? "" : "s");
    } else {
      std::fprintf(stderr, "weir run: %s\n", result.error().to_string().c_str());
      code = result.error().is(Errc::overloaded) ? kExitOverloaded : kExitRunFailed;
    }
  }
  store->reset();
  std::error_code ec;
  fs::remove_all(art_dir, ec);
  return code;
}

}  // namespace weir::cli
