// Choosing the next token from logits: greedy (ties: lowest id), or temperature sampling
// filtered by top-k, top-p (nucleus) and min-p, after a repetition penalty over recent tokens.
// A seeded generator makes runs repeatable: the same seed and logits give the same tokens.
//
// Thread safety: a Sampler is used by one thread (the engine's, per request).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace weir::inference {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy
  std::int32_t top_k = 0;           // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; keeps tokens with p >= min_p * p(top)
  float repetition_penalty = 1.0f;  // 1: off; logits of recent tokens: >0 divided, <0 multiplied
  std::int32_t repetition_window = 64;
  std::uint64_t seed = 0;
  // OpenAI's penalties over the tokens generated so far (not the prompt): each logit is lowered
  // by presence_penalty once if the token was generated, and by frequency_penalty per time.
  float presence_penalty = 0.0f;   // 0: off
  float frequency_penalty = 0.0f;  // 0: off
};

// A token's log-probability under the model's raw distribution (log-softmax of the logits,
// before temperature and penalties), as OpenAI's `logprobs` reports it.
struct TokenLogprob {
  std::int32_t token = 0;
  float logprob = 0.0f;
};
struct SampledLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // the most likely tokens, descending (ties: lowest id first)
};
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
  std::vector<std::pair<float, std::int32_t>> cand_;  // reused
};

}  // namespace weir::inference
