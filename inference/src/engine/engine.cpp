#include "engine/engine_impl.hpp"

#include <unistd.h>

#include <algorithm>
#include <new>

#include "weir/runtime/metrics.hpp"

namespace weir::inference {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::stop:
      return "stop";
    case FinishReason::length:
      return "length";
    case FinishReason::eos:
      return "eos";
    case FinishReason::cancelled:
      return "cancelled";
    case FinishReason::error:
      return "error";
  }
  return "unknown";
}

// --- creation -----------------------------------------------------------------------------

const char* kv_type_name(KvType type) {
  return type == KvType::f16 ? "f16" : type == KvType::q8_0 ? "q8_0" : "f32";
}

Result<KvType> parse_kv_type(std::string_view name) {
  for (KvType t : {KvType::f32, KvType::f16, KvType::q8_0})
    if (name == kv_type_name(t)) return t;
  return Error(Errc::invalid_argument,
               "unknown KV cache type '" + std::string(name) + "' (choose f32, f16 or q8_0)");
}

namespace {

std::size_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                               : 0;
}

// The KV pool's bytes: what the config asks (kv_cache_bytes, else the runner's hint), never more
// than the budget's kv_cache category can grant now (without a size, all of that).
Result<std::size_t> kv_pool_bytes(const EngineConfig& config, const StepRunner& runner) {
  std::size_t bytes = config.kv_cache_bytes ? config.kv_cache_bytes : runner.kv_bytes_hint();
  bool sized = bytes > 0;
  if (config.budget) {
    const std::size_t grant = config.budget->headroom(BudgetCategory::kv_cache);
    sized = sized || grant != kUnlimited;
    bytes = bytes ? std::min(bytes, grant) : grant;  // 0 left: create() says what one needs
  }
  if (!sized) {
    return Error(Errc::invalid_argument,
                 "engine: no KV cache size: set kv_cache_bytes (weir serve: --kv-cache-mb), or "
                 "give the engine a memory budget with a kv_cache limit");
  }
  return bytes;
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<StepRunner> runner,
                                               EngineConfig config) {
  if (!runner) return Error(Errc::invalid_argument, "engine: no model runner given");
  if (config.block_size <= 0 || config.max_num_seqs <= 0 || config.max_num_batched_tokens <= 0) {
    return Error(Errc::invalid_argument,
                 "engine: block_size, max_num_seqs and max_num_batched_tokens must be positive");
  }
  const std::int64_t ctx = runner->context_length();
  if (config.max_model_len == 0) config.max_model_len = ctx;
  if (config.max_model_len > ctx) {
    return Error(Errc::invalid_argument,
                 "engine.max_model_len=" + std::to_string(config.max_model_len) +
                     " exceeds the model's context length of " + std::to_string(ctx) +
                     "; lower it (weir run/demo: --max-model-len N; files: \"engine\": "
                     "{\"max_model_len\": N}), or leave it unset to use the model's");
  }
  if (!runner->supports_kv_type(config.kv_cache_type)) {
    return Error(Errc::unsupported,
                 std::string("engine: this model runner keeps its KV cache in F32 only; the "
                             "KV cache type ") +
                     kv_type_name(config.kv_cache_type) + " is for the CPU runner");
  }
  KvLayout layout{
      runner->n_layers(),  runner->n_kv_heads(), runner->head_dim(), config.block_size, 0,
      config.kv_cache_type};
  if (layout.n_layers < 1 || layout.n_kv_heads < 1 || layout.head_dim < 1)
    return Error(Errc::model_error, "engine: the model has " + std::to_string(layout.n_layers) +
                                        " layers of " + std::to_string(layout.n_kv_heads) +
                                        " KV heads of " + std::to_string(layout.head_dim) +
                                        ": no KV cache to size");
  const auto block_bytes = static_cast<std::size_t>(layout.type_block_bytes());
  auto bytes = kv_pool_bytes(config, *runner);
  if (!bytes) return std::move(bytes).error();
  layout.num_blocks =
      static_cast<std::int32_t>(std::min<std::size_t>(*bytes / block_bytes, INT32_MAX));
  const std::int64_t need = (config.max_model_len + config.block_size - 1) / config.block_size;
  if (layout.num_blocks < need) {
    return Error(Errc::memory_budget_exceeded,
                 "the KV cache budget of " + std::to_string(*bytes >> 10) + " KiB holds " +
                     std::to_string(layout.num_blocks) + " blocks of " +
                     std::to_string(config.block_size) + " tokens (" + std::to_string(block_bytes) +
                     " bytes each), but one sequence of max_model_len=" +
                     std::to_string(config.max_model_len) + " needs " + std::to_string(need) +
                     "; raise the KV cache budget (weir serve: --kv-cache-mb N; files: \"limits\": "
                     "{\"memory\": {\"kv_cache\": ...}}) or lower max_model_len "
                     "(--max-model-len N; files: \"engine\": {\"max_model_len\": N})");
  }
  const std::size_t pool_bytes = static_cast<std::size_t>(layout.num_blocks) * block_bytes;
  // The budget grants the bytes first; then they are allocated. Memory the machine does not
  // have is an error naming the setting, not a terminate: a host pool larger than the RAM is
  // refused before it is touched (with overcommit it would allocate, then be killed filling
  // it), and a failed allocation (std::bad_alloc) is caught below.
  const std::string too_big =
      "; lower the KV cache size (kv_cache_bytes: weir serve "
      "--kv-cache-mb, or the memory budget's limits.kv_cache)";
  if (const std::size_t ram = physical_memory_bytes();
      !runner->owns_kv_pool() && ram > 0 && pool_bytes > ram) {
    return Error(Errc::memory_budget_exceeded, "the KV cache of " + format_bytes(pool_bytes) +
                                                   " is more than this machine's memory (" +
                                                   format_bytes(ram) + ")" + too_big);
  }
  MemoryBudget::Reservation reservation;
  if (config.budget) {
    auto r = config.budget->try_reserve(BudgetCategory::kv_cache, pool_bytes);
    if (!r) return std::move(r).error();
    reservation = std::move(*r);
  }
  try {
    if (runner->owns_kv_pool()) {
      if (auto st = runner->allocate_kv_pool(layout); !st) return std::move(st).error();
    }
    auto impl = std::make_unique<Impl>(std::move(runner), std::move(config), layout,
                                       std::move(reservation));
    return std::unique_ptr<Engine>(new Engine(std::move(impl)));
  } catch (const std::bad_alloc&) {
    return Error(Errc::memory_budget_exceeded,
                 "the KV cache of " + format_bytes(pool_bytes) +
                     " could not be allocated: the machine does not have that much free memory" +
                     too_big);
  }
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() = default;

Engine::Impl::Impl(std::unique_ptr<StepRunner> runner, EngineConfig config, KvLayout layout,
                   MemoryBudget::Reservation reservation)
    : runner_(std::move(runner)),
      config_(std::move(config)),
      layout_(layout),
      kv_reservation_(std::move(reservation)),
      kv_pool_(runner_->owns_kv_pool() ? 0
                                       : static_cast<std::size_t>((layout.total_bytes() + 3) / 4)),
      kv_({layout.num_blocks, layout.block_size, config_.enable_prefix_caching}),
      scheduler_({config_.max_num_seqs, config_.max_num_batched_tokens, config_.max_model_len,
                  config_.max_waiting},
                 kv_) {
  stats_.kv_pool_bytes = layout.total_bytes();
  publish_occupancy();  // the empty pool, before a first step
  register_gauges();
  thread_ = std::thread([this] { run(); });
}

Engine::Impl::~Impl() {
  if (!config_.metrics_name.empty())
    Registry::global().remove_callbacks({{"engine", config_.metrics_name}});
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Engine::Impl::register_gauges() {
  if (config_.metrics_name.empty()) return;
  auto& reg = Registry::global();
  const Labels labels = {{"engine", config_.metrics_name}};
  auto gauge = [&](const char* name, const char* help,
                   std::function<double(const EngineStats&)> get) {
    reg.gauge_callback(name, help, labels, [this, get] {
      std::lock_guard lock(mu_);
      return get(stats_);
    });
  };
  gauge("weir_kv_blocks_used", "KV cache blocks in use",
        [](const EngineStats& s) { return s.kv.used_blocks; });
  gauge("weir_kv_blocks_free", "KV cache blocks free (cached or empty)",
        [](const EngineStats& s) { return s.kv.free_blocks; });
  gauge("weir_kv_blocks_cached", "free KV blocks still holding a reusable prefix",
        [](const EngineStats& s) { return s.kv.cached_blocks; });
  gauge("weir_kv_waste_ratio", "allocated but unfilled KV slots over allocated slots",
        [](const EngineStats& s) { return s.kv.waste(); });
  gauge("weir_prefix_cache_hit_ratio", "prompt blocks found in the prefix cache",
        [](const EngineStats& s) { return s.kv.prefix_hit_rate(); });
  gauge("weir_engine_preemptions", "sequences preempted by recompute",
        [](const EngineStats& s) { return double(s.sched.preemptions); });
  gauge("weir_engine_waiting", "requests waiting for admission",
        [](const EngineStats& s) { return double(s.sched.waiting); });
  gauge("weir_engine_running", "sequences running",
        [](const EngineStats& s) { return double(s.sched.running); });
  gauge("weir_engine_tokens_generated", "tokens generated",
        [](const EngineStats& s) { return double(s.tokens_generated); });
}

// --- the public face (any thread) ------------------------------------------------------------

RequestId Engine::submit(GenerateRequest request, RequestCallbacks callbacks) {
  auto r = std::make_unique<EngineRequest>();
  r->id = impl_->next_id_.fetch_add(1, std::memory_order_relaxed);
  r->req = std::move(request);
  r->cb = std::move(callbacks);
  r->submitted = Clock::now();
  r->sampler.emplace(r->req.sampling);
  const RequestId id = r->id;
  {
    std::lock_guard lock(impl_->mu_);
    impl_->inbox_.push_back(std::move(r));
  }
  impl_->cv_.notify_one();
  return id;
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard lock(impl_->mu_);
    impl_->cancels_.push_back(id);
  }
  impl_->cv_.notify_one();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->stats_;
}

const EngineConfig& Engine::config() const {
  return impl_->config_;
}

const KvLayout& Engine::kv_layout() const {
  return impl_->layout_;
}

std::int32_t Engine::vocab_size() const {
  return impl_->runner_->vocab_size();
}

// --- engine thread ---------------------------------------------------------------------------

void Engine::Impl::run() {
  while (true) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !inbox_.empty() || !cancels_.empty() || scheduler_.has_work();
      });
      if (stop_) break;
    }
    admit_inbox();
    if (scheduler_.has_work()) step();
  }
  // Shutting down: everything still known ends as cancelled, with what it generated.
  {
    std::lock_guard lock(mu_);
    for (auto& r : inbox_) cancels_.push_back(r->id);
  }
  admit_inbox();
  std::vector<RequestId> ids;
  for (auto& [id, r] : requests_) ids.push_back(id);
  for (RequestId id : ids) complete(id, cancelled_result(*requests_.at(id)));
  publish(0, 0, 0, 0);
}

