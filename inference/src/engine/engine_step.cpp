// One engine step, top to bottom: the scheduler picks the chunks, the batch is built, the
// runner computes the forward pass, the constrained rows are masked, and each sampled row
// advances or finishes its request.
#include <algorithm>
#include <cassert>
#include <cmath>

#include "engine/engine_impl.hpp"

namespace weir::inference {

void Engine::Impl::step() {
  const auto t0 = Clock::now();
  SchedulerOutput out = scheduler_.schedule();
  if (out.empty()) return;
  const std::uint64_t prompt_tokens = build_batch(out);
  const std::size_t vocab = static_cast<std::size_t>(runner_->vocab_size());
  logits_.resize(batch_.logit_rows.size() * vocab);
  if (Status st = runner_->forward(batch_, layout_, kv_pool_, logits_); !st) {
    for (const auto& c : out.chunks) complete(c.seq, st.error());
    publish(1, 0, 0, 0);
    return;
  }
  publish_occupancy();
  compute_masks(out);
  const std::size_t words = mask_words(static_cast<std::int32_t>(vocab));
  std::size_t row = 0, next_mask = 0;
  std::uint64_t generated = 0;
  const auto now = Clock::now();
  for (const auto& c : out.chunks) {
    scheduler_.on_computed(c);
    if (!c.sample) continue;
    std::span<float> logits(logits_.data() + row++ * vocab, vocab);
    EngineRequest* r = request_of(c.seq);
    if (!r) {  // cannot happen (the invariant in engine_impl.hpp); never step it again
      assert(false && "a scheduled sequence without its request");
      scheduler_.finish(c.seq);
      continue;
    }
    const bool is_masked = r->matcher && masked_[next_mask++];
    if (is_masked && !mask_row(*r, logits, masks_.data() + (next_mask - 1) * words)) {
      complete(c.seq, Error(Errc::invalid_argument,
                            "constraint: no token of the vocabulary can continue the output "
                            "(a recursive schema nested past the depth bound?)"));
      continue;
    }
    generated += sample_row(c, *r, logits, is_masked, now) ? 1 : 0;
  }
  publish(1, generated, prompt_tokens, std::chrono::duration<double>(Clock::now() - t0).count());
}

std::uint64_t Engine::Impl::build_batch(const SchedulerOutput& out) {
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
  return prompt_tokens;
}

// Token masks of the constrained sequences, within each one's budget, computed in parallel
// (each matcher is its own sequence's; the Constraint's mask cache is shared and locked). A
// matcher in free text far from its budget masks nothing (masked_[i] stays 0).
void Engine::Impl::compute_masks(const SchedulerOutput& out) {
  std::vector<EngineRequest*> constrained;  // in the order of their logit rows
  for (const auto& c : out.chunks) {
    if (!c.sample) continue;
    if (EngineRequest* r = request_of(c.seq); r && r->matcher) constrained.push_back(r);
  }
  if (constrained.empty()) return;
  const std::size_t words = mask_words(runner_->vocab_size());
  masks_.resize(constrained.size() * words);
  masked_.assign(constrained.size(), 0);
  auto fill = [&](int, std::int64_t begin, std::int64_t end) {
    for (auto k = begin; k < end; ++k) {
      const auto i = static_cast<std::size_t>(k);
      const EngineRequest& q = *constrained[i];
      const std::int32_t budget =
          budget_left(q.req.max_new_tokens, config_.max_model_len,
                      static_cast<std::int64_t>(q.req.prompt.size()), q.generated.size());
      masked_[i] = q.matcher->fill_mask(std::span(masks_.data() + i * words, words), budget);
    }
  };
  if (constrained.size() > 1 && config_.constraint_threads > 1) {
    if (!mask_pool_) mask_pool_ = std::make_unique<ThreadPool>(config_.constraint_threads);
    mask_pool_->parallel_for(static_cast<std::int64_t>(constrained.size()), fill);
  } else {
    fill(0, 0, static_cast<std::int64_t>(constrained.size()));
  }
}

// Masks the row in place: disallowed tokens get -inf; end-of-generation and stop tokens only
// when the output is complete.
bool Engine::Impl::mask_row(const EngineRequest& r, std::span<float> lg,
                            const std::uint64_t* m) const {
  const std::size_t vocab = lg.size();
  const std::size_t words = mask_words(static_cast<std::int32_t>(vocab));
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
  return std::any_of(lg.begin(), lg.end(), [](float x) { return x != -INFINITY; });
}

bool Engine::Impl::sample_row(const ScheduledChunk& c, EngineRequest& r, std::span<float> lg,
                              bool is_masked, Clock::time_point now) {
  const std::int32_t tok = r.sampler->sample(lg, scheduler_.tokens(c.seq));
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
    return false;
  }
  bool constraint_done = false;
  if (auto error = advance_constraint(r, tok, constraint_done)) {
    complete(c.seq, std::move(*error));
    return false;
  }
  r.generated.push_back(tok);
  if (!r.first_token) r.first_token = now;
  if (r.req.logprobs >= 0) {
    r.logprobs.push_back(compute_logprobs(lg, tok, std::min(r.req.logprobs, 20)));
    if (r.cb.on_logprobs) r.cb.on_logprobs(r.logprobs.back());
  }
  if (r.cb.on_token) r.cb.on_token(tok);
  if (auto why = finish_reason(c, r, tok, constraint_done))
    finish(c, r, *why, now);
  else
    scheduler_.append_token(c.seq, tok);
  return true;
}

