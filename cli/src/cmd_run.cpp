#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "agents_run.hpp"
#include "args.hpp"
#include "commands.hpp"
#include "document.hpp"
#include "trace_flags.hpp"
#include "weir/agents/crew_file.hpp"
#include "weir/agents/workflow.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/workflow_graph.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/json_write.hpp"
#include "weir/runtime/memory_budget.hpp"

namespace weir::cli {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;

void remove_stale_artifact_dirs() {
  std::error_code ec;
  const fs::path tmp = fs::temp_directory_path(ec);
  if (ec) return;
  for (fs::directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // weir-<lowercase command>-<pid>
    if (name.rfind("weir-", 0) != 0) continue;
    const auto dash = name.rfind('-');
    if (dash <= 5 || dash + 1 >= name.size()) continue;
    const std::string cmd = name.substr(5, dash - 5), digits = name.substr(dash + 1);
    if (cmd.find_first_not_of("abcdefghijklmnopqrstuvwxyz") != std::string::npos ||
        digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9)
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    std::error_code dir_ec;
    if (pid <= 0 || pid == ::getpid() || !it->is_directory(dir_ec)) continue;
    if (::kill(pid, 0) == -1 && errno == ESRCH) fs::remove_all(it->path(), dir_ec);
  }
}

namespace {

// The error an exception escaping a run's coroutine carries, for its completion handler.
Error exception_error(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const Exception& x) {
    return x.error();
  } catch (const std::exception& x) {
    return Error(Errc::tool_failed, std::string("the run threw: ") + x.what());
  } catch (...) {
    return Error(Errc::tool_failed, "the run threw an unknown exception");
  }
}

// --input: a JSON object, or @file holding one. The file's size is checked before it is read;
// with `storage` (the run-state budget), the value is charged as it is built.
Result<json::object> read_input_object(std::string text,
                                       std::optional<json::storage_ptr> storage = {}) {
  std::string source = "--input";
  bool padded = false;
  if (!text.empty() && text[0] == '@') {
    source = text.substr(1);
    auto file = read_json_file(source);
    if (!file) return Error(Errc::invalid_argument, "--input: " + file.error().message);
    text = std::move(*file);
    padded = true;
  }
  auto parsed = parse_json(text, source, {.storage = storage, .text_is_padded = padded});
  if (!parsed) return std::move(parsed).error();
  if (!parsed->value.is_object())
    return Error(Errc::invalid_argument, "--input must be a JSON object of channel values");
  return std::move(parsed->value.as_object());
}

// What every run of a workflow file needs: its spec, the built graph, one budget and one
// artifact store from the file's limits; its models open on first use (agents::build_workflow).
struct WorkflowEnv {
  graph::WorkflowSpec spec;
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

  // The workflow's name: its "name", else its file's stem.
  std::string name() const { return spec.name.empty() ? spec.file.stem().string() : spec.name; }

  graph::RuntimeOptions runtime_options() const {
    graph::RuntimeOptions o = built.runtime;
    o.budget = budget.get();
    o.artifacts = store.get();
    return o;
  }

