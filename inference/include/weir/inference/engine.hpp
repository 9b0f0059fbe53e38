// Engine: continuous-batching inference on its own thread, with a paged KV cache sized from
// one byte budget.
//
// Requests arrive through submit() from any thread. The engine thread runs steps: the
// Scheduler picks a batch (decodes plus prefill chunks) whose KV blocks exist, the StepRunner
// computes one forward pass over it (logits only for the rows that are sampled), each sampled
// sequence gets its next token, and finished requests complete through their callbacks. The
// KV pool is a fixed number of blocks computed from `kv_cache_bytes`, reserved in the kv_cache
// category of a MemoryBudget when one is given; no request reserves its worst case. When blocks run
// out the newest sequence is preempted and recomputed later: requests never fail for lack of KV
// space.
//
// Callbacks run on the engine thread: they must be short and must not block (post elsewhere).
//
// This header keeps Asio out (see engine_async.hpp for `co_await async_generate(...)`).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weir/inference/constraint.hpp"
#include "weir/inference/engine_stats.hpp"
#include "weir/inference/kv_layout.hpp"
#include "weir/inference/sampling.hpp"
#include "weir/runtime/error.hpp"
#include "weir/runtime/memory_budget.hpp"

namespace weir::inference {

// One forward pass over a step's batch.
struct StepBatch {
  std::vector<std::int32_t> tokens;     // [n_tokens]
  std::vector<std::int32_t> positions;  // [n_tokens]
  std::vector<std::int32_t> seq_index;  // [n_tokens] -> index into `seqs`
  struct Seq {
    std::span<const BlockId> block_table;  // [blocks of the sequence]
    std::int32_t n_ctx = 0;                // positions with KV after this step
  };
  std::vector<Seq> seqs;
  std::vector<std::int32_t> logit_rows;  // [n_logits] token rows whose logits are wanted
  std::vector<BlockCopy> copies;         // copy-on-write, to perform before the pass
};

// Where a runner's steps went while profiling was on, by kind: decode steps (each sequence
// decodes one token) and prompt steps (any step with prompt tokens). For benchmarks: what a step
// spends on the weight matmuls, attention (K/V writes included), the output projection (logits)
// and everything else (embedding, norms, rotary, activations, residuals). Milliseconds, summed.
struct StepPhases {
  std::int64_t steps = 0, tokens = 0;
  double matmul_ms = 0, attention_ms = 0, logits_ms = 0, rest_ms = 0;
  double total_ms() const { return matmul_ms + attention_ms + logits_ms + rest_ms; }
};
struct StepProfile {
  StepPhases decode, prompt;
};

// What the engine needs from a model: its KV geometry, and a forward pass that writes K/V for
// the batch's tokens into the paged pool and returns logits for the requested rows.
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual std::int32_t vocab_size() const = 0;
  virtual std::int32_t n_layers() const = 0;
  virtual std::int32_t n_kv_heads() const = 0;
  virtual std::int32_t head_dim() const = 0;
  virtual std::int32_t context_length() const = 0;  // the model's trained context
  // kv_pool: [layout.total_elems()] elements of layout.type laid out as kv_layout.hpp says, in
  // a float buffer (F16: two elements a float, read through std::uint16_t; empty when the
  // runner keeps the pool itself, see below). logits: [batch.logit_rows.size(), vocab_size()],
  // in host memory. Errors: model_error.
  virtual Status forward(const StepBatch& batch, const KvLayout& layout, std::span<float> kv_pool,
                         std::span<float> logits) = 0;
  // A runner whose KV pool lives elsewhere (GPU memory) allocates it here, once, and gets an
  // empty span in forward(). Default: the engine keeps the pool in host memory.
  virtual bool owns_kv_pool() const { return false; }
  virtual Status allocate_kv_pool(const KvLayout& layout) { return {}; }
  // The KV bytes this runner can hold when the engine is not given a budget (e.g. free GPU
  // memory times a utilisation fraction, minus weights and activations); 0 = no opinion.
  virtual std::size_t kv_bytes_hint() const { return 0; }
  // The KV element types forward() can read and write (kv_layout.hpp). Default: F32 only.
  virtual bool supports_kv_type(KvType type) const { return type == KvType::f32; }
  // Step profiling (StepProfile), off by default: turning it on clears what was summed;
  // false when this runner cannot profile. Read step_profile() while no step runs (the engine
  // idle, or after the requests' futures are ready): forward() writes it unlocked.
  virtual bool set_step_profiling(bool on) { return false; }
  virtual StepProfile step_profile() const { return {}; }
};

enum class FinishReason { stop, length, eos, cancelled, error };
const char* finish_reason_name(FinishReason r);

