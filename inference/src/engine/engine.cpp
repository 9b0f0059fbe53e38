#include "weir/inference/engine.hpp"

#include <algorithm>

#include <cmath>
#include "weir/runtime/metrics.hpp"

namespace weir::inference {

using Clock = std::chrono::steady_clock;

namespace {
double ms_since(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}
}  // namespace

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

struct Engine::Request {
  RequestId id = 0;
  GenerateRequest req;
  RequestCallbacks cb;
  Clock::time_point submitted;
  std::optional<Clock::time_point> first_token;
  std::vector<std::int32_t> generated;
  std::optional<Sampler> sampler;
  std::string tail;                       // the last generated text, for stop strings
  std::vector<SampledLogprobs> logprobs;  // [generated.size()] when req.logprobs >= 0
  std::optional<ConstraintMatcher> matcher;  // with the trigger, when there is one
};

namespace {
// Tokens a request may still generate, the next one included: max_new_tokens and the context.
std::int32_t budget_left(std::int32_t max_new, std::int64_t max_model_len, std::int64_t prompt,
                         std::size_t generated) {
  return static_cast<std::int32_t>(std::min<std::int64_t>(max_new, max_model_len - prompt) -
                                   static_cast<std::int64_t>(generated));
}
}  // namespace

// --- creation -----------------------------------------------------------------------------

const char* kv_type_name(KvType type) {
  return type == KvType::f16 ? "f16" : "f32";
}

Result<KvType> parse_kv_type(std::string_view name) {
  if (name == "f32") return KvType::f32;
  if (name == "f16") return KvType::f16;
  return Error(Errc::invalid_argument,
               "unknown KV cache type '" + std::string(name) + "' (choose f32 or f16)");
}

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
  const auto block_bytes = static_cast<std::size_t>(layout.block_bytes(layout.elem_bytes()));
  std::size_t bytes = config.kv_cache_bytes ? config.kv_cache_bytes : runner->kv_bytes_hint();
  if (config.budget) {
    bytes = std::min(config.budget->limit(BudgetCategory::kv_cache),
                     config.budget->headroom(BudgetCategory::kv_cache));
    if (bytes == kUnlimited) bytes = config.kv_cache_bytes;
  }
  layout.num_blocks =
      static_cast<std::int32_t>(std::min<std::size_t>(bytes / block_bytes, INT32_MAX));
  const std::int64_t need = (config.max_model_len + config.block_size - 1) / config.block_size;
  if (layout.num_blocks < need) {
    return Error(Errc::memory_budget_exceeded,
                 "the KV cache budget of " + std::to_string(bytes >> 10) + " KiB holds " +
                     std::to_string(layout.num_blocks) + " blocks of " +
                     std::to_string(config.block_size) + " tokens (" + std::to_string(block_bytes) +
                     " bytes each), but one sequence of max_model_len=" +
                     std::to_string(config.max_model_len) + " needs " + std::to_string(need) +
                     "; raise limits.kv_cache or lower engine.max_model_len");
  }
  if (runner->owns_kv_pool()) {
    if (auto st = runner->allocate_kv_pool(layout); !st) return std::move(st).error();
  }
  MemoryBudget::Reservation reservation;
  if (config.budget) {
    auto r = config.budget->try_reserve(BudgetCategory::kv_cache,
                                        static_cast<std::size_t>(layout.num_blocks) * block_bytes);
    if (!r) return std::move(r).error();
    reservation = std::move(*r);
  }
  return std::unique_ptr<Engine>(
      new Engine(std::move(runner), std::move(config), layout, std::move(reservation)));
}