  // Null after printing the problem; `code` is then the exit code.
  static std::unique_ptr<WorkflowEnv> open(const std::string& path,
                                           const std::optional<std::string>& model,
                                           const char* command, int& code,
                                           std::int64_t max_model_len = 0) {
    return open(graph::load_workflow_file(path, agents::workflow_checks()), model, command, code,
                max_model_len);
  }
  static std::unique_ptr<WorkflowEnv> open(graph::WorkflowLoad load,
                                           const std::optional<std::string>& model,
                                           const char* command, int& code,
                                           std::int64_t max_model_len = 0) {
    code = kExitInvalidInput;
    if (!load.ok()) {
      std::fputs(load.report().c_str(), stderr);
      return nullptr;
    }
    auto env = std::make_unique<WorkflowEnv>();
    env->spec = std::move(*load.spec);
    BudgetLimits limits;
    const auto& mem = env->spec.limits.memory;
    auto set = [](std::optional<std::int64_t> v, std::size_t& dst) {
      if (v) dst = static_cast<std::size_t>(*v);
    };
    set(mem.total, limits.total);
    set(mem.run_state, limits.category[static_cast<int>(BudgetCategory::run_state)]);
    set(mem.artifacts, limits.category[static_cast<int>(BudgetCategory::artifacts)]);
    env->budget = std::make_unique<MemoryBudget>(limits);
    remove_stale_artifact_dirs();
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
    agents::WorkflowServices services;
    services.artifacts = env->store.get();
    services.budget = env->budget.get();
    if (model) services.model_override = fs::path(*model);
    services.model_options.max_model_len = max_model_len;
    auto built = agents::build_workflow(env->spec, services);
    if (!built) {
      std::fprintf(stderr, "%s\n", built.error().message.c_str());
      return nullptr;
    }
    env->built = std::move(*built);
    env->graph = env->built.graph;
    return env;
  }
};

}  // namespace

// The checkpoint store: --store, else $WEIR_STORE, else $XDG_DATA_HOME/weir/checkpoints.db
// (~/.local/share/weir/checkpoints.db).
fs::path store_path(const Flags& f) {
  if (auto s = f.get("--store")) return *s;
  if (const char* e = std::getenv("WEIR_STORE"); e && *e) return e;
  fs::path base;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x)
    base = x;
  else if (const char* h = std::getenv("HOME"); h && *h)
    base = fs::path(h) / ".local" / "share";
  else
    base = fs::temp_directory_path();
  return base / "weir" / "checkpoints.db";
}

// A file path (SQLite; its folder is created when missing) or a postgres:// / postgresql:// URI.
Result<std::unique_ptr<graph::Checkpointer>> open_store(const fs::path& db) {
  if (graph::is_postgres_uri(db.string())) return graph::open_checkpointer(db.string());
  std::error_code ec;
  if (db.has_parent_path()) fs::create_directories(db.parent_path(), ec);
  return graph::open_sqlite_checkpointer(db);
}

int store_failed(const char* command, const Error& e) {
  std::fprintf(stderr, "weir %s: %s\n", command, e.message.c_str());
  return store_exit_code(e);
}

namespace {

// Where a run keeps its checkpoints (--thread, --store) and whether it streams.
struct RunTarget {
  std::unique_ptr<graph::Checkpointer> checkpointer;
  std::string thread;
  fs::path store;
  bool stream = false;
  json::object metadata;  // into every checkpoint: the workflow file, for weir resume
  std::shared_ptr<trace::Tracer> tracer;  // --trace, --otlp-endpoint (null: off)

  // kExitOk, or the exit code after printing the problem.
  int open(const Flags& f, const char* command) {
    stream = f.has("--stream");
    if (auto t = f.get("--thread")) thread = *t;
    if (thread.empty()) {
      if (f.get("--store")) {
        std::fprintf(stderr, "weir %s: --store needs --thread ID\n", command);
        return kExitInvalidInput;
      }
      return kExitOk;
    }
    store = store_path(f);
    auto cp = open_store(store);
    if (!cp) return store_failed(command, cp.error());
    checkpointer = std::move(*cp);
    return kExitOk;
  }
};

json::value event_json(const graph::Event& e) {
  json::object o{{"event", graph::event_kind_name(e.kind)}, {"step", e.step}};
  if (!e.node.empty()) o["node"] = e.node;
  if (!e.name.empty()) o["name"] = e.name;
  if (!e.data.is_null()) o["data"] = e.data;
  return o;
}

// Live progress on a terminal: one line on stderr, rewritten at most every 100 ms.
struct ProgressLine {
  using Clock = std::chrono::steady_clock;
  Clock::time_point t0 = Clock::now(), last{};
  std::int64_t step = 0, nodes_done = 0;
  std::string node;
  bool shown = false;

