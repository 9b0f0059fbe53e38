// The engine's sampler: choosing the next token from logits as SamplingParams says, and a
// token's log-probabilities. Private to inference/ (sampling.hpp has the public types).
//
// Thread safety: a Sampler is used by one thread (the engine's, per request).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "weir/inference/sampling.hpp"

namespace weir::inference {

// REQUIRES: 0 <= chosen < logits.size(), top_n >= 0. Returns min(top_n, vocab) alternatives.
SampledLogprobs compute_logprobs(std::span<const float> logits, std::int32_t chosen,
                                 std::int32_t top_n);

class Sampler {
 public:
  explicit Sampler(SamplingParams p) : p_(p), rng_(p.seed) {}
  // `history`: the tokens so far (prompt and generated), for the repetition penalty.
  std::int32_t sample(std::span<const float> logits, std::span<const std::int32_t> history);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::size_t prompt_len_ = 0;  // history's length at the first call (penalties skip it)
  bool first_ = true;
  // Reused from token to token: (scaled logit, id) in sampling order, the probabilities, and
  // with top_k off the scaled logits by id and their radix order (sampling.cpp).
  std::vector<std::pair<float, std::int32_t>> cand_;
  std::vector<double> prob_;
  std::vector<float> scaled_;
  std::vector<std::uint64_t> order_, order_tmp_;
};

}  // namespace weir::inference
