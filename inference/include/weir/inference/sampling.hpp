// How a request's next token is chosen (SamplingParams) and what its log-probabilities are
// (SampledLogprobs): the engine samples greedily (ties: lowest id), or with a temperature
// filtered by top-k, top-p (nucleus) and min-p, after a repetition penalty over recent tokens.
// A seeded generator makes runs repeatable: the same seed and logits give the same tokens.
#pragma once

#include <cstdint>
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
}  // namespace weir::inference
