// weir demo: many three-agent crews (researcher -> writer -> reviewer) at once on one shared
// in-process engine, under one memory budget. Each stage is a model call; its output goes to
// the artifact store and only a reference plus a short preview reaches the next stage. The
// crews run as coroutines behind the admission limiter; the engine batches their requests
// continuously over a paged KV cache, and their shared system prompt is prefilled once.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "weir/inference/chat_template.hpp"
#include "weir/inference/engine_async.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/inference/runner.hpp"
#include "weir/inference/tokenizer.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/executor.hpp"
#include "weir/runtime/limiter.hpp"
#include "weir/runtime/memory_budget.hpp"

namespace weir::cli {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kSystem =
    "You are one agent of a research crew running inside weir. The crew has a researcher, a writer "
    "and "
    "a reviewer. Work only from the notes you are given, keep answers short, cite the artifact you "
    "read, "
    "and never repeat the whole context: large outputs live in the artifact store and travel by "
    "reference.";
constexpr const char* kRoles[] = {"researcher", "writer", "reviewer"};

struct Totals {
  std::atomic<int> runs{0}, failed{0}, steps{0};
  std::atomic<long> tokens{0}, prompt_tokens{0}, cached_tokens{0};
};

std::string mib(std::size_t b) {
  return format_bytes(b);
}

}  // namespace

