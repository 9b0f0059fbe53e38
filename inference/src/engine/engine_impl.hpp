// Engine::Impl: the engine's machinery behind its public face (engine.hpp). Private to
// inference/: engine.cpp (creation, submission, the engine thread, admission, completion) and
// engine_step.cpp (one step: the batch, the forward pass, masks, sampling, finishing).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/kv_cache.hpp"
#include "engine/sampler.hpp"
#include "engine/scheduler.hpp"
#include "kernels/thread_pool.hpp"
#include "weir/inference/engine.hpp"

namespace weir::inference {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// A request from submit() to on_done. Engine thread only, once admitted.
struct EngineRequest {
  RequestId id = 0;
  GenerateRequest req;
  RequestCallbacks cb;
  Clock::time_point submitted;
  std::optional<Clock::time_point> first_token;
  std::vector<std::int32_t> generated;
  std::optional<Sampler> sampler;
  std::string tail;                          // the last generated text, for stop strings
  std::vector<SampledLogprobs> logprobs;     // [generated.size()] when req.logprobs >= 0
  std::optional<ConstraintMatcher> matcher;  // with the trigger, when there is one
};

// Tokens a request may still generate, the next one included: max_new_tokens and the context.
inline std::int32_t budget_left(std::int32_t max_new, std::int64_t max_model_len,
                                std::int64_t prompt, std::size_t generated) {
  return static_cast<std::int32_t>(std::min<std::int64_t>(max_new, max_model_len - prompt) -
                                   static_cast<std::int64_t>(generated));
}

// Invariant (Engine's 2): a sequence is in the scheduler only while its request is in
// `requests`; complete() removes both at once, and is the only place that removes either.
struct Engine::Impl {
  Impl(std::unique_ptr<StepRunner> runner, EngineConfig config, KvLayout layout,
       MemoryBudget::Reservation reservation);
  ~Impl();

  // --- engine thread (engine.cpp) ---
  void run();
  void admit_inbox();
  // Validates a submitted request; its error, if any.
  Status check(EngineRequest& r) const;
  // Ends a request: removes it and its sequence, and queues on_done with `result`.
  void complete(RequestId id, Result<GenerateResult> result);
  // What a request ended early (cancelled) returns: what it generated so far.
  static GenerateResult cancelled_result(const EngineRequest& r);
  // Publishes the KV cache's and the scheduler's occupancy as the step's forward pass left them,
  // before any of its tokens is handed out: whoever sees a token also sees the blocks that
  // hold it (Serve.DisconnectMidStreamFreesTheBlocks read 0 blocks after its first token).
  void publish_occupancy();
  // Publishes the stats, then runs the queued on_done callbacks.
  void publish(std::uint64_t steps, std::uint64_t generated, std::uint64_t prompt_tokens,
               double busy_seconds);
  void register_gauges();

  EngineRequest* request_of(RequestId id) {
    auto it = requests_.find(id);
    return it == requests_.end() ? nullptr : it->second.get();
  }

  // --- one step (engine_step.cpp) ---
  void step();
  // Fills batch_ from the scheduler's chunks; returns the prompt tokens among them.
  std::uint64_t build_batch(const SchedulerOutput& out);
  // Token masks of the step's constrained rows, in masks_ (one row each, in chunk order).
  void compute_masks(const SchedulerOutput& out);
  // Masks one logits row in place; false when no token can continue the output.
  bool mask_row(const EngineRequest& r, std::span<float> logits, const std::uint64_t* mask) const;
  // Samples the request's next token from its logits row and advances or finishes it; returns
  // whether a token was generated. `masked`: whether its row was masked (mask_row).
  bool sample_row(const ScheduledChunk& c, EngineRequest& r, std::span<float> logits, bool masked,
                  Clock::time_point now);
  // The constraint's view of a sampled token: nullopt when it is allowed (`done` says whether
  // the constrained value is now complete), else the error that ends the request.
  std::optional<Error> advance_constraint(EngineRequest& r, std::int32_t tok, bool& done);
  std::optional<FinishReason> finish_reason(const ScheduledChunk& c, EngineRequest& r,
                                            std::int32_t tok, bool constraint_done);
  void finish(const ScheduledChunk& c, EngineRequest& r, FinishReason why, Clock::time_point now);

  std::unique_ptr<StepRunner> runner_;
  EngineConfig config_;
  KvLayout layout_;
  MemoryBudget::Reservation kv_reservation_;
  std::vector<float> kv_pool_;  // layout_.total_elems() elements of layout_.type
  KvCacheManager kv_;
  Scheduler scheduler_;

  // Engine-thread state.
  std::unordered_map<RequestId, std::unique_ptr<EngineRequest>> requests_;
  std::vector<float> logits_;  // [batch_.logit_rows.size(), vocab]
  StepBatch batch_;
  std::unique_ptr<ThreadPool> mask_pool_;  // created on the first step with constraints
  std::vector<std::uint64_t> masks_;       // [constrained rows, mask_words(vocab)]
  std::vector<char> masked_;  // [constrained rows] 0: the matcher masked nothing (free text)
  std::vector<std::pair<std::function<void(Result<GenerateResult>)>, Result<GenerateResult>>> done_;

  // Shared with submitters.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<EngineRequest>> inbox_;  // GUARDED_BY(mu_)
  std::vector<RequestId> cancels_;                     // GUARDED_BY(mu_)
  bool stop_ = false;                                  // GUARDED_BY(mu_)
  EngineStats stats_;                                  // GUARDED_BY(mu_) (copied out by stats())
  std::atomic<RequestId> next_id_{1};
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace weir::inference
