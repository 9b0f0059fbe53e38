#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "agents_run.hpp"
#include "args.hpp"
#include "commands.hpp"
#include "weir/agents/crew_file.hpp"
#include "weir/agents/workflow.hpp"
#include "weir/graph/checkpointer.hpp"
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

// What every run of a workflow file needs: its spec, the built graph, one budget and one
// artifact store from the file's limits, and its models (loaded on first use).
struct WorkflowEnv {
  graph::WorkflowSpec spec;
  std::shared_ptr<Models> models = std::make_shared<Models>();
  graph::WorkflowGraph built;
  std::shared_ptr<const graph::CompiledGraph> graph;
  std::unique_ptr<MemoryBudget> budget;
  std::unique_ptr<ArtifactStore> store;
  fs::path art_dir;

  ~WorkflowEnv() {
    store.reset();
    std::error_code ec;
    if (!art_dir.empty()) fs::remove_all(art_dir, ec);
  }

  graph::RuntimeOptions runtime_options() const {
    graph::RuntimeOptions o = built.runtime;
    o.budget = budget.get();
    o.artifacts = store.get();
    return o;
  }

  // Null after printing the problem; `code` is then the exit code.
  static std::unique_ptr<WorkflowEnv> open(const std::string& path,
                                           const std::optional<std::string>& model,
                                           const char* command, int& code) {
    code = kExitInvalidInput;
    auto load = graph::load_workflow_file(path);
    if (!load.ok()) {
      std::fputs(load.report().c_str(), stderr);
      return nullptr;
    }
    auto env = std::make_unique<WorkflowEnv>();
    env->spec = *load.spec;
    for (const auto& m : env->spec.models)
      env->models->paths[m.name] = model ? fs::path(*model) : m.path;
    BudgetLimits limits;
    const auto& mem = env->spec.limits.memory;
    auto set = [](std::optional<std::int64_t> v, std::size_t& dst) {
      if (v) dst = static_cast<std::size_t>(*v);
    };
    set(mem.total, limits.total);
    set(mem.run_state, limits.category[static_cast<int>(BudgetCategory::run_state)]);
    set(mem.artifacts, limits.category[static_cast<int>(BudgetCategory::artifacts)]);
    env->budget = std::make_unique<MemoryBudget>(limits);
    env->art_dir = fs::temp_directory_path() /
                   ("weir-" + std::string(command) + "-" + std::to_string(::getpid()));
    auto store = ArtifactStore::open(
        {env->art_dir, std::size_t{64} << 20, std::size_t{4} << 30, 200, env->budget.get()});
    if (!store) {
      std::fprintf(stderr, "weir %s: %s\n", command, store.error().message.c_str());
      code = kExitRunFailed;
      return nullptr;
    }
    env->store = std::move(*store);
    auto models = env->models;
    agents::WorkflowServices services;
    services.artifacts = env->store.get();
    services.budget = env->budget.get();
    if (model) services.model_override = fs::path(*model);
    auto built = agents::build_workflow(
        env->spec,
        [models](std::string m, std::string s, std::string p, std::int32_t n) {
          return models->call(std::move(m), std::move(s), std::move(p), n);
        },
        services);
    if (!built) {
      std::fprintf(stderr, "%s\n", built.error().message.c_str());
      return nullptr;
    }
    env->built = std::move(*built);
    env->graph = env->built.graph;
    return env;
  }
};

// Where a run keeps its checkpoints (--thread, --checkpoints) and whether it streams.
struct RunTarget {
  std::unique_ptr<graph::Checkpointer> checkpointer;
  std::string thread;
  bool stream = false;

  bool open(const Flags& f, const char* command) {
    stream = f.has("--stream");
    if (auto t = f.get("--thread")) thread = *t;
    if (thread.empty()) {
      if (f.get("--checkpoints")) {
        std::fprintf(stderr, "weir %s: --checkpoints needs --thread ID\n", command);
        return false;
      }
      return true;
    }
    const fs::path db = f.get("--checkpoints").value_or("weir-checkpoints.db");
    auto cp = graph::open_sqlite_checkpointer(db);
    if (!cp) {
      std::fprintf(stderr, "weir %s: %s\n", command, cp.error().message.c_str());
      return false;
    }
    checkpointer = std::move(*cp);
    return true;
  }
};