Engine::Engine(std::unique_ptr<StepRunner> runner, EngineConfig config, KvLayout layout,
               MemoryBudget::Reservation reservation)
    : runner_(std::move(runner)),
      config_(std::move(config)),
      layout_(layout),
      kv_reservation_(std::move(reservation)),
      kv_pool_(runner_->owns_kv_pool() ? 0
                                       : static_cast<std::size_t>(
                                             (layout.total_elems() * layout.elem_bytes() + 3) / 4)),
      kv_({layout.num_blocks, layout.block_size, config_.enable_prefix_caching}),
      scheduler_({config_.max_num_seqs, config_.max_num_batched_tokens, config_.max_model_len,
                  config_.max_waiting},
                 kv_) {
  stats_.kv_pool_bytes = layout.total_elems() * layout.elem_bytes();
  if (!config_.metrics_name.empty()) {
    auto& reg = Registry::global();
    const Labels labels = {{"engine", config_.metrics_name}};
    auto gauge = [&](const char* name, const char* help,
                     std::function<double(const EngineStats&)> get) {
      reg.gauge_callback(name, help, labels, [this, get] { return get(stats()); });
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
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  if (!config_.metrics_name.empty())
    Registry::global().remove_callbacks({{"engine", config_.metrics_name}});
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

// --- submission (any thread) ----------------------------------------------------------------

RequestId Engine::submit(GenerateRequest request, RequestCallbacks callbacks) {
  auto r = std::make_unique<Request>();
  r->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  r->req = std::move(request);
  r->cb = std::move(callbacks);
  r->submitted = Clock::now();
  r->sampler.emplace(r->req.sampling);
  RequestId id = r->id;
  {
    std::lock_guard lock(mu_);
    inbox_.push_back(std::move(r));
  }
  cv_.notify_one();
  return id;
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard lock(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_one();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

// --- engine thread ---------------------------------------------------------------------------

void Engine::complete(RequestId id, Result<GenerateResult> result) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  std::unique_ptr<Request> r = std::move(it->second);
  requests_.erase(it);
  if (scheduler_.contains(id)) scheduler_.finish(id);
  if (r->cb.on_done) done_.emplace_back(std::move(r->cb.on_done), std::move(result));
}

// Publishes the stats, then runs the completions: whoever sees a result also sees stats that
// include it (and its freed blocks).
void Engine::publish(std::uint64_t steps, std::uint64_t generated, std::uint64_t prompt_tokens,
                     double busy) {
  auto kvs = kv_.stats();
  auto ss = scheduler_.stats();
  {
    std::lock_guard lock(mu_);
    stats_.kv = kvs;
    stats_.sched = ss;
    stats_.steps += steps;
    stats_.tokens_generated += generated;
    stats_.prompt_tokens_computed += prompt_tokens;
    stats_.requests_completed += done_.size();
    stats_.busy_seconds += busy;
  }
  for (auto& [fn, result] : done_) fn(std::move(result));
  done_.clear();
}

void Engine::admit_inbox() {
  std::vector<std::unique_ptr<Request>> inbox;
  std::vector<RequestId> cancels;
  {
    std::lock_guard lock(mu_);
    inbox.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& r : inbox) {
    RequestId id = r->id;
    auto& req = r->req;
    Status st;
    if (req.max_new_tokens <= 0) {
      st = Error(Errc::invalid_argument, "max_new_tokens must be at least 1");
    } else {
      for (std::int32_t t : req.prompt) {
        if (t < 0 || t >= runner_->vocab_size()) {
          st = Error(Errc::invalid_argument, "prompt token id " + std::to_string(t) +
                                                 " is outside the vocabulary (size " +
                                                 std::to_string(runner_->vocab_size()) + ")");
          break;
        }
      }
    }
    if (st && req.constraint) {
      if (req.constraint->n_vocab() != runner_->vocab_size()) {
        st = Error(Errc::invalid_argument, "the constraint was compiled for a vocabulary of " +
                                               std::to_string(req.constraint->n_vocab()) +
                                               " tokens, but the model has " +
                                               std::to_string(runner_->vocab_size()));
      } else {
        r->matcher.emplace(req.constraint, req.constraint_trigger);
        // A value that must start at once and cannot end within the budget: refused, never cut.
        const std::int32_t budget = budget_left(req.max_new_tokens, config_.max_model_len,
                                                static_cast<std::int64_t>(req.prompt.size()), 0);
        if (const std::int32_t need = r->matcher->min_tokens();
            r->matcher->active() && need > budget && budget > 0) {
          st = Error(Errc::invalid_argument,
                     "the constraint's shortest valid output takes " + std::to_string(need) +
                         " tokens of this vocabulary, but the request allows " +
                         std::to_string(budget) +
                         (budget < req.max_new_tokens ? " (what the context leaves after the prompt)"
                                                      : " (max_new_tokens)"));
        }
      }
    }
    if (st) st = scheduler_.add(id, req.prompt, req.priority);
    requests_.emplace(id, std::move(r));
    if (!st) complete(id, std::move(st).error());
  }
  for (RequestId id : cancels) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    Request& r = *it->second;
    GenerateResult res;
    res.tokens = r.generated;
    res.logprobs = r.logprobs;
    res.finish = FinishReason::cancelled;
    res.usage.prompt_tokens = static_cast<std::int64_t>(r.req.prompt.size());
    res.usage.completion_tokens = static_cast<std::int64_t>(r.generated.size());
    res.timings.total_ms = ms_since(r.submitted, Clock::now());
    complete(id, std::move(res));
  }
  if (!done_.empty()) publish(0, 0, 0, 0);
}

void Engine::run() {
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
  // Shutting down: everything still known ends as cancelled.
  {
    std::lock_guard lock(mu_);
    for (auto& r : inbox_) cancels_.push_back(r->id);
  }
  admit_inbox();
  std::vector<RequestId> ids;
  for (auto& [id, r] : requests_) ids.push_back(id);
  for (RequestId id : ids) {
    GenerateResult res;
    res.finish = FinishReason::cancelled;
    complete(id, std::move(res));
  }
  publish(0, 0, 0, 0);
}

void Engine::step() {
  const auto t0 = Clock::now();
  SchedulerOutput out = scheduler_.schedule();
  if (out.empty()) return;

  StepBatch& b = batch_;
  b.tokens.clear();
  b.positions.clear();
  b.seq_index.clear();
  b.seqs.clear();
  b.logit_rows.clear();
  b.copies = kv_.take_copies();
  std::uint64_t prompt_tokens = 0;
  for (std::size_t i = 0; i < out.chunks.size(); ++i) {
    const auto& c = out.chunks[i];
    auto toks = scheduler_.tokens(c.seq);
    for (std::int64_t p = c.start; p < c.start + c.count; ++p) {
      b.tokens.push_back(toks[static_cast<std::size_t>(p)]);
      b.positions.push_back(static_cast<std::int32_t>(p));
      b.seq_index.push_back(static_cast<std::int32_t>(i));
    }
    if (c.start < scheduler_.prompt_len(c.seq)) {
      prompt_tokens += static_cast<std::uint64_t>(
          std::min(c.start + c.count, scheduler_.prompt_len(c.seq)) - c.start);
    }
    b.seqs.push_back({kv_.block_table(c.seq), static_cast<std::int32_t>(c.start + c.count)});
    if (c.sample) b.logit_rows.push_back(static_cast<std::int32_t>(b.tokens.size() - 1));
  }
  const std::size_t vocab = static_cast<std::size_t>(runner_->vocab_size());
  logits_.resize(b.logit_rows.size() * vocab);
  Status st = runner_->forward(b, layout_, kv_pool_, logits_);
  if (!st) {
    for (const auto& c : out.chunks) complete(c.seq, st.error());
    publish(1, 0, 0, 0);
    return;
  }

  // Token masks of the constrained sequences, within each one's budget, computed in parallel
  // (each matcher is its own sequence's; the Constraint's mask cache is shared and locked). A
  // matcher in free text far from its budget masks nothing (masked[i] stays 0).
  std::vector<std::pair<std::size_t, Request*>> constrained;  // (logit row, request)
  {
    std::size_t row = 0;
    for (const auto& c : out.chunks) {
      if (!c.sample) continue;
      auto it = requests_.find(c.seq);
      if (it != requests_.end() && it->second->matcher)
        constrained.emplace_back(row, it->second.get());
      ++row;
    }
  }
  const std::size_t words = mask_words(static_cast<std::int32_t>(vocab));
  std::vector<char> masked(constrained.size(), 0);
  if (!constrained.empty()) {
    masks_.resize(constrained.size() * words);
    auto fill = [&](int, std::int64_t begin, std::int64_t end) {
      for (auto k = begin; k < end; ++k) {
        const auto i = static_cast<std::size_t>(k);
        Request& q = *constrained[i].second;
        const std::int32_t budget =
            budget_left(q.req.max_new_tokens, config_.max_model_len,
                        static_cast<std::int64_t>(q.req.prompt.size()), q.generated.size());
        masked[i] = q.matcher->fill_mask(std::span(masks_.data() + i * words, words), budget);
      }
    };
    if (constrained.size() > 1 && config_.constraint_threads > 1) {
      if (!mask_pool_) mask_pool_ = std::make_unique<ThreadPool>(config_.constraint_threads);
      mask_pool_->parallel_for(static_cast<std::int64_t>(constrained.size()), fill);
    } else {
      fill(0, 0, static_cast<std::int64_t>(constrained.size()));
    }
  }
  std::size_t next_constrained = 0;

  std::size_t row = 0;
  std::uint64_t generated = 0;
  const auto now = Clock::now();
  for (const auto& c : out.chunks) {
    scheduler_.on_computed(c);
    if (!c.sample) continue;
    std::span<float> lg(logits_.data() + row * vocab, vocab);
    ++row;
    auto it = requests_.find(c.seq);
    if (it == requests_.end()) continue;
    Request& r = *it->second;
    const bool is_masked = r.matcher && masked[next_constrained++];
    if (is_masked) {
      // Mask the row in place: disallowed tokens get -inf; end-of-generation and stop tokens
      // only when the output is complete.
      const std::uint64_t* m = masks_.data() + (next_constrained - 1) * words;
      const bool value_complete = r.matcher->complete();
      std::vector<std::pair<std::int32_t, float>> ends;  // end tokens and their logits
      for (const auto* list : {&config_.eog_tokens, &r.req.stop_tokens})
        for (std::int32_t t : *list)
          if (t >= 0 && static_cast<std::size_t>(t) < vocab)
            ends.emplace_back(t, lg[static_cast<std::size_t>(t)]);
      for (std::size_t w = 0; w < words; ++w) {
        const std::uint64_t bits = m[w];
        if (bits == ~std::uint64_t{0}) continue;
        const std::size_t base = w * 64;
        const std::size_t n = std::min<std::size_t>(64, vocab - base);
        for (std::size_t j = 0; j < n; ++j)
          if (!((bits >> j) & 1)) lg[base + j] = -INFINITY;
      }
      for (auto [t, l] : ends) lg[static_cast<std::size_t>(t)] = value_complete ? l : -INFINITY;
      const bool any = std::any_of(lg.begin(), lg.end(), [](float x) { return x != -INFINITY; });
      if (!any) {
        complete(c.seq, Error(Errc::invalid_argument,
                              "constraint: no token of the vocabulary can continue the output "
                              "(a recursive schema nested past the depth bound?)"));
        continue;
      }
    }
    std::int32_t tok = r.sampler->sample(lg, scheduler_.tokens(c.seq));
    // NaN or infinite logits (weights holding NaN, activations overflowing) would otherwise
    // "sample" an arbitrary token and return noise as a success.
    // (A constrained request's masked logits are -inf by design: only NaN, or an infinity
    // the model computed, is a fault there.)
    if (const float l = lg[static_cast<std::size_t>(tok)];
        std::isnan(l) || (std::isinf(l) && (!is_masked || l > 0))) {
      complete(c.seq, Error(Errc::model_error,
                            "the model computed a non-finite logit (NaN or infinity) after " +
                                std::to_string(r.generated.size()) +
                                " generated tokens: its weights hold NaN/Inf or its activations "
                                "overflow; check the model file"));
      continue;
    }
    bool constraint_done = false;
    if (r.matcher) {
      const bool is_end = std::find(config_.eog_tokens.begin(), config_.eog_tokens.end(), tok) !=
                              config_.eog_tokens.end() ||
                          std::find(r.req.stop_tokens.begin(), r.req.stop_tokens.end(), tok) !=
                              r.req.stop_tokens.end();
      const bool was_active = r.matcher->active();
      if (!is_end) {  // free text follows the trigger; a value, its grammar
        if (!r.matcher->accept(tok)) {
          complete(c.seq, Error(Errc::model_error, "constraint: sampled token " +
                                                       std::to_string(tok) + " is not allowed"));
          continue;
        }
        constraint_done = r.matcher->finished();
        if (!was_active && r.matcher->active()) r.tail.clear();  // stops look at free text only
      }
    }
    r.generated.push_back(tok);
    ++generated;
    if (!r.first_token) r.first_token = now;
    if (r.req.logprobs >= 0) {
      r.logprobs.push_back(compute_logprobs(lg, tok, std::min(r.req.logprobs, 20)));
      if (r.cb.on_logprobs) r.cb.on_logprobs(r.logprobs.back());
    }
    if (r.cb.on_token) r.cb.on_token(tok);

    std::optional<FinishReason> finish;
    // Stop strings apply to free text: never inside a constrained value (which ends where its
    // grammar, an end-of-generation token or the budget ends it).
    if (!r.req.stop_strings.empty() && config_.token_text && !(r.matcher && r.matcher->active())) {
      r.tail += config_.token_text(tok);
      std::size_t longest = 0;
      for (const auto& s : r.req.stop_strings) {
        longest = std::max(longest, s.size());
        if (!s.empty() && r.tail.find(s) != std::string::npos) finish = FinishReason::stop;
      }
      if (r.tail.size() > 2 * longest) r.tail.erase(0, r.tail.size() - longest);  // keep it bounded
    }
    auto contains = [tok](const std::vector<std::int32_t>& v) {
      return std::find(v.begin(), v.end(), tok) != v.end();
    };
    if (finish) {
      // a stop string ended it
    } else if (constraint_done) {
      finish = FinishReason::stop;  // the constrained value is complete; nothing can follow
    } else if (contains(config_.eog_tokens)) {
      finish = FinishReason::eos;
    } else if (contains(r.req.stop_tokens)) {
      finish = FinishReason::stop;
    } else if (static_cast<std::int32_t>(r.generated.size()) >= r.req.max_new_tokens ||
               static_cast<std::int64_t>(scheduler_.tokens(c.seq).size()) + 1 >=
                   config_.max_model_len) {
      // A constrained value complete when its budget ran out ended in time: "stop".
      finish = r.matcher && r.matcher->active() && r.matcher->complete() ? FinishReason::stop
                                                                          : FinishReason::length;
    }
    if (!finish) {
      scheduler_.append_token(c.seq, tok);
      continue;
    }
    GenerateResult res;
    res.tokens = std::move(r.generated);
    res.logprobs = std::move(r.logprobs);
    res.finish = *finish;
    res.usage.prompt_tokens = scheduler_.prompt_len(c.seq);
    res.usage.completion_tokens = static_cast<std::int64_t>(res.tokens.size());
    res.usage.cached_prompt_tokens = scheduler_.cached_prompt_tokens(c.seq);
    res.timings.first_token_ms = ms_since(r.submitted, *r.first_token);
    res.timings.total_ms = ms_since(r.submitted, now);
    res.timings.preemptions = scheduler_.preemptions(c.seq);
    complete(c.seq, std::move(res));
  }

  publish(1, generated, prompt_tokens, std::chrono::duration<double>(Clock::now() - t0).count());
}

}  // namespace weir::inference
