#include "engine/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "kernels/simd.hpp"

namespace weir::inference {

namespace {

// The index of the largest logit, the lowest on ties: 16 lanes each keep their first maximum
// (strictly greater replaces), then the lanes are merged. A step samples every sequence of a
// batch on the engine thread, so this loop over the vocabulary is on the critical path.
WEIR_CLONES std::int32_t argmax(const float* x, std::int32_t n) {
  typedef float v16 __attribute__((vector_size(64), aligned(4)));
  typedef std::int32_t vi16 __attribute__((vector_size(64), aligned(4)));
  std::int32_t best = 0;
  std::int32_t i = 0;
  if (n >= 32) {
    v16 m = *reinterpret_cast<const v16*>(x);
    vi16 idx = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, at = idx;
    for (i = 16; i + 16 <= n; i += 16) {
      at += 16;
      const v16 v = *reinterpret_cast<const v16*>(x + i);
      const vi16 gt = v > m;
      m = gt ? v : m;
      idx = gt ? at : idx;
    }
    float mv[16];
    std::int32_t iv[16];
    std::memcpy(mv, &m, sizeof mv);
    std::memcpy(iv, &idx, sizeof iv);
    best = iv[0];
    for (int j = 1; j < 16; ++j) {
      if (mv[j] > x[best] || (mv[j] == x[best] && iv[j] < best)) best = iv[j];
    }
  }
  for (; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace

SampledLogprobs compute_logprobs(std::span<const float> logits, std::int32_t chosen,
                                 std::int32_t top_n) {
  const auto n = static_cast<std::int32_t>(logits.size());
  float mx = logits[0];
  for (float l : logits) mx = std::max(mx, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  const double log_z = mx + std::log(sum);
  auto lp = [&](std::int32_t i) {
    return static_cast<float>(logits[static_cast<std::size_t>(i)] - log_z);
  };
  SampledLogprobs out;
  out.chosen = {chosen, lp(chosen)};
  const std::int32_t k = std::min(top_n, n);
  if (k <= 0) return out;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = i;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](std::int32_t a, std::int32_t b) {
    const float la = logits[static_cast<std::size_t>(a)], lb = logits[static_cast<std::size_t>(b)];
    return la > lb || (la == lb && a < b);
  });
  for (std::int32_t i = 0; i < k; ++i)
    out.top.push_back({ids[static_cast<std::size_t>(i)], lp(ids[static_cast<std::size_t>(i)])});
  return out;
}

std::int32_t Sampler::sample(std::span<const float> logits, std::span<const std::int32_t> history) {
  if (first_) prompt_len_ = history.size(), first_ = false;
  // OpenAI's presence/frequency penalties count only what was generated (history past the
  // prompt; a recomputed sequence keeps the same history, so the split stays right).
  std::unordered_map<std::int32_t, int> generated_counts;
  const bool oa_penalise =
      (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) && history.size() > prompt_len_;
  if (oa_penalise) {
    for (std::size_t i = prompt_len_; i < history.size(); ++i) ++generated_counts[history[i]];
  }
  const bool penalise = (p_.repetition_penalty != 1.0f && !history.empty()) || oa_penalise;
  std::unordered_set<std::int32_t> recent;
  if (p_.repetition_penalty != 1.0f && !history.empty()) {
    const std::size_t from = history.size() > static_cast<std::size_t>(p_.repetition_window)
                                 ? history.size() - static_cast<std::size_t>(p_.repetition_window)
                                 : 0;
    recent.insert(history.begin() + static_cast<std::ptrdiff_t>(from), history.end());
  }
  auto adjusted = [&](std::int32_t i) {
    float l = logits[static_cast<std::size_t>(i)];
    if (penalise && recent.count(i))
      l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
    if (oa_penalise) {
      if (auto it = generated_counts.find(i); it != generated_counts.end())
        l -= p_.presence_penalty + p_.frequency_penalty * static_cast<float>(it->second);
    }
    return l;
  };
  const auto n = static_cast<std::int32_t>(logits.size());
  if (p_.temperature <= 0.0f && !penalise) return argmax(logits.data(), n);
  if (p_.temperature <= 0.0f) {
    std::int32_t best = 0;
    float best_l = adjusted(0);
    for (std::int32_t i = 1; i < n; ++i) {
      float l = adjusted(i);
      if (l > best_l) best = i, best_l = l;  // strictly greater: ties keep the lowest id
    }
    return best;
  }
  cand_.resize(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i)
    cand_[static_cast<std::size_t>(i)] = {adjusted(i) / p_.temperature, i};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::size_t keep = cand_.size();
  if (p_.top_k > 0 && static_cast<std::size_t>(p_.top_k) < keep) {
    keep = static_cast<std::size_t>(p_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(keep), cand_.end(),
                      by_logit);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  const double top = cand_[0].first;
  std::vector<double> prob(keep);
  double sum = 0;
  for (std::size_t i = 0; i < keep; ++i) sum += prob[i] = std::exp(cand_[i].first - top);
  if (p_.min_p > 0.0f) {  // relative to the most likely token (prob[0] == 1 before normalising)
    std::size_t k = 1;
    while (k < keep && prob[k] >= p_.min_p) ++k;
    for (std::size_t i = k; i < keep; ++i) sum -= prob[i];
    keep = k;
  }
  if (p_.top_p < 1.0f) {
    double acc = 0;
    for (std::size_t i = 0; i < keep; ++i) {
      acc += prob[i] / sum;
      if (acc >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::discrete_distribution<std::size_t> dist(prob.begin(),
                                               prob.begin() + static_cast<std::ptrdiff_t>(keep));
  return cand_[dist(rng_)].second;
}

}  // namespace weir::inference
