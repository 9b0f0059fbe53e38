// Runs crew and group-chat files: one instance (its result as JSON on stdout), or many at once
// on one shared engine with a summary table (what `weir demo` shows).
#include "agents_run.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "commands.hpp"
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

}  // namespace

// A crew or group-chat file ("kind": "crew" | "group_chat") rather than a workflow.
bool is_agents_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) return false;
  std::stringstream ss;
  ss << file.rdbuf();
  std::error_code ec;
  auto v = json::parse(ss.str(), ec);
  return !ec && agents::is_agents_document(v);
}

int run_agents_file(const fs::path& path, const AgentsRunOptions& options) {
  auto file = agents::load_agents_file(path);
  if (!file) {
    std::fprintf(stderr, "%s\n", file.error().message.c_str());
    return file.error().is(Errc::invalid_workflow) ? kExitInvalidInput : kExitRunFailed;
  }
  // --model openai:URL/MODEL: the agents talk to a remote OpenAI-compatible endpoint; no engine.
  const bool remote = options.model && options.model->starts_with("openai:");
  auto choice = remote ? Result<ModelChoice>(ModelChoice{*options.model, false})
                       : choose_model(options.model);
  if (!choice)
    return std::fprintf(stderr, "weir: %s\n", choice.error().message.c_str()), kExitRunFailed;

  // One budget for everything the crews use.
  BudgetLimits limits;
  limits.total = std::size_t{1} << 30;
  limits.category[static_cast<int>(BudgetCategory::kv_cache)] = std::size_t{96} << 20;
  limits.category[static_cast<int>(BudgetCategory::artifacts)] = std::size_t{32} << 20;
  limits.category[static_cast<int>(BudgetCategory::run_state)] = std::size_t{64} << 20;
  MemoryBudget budget(limits);
  remove_stale_artifact_dirs();
  const fs::path art_dir = fs::temp_directory_path() / ("weir-crew-" + std::to_string(::getpid()));
  auto store =
      ArtifactStore::open({art_dir, std::size_t{24} << 20, std::size_t{4} << 30, 200, &budget});
  if (!store)
    return std::fprintf(stderr, "weir: %s\n", store.error().message.c_str()), kExitRunFailed;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{art_dir};

  // This command's engines; their KV pools are reserved from `budget`, declared first so that it
  // outlives them.
  inference::EngineRegistry engines;
  std::shared_ptr<agents::LocalChatModel> local;  // null for a remote model
  std::shared_ptr<agents::ChatModel> model;
  if (remote) {
    auto o = agents::parse_openai_model_ref(*options.model);
    if (o && options.max_model_len > 0) o->context_length = options.max_model_len;
    auto m = o ? agents::OpenAIChatModel::open(std::move(*o))
               : Result<std::shared_ptr<agents::OpenAIChatModel>>(std::move(o).error());
    if (!m) return std::fprintf(stderr, "weir: %s\n", m.error().message.c_str()), kExitRunFailed;
    model = std::move(*m);
  } else {
    agents::LocalModelOptions mo;
    mo.budget = &budget;
    mo.max_num_seqs = file->max_num_seqs > 0 ? file->max_num_seqs : 64;
    mo.max_model_len = options.max_model_len > 0 ? options.max_model_len : file->max_model_len;
    mo.ignore_eog = choice->random;
    mo.kv_cache_type = file->kv_cache_type;
    auto m = agents::LocalChatModel::open(engines, choice->path, mo);
    if (!m) return std::fprintf(stderr, "weir: %s\n", m.error().message.c_str()), kExitRunFailed;
    local = *m;
    model = local;
  }
  auto tools = agents::build_tools(*file, store->get());
  if (!tools)
    return std::fprintf(stderr, "%s: %s\n", path.c_str(), tools.error().message.c_str()),
           kExitInvalidInput;
  agents::expand_tool_patterns(*file, **tools);

  graph::RuntimeOptions ropt;
  ropt.budget = &budget;
  ropt.artifacts = store->get();
  ropt.max_concurrent_runs = static_cast<std::size_t>(std::max(1, options.concurrency));
  std::shared_ptr<const agents::Crew> crew;
  std::shared_ptr<const agents::GroupChat> chat;
  if (file->kind == agents::AgentsFileKind::crew) {
    auto c = agents::Crew::create(file->crew, model, *tools, ropt);
    if (!c)
      return std::fprintf(stderr, "%s: %s\n", path.c_str(), c.error().message.c_str()),
             kExitInvalidInput;
    crew = std::move(*c);
  } else {
    auto c = agents::GroupChat::create(file->chat, model);
    if (!c)
      return std::fprintf(stderr, "%s: %s\n", path.c_str(), c.error().message.c_str()),
             kExitInvalidInput;
    chat = std::move(*c);
  }
  json::object inputs = file->inputs;
  for (const auto& [k, v] : options.inputs) inputs[k] = v;

  const bool table = options.table || options.instances > 1;
  const std::string what = file->kind == agents::AgentsFileKind::crew
                               ? std::to_string(file->crew.agents.size()) + " agents, " +
                                     std::to_string(file->crew.tasks.size()) + " tasks"
                               : std::to_string(file->chat.agents.size()) + "-agent group chat";
  if (table) {
    std::printf("weir: %d instance%s of %s (%s), %d at once, model %s%s\n", options.instances,
                options.instances == 1 ? "" : "s", file->name.c_str(), what.c_str(),
                options.concurrency,
                remote ? options.model->c_str() : choice->path.filename().c_str(),
                choice->random ? " (random weights)" : "");
    if (choice->random)
      std::printf(
          "  note: the default model's weights are random, so its text is noise; the mechanics "
          "are real:\n  agent loops on the graph executor, tool calls, artifacts, admission, "
          "continuous batching,\n  a paged KV cache sized from the budget, shared-prefix reuse. "
          "Set WEIR_MODEL=/path/to/model.gguf\n  (or --model) to run a real model.\n");
    std::fflush(stdout);
  }

  graph::GraphRuntime runtime(ropt);
  asio::io_context io;
  Totals totals;
  json::object single;
  std::atomic<int> remaining{options.instances};
  auto one = [&](int id) -> asio::awaitable<void> {
    graph::RunOptions ro;
    ro.run_id = file->name + "-" + std::to_string(id);
    const graph::RunTracing tracing{{options.tracer.get(), {}}, file->name};
    if (options.tracer) ro.trace = &tracing;
    json::object in = inputs;
    // Many instances: "topics" in the inputs gives each instance its own "topic", in turn.
    if (const auto* topics = inputs.if_contains("topics");
        topics && topics->is_array() && !topics->as_array().empty())
      in["topic"] = topics->as_array()[static_cast<std::size_t>(id) % topics->as_array().size()];
    if (crew) {
      auto r = co_await crew->async_kickoff(runtime, std::move(in), ro);
      if (r) {
        ++totals.runs;
        totals.steps += r->steps;
        totals.iterations += r->iterations;
        totals.tool_calls += r->tool_calls;
        totals.malformed += r->malformed_tool_calls;
        totals.refused += r->refused_tool_calls;
        totals.prompt_tokens += r->prompt_tokens;
        totals.completion_tokens += r->completion_tokens;
        if (options.instances == 1) single = crew_json(*r, **store);
      } else {
        ++totals.failed;
        std::lock_guard lock(totals.mu);
        if (totals.first_error.empty()) totals.first_error = r.error().to_string();
      }
    } else {
      std::string task = agents::render_inputs(file->task, in);
      auto r = co_await chat->async_run(runtime, std::move(task), ro);
      if (r) {
        ++totals.runs;
        totals.steps += r->steps;
        totals.iterations += static_cast<int>(r->messages);
        totals.prompt_tokens += r->tokens;
        if (options.instances == 1) {
          json::array tr;
          for (const auto& m : r->transcript) tr.push_back(m.to_json());
          // The transcript is the window (the task and the latest turns); say how many
          // earlier turns left it, so a reader does not take the window for the whole chat.
          const auto shown = static_cast<std::int64_t>(r->transcript.size()) - 1;
          single = {{"transcript", std::move(tr)},
                    {"stop_reason", r->stop_reason},
                    {"messages", r->messages},
                    {"messages_before_window", std::max<std::int64_t>(0, r->messages - shown)},
                    {"tokens", r->tokens}};
        }
      } else {
        ++totals.failed;
        std::lock_guard lock(totals.mu);
        if (totals.first_error.empty()) totals.first_error = r.error().to_string();
      }
    }
    (*store)->release_owner(ro.run_id);
    --remaining;
  };
  // Samples the engine while the crews run (peak KV blocks) and prints progress on a terminal.
  const bool tty = ::isatty(STDOUT_FILENO);
  auto sampler = [&]() -> asio::awaitable<void> {
    asio::steady_timer t(io);
    int last_done = -1;
    while (remaining.load() > 0) {
      auto st = local ? local->engine().stats() : inference::EngineStats{};
      totals.peak_used_blocks = std::max(totals.peak_used_blocks.load(), st.kv.used_blocks);
      const int done = totals.runs.load() + totals.failed.load();
      if (tty && table && done != last_done) {
        std::printf("\r  %d/%d done, %zu running, %zu queued, KV %d/%d blocks   ", done,
                    options.instances, runtime.active_runs(), runtime.queued_runs(),
                    st.kv.used_blocks, st.kv.num_blocks);
        std::fflush(stdout);
        last_done = done;
      }
      t.expires_after(std::chrono::milliseconds(50));
      co_await t.async_wait(asio::use_awaitable);
    }
    if (tty && table) std::printf("\r%70s\r", "");
  };
  const auto t0 = Clock::now();
  for (int i = 0; i < options.instances; ++i) asio::co_spawn(io, one(i), asio::detached);
  asio::co_spawn(io, sampler(), asio::detached);
  io.run();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();

  if (!table) {
    if (totals.runs.load() == 1) {
      std::printf("%s\n", to_json_text(single).c_str());
      std::fprintf(stderr, "weir run: %s finished in %.1f s\n", file->name.c_str(), secs);
      return kExitOk;
    }
    std::fprintf(stderr, "weir run: %s\n", totals.first_error.c_str());
    return kExitRunFailed;
  }
  const auto st = local ? local->engine().stats() : inference::EngineStats{};
  const long gen = totals.completion_tokens.load();
  std::printf("\n  %-30s %d completed, %d failed, in %.1f s\n", "runs", totals.runs.load(),
              totals.failed.load(), secs);
  std::printf("  %-30s %d supersteps, %d model calls, %d tool calls\n", "work", totals.steps.load(),
              totals.iterations.load(), totals.tool_calls.load());
  // Made: every call written (a malformed one too; a task's prefetch included); valid: parsed, of a
  // tool the agent has, with arguments its schema accepts. Constrained decoding makes the two
  // equal.
  const int made = totals.tool_calls.load() + totals.malformed.load();
  std::printf("  %-30s %d made, %d valid (%d malformed, %d refused)\n", "tool calls", made,
              made - totals.malformed.load() - totals.refused.load(), totals.malformed.load(),
              totals.refused.load());
  std::printf("  %-30s %ld prompt, %ld generated (%.0f generated tok/s)\n", "tokens",
              totals.prompt_tokens.load(), gen, gen / secs);
  if (local) {  // a remote model's KV cache is the server's
    std::printf("  %-30s %d of %d blocks at peak (%d tokens each, pool %s)\n", "KV cache",
                totals.peak_used_blocks.load(), st.kv.num_blocks,
                local->engine().kv_layout().block_size,
                format_bytes(static_cast<std::size_t>(st.kv_pool_bytes)).c_str());
    std::printf("  %-30s %llu of %llu full prompt blocks (%.0f%%)\n", "prefix-cache hits",
                static_cast<unsigned long long>(st.kv.prefix_hits),
                static_cast<unsigned long long>(st.kv.prefix_queries),
                100 * st.kv.prefix_hit_rate());
    std::printf("  %-30s %llu\n", "preemptions",
                static_cast<unsigned long long>(st.sched.preemptions));
  }
  print_budget(budget);
  if (!totals.first_error.empty()) std::printf("\n  first error: %s\n", totals.first_error.c_str());
  return totals.failed.load() ? kExitRunFailed : kExitOk;
}

}  // namespace weir::cli