  void update(const graph::Event& e, const graph::GraphRuntime& rt, const MemoryBudget& budget) {
    if (e.kind == graph::EventKind::node_started) node = e.node;
    if (e.kind == graph::EventKind::node_finished) ++nodes_done;
    step = std::max(step, e.step);
    const auto now = Clock::now();
    if (now - last < std::chrono::milliseconds(100)) return;
    last = now;
    shown = true;
    std::fprintf(stderr,
                 "\r  step %lld, node %s (%lld done), %.1f s, %zu run%s active, %s in use   ",
                 static_cast<long long>(step), node.c_str(), static_cast<long long>(nodes_done),
                 std::chrono::duration<double>(now - t0).count(), rt.active_runs(),
                 rt.active_runs() == 1 ? "" : "s", format_bytes(budget.used_total()).c_str());
  }
  void clear() {
    if (shown) std::fprintf(stderr, "\r%100s\r", "");
  }
};

// " --store DB" when the target's store is not the default one (for the commands we suggest).
std::string store_flag(const RunTarget& target) {
  return target.store == store_path(Flags("", {}, {}))
             ? ""
             : " --store " + graph::redact_store(target.store.string());
}

// The executor's messages name its C++ API (RunOptions, async_resume); a CLI user needs the
// commands and flags instead.
std::string cli_text(const Error& e, const RunTarget& target, const std::string& file) {
  std::string m = e.to_string();
  const std::string thread = target.thread.empty() ? "ID" : target.thread;
  auto replace = [&](std::string_view from, const std::string& to) {
    if (auto p = m.find(from); p != std::string::npos) m.replace(p, from.size(), to);
  };
  replace(
      ", which needs a checkpoint to resume from: set RunOptions.checkpointer and "
      "RunOptions.thread_id",
      ", which needs a thread to resume from: run it with --thread ID (and weir resume ID "
      "--value JSON to continue)");
  replace("; call async_resume with a value to continue it",
          "; continue it with: weir resume " + thread + " --value JSON" + store_flag(target));
  replace("; async_invoke continues it)", "); continue it with: weir run " +
                                              (file.empty() ? "FILE" : file) + " --thread " +
                                              thread + store_flag(target));
  return m;
}

// Runs `start` (an invoke or a resume) with the target's checkpoints and streaming; prints the
// events (one JSON line each, with --stream; a progress line on a terminal otherwise) and the
// result. Returns the exit code.
template <class Start>
int run_workflow(WorkflowEnv& env, RunTarget& target, const std::string& file, const char* command,
                 Start start) {
  graph::GraphRuntime runtime(env.runtime_options());
  asio::io_context io;
  Result<graph::RunResult> result = Error(Errc::cancelled, "not run");
  graph::RunOptions opt;
  opt.checkpointer = target.checkpointer.get();
  opt.thread_id = target.thread;
  opt.checkpoint_metadata = target.metadata;
  const bool progress = !target.stream && ::isatty(STDERR_FILENO);
  if (target.stream || progress) opt.events = std::make_shared<graph::EventStream>(64);
  graph::RunTracing tracing{{target.tracer.get(), {}}, env.spec.name};
  if (target.tracer) opt.trace = &tracing;
  auto events = opt.events;
  std::optional<Error> printer_error;
  ProgressLine line;
  auto task = [&]() -> asio::awaitable<void> {
    auto op = start(runtime, opt);
    result = co_await std::move(op);
  };
  auto printer = [&]() -> asio::awaitable<void> {
    while (auto e = co_await events->async_next()) {
      if (target.stream)
        std::printf("%s\n", to_json_text(event_json(*e)).c_str());
      else
        line.update(*e, runtime, *env.budget);
    }
  };
  // Never detached (STYLE.md): an exception escaping the run or the printer is the run's error
  // (a printer that stopped closes the stream, so the run is not held by its backpressure).
  asio::co_spawn(io, task(), [&](std::exception_ptr e) {
    if (e) result = exception_error(e);
  });
  if (events)
    asio::co_spawn(io, printer(), [&](std::exception_ptr e) {
      if (!e) return;
      events->close();
      printer_error = exception_error(e);
    });
  io.run();
  line.clear();
  if (result && printer_error) result = std::move(*printer_error);
  if (!result) {
    std::fprintf(stderr, "weir %s: %s\n", command, cli_text(result.error(), target, file).c_str());
    return run_exit_code(result.error());
  }
  if (result->interrupted) {
    std::printf("%s\n", to_json_text(json::object{{"interrupted", result->interrupted_node},
                                                  {"payload", result->interrupt_payload},
                                                  {"thread", target.thread}})
                            .c_str());
    std::fprintf(stderr,
                 "weir %s: %s paused at node '%s' (thread '%s'); continue with:\n  weir resume "
                 "%s --value JSON%s\n",
                 command, env.spec.name.c_str(), result->interrupted_node.c_str(),
                 target.thread.c_str(), target.thread.c_str(), store_flag(target).c_str());
    return kExitOk;
  }
  std::printf("%s\n", to_json_text(env.spec.output_of(std::move(result->state))).c_str());
  std::fprintf(stderr,
               "weir %s: %s finished in %d supersteps; peak run state %s, %zu value%s moved to "
               "artifacts\n",
               command, file.empty() ? "" : env.spec.name.c_str(), result->steps,
               format_bytes(result->peak_state_bytes).c_str(), result->offloaded,
               result->offloaded == 1 ? "" : "s");
  return kExitOk;
}

}  // namespace