struct GenerateRequest {
  std::vector<std::int32_t> prompt;  // token ids (BOS included when the model wants it)
  std::int32_t max_new_tokens = 256;
  SamplingParams sampling;
  std::vector<std::int32_t> stop_tokens;  // besides the model's end-of-generation tokens
  // Text that ends generation when it appears in the output (needs EngineConfig::token_text);
  // it may span several tokens. The tokens that formed it are kept in the result.
  std::vector<std::string> stop_strings;
  int priority = 0;  // lower runs first
  // Structured output (constraint.hpp): when set, every sampled token keeps the output a
  // prefix of what the constraint allows (the logits of other tokens are masked before
  // sampling) and lets the value be completed within the tokens left (max_new_tokens and the
  // context: the budget rule), end-of-generation and stop tokens are allowed only once the
  // output is complete, stop strings do not apply inside the value, and generation ends
  // (finish reason stop) when nothing more can follow, or when the budget runs out on a
  // complete value. A value whose shortest form takes more tokens than the request allows is
  // refused before generation (invalid_argument naming both numbers). It must be compiled
  // for this model's vocabulary (invalid_argument otherwise). Unset: decoding is unchanged.
  std::shared_ptr<const Constraint> constraint;
  // When not empty, the constraint applies only once this text has appeared in the output
  // (a lazy constraint, e.g. "<tool_call>": free text, then a call that must be valid); the
  // bytes of the triggering token after the trigger are the constrained output's first bytes.
  // The trigger is refused where the value after it could not be completed within the
  // budget (the output then stays free text), so a value that starts also ends in time.
  std::string constraint_trigger;
  // -1: off. k >= 0: every generated token's log-probability (raw logits' log-softmax) plus the
  // k most likely alternatives (k is capped at 20), in GenerateResult::logprobs and on_logprobs.
  std::int32_t logprobs = -1;
};

struct Usage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int64_t cached_prompt_tokens = 0;  // served from the prefix cache
};

struct Timings {
  double queue_ms = 0;        // submit -> first scheduled
  double first_token_ms = 0;  // submit -> first token
  double total_ms = 0;        // submit -> done
  std::int32_t preemptions = 0;
};

struct GenerateResult {
  std::vector<std::int32_t> tokens;  // generated ids (a stop/eos token included)
  FinishReason finish = FinishReason::length;
  Usage usage;
  Timings timings;
  std::vector<SampledLogprobs> logprobs;  // [tokens.size()] when the request asked for them
};

// "f32", "f16", "q8_0"; parse_kv_type's error (invalid_argument) names the choices.
const char* kv_type_name(KvType type);
Result<KvType> parse_kv_type(std::string_view name);

struct EngineConfig {
  std::int32_t max_num_seqs = 64;
  std::int64_t max_num_batched_tokens = 1024;
  std::int64_t max_model_len = 0;  // 0: the model's context length
  std::int32_t block_size = 16;
  // The KV pool's bytes (0: the runner's hint), never more than `budget`'s kv_cache category
  // grants at create(); with neither a size nor a hint, all that it grants.
  std::size_t kv_cache_bytes = 64u << 20;
  // F16: twice the tokens in the same bytes, half the memory attention reads; Q8_0: up to 3.9
  // times the tokens (heads of 64), 0.26 of the memory (the CPU runner;
  // StepRunner::supports_kv_type says which a runner takes).
  KvType kv_cache_type = KvType::f32;
  // When set, the KV pool is reserved from its kv_cache category. REQUIRES: it outlives the
  // engine.
  MemoryBudget* budget = nullptr;
  std::size_t max_waiting = 4096;
  bool enable_prefix_caching = true;
  // When not empty, the engine reports its KV cache and scheduler as gauges in
  // weir::Registry::global() under the label {engine=<metrics_name>} (removed on destruction).
  std::string metrics_name;
  std::vector<std::int32_t> eog_tokens;  // end-of-generation ids (finish reason eos)
  // A token's text, for stop strings (e.g. Tokenizer::token_to_piece). Unset: stop strings
  // are ignored.
  std::function<std::string(std::int32_t)> token_text;
  // Threads computing the token masks of a step's constrained sequences (the engine thread
  // included); masks of one step are computed in parallel, then the rows are sampled.
  int constraint_threads = 2;
};

using RequestId = std::int64_t;

// Callbacks of one request. on_token (optional) sees each generated id as it is sampled;
// on_done sees the result exactly once (also after cancel()).
struct RequestCallbacks {
  std::function<void(std::int32_t token)> on_token;
  std::function<void(Result<GenerateResult>)> on_done;
  // When the request asked for logprobs: each token's, just before on_token (engine thread).
  std::function<void(const SampledLogprobs&)> on_logprobs;
};

// Thread safety: submit(), cancel(), stats(), config(), kv_layout(), vocab_size() and the
// destructor may be called from any thread.
//
// Invariants:
//   1. Every request gets on_done exactly once: with its result, its error, or cancelled (on
//      cancel(), and for everything still known when the engine is destroyed).
//   2. Every sequence a step computes belongs to a request that has not had on_done yet: once
//      on_done reports a request (cancelled or finished), no later step touches it.
//   3. The KV pool is sized once, at create(), and never grows.
class Engine {
 public:
  // Sizes the KV pool and starts the engine thread. The pool is EngineConfig::kv_cache_bytes
  // (else the runner's hint), never more than the budget's kv_cache category grants.
  // Errors: memory_budget_exceeded (the pool cannot hold one sequence of max_model_len, or the
  // machine cannot hold the pool), invalid_argument (bad settings; no KV size given),
  // unsupported (a KV type the runner cannot use). On error nothing is reserved or started.
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<StepRunner> runner,
                                                EngineConfig config);
  // Cancels what is in flight (on_done with cancelled), stops and joins the thread; waits for
  // at most the step in progress.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Errors arrive through on_done (invalid prompt, overloaded, ...).
  RequestId submit(GenerateRequest request, RequestCallbacks callbacks);
  // Ends a request early: its blocks are freed and on_done gets finish reason cancelled, with
  // what it generated so far. An id that is unknown or already done is ignored.
  void cancel(RequestId id);

  EngineStats stats() const;
  const EngineConfig& config() const;
  const KvLayout& kv_layout() const;
  std::int32_t vocab_size() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;  // the engine thread, scheduler, KV manager and step state
};

}  // namespace weir::inference