int cmd_demo(Args args) {
  Flags f("demo", {"--crews", "--concurrency", "--tokens"}, {});
  if (!f.parse(args)) return kExitInvalidInput;
  double crews = 64, concurrency = 16, tokens = 24;
  for (auto [k, v] :
       {std::pair{"--crews", &crews}, {"--concurrency", &concurrency}, {"--tokens", &tokens}}) {
    if (!f.number(k, *v)) return kExitInvalidInput;
  }

  // The model: WEIR_MODEL, or a small random-weight model weir writes itself.
  fs::path model_path;
  bool random_model = false;
  if (const char* env = std::getenv("WEIR_MODEL"); env && *env) {
    model_path = env;
  } else {
    random_model = true;
    model_path = fs::temp_directory_path() / "weir-demo-model.gguf";
    if (!fs::exists(model_path)) {
      std::printf("generating the demo model (random weights) at %s ...\n", model_path.c_str());
      inference::RandomModelShape shape{256, 768, 4, 8, 8, 4096, 1024};
      if (auto st = inference::write_random_llama(model_path, shape, inference::GgmlType::q8_0, 7);
          !st) {
        std::fprintf(stderr, "weir demo: %s\n", st.error().message.c_str());
        return kExitRunFailed;
      }
    }
  }
  auto file = inference::GgufFile::open(model_path);
  if (!file)
    return std::fprintf(stderr, "weir demo: %s\n", file.error().message.c_str()), kExitInvalidInput;
  auto tok = inference::Tokenizer::from_gguf(**file);
  if (!tok)
    return std::fprintf(stderr, "weir demo: %s\n", tok.error().message.c_str()), kExitInvalidInput;
  inference::ChatFamily family = inference::ChatFamily::chatml;
  if (auto t = (*file)->get_string("tokenizer.chat_template"); t && *t) {
    if (auto fam = inference::detect_chat_family(**t)) family = *fam;
  }
  auto model = inference::Model::from_gguf(std::move(*file));
  if (!model)
    return std::fprintf(stderr, "weir demo: %s\n", model.error().message.c_str()),
           kExitInvalidInput;

  // One budget for everything.
  BudgetLimits limits;
  limits.total = std::size_t{512} << 20;
  limits.category[static_cast<int>(BudgetCategory::kv_cache)] = std::size_t{96} << 20;
  limits.category[static_cast<int>(BudgetCategory::artifacts)] = std::size_t{8} << 20;
  MemoryBudget budget(limits);
  auto runner = inference::make_runner(*model, inference::Device::automatic, 0);
  if (!runner)
    return std::fprintf(stderr, "weir demo: %s\n", runner.error().message.c_str()), kExitRunFailed;
  const inference::Tokenizer* t = tok->get();
  auto engine = inference::Engine::create(
      std::move(runner->runner),
      {.max_num_seqs = 64,
       .max_num_batched_tokens = 1024,
       .max_model_len = std::min<std::int64_t>(1024, (*model)->hp().context_length),
       .block_size = 16,
       .budget = &budget,
       .eog_tokens = {},  // random weights: run every turn to its length
       .token_text = [t](std::int32_t id) { return t->token_to_piece(id); }});
  if (!engine)
    return std::fprintf(stderr, "weir demo: %s\n", engine.error().message.c_str()), kExitRunFailed;
  auto store = ArtifactStore::open(
      {fs::temp_directory_path() / "weir-demo-artifacts", 4u << 20, 1u << 30, 120, &budget});
  if (!store)
    return std::fprintf(stderr, "weir demo: %s\n", store.error().message.c_str()), kExitRunFailed;

  std::printf(
      "weir demo: %d crews (researcher -> writer -> reviewer), %d at once, on %s, model %s%s\n",
      static_cast<int>(crews), static_cast<int>(concurrency), runner->description.c_str(),
      model_path.filename().c_str(), random_model ? " (random weights)" : "");
  if (random_model) {
    std::printf(
        "  note: the demo model's weights are random, so its text is noise; the mechanics are "
        "real:\n"
        "  admission, continuous batching, paged KV from the budget, shared-prefix reuse, "
        "artifacts.\n"
        "  Set WEIR_MODEL=/path/to/model.gguf to run a real model.\n");
  }

  Executor ex(1);
  Limiter admission("crew admission (--concurrency)", static_cast<std::size_t>(concurrency),
                    100000);
  Totals totals;
  std::string sample_output;
  std::mutex sample_mu;
  const auto t0 = Clock::now();
  auto crew = [&](int id) -> asio::awaitable<void> {
    auto permit = co_await admission.async_acquire();
    if (!permit) {
      ++totals.failed;
      co_return;
    }
    const std::string owner = "crew-" + std::to_string(id);
    std::string context =
        "Topic " + std::to_string(id) + ": how bounded memory keeps agent crews alive under load.";
    for (const char* role : kRoles) {
      std::vector<inference::ChatTurn> turns = {
          {"system", kSystem}, {"user", std::string("You are the ") + role + ". " + context}};
      inference::GenerateRequest rq;
      rq.prompt = t->encode(inference::apply_chat_template(family, turns), true, true);
      rq.max_new_tokens = static_cast<std::int32_t>(tokens);
      rq.sampling.temperature = 0.7f;
      rq.sampling.seed = static_cast<std::uint64_t>(id);
      auto r = co_await inference::async_generate(**engine, std::move(rq), asio::use_awaitable);
      if (!r) {
        ++totals.failed;
        co_return;
      }
      ++totals.steps;
      totals.tokens += static_cast<long>(r->tokens.size());
      totals.prompt_tokens += r->usage.prompt_tokens;
      totals.cached_tokens += r->usage.cached_prompt_tokens;
      // The stage's output becomes an artifact; the next stage sees its reference and preview.
      auto ref = (*store)->put(t->decode(r->tokens), "text/plain", "", owner);
      if (!ref) {
        ++totals.failed;
        co_return;
      }
      context = std::string("Read artifact ") + ref->id.substr(0, 12) + " (" +
                std::to_string(ref->bytes) + " bytes), preview: " + ref->preview.substr(0, 60);
      if (id == 0 && std::string(role) == "reviewer") {
        std::lock_guard lock(sample_mu);
        sample_output = ref->preview;
      }
    }
    (*store)->release_owner(owner);
    ++totals.runs;
  };
  for (int i = 0; i < static_cast<int>(crews); ++i)
    ex.spawn(crew(i), [&](std::exception_ptr e) {
      if (e) ++totals.failed;
    });
  ex.shutdown(std::chrono::minutes(5));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  auto st = (*engine)->stats();

  std::printf(
      "\n  %-34s %s\n", "crews completed / failed",
      (std::to_string(totals.runs.load()) + " / " + std::to_string(totals.failed.load())).c_str());
  std::printf("  %-34s %d\n", "agent steps (model calls)", totals.steps.load());
  std::printf("  %-34s %ld generated, %ld prompt\n", "tokens", totals.tokens.load(),
              totals.prompt_tokens.load());
  std::printf("  %-34s %.1f s, %.0f generated tok/s\n", "wall time", secs,
              totals.tokens.load() / secs);
  std::printf("  %-34s %ld of %ld prompt tokens (%.0f%%)\n", "prefix-cache hits",
              totals.cached_tokens.load(), totals.prompt_tokens.load(),
              100.0 * totals.cached_tokens.load() / std::max(1L, totals.prompt_tokens.load()));
  std::printf("  %-34s %d blocks of %d tokens (%s), preemptions %llu\n", "KV cache pool",
              (*engine)->kv_layout().num_blocks, (*engine)->kv_layout().block_size,
              mib(static_cast<std::size_t>(st.kv_pool_bytes)).c_str(),
              static_cast<unsigned long long>(st.sched.preemptions));
  std::printf("  %-34s %llu steps, %llu admitted\n", "engine",
              static_cast<unsigned long long>(st.steps),
              static_cast<unsigned long long>(st.sched.admitted));
  std::printf("  peak memory by budget category:\n");
  for (int c = 0; c < kBudgetCategoryCount; ++c) {
    auto cat = static_cast<BudgetCategory>(c);
    std::printf("    %-14s peak %-12s limit %s\n", budget_category_name(cat),
                mib(budget.peak(cat)).c_str(),
                budget.limit(cat) == kUnlimited ? "(total)" : mib(budget.limit(cat)).c_str());
  }
  std::printf("    %-14s peak %-12s limit %s\n", "total", mib(budget.peak_total()).c_str(),
              mib(budget.total_limit()).c_str());
  std::printf("\n  crew 0's review (preview): %s\n", sample_output.c_str());
  return totals.failed.load() ? kExitRunFailed : kExitOk;
}

}  // namespace weir::cli
