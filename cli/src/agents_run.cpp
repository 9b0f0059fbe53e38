// Runs crew and group-chat files: one instance (its result as JSON on stdout), or many at once
// on one shared engine with a summary table (what `weir demo` shows).
#include "agents_run.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "commands.hpp"
#include "run_instances.hpp"
#include "weir/agents/crew_file.hpp"
#include "weir/agents/local_model.hpp"
#include "weir/agents/openai_model.hpp"
#include "weir/inference/engine.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/json_write.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/tools/registry.hpp"

namespace weir::cli {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

Result<ModelChoice> choose_model(const std::optional<std::string>& flag) {
  if (flag) return ModelChoice{*flag, false};
  if (const char* env = std::getenv("WEIR_MODEL"); env && *env) return ModelChoice{env, false};
  // Small enough to run 64 crews on 2 cores in well under two minutes; q8_0 like real models.
  ModelChoice c{fs::temp_directory_path() / "weir-default-model-v2.gguf", true};
  if (!fs::exists(c.path)) {
    // Progress goes to stderr: stdout carries the run's JSON result.
    std::fprintf(stderr, "generating the default model (random weights, 4 layers) at %s ...\n",
                 c.path.c_str());
    inference::RandomModelShape shape{256, 768, 4, 8, 8, 4096, 4096};
    const fs::path tmp = c.path.string() + ".tmp" + std::to_string(::getpid());
    if (auto st = inference::write_random_llama(tmp, shape, inference::GgmlType::q8_0, 7); !st)
      return std::move(st).error();
    fs::rename(tmp, c.path);
  }
  return c;
}

namespace {

struct Totals {
  std::atomic<int> runs{0}, failed{0}, steps{0}, iterations{0}, tool_calls{0}, malformed{0},
      refused{0};
  std::atomic<long> prompt_tokens{0}, completion_tokens{0};
  std::atomic<int> peak_used_blocks{0};
  std::string first_error;
  std::mutex mu;
};

void print_budget(const MemoryBudget& budget) {
  std::printf("  peak memory by budget category:\n");
  for (int c = 0; c < kBudgetCategoryCount; ++c) {
    auto cat = static_cast<BudgetCategory>(c);
    std::printf(
        "    %-14s peak %-12s limit %s\n", budget_category_name(cat),
        format_bytes(budget.peak(cat)).c_str(),
        budget.limit(cat) == kUnlimited ? "(total)" : format_bytes(budget.limit(cat)).c_str());
  }
  std::printf("    %-14s peak %-12s limit %s\n", "total", format_bytes(budget.peak_total()).c_str(),
              format_bytes(budget.total_limit()).c_str());
}

json::object crew_json(const agents::CrewResult& r, const ArtifactStore& store) {
  json::array tasks;
  for (const auto& t : r.tasks) {
    json::object rec{{"task", t.task},
                     {"agent", t.agent},
                     {"summary", t.summary},
                     {"artifact", t.artifact_id},
                     {"bytes", t.output_bytes},
                     {"iterations", t.loop.iterations},
                     {"tool_calls", t.loop.tool_calls}};
    if (t.output_valid) rec["output_valid"] = *t.output_valid;
    tasks.push_back(std::move(rec));
  }
  std::string final_text = r.final_output;
  if (!r.tasks.empty() && !r.tasks.back().artifact_id.empty())
    if (auto full = store.get(r.tasks.back().artifact_id)) final_text = std::move(*full);
  return {{"tasks", std::move(tasks)},
          {"final_output", final_text},
          {"steps", r.steps},
          {"iterations", r.iterations},
          {"tool_calls", r.tool_calls},
          {"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens}};
}

// A group chat's result: the transcript (the window: the task and the latest turns), and how
// many earlier turns left it, so a reader does not take the window for the whole chat.
json::object chat_json(const agents::GroupChatResult& r) {
  json::array tr;
  for (const auto& m : r.transcript) tr.push_back(m.to_json());
  const auto shown = static_cast<std::int64_t>(r.transcript.size()) - 1;
  return {{"transcript", std::move(tr)},
          {"stop_reason", r.stop_reason},
          {"messages", r.messages},
          {"messages_before_window", std::max<std::int64_t>(0, r.messages - shown)},
          {"tokens", r.tokens}};
}

// An exception's what(), for a message.
std::string what(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
  }
  return "an unknown exception";
}

// What one `weir run` of a crew or group-chat file holds. Members are destroyed in reverse
// order: the crew and the model before their engines, the engines (whose KV pools are reserved
// from `budget`) before the budget, the store before its folder is removed.
struct CrewSession {
  struct RemoveDir {
    fs::path dir;
    ~RemoveDir() {
      std::error_code ec;
      if (!dir.empty()) fs::remove_all(dir, ec);
    }
  };
  std::unique_ptr<MemoryBudget> budget;
  std::unique_ptr<ArtifactStore> store;
  RemoveDir art_dir;
  // This run's engines; their KV pools are reserved from `budget`, declared after it so that it
  // outlives them.
  inference::EngineRegistry engines;
  std::shared_ptr<agents::LocalChatModel> local;  // null for a remote model
  std::shared_ptr<agents::ChatModel> model;
  std::shared_ptr<tools::ToolRegistry> tools;
  graph::RuntimeOptions runtime;
  std::shared_ptr<const agents::Crew> crew;
  std::shared_ptr<const agents::GroupChat> chat;
};

// One budget for everything the crews use, and the artifact store on it.
Status open_budget_and_store(CrewSession& s) {
  BudgetLimits limits;
  limits.total = std::size_t{1} << 30;
  limits.category[static_cast<int>(BudgetCategory::kv_cache)] = std::size_t{96} << 20;
  limits.category[static_cast<int>(BudgetCategory::artifacts)] = std::size_t{32} << 20;
  limits.category[static_cast<int>(BudgetCategory::run_state)] = std::size_t{64} << 20;
  s.budget = std::make_unique<MemoryBudget>(limits);
  remove_stale_artifact_dirs();
  const fs::path dir = fs::temp_directory_path() / ("weir-crew-" + std::to_string(::getpid()));
  auto store =
      ArtifactStore::open({dir, std::size_t{24} << 20, std::size_t{4} << 30, 200, s.budget.get()});
  if (!store) return std::move(store).error();
  s.store = std::move(*store);
  s.art_dir.dir = dir;
  return {};
}

// --model openai:URL/MODEL: the agents talk to a remote OpenAI-compatible endpoint (no engine);
// else the in-process engine on `choice` with the file's "engine" settings.
Status open_model(CrewSession& s, const agents::AgentsFile& file, const AgentsRunOptions& options,
                  const ModelChoice& choice, bool remote) {
  if (remote) {
    auto o = agents::parse_openai_model_ref(*options.model);
    if (!o) return std::move(o).error();
    if (options.max_model_len > 0) o->context_length = options.max_model_len;
    auto m = agents::OpenAIChatModel::open(std::move(*o));
    if (!m) return std::move(m).error();
    s.model = std::move(*m);
    return {};
  }
  agents::LocalModelOptions mo;
  mo.budget = s.budget.get();
  mo.max_model_len = options.max_model_len;  // --max-model-len wins over the file's "engine"
  file.engine.apply(mo);
  mo.ignore_eog = choice.random;
  auto m = agents::LocalChatModel::open(s.engines, choice.path, mo);
  if (!m) return std::move(m).error();
  s.local = *m;
  s.model = s.local;
  return {};
}

// The tools and the crew or group chat. Errors: the file's (invalid_workflow).
Status build_crew(CrewSession& s, agents::AgentsFile& file, const AgentsRunOptions& options) {
  auto tools = agents::build_tools(file, s.store.get());
  if (!tools) return std::move(tools).error();
  s.tools = std::move(*tools);
  agents::expand_tool_patterns(file, *s.tools);
  s.runtime.budget = s.budget.get();
  s.runtime.artifacts = s.store.get();
  s.runtime.max_concurrent_runs = static_cast<std::size_t>(std::max(1, options.concurrency));
  if (file.kind == agents::AgentsFileKind::crew) {
    auto c = agents::Crew::create(file.crew, s.model, s.tools, s.runtime);
    if (!c) return std::move(c).error();
    s.crew = std::move(*c);
  } else {
    auto c = agents::GroupChat::create(file.chat, s.model);
    if (!c) return std::move(c).error();
    s.chat = std::move(*c);
  }
  return {};
}

void print_header(const agents::AgentsFile& file, const AgentsRunOptions& options,
                  const ModelChoice& choice, bool remote) {
  const std::string what = file.kind == agents::AgentsFileKind::crew
                               ? std::to_string(file.crew.agents.size()) + " agents, " +
                                     std::to_string(file.crew.tasks.size()) + " tasks"
                               : std::to_string(file.chat.agents.size()) + "-agent group chat";
  std::printf("weir: %d instance%s of %s (%s), %d at once, model %s%s\n", options.instances,
              options.instances == 1 ? "" : "s", file.name.c_str(), what.c_str(),
              options.concurrency, remote ? options.model->c_str() : choice.path.filename().c_str(),
              choice.random ? " (random weights)" : "");
  if (choice.random)
    std::printf(
        "  note: the default model's weights are random, so its text is noise; the mechanics "
        "are real:\n  agent loops on the graph executor, tool calls, artifacts, admission, "
        "continuous batching,\n  a paged KV cache sized from the budget, shared-prefix reuse. "
        "Set WEIR_MODEL=/path/to/model.gguf\n  (or --model) to run a real model.\n");
  std::fflush(stdout);
}

// The counters of all instances, and the result of one when only one runs.
struct Outcome : Totals {
  json::object single;
  double seconds = 0;
};

// Runs `options.instances` instances of the crew or chat at once and waits for all of them
// (each accounted for however it ends: run_instances.hpp); samples the engine meanwhile (peak
// KV blocks) and, with `progress`, prints a progress line on a terminal.
void run_all(CrewSession& s, const agents::AgentsFile& file, const json::object& inputs,
             const AgentsRunOptions& options, bool progress, Outcome& out) {
  graph::GraphRuntime runtime(s.runtime);
  asio::io_context io;
  std::atomic<int> remaining{options.instances};
  auto failed = [&](std::string message) {
    ++out.failed;
    std::lock_guard lock(out.mu);
    if (out.first_error.empty()) out.first_error = std::move(message);
  };
  auto one = [&](int id) -> asio::awaitable<void> {
    graph::RunOptions ro;
    ro.run_id = file.name + "-" + std::to_string(id);
    const graph::RunTracing tracing{{options.tracer.get(), {}}, file.name};
    if (options.tracer) ro.trace = &tracing;
    json::object in = inputs;
    // Many instances: "topics" in the inputs gives each instance its own "topic", in turn.
    if (const auto* topics = inputs.if_contains("topics");
        topics && topics->is_array() && !topics->as_array().empty())
      in["topic"] = topics->as_array()[static_cast<std::size_t>(id) % topics->as_array().size()];
    if (s.crew) {
      auto op = s.crew->async_kickoff(runtime, std::move(in), ro);
      auto r = co_await std::move(op);
      if (!r) co_return failed(r.error().to_string());
      ++out.runs;
      out.steps += r->steps;
      out.iterations += r->iterations;
      out.tool_calls += r->tool_calls;
      out.malformed += r->malformed_tool_calls;
      out.refused += r->refused_tool_calls;
      out.prompt_tokens += r->prompt_tokens;
      out.completion_tokens += r->completion_tokens;
      if (options.instances == 1) out.single = crew_json(*r, *s.store);
      co_return;
    }
    auto op = s.chat->async_run(runtime, agents::render_inputs(file.task, in), ro);
    auto r = co_await std::move(op);
    if (!r) co_return failed(r.error().to_string());
    ++out.runs;
    out.steps += r->steps;
    out.iterations += static_cast<int>(r->messages);
    out.prompt_tokens += r->tokens;
    if (options.instances == 1) out.single = chat_json(*r);
  };
  // Runs when an instance ends, however it ends: an exception that escaped it (a bug) is that
  // instance's failure, and it is counted, so the sampler and io.run() always finish.
  auto done = [&](int id, std::exception_ptr e) {
    s.store->release_owner(file.name + "-" + std::to_string(id));
    if (e) failed("instance " + std::to_string(id) + " threw: " + what(e));
    --remaining;
  };
  const bool tty = progress && ::isatty(STDOUT_FILENO);
  auto sampler = [&]() -> asio::awaitable<void> {
    asio::steady_timer t(io);
    int last_done = -1;
    while (remaining.load() > 0) {
      auto st = s.local ? s.local->engine().stats() : inference::EngineStats{};
      out.peak_used_blocks = std::max(out.peak_used_blocks.load(), st.kv.used_blocks);
      const int ended = out.runs.load() + out.failed.load();
      if (tty && ended != last_done) {
        std::printf("\r  %d/%d done, %zu running, %zu queued, KV %d/%d blocks   ", ended,
                    options.instances, runtime.active_runs(), runtime.queued_runs(),
                    st.kv.used_blocks, st.kv.num_blocks);
        std::fflush(stdout);
        last_done = ended;
      }
      t.expires_after(std::chrono::milliseconds(50));
      co_await t.async_wait(asio::use_awaitable);
    }
    if (tty) std::printf("\r%70s\r", "");
  };
  const auto t0 = Clock::now();
  spawn_instances(io, options.instances, one, done);
  asio::co_spawn(io, sampler(), [](std::exception_ptr e) {
    if (e) std::fprintf(stderr, "weir: the progress sampler failed\n");
  });
  io.run();
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
}

void print_table(const CrewSession& s, const Outcome& t) {
  const auto st = s.local ? s.local->engine().stats() : inference::EngineStats{};
  const long gen = t.completion_tokens.load();
  std::printf("\n  %-30s %d completed, %d failed, in %.1f s\n", "runs", t.runs.load(),
              t.failed.load(), t.seconds);
  std::printf("  %-30s %d supersteps, %d model calls, %d tool calls\n", "work", t.steps.load(),
              t.iterations.load(), t.tool_calls.load());
  // Made: every call written (a malformed one too; a task's prefetch included); valid: parsed, of a
  // tool the agent has, with arguments its schema accepts. Constrained decoding makes the two
  // equal.
  const int made = t.tool_calls.load() + t.malformed.load();
  std::printf("  %-30s %d made, %d valid (%d malformed, %d refused)\n", "tool calls", made,
              made - t.malformed.load() - t.refused.load(), t.malformed.load(), t.refused.load());
  std::printf("  %-30s %ld prompt, %ld generated (%.0f generated tok/s)\n", "tokens",
              t.prompt_tokens.load(), gen, gen / t.seconds);
  if (s.local) {  // a remote model's KV cache is the server's
    std::printf("  %-30s %d of %d blocks at peak (%d tokens each, pool %s)\n", "KV cache",
                t.peak_used_blocks.load(), st.kv.num_blocks,
                s.local->engine().kv_layout().block_size,
                format_bytes(static_cast<std::size_t>(st.kv_pool_bytes)).c_str());
    std::printf("  %-30s %llu of %llu full prompt blocks (%.0f%%)\n", "prefix-cache hits",
                static_cast<unsigned long long>(st.kv.prefix_hits),
                static_cast<unsigned long long>(st.kv.prefix_queries),
                100 * st.kv.prefix_hit_rate());
    std::printf("  %-30s %llu\n", "preemptions",
                static_cast<unsigned long long>(st.sched.preemptions));
  }
  print_budget(*s.budget);
  if (!t.first_error.empty()) std::printf("\n  first error: %s\n", t.first_error.c_str());
}

}  // namespace

int run_agents_file(const fs::path& path, const AgentsRunOptions& options) {
  auto file = agents::load_agents_file(path);
  if (!file) {
    std::fprintf(stderr, "%s\n", file.error().message.c_str());
    return file.error().is(Errc::invalid_workflow) ? kExitInvalidInput : kExitRunFailed;
  }
  const bool remote = options.model && options.model->starts_with("openai:");
  auto choice = remote ? Result<ModelChoice>(ModelChoice{*options.model, false})
                       : choose_model(options.model);
  if (!choice)
    return std::fprintf(stderr, "weir: %s\n", choice.error().message.c_str()), kExitRunFailed;
  CrewSession s;
  Status st = open_budget_and_store(s);
  if (st) st = open_model(s, *file, options, *choice, remote);
  if (!st) return std::fprintf(stderr, "weir: %s\n", st.error().message.c_str()), kExitRunFailed;
  if (auto b = build_crew(s, *file, options); !b)
    return std::fprintf(stderr, "%s: %s\n", path.c_str(), b.error().message.c_str()),
           kExitInvalidInput;
  json::object inputs = file->inputs;
  for (const auto& [k, v] : options.inputs) inputs[k] = v;

  const bool table = options.table || options.instances > 1;
  if (table) print_header(*file, options, *choice, remote);
  Outcome out;
  run_all(s, *file, inputs, options, table, out);
  if (!table) {
    if (out.runs.load() == 1) {
      std::printf("%s\n", to_json_text(out.single).c_str());
      std::fprintf(stderr, "weir run: %s finished in %.1f s\n", file->name.c_str(), out.seconds);
      return kExitOk;
    }
    std::fprintf(stderr, "weir run: %s\n", out.first_error.c_str());
    return kExitRunFailed;
  }
  print_table(s, out);
  return out.failed.load() ? kExitRunFailed : kExitOk;
}

}  // namespace weir::cli
