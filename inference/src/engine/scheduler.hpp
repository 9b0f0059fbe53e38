// Scheduler: continuous batching over a paged KV cache (after vLLM's scheduler).
//
// Each step it forms one batch under a token budget (`max_num_batched_tokens`) and a cap on
// running sequences (`max_num_seqs`): every running sequence gets its next tokens (a decode
// token, or the next chunk of a long prompt: chunked prefill), then waiting sequences are
// admitted in (priority, arrival) order while budget, sequence slots and KV blocks last. A
// sequence is admitted only when the blocks for its next chunk exist; nothing is reserved for
// its worst case. When a running sequence cannot get a block, the newest sequence of the
// lowest priority is preempted by recompute: its blocks are freed and it goes back to the
// waiting queue with all its tokens (prompt + generated so far), to be recomputed (often from
// the prefix cache) when readmitted. Preemption never fails a request.
//
// Prefix sharing within a step: a block is registered in the prefix cache as soon as it is
// scheduled, so a request admitted later in the same step reuses it. This is correct because
// every forward pass (CPU and CUDA) writes the whole batch's K/V for a layer before any token
// of that layer attends, and a scheduled chunk is always computed before its sequence can be
// preempted or cancelled (both happen between steps).
//
// Thread safety: none; the engine thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache.hpp"
#include "weir/runtime/error.hpp"

namespace weir::inference {

struct SchedulerConfig {
  std::int32_t max_num_seqs = 256;
  std::int64_t max_num_batched_tokens = 2048;
  std::int64_t max_model_len = 4096;  // prompt + generated tokens, per sequence
  std::size_t max_waiting = 4096;     // beyond it: overloaded
};

// One sequence's share of a step: compute KV for tokens [start, start + count) and, when
// `sample`, produce logits for the last of them.
struct ScheduledChunk {
  SeqId seq;
  std::int64_t start;
  std::int64_t count;
  bool sample;
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<SeqId> preempted;
  std::int64_t num_tokens = 0;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KvCacheManager& kv);

  // Queues a sequence. `tokens`: its prompt. Lower `priority` runs first.
  // Errors (nothing queued): invalid_argument (empty prompt; prompt longer than
  // max_model_len), kv_cache_exhausted (the prompt alone needs more blocks than the pool
  // has), overloaded (the waiting queue is full).
  Status add(SeqId seq, std::vector<std::int32_t> tokens, int priority = 0);

  SchedulerOutput schedule();

  // After the forward pass. Kept for symmetry with schedule(); blocks are registered when
  // scheduled, so it does nothing today.
  void on_computed(const ScheduledChunk& chunk);
  // A sampled token joins the sequence (it is fed in its next step). Ignored for a sequence
  // finished meanwhile (cancelled during the step).
  void append_token(SeqId seq, std::int32_t token);
  // Ends a sequence (finished, cancelled, failed): frees its blocks. Safe on unknown ids.
  void finish(SeqId seq);

  bool contains(SeqId seq) const { return seqs_.count(seq) != 0; }
  std::span<const std::int32_t> tokens(SeqId seq) const { return seqs_.at(seq).tokens; }
  std::int64_t prompt_len(SeqId seq) const { return seqs_.at(seq).prompt_len; }
  // Prompt tokens that came from the prefix cache at first admission.
  std::int64_t cached_prompt_tokens(SeqId seq) const { return seqs_.at(seq).cached_prompt; }
  std::int32_t preemptions(SeqId seq) const { return seqs_.at(seq).preemptions; }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  SchedulerStats stats() const;
  const SchedulerConfig& config() const { return config_; }

 private:
  struct Seq {
    std::vector<std::int32_t> tokens;
    std::int64_t prompt_len = 0;
    std::int64_t computed = 0;  // tokens whose KV exists (or is scheduled this step)
    std::int64_t cached_prompt = -1;
    int priority = 0;
    std::uint64_t arrival = 0;
    std::int32_t preemptions = 0;
    bool running = false;
  };
  using Key = std::tuple<int, std::uint64_t, SeqId>;  // (priority, arrival, id)
  Key key(SeqId id) const {
    const Seq& s = seqs_.at(id);
    return {s.priority, s.arrival, id};
  }
  void preempt(SeqId id);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::unordered_map<SeqId, Seq> seqs_;
  std::map<Key, SeqId> waiting_;  // admission order
  std::map<Key, SeqId> running_;  // scheduling order; victims from the end
  std::uint64_t next_arrival_ = 0;
  std::uint64_t preemptions_ = 0, admitted_ = 0;
};

}  // namespace weir::inference