std::optional<Error> Engine::Impl::advance_constraint(EngineRequest& r, std::int32_t tok,
                                                      bool& done) {
  if (!r.matcher) return std::nullopt;
  const bool is_end =
      std::find(config_.eog_tokens.begin(), config_.eog_tokens.end(), tok) !=
          config_.eog_tokens.end() ||
      std::find(r.req.stop_tokens.begin(), r.req.stop_tokens.end(), tok) != r.req.stop_tokens.end();
  if (is_end) return std::nullopt;
  // Free text follows the trigger; a value, its grammar.
  const bool was_active = r.matcher->active();
  if (!r.matcher->accept(tok))
    return Error(Errc::model_error,
                 "constraint: sampled token " + std::to_string(tok) + " is not allowed");
  done = r.matcher->finished();
  if (!was_active && r.matcher->active()) r.tail.clear();  // stops look at free text only
  return std::nullopt;
}

std::optional<FinishReason> Engine::Impl::finish_reason(const ScheduledChunk& c, EngineRequest& r,
                                                        std::int32_t tok, bool constraint_done) {
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
  if (finish) return finish;                       // a stop string ended it
  if (constraint_done) return FinishReason::stop;  // the constrained value is complete
  if (contains(config_.eog_tokens)) return FinishReason::eos;
  if (contains(r.req.stop_tokens)) return FinishReason::stop;
  if (static_cast<std::int32_t>(r.generated.size()) >= r.req.max_new_tokens ||
      static_cast<std::int64_t>(scheduler_.tokens(c.seq).size()) + 1 >= config_.max_model_len)
    // A constrained value complete when its budget ran out ended in time: "stop".
    return r.matcher && r.matcher->active() && r.matcher->complete() ? FinishReason::stop
                                                                     : FinishReason::length;
  return std::nullopt;
}

void Engine::Impl::finish(const ScheduledChunk& c, EngineRequest& r, FinishReason why,
                          Clock::time_point now) {
  GenerateResult res;
  res.tokens = std::move(r.generated);
  res.logprobs = std::move(r.logprobs);
  res.finish = why;
  res.usage.prompt_tokens = scheduler_.prompt_len(c.seq);
  res.usage.completion_tokens = static_cast<std::int64_t>(res.tokens.size());
  res.usage.cached_prompt_tokens = scheduler_.cached_prompt_tokens(c.seq);
  res.timings.first_token_ms = ms_since(r.submitted, *r.first_token);
  res.timings.total_ms = ms_since(r.submitted, now);
  res.timings.preemptions = scheduler_.preemptions(c.seq);
  complete(c.seq, std::move(res));
}

}  // namespace weir::inference