Status Engine::Impl::check(EngineRequest& r) const {
  const GenerateRequest& req = r.req;
  if (req.max_new_tokens <= 0)
    return Error(Errc::invalid_argument, "max_new_tokens must be at least 1");
  for (std::int32_t t : req.prompt) {
    if (t < 0 || t >= runner_->vocab_size()) {
      return Error(Errc::invalid_argument, "prompt token id " + std::to_string(t) +
                                               " is outside the vocabulary (size " +
                                               std::to_string(runner_->vocab_size()) + ")");
    }
  }
  if (req.constraint) {
    if (req.constraint->n_vocab() != runner_->vocab_size()) {
      return Error(Errc::invalid_argument, "the constraint was compiled for a vocabulary of " +
                                               std::to_string(req.constraint->n_vocab()) +
                                               " tokens, but the model has " +
                                               std::to_string(runner_->vocab_size()));
    }
    r.matcher.emplace(req.constraint, req.constraint_trigger);
    // A value that must start at once and cannot end within the budget: refused, never cut.
    const std::int32_t budget = budget_left(req.max_new_tokens, config_.max_model_len,
                                            static_cast<std::int64_t>(req.prompt.size()), 0);
    if (const std::int32_t need = r.matcher->min_tokens();
        r.matcher->active() && need > budget && budget > 0) {
      return Error(Errc::invalid_argument,
                   "the constraint's shortest valid output takes " + std::to_string(need) +
                       " tokens of this vocabulary, but the request allows " +
                       std::to_string(budget) +
                       (budget < req.max_new_tokens ? " (what the context leaves after the prompt)"
                                                    : " (max_new_tokens)"));
    }
  }
  return {};
}

