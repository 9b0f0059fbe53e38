#include "engine/scheduler.hpp"

#include <algorithm>
#include <string>

namespace weir::inference {

Scheduler::Scheduler(SchedulerConfig config, KvCacheManager& kv) : config_(config), kv_(kv) {}

Status Scheduler::add(SeqId id, std::vector<std::int32_t> tokens, int priority) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  if (n == 0)
    return Error(Errc::invalid_argument, "the prompt is empty: it needs at least one token");
  if (n > config_.max_model_len) {
    return Error(
        Errc::invalid_argument,
        "the prompt has " + std::to_string(n) +
            " tokens, more than max_model_len=" + std::to_string(config_.max_model_len) +
            "; shorten it (trim history), or raise max_model_len up to the model's context "
            "length (--max-model-len N; files: \"engine\": {\"max_model_len\": N})");
  }
  if (kv_.blocks_for(n) > kv_.config().num_blocks) {
    return Error(Errc::kv_cache_exhausted, "the prompt needs " + std::to_string(kv_.blocks_for(n)) +
                                               " KV blocks but the pool has " +
                                               std::to_string(kv_.config().num_blocks) +
                                               "; raise the kv_cache memory budget");
  }
  if (waiting_.size() >= config_.max_waiting) {
    return Error(Errc::overloaded, "the engine's waiting queue is full (" +
                                       std::to_string(config_.max_waiting) +
                                       " requests, engine.max_waiting); retry later");
  }
  Seq& s = seqs_[id];
  s.tokens = std::move(tokens);
  s.prompt_len = n;
  s.priority = priority;
  s.arrival = next_arrival_++;
  waiting_.emplace(key(id), id);
  return {};
}

void Scheduler::preempt(SeqId id) {
  Seq& s = seqs_.at(id);
  running_.erase(key(id));
  kv_.free(id);
  s.computed = 0;
  s.running = false;
  ++s.preemptions;
  ++preemptions_;
  waiting_.emplace(key(id), id);  // keeps its arrival: first in line among its priority
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  std::int64_t budget = config_.max_num_batched_tokens;

  // 1. Running sequences, in order; victims for preemption come from the end.
  for (auto it = running_.begin(); it != running_.end() && budget > 0;) {
    SeqId id = it->second;
    Seq& s = seqs_.at(id);
    std::int64_t n =
        std::min<std::int64_t>(static_cast<std::int64_t>(s.tokens.size()) - s.computed, budget);
    if (n <= 0) {
      ++it;
      continue;
    }
    bool self_preempted = false;
    while (!kv_.allocate(id, n)) {
      auto victim = std::prev(running_.end());
      SeqId vid = victim->second;
      preempt(vid);
      out.preempted.push_back(vid);
      if (vid == id) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // it was the last runnable one
    kv_.commit(id, s.tokens);
    out.chunks.push_back(
        {id, s.computed, n, s.computed + n == static_cast<std::int64_t>(s.tokens.size())});
    s.computed += n;
    out.num_tokens += n;
    budget -= n;
    ++it;
  }

  // 2. Waiting sequences, when nothing had to be preempted this step.
  while (out.preempted.empty() && budget > 0 && !waiting_.empty() &&
         running_.size() < static_cast<std::size_t>(config_.max_num_seqs)) {
    SeqId id = waiting_.begin()->second;
    Seq& s = seqs_.at(id);
    std::int64_t cached = kv_.add_sequence(id, s.tokens);
    std::int64_t n =
        std::min<std::int64_t>(static_cast<std::int64_t>(s.tokens.size()) - cached, budget);
    if (!kv_.allocate(id, n)) {
      kv_.free(id);  // not enough blocks yet: it waits at the head of the queue
      break;
    }
    kv_.commit(id, s.tokens);
    waiting_.erase(waiting_.begin());
    if (s.cached_prompt < 0) s.cached_prompt = std::min(cached, s.prompt_len);
    s.computed = cached;
    s.running = true;
    running_.emplace(key(id), id);
    ++admitted_;
    out.chunks.push_back(
        {id, s.computed, n, s.computed + n == static_cast<std::int64_t>(s.tokens.size())});
    s.computed += n;
    out.num_tokens += n;
    budget -= n;
  }
  return out;
}

void Scheduler::on_computed(const ScheduledChunk&) {
  // Blocks are registered for reuse when they are scheduled (see schedule()); nothing to do.
}

void Scheduler::append_token(SeqId id, std::int32_t token) {
  auto it = seqs_.find(id);
  if (it != seqs_.end()) it->second.tokens.push_back(token);  // gone if cancelled meanwhile
}

void Scheduler::finish(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  if (it->second.running)
    running_.erase(key(id));
  else
    waiting_.erase(key(id));
  kv_.free(id);
  seqs_.erase(it);
}

SchedulerStats Scheduler::stats() const {
  return {waiting_.size(), running_.size(), preemptions_, admitted_};
}

}  // namespace weir::inference