json::value event_json(const graph::Event& e) {
  json::object o{{"event", graph::event_kind_name(e.kind)}, {"step", e.step}};
  if (!e.node.empty()) o["node"] = e.node;
  if (!e.name.empty()) o["name"] = e.name;
  if (!e.data.is_null()) o["data"] = e.data;
  return o;
}

// Runs `start` (an invoke or a resume) with the target's checkpoints and streaming; prints the
// events (one JSON line each, with --stream) and the result. Returns the exit code.
template <class Start>
int run_workflow(WorkflowEnv& env, RunTarget& target, const std::string& file, const char* command,
                 Start start) {
  graph::GraphRuntime runtime(env.runtime_options());
  asio::io_context io;
  Result<graph::RunResult> result = Error(Errc::cancelled, "not run");
  graph::RunOptions opt;
  opt.checkpointer = target.checkpointer.get();
  opt.thread_id = target.thread;
  if (target.stream) opt.events = std::make_shared<graph::EventStream>(64);
  auto events = opt.events;
  auto task = [&]() -> asio::awaitable<void> {
    auto op = start(runtime, opt);
    result = co_await std::move(op);
  };
  auto printer = [&]() -> asio::awaitable<void> {
    while (auto e = co_await events->async_next())
      std::printf("%s\n", json::serialize(event_json(*e)).c_str());
  };
  asio::co_spawn(io, task(), asio::detached);
  if (events) asio::co_spawn(io, printer(), asio::detached);
  io.run();
  if (!result) {
    std::fprintf(stderr, "weir %s: %s\n", command, result.error().to_string().c_str());
    return result.error().is(Errc::overloaded) ? kExitOverloaded
           : result.error().is(Errc::invalid_argument) || result.error().is(Errc::not_found)
               ? kExitInvalidInput
               : kExitRunFailed;
  }
  if (result->interrupted) {
    std::printf("%s\n", json::serialize(json::object{{"interrupted", result->interrupted_node},
                                                     {"payload", result->interrupt_payload},
                                                     {"thread", target.thread}})
                            .c_str());
    std::fprintf(stderr,
                 "weir %s: %s paused at node '%s' (thread '%s'); continue with:\n  weir resume "
                 "%s --thread %s --value JSON\n",
                 command, env.spec.name.c_str(), result->interrupted_node.c_str(),
                 target.thread.c_str(), file.c_str(), target.thread.c_str());
    return kExitOk;
  }
  std::printf("%s\n", json::serialize(result->state).c_str());
  std::fprintf(stderr,
               "weir %s: %s finished in %d supersteps; peak run state %s, %zu value%s moved to "
               "artifacts\n",
               command, env.spec.name.c_str(), result->steps,
               format_bytes(result->peak_state_bytes).c_str(), result->offloaded,
               result->offloaded == 1 ? "" : "s");
  return kExitOk;
}

}  // namespace

int cmd_run(Args args) {
  Flags f("run",
          {"--input", "--model", "--instances", "--concurrency", "--thread", "--checkpoints"},
          {"--table", "--stream"});
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
  int code = kExitOk;
  auto env = WorkflowEnv::open(f.positional()[0], f.get("--model"), "run", code);
  if (!env) return code;
  code = kExitOk;
  json::object input;
  if (auto in = f.get("--input")) {
    auto parsed = read_input_object(*in);
    if (!parsed)
      return std::fprintf(stderr, "weir run: %s\n", parsed.error().message.c_str()),
             kExitInvalidInput;
    input = std::move(*parsed);
  }
  RunTarget target;
  if (!target.open(f, "run")) return kExitInvalidInput;
  return run_workflow(*env, target, f.positional()[0], "run",
                      [&](graph::GraphRuntime& rt, graph::RunOptions opt) {
                        return rt.async_invoke(env->graph, input, std::move(opt));
                      });
}

int cmd_resume(Args args) {
  Flags f("resume", {"--thread", "--value", "--checkpoints", "--model"}, {"--stream"});
  if (!f.parse(args)) return kExitInvalidInput;
  if (f.positional().size() != 1) return f.fail("give one workflow file"), kExitInvalidInput;
  if (!f.get("--thread")) return f.fail("--thread ID is required"), kExitInvalidInput;
  json::value value;  // null when not given
  if (auto v = f.get("--value")) {
    auto parsed = parse_json(*v, "--value");
    if (!parsed)
      return std::fprintf(stderr, "weir resume: %s\n", parsed.error().message.c_str()),
             kExitInvalidInput;
    value = std::move(parsed->value);
  }
  int code = kExitOk;
  auto env = WorkflowEnv::open(f.positional()[0], f.get("--model"), "resume", code);
  if (!env) return code;
  RunTarget target;
  if (!target.open(f, "resume")) return kExitInvalidInput;
  return run_workflow(*env, target, f.positional()[0], "resume",
                      [&](graph::GraphRuntime& rt, graph::RunOptions opt) {
                        return rt.async_resume(env->graph, *f.get("--thread"), value,
                                               std::move(opt));
                      });
}