void Engine::Impl::admit_inbox() {
  std::vector<std::unique_ptr<EngineRequest>> inbox;
  std::vector<RequestId> cancels;
  {
    std::lock_guard lock(mu_);
    inbox.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& r : inbox) {
    const RequestId id = r->id;
    Status st = check(*r);
    if (st) st = scheduler_.add(id, r->req.prompt, r->req.priority);
    requests_.emplace(id, std::move(r));
    if (!st) complete(id, std::move(st).error());
  }
  for (RequestId id : cancels) {
    if (auto it = requests_.find(id); it != requests_.end())
      complete(id, cancelled_result(*it->second));
  }
  if (!done_.empty()) publish(0, 0, 0, 0);
}

GenerateResult Engine::Impl::cancelled_result(const EngineRequest& r) {
  GenerateResult res;
  res.tokens = r.generated;
  res.logprobs = r.logprobs;
  res.finish = FinishReason::cancelled;
  res.usage.prompt_tokens = static_cast<std::int64_t>(r.req.prompt.size());
  res.usage.completion_tokens = static_cast<std::int64_t>(r.generated.size());
  res.timings.total_ms = ms_since(r.submitted, Clock::now());
  return res;
}

void Engine::Impl::complete(RequestId id, Result<GenerateResult> result) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  std::unique_ptr<EngineRequest> r = std::move(it->second);
  requests_.erase(it);
  if (scheduler_.contains(id)) scheduler_.finish(id);
  if (r->cb.on_done) done_.emplace_back(std::move(r->cb.on_done), std::move(result));
}

void Engine::Impl::publish_occupancy() {
  auto kvs = kv_.stats();
  auto ss = scheduler_.stats();
  std::lock_guard lock(mu_);
  stats_.kv = kvs;
  stats_.sched = ss;
}

// Publishes the stats, then runs the completions: whoever sees a result also sees stats that
// include it (and its freed blocks).
void Engine::Impl::publish(std::uint64_t steps, std::uint64_t generated,
                           std::uint64_t prompt_tokens, double busy) {
  publish_occupancy();
  {
    std::lock_guard lock(mu_);
    stats_.steps += steps;
    stats_.tokens_generated += generated;
    stats_.prompt_tokens_computed += prompt_tokens;
    stats_.requests_completed += done_.size();
    stats_.busy_seconds += busy;
  }
  for (auto& [fn, result] : done_) fn(std::move(result));
  done_.clear();
}

}  // namespace weir::inference
