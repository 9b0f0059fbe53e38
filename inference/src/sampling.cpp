#include "weir/inference/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace weir::inference {

std::int32_t Sampler::sample(std::span<const float> logits, std::span<const std::int32_t> history) {
  const bool penalise = p_.repetition_penalty != 1.0f && !history.empty();
  std::unordered_set<std::int32_t> recent;
  if (penalise) {
    const std::size_t from = history.size() > static_cast<std::size_t>(p_.repetition_window)
                                 ? history.size() - static_cast<std::size_t>(p_.repetition_window)
                                 : 0;
    recent.insert(history.begin() + static_cast<std::ptrdiff_t>(from), history.end());
  }
  auto adjusted = [&](std::int32_t i) {
    float l = logits[static_cast<std::size_t>(i)];
    if (penalise && recent.count(i))
      l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
    return l;
  };
  const auto n = static_cast<std::int32_t>(logits.size());
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