int cmd_run(Args args) {
  Flags f("run",
          {"--input", "--model", "--instances", "--concurrency", "--thread", "--store",
           "--max-model-len", "--otlp-endpoint", "--trace"},
          {"--table", "--stream", "--trace-content"});
  if (!f.parse(args)) return kExitInvalidInput;
  std::shared_ptr<trace::Tracer> tracer;
  if (!open_tracer(f, tracer)) return kExitInvalidInput;
  if (f.positional().size() != 1) return f.fail("give one workflow file"), kExitInvalidInput;
  auto doc = open_document(f.positional()[0]);
  if (!doc) return std::fprintf(stderr, "%s\n", doc.error().message.c_str()), kExitInvalidInput;
  if (doc->agents) {
    if (f.get("--thread") || f.get("--store"))
      return f.fail(
                 "--thread and --store keep the checkpoints of a workflow file; crew and "
                 "group-chat files run without checkpoints (run them without these flags)"),
             kExitInvalidInput;
    if (doc->from_stdin())
      return f.fail("a crew or group-chat file cannot be read from standard input; give its path"),
             kExitInvalidInput;
    AgentsRunOptions o;
    if (!f.integer("--instances", o.instances, 1, 1'000'000) ||
        !f.integer("--concurrency", o.concurrency, 1, 100'000) ||
        !f.integer("--max-model-len", o.max_model_len, std::int64_t{16}, std::int64_t{1} << 20))
      return kExitInvalidInput;
    o.model = f.get("--model");
    o.table = f.has("--table");
    if (auto in = f.get("--input")) {
      auto parsed = read_input_object(*in);
      if (!parsed)
        return std::fprintf(stderr, "weir run: %s\n", parsed.error().message.c_str()),
               kExitInvalidInput;
      o.inputs = std::move(*parsed);
    }
    o.tracer = tracer;
    const int rc = run_agents_file(f.positional()[0], o);
    close_tracer(tracer);
    return rc;
  }
  std::int64_t max_model_len = 0;
  if (!f.integer("--max-model-len", max_model_len, std::int64_t{16}, std::int64_t{1} << 20))
    return kExitInvalidInput;
  if (doc->from_stdin() && f.get("--thread"))
    return f.fail(
               "a workflow read from standard input cannot be resumed; save it to a file to "
               "use --thread"),
           kExitInvalidInput;
  int code = kExitOk;
  auto parsed_doc = std::move(doc->parsed);
  auto env =
      WorkflowEnv::open(graph::load_workflow_json(std::move(parsed_doc), doc->text_for_loading(),
                                                  f.positional()[0], agents::workflow_checks()),
                        f.get("--model"), "run", code, max_model_len);
  if (!env) return code;
  doc->text = {};  // the file's text is no longer needed
  doc->text.shrink_to_fit();
  json::object input;
  if (auto in = f.get("--input")) {
    // Charged to the run-state budget as it is built, under the run's state cap.
    std::size_t cap = env->spec.limits.max_state_bytes
                          ? static_cast<std::size_t>(*env->spec.limits.max_state_bytes)
                          : std::size_t{16} << 20;
    auto storage = json::make_shared_resource<AccountingResource>(
        env->budget.get(), BudgetCategory::run_state, cap, "--input");
    auto parsed = read_input_object(*in, storage);
    if (!parsed)
      return std::fprintf(stderr, "weir run: %s\n", parsed.error().message.c_str()),
             kExitInvalidInput;
    input = std::move(*parsed);
  }
  // The workflow's "input": the channels a run may set (the executor checks it too; here the
  // message names the flag).
  if (auto s = graph::check_input_channels(env->spec.input, env->name(), input, "--input"); !s)
    return std::fprintf(stderr, "weir run: %s\n", s.error().message.c_str()), kExitInvalidInput;
  RunTarget target;
  if (int c = target.open(f, "run"); c != kExitOk) return c;
  target.metadata["workflow"] = fs::absolute(f.positional()[0]).string();
  target.tracer = tracer;
  const int rc = run_workflow(*env, target, f.positional()[0], "run",
                              [&](graph::GraphRuntime& rt, graph::RunOptions opt) {
                                return rt.async_invoke(env->graph, input, std::move(opt));
                              });
  target.tracer.reset();
  close_tracer(tracer);
  return rc;
}

int cmd_resume(Args args) {
  Flags f("resume",
          {"--value", "--store", "--file", "--model", "--thread", "--otlp-endpoint", "--trace"},
          {"--stream", "--trace-content"});
  if (!f.parse(args)) return kExitInvalidInput;
  std::shared_ptr<trace::Tracer> tracer;
  if (!open_tracer(f, tracer)) return kExitInvalidInput;
  std::string thread = f.get("--thread").value_or("");
  if (f.positional().size() == 1 && thread.empty()) thread = f.positional()[0];
  if (thread.empty() || f.positional().size() > 1)
    return f.fail("give the thread id: weir resume THREAD_ID --value JSON"), kExitInvalidInput;
  json::value value;  // null when not given
  if (auto v = f.get("--value")) {
    auto parsed = parse_json(*v, "--value");
    if (!parsed) {
      if (v->find('\'') == std::string::npos && !v->empty())
        return std::fprintf(stderr,
                            "weir resume: --value expects JSON: did you mean --value '%s'?\n",
                            json::serialize(json::string(*v)).c_str()),
               kExitInvalidInput;
      return std::fprintf(stderr, "weir resume: %s\n", parsed.error().message.c_str()),
             kExitInvalidInput;
    }
    value = std::move(parsed->value);
  }
  // The thread's workflow file: --file, else the one its checkpoints recorded.
  const fs::path db = store_path(f);
  std::string file = f.get("--file").value_or("");
  if (file.empty()) {
    auto cp = open_store(db);
    if (!cp) return store_failed("resume", cp.error());
    auto latest = (*cp)->latest(thread);
    if (!latest) return store_failed("resume", latest.error());
    if (!*latest)
      return std::fprintf(stderr, "weir resume: no thread '%s' in %s\n", thread.c_str(),
                          graph::redact_store(db.string()).c_str()),
             kExitInvalidInput;
    if (const auto* w = (**latest).metadata.if_contains("workflow"); w && w->is_string())
      file = w->as_string();
    else
      return std::fprintf(stderr,
                          "weir resume: thread '%s' does not record its workflow file; give "
                          "--file FILE\n",
                          thread.c_str()),
             kExitInvalidInput;
  }
  int code = kExitOk;
  auto env = WorkflowEnv::open(file, f.get("--model"), "resume", code);
  if (!env) return code;
  RunTarget target;
  target.thread = thread;
  target.store = db;
  target.stream = f.has("--stream");
  target.metadata["workflow"] = fs::absolute(file).string();
  auto cp = open_store(db);
  if (!cp) return store_failed("resume", cp.error());
  target.checkpointer = std::move(*cp);
  target.tracer = tracer;
  const int rc = run_workflow(*env, target, file, "resume",
                              [&](graph::GraphRuntime& rt, graph::RunOptions opt) {
                                return rt.async_resume(env->graph, thread, value, std::move(opt));
                              });
  target.tracer.reset();
  close_tracer(tracer);
  return rc;
}

namespace {

// weir batch's result lines in input order: a line's result waits until every earlier line's
// was written (a blank line has none). On the io_context's one thread.
struct OrderedOutput {
  std::FILE* out = stdout;
  std::map<std::size_t, std::string> ready;  // index -> its result line, not yet written
  std::vector<std::size_t> skipped;          // blank lines: indexes with no run
  std::size_t next = 0;                      // the next index to write
  std::size_t emitted = 0;                   // result lines written

  void flush() {
    while (true) {
      if (std::find(skipped.begin(), skipped.end(), next) != skipped.end()) {
        ++next;
        continue;
      }
      auto it = ready.find(next);
      if (it == ready.end()) break;
      std::fprintf(out, "%s\n", it->second.c_str());
      ready.erase(it);
      ++next;
      ++emitted;
    }
  }
};

json::object failed_line(std::size_t index, const Error& e) {
  return json::object{{"index", index},
                      {"ok", false},
                      {"error", json::object{{"code", errc_name(e.code)}, {"message", e.message}}}};
}

}  // namespace

int cmd_batch(Args args) {
  Flags f("batch",
          {"--model", "--inputs", "--max-concurrency", "--concurrency", "--output",
           "--otlp-endpoint", "--trace"},
          {"--trace-content"});
  if (!f.parse(args)) return kExitInvalidInput;
  std::shared_ptr<trace::Tracer> tracer;  // a trace a line (docs/tracing.md)
  if (!open_tracer(f, tracer)) return kExitInvalidInput;
  std::string inputs = f.get("--inputs").value_or("");
  if (inputs.empty() && f.positional().size() == 2) inputs = f.positional()[1];
  if (f.positional().empty() || inputs.empty() || f.positional().size() > 2)
    return f.fail("give a workflow file and --inputs FILE.jsonl (one JSON object a line)"),
           kExitInvalidInput;
  std::size_t concurrency = 16;
  if (!f.integer("--max-concurrency", concurrency, std::size_t{1}, std::size_t{100'000}) ||
      !f.integer("--concurrency", concurrency, std::size_t{1}, std::size_t{100'000}))
    return kExitInvalidInput;
  std::ifstream lines(inputs);
  if (!lines) return f.fail("cannot read inputs file '" + inputs + "'"), kExitInvalidInput;
  OrderedOutput output;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out_file(nullptr, &std::fclose);
  if (auto o = f.get("--output")) {
    out_file.reset(std::fopen(o->c_str(), "w"));
    if (!out_file) return f.fail("cannot write output file '" + *o + "'"), kExitInvalidInput;
    output.out = out_file.get();
  }
  int code = kExitOk;
  auto env = WorkflowEnv::open(f.positional()[0], f.get("--model"), "batch", code);
  if (!env) return code;
  graph::RuntimeOptions ropt = env->runtime_options();
  ropt.max_concurrent_runs = concurrency;
  graph::GraphRuntime runtime(ropt);
  const graph::RunTracing tracing{{tracer.get(), {}}, env->spec.name};
  asio::io_context io;
  // Lines are read as they are needed and results are printed in input order, so at most
  // `window` runs are in flight or finished-but-waiting for an earlier one: a million-line
  // file costs no more memory than a short one.
  struct Progress {
    std::size_t started = 0, done = 0, failed = 0;
  } pr;
  const bool tty = ::isatty(STDERR_FILENO);
  const std::size_t window = 2 * concurrency;
  asio::steady_timer wake(io);
  wake.expires_at(asio::steady_timer::time_point::max());
  // A line's result, in order; on the io_context's one thread.
  auto line_done = [&](std::size_t index, json::object res) {
    if (!res.at("ok").as_bool()) ++pr.failed;
    ++pr.done;
    output.ready[index] = to_json_text(res);
    output.flush();
    if (tty)
      std::fprintf(stderr, "\r  %zu done (%zu failed), %zu running, %s in use   ", pr.done,
                   pr.failed, runtime.active_runs(),
                   format_bytes(env->budget->used_total()).c_str());
    wake.cancel();
  };
  auto one = [&](std::size_t index, std::string line) -> asio::awaitable<void> {
    auto parsed = parse_json(line, inputs + " line " + std::to_string(index + 1));
    if (!parsed) co_return line_done(index, failed_line(index, parsed.error()));
    if (!parsed->value.is_object())
      co_return line_done(index, failed_line(index, Error(Errc::invalid_argument,
                                                          "line " + std::to_string(index + 1) +
                                                              " is not a JSON object")));
    graph::RunOptions opt;
    if (tracer) opt.trace = &tracing;
    auto op =
        runtime.async_invoke(env->graph, std::move(parsed->value.as_object()), std::move(opt));
    auto r = co_await std::move(op);
    if (!r) co_return line_done(index, failed_line(index, r.error()));
    line_done(
        index,
        json::object{
            {"index", index}, {"ok", true}, {"state", std::move(r->state)}, {"steps", r->steps}});
  };
  bool feeder_failed = false;
  auto feeder = [&]() -> asio::awaitable<void> {
    std::string line;
    std::size_t index = 0;
    while (std::getline(lines, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) {
        output.skipped.push_back(index++);
        output.flush();
        continue;
      }
      while (pr.started - output.emitted >= window) {
        boost::system::error_code ec;
        co_await wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        wake.expires_at(asio::steady_timer::time_point::max());
      }
      ++pr.started;
      // Never detached (STYLE.md): a line whose coroutine threw still gets its result line, so
      // the window moves on and the process ends.
      const std::size_t i = index++;
      asio::co_spawn(io, one(i, std::move(line)), [&, i](std::exception_ptr e) {
        if (e) line_done(i, failed_line(i, exception_error(e)));
      });
      // Yield once a line. A run that never suspends completes inside co_spawn, and Asio frees
      // a finished coroutine's frames through a post to the executor: a feeder that never
      // yielded kept every finished run's frames until the end of the file (~1.3 KB a line).
      co_await asio::post(io, asio::use_awaitable);
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  asio::co_spawn(io, feeder(), [&](std::exception_ptr e) {
    if (!e) return;
    feeder_failed = true;
    std::fprintf(stderr, "weir batch: reading %s: %s\n", inputs.c_str(),
                 exception_error(e).to_string().c_str());
  });
  io.run();
  output.flush();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tty) std::fprintf(stderr, "\r%70s\r", "");
  std::fprintf(stderr, "weir batch: %zu runs, %zu failed, in %.2f s (%.0f runs/s)\n", pr.done,
               pr.failed, secs, static_cast<double>(pr.done) / std::max(secs, 1e-9));
  close_tracer(tracer);
  return pr.failed || feeder_failed ? kExitRunFailed : kExitOk;
}

}  // namespace weir::cli