int cmd_batch(Args args) {
  Flags f("batch", {"--model", "--concurrency"}, {});
  if (!f.parse(args)) return kExitInvalidInput;
  if (f.positional().size() != 2)
    return f.fail("give a workflow file and a JSONL file of inputs (one JSON object a line)"),
           kExitInvalidInput;
  double concurrency = 16;
  if (!f.number("--concurrency", concurrency)) return kExitInvalidInput;
  if (concurrency < 1) return f.fail("--concurrency must be at least 1"), kExitInvalidInput;
  std::ifstream lines(f.positional()[1]);
  if (!lines)
    return f.fail("cannot read inputs file '" + f.positional()[1] + "'"), kExitInvalidInput;
  int code = kExitOk;
  auto env = WorkflowEnv::open(f.positional()[0], f.get("--model"), "batch", code);
  if (!env) return code;
  graph::RuntimeOptions ropt = env->runtime_options();
  ropt.max_concurrent_runs = static_cast<std::size_t>(concurrency);
  graph::GraphRuntime runtime(ropt);
  asio::io_context io;
  // Inputs are read as they are needed (at most 2 x concurrency in flight or queued), so a
  // million-line file costs no more memory than a short one; results print as runs finish.
  struct Progress {
    std::size_t started = 0, done = 0, failed = 0;
  } pr;
  const bool tty = ::isatty(STDERR_FILENO);
  const std::string source = f.positional()[1];
  const std::size_t window = 2 * static_cast<std::size_t>(concurrency);
  asio::steady_timer wake(io);
  wake.expires_at(asio::steady_timer::time_point::max());
  auto one = [&](std::size_t index, std::string line) -> asio::awaitable<void> {
    json::object out{{"index", index}};
    auto parsed = parse_json(line, source + " line " + std::to_string(index + 1));
    if (!parsed || !parsed->value.is_object()) {
      out["ok"] = false;
      out["error"] = json::object{
          {"code", parsed ? "invalid_argument" : errc_name(parsed.error().code)},
          {"message", parsed ? "line " + std::to_string(index + 1) + " is not a JSON object"
                             : parsed.error().message}};
    } else {
      auto r = co_await runtime.async_invoke(env->graph, parsed->value.as_object());
      out["ok"] = static_cast<bool>(r);
      if (r) {
        out["state"] = std::move(r->state);
        out["steps"] = r->steps;
      } else {
        out["error"] =
            json::object{{"code", errc_name(r.error().code)}, {"message", r.error().message}};
      }
    }
    if (!out.at("ok").as_bool()) ++pr.failed;
    ++pr.done;
    std::printf("%s\n", json::serialize(out).c_str());
    if (tty)
      std::fprintf(stderr, "\r  %zu done (%zu failed), %zu running   ", pr.done, pr.failed,
                   runtime.active_runs());
    wake.cancel();
  };
  auto feeder = [&]() -> asio::awaitable<void> {
    std::string line;
    std::size_t index = 0;
    while (std::getline(lines, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) {
        ++index;
        continue;
      }
      while (pr.started - pr.done >= window) {
        boost::system::error_code ec;
        co_await wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        wake.expires_at(asio::steady_timer::time_point::max());
      }
      ++pr.started;
      asio::co_spawn(io, one(index++, std::move(line)), asio::detached);
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  asio::co_spawn(io, feeder(), asio::detached);
  io.run();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tty) std::fprintf(stderr, "\r%60s\r", "");
  std::fprintf(stderr, "weir batch: %zu runs, %zu failed, in %.2f s (%.0f runs/s)\n", pr.done,
               pr.failed, secs, static_cast<double>(pr.done) / std::max(secs, 1e-9));
  return pr.failed ? kExitRunFailed : kExitOk;
}

}  // namespace weir::cli
