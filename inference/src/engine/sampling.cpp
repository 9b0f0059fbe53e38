#include "engine/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
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

// `order`: (key << 32 | id) for every id of `x`, ascending, where the key orders logits from the
// largest down (-0 and +0 alike): the order of (logit descending, id ascending). A stable LSD
// radix sort over the key's 32 bits, 11 bits a pass, from ids in ascending order.
void order_by_logit(std::span<const float> x, std::vector<std::uint64_t>& order,
                    std::vector<std::uint64_t>& tmp) {
  const std::size_t n = x.size();
  order.resize(n);
  tmp.resize(n);
  constexpr int kBits = 11, kPasses = 3;
  constexpr std::uint32_t kBuckets = 1u << kBits;
  std::vector<std::uint32_t> count(kBuckets * kPasses, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const float f = x[i] + 0.0f;  // -0 becomes +0 (ties, as the comparison has it); no other
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    const std::uint32_t neg = static_cast<std::uint32_t>(static_cast<std::int32_t>(u) >> 31);
    const std::uint32_t key = ~(u ^ (neg | 0x80000000u));  // ascending with -f
    order[i] = (static_cast<std::uint64_t>(key) << 32) | static_cast<std::uint32_t>(i);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const auto key = static_cast<std::uint32_t>(order[i] >> 32);
    for (int p = 0; p < kPasses; ++p)
      ++count[p * kBuckets + ((key >> (p * kBits)) & (kBuckets - 1))];
  }
  for (int p = 0; p < kPasses; ++p) {
    std::uint32_t* c = count.data() + p * kBuckets;
    if (std::find(c, c + kBuckets, static_cast<std::uint32_t>(n)) != c + kBuckets) continue;
    std::uint32_t at = 0;
    for (std::uint32_t b = 0; b < kBuckets; ++b) {
      const std::uint32_t k = c[b];
      c[b] = at;
      at += k;
    }
    const int shift = 32 + p * kBits;
    for (std::size_t i = 0; i < n; ++i) tmp[c[(order[i] >> shift) & (kBuckets - 1)]++] = order[i];
    order.swap(tmp);
  }
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
  std::size_t keep = static_cast<std::size_t>(n);
  if (p_.top_k > 0 && static_cast<std::size_t>(p_.top_k) < keep) {
    cand_.resize(static_cast<std::size_t>(n));
    for (std::int32_t i = 0; i < n; ++i)
      cand_[static_cast<std::size_t>(i)] = {adjusted(i) / p_.temperature, i};
    keep = static_cast<std::size_t>(p_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(keep), cand_.end(),
                      [](const auto& a, const auto& b) {
                        return a.first > b.first || (a.first == b.first && a.second < b.second);
                      });
  } else {
    // The whole vocabulary in descending (logit, then lower id) order. `sum` below adds every
    // probability in this order, and a sampled token must not depend on how the order was
    // found, so it is a full order, by a radix sort (std::sort cost ~2 ms a token at 32k).
    scaled_.resize(static_cast<std::size_t>(n));
    if (!penalise) {  // the same values, in a loop the compiler vectorises
      for (std::size_t i = 0; i < scaled_.size(); ++i) scaled_[i] = logits[i] / p_.temperature;
    } else {
      for (std::int32_t i = 0; i < n; ++i)
        scaled_[static_cast<std::size_t>(i)] = adjusted(i) / p_.temperature;
    }
    order_by_logit(scaled_, order_, order_tmp_);
    cand_.resize(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < cand_.size(); ++i) {
      const auto id = static_cast<std::int32_t>(order_[i] & 0xffffffffu);
      cand_[i] = {scaled_[static_cast<std::size_t>(id)], id};
    }
  }
  const double top = cand_[0].first;
  prob_.resize(keep);
  double sum = 0;
  for (std::size_t i = 0; i < keep; ++i) sum += prob_[i] = std::exp(cand_[i].first - top);
  const std::size_t all = keep;
  const double all_sum = sum;
  if (p_.min_p > 0.0f) {  // relative to the most likely token (prob[0] == 1 before normalising)
    std::size_t k = 1;
    while (k < keep && prob_[k] >= p_.min_p) ++k;
    for (std::size_t i = k; i < keep; ++i) sum -= prob_[i];
    keep = k;
  }
  if (p_.top_p < 1.0f) {
    double acc = 0;
    for (std::size_t i = 0; i < keep; ++i) {
      acc += prob_[i] / sum;
      if (acc >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  // The draw is std::discrete_distribution's over prob_[0, keep) as libstdc++ makes it, without
  // building the whole CDF: one weight draws nothing from the generator; otherwise one canonical
  // double u, the weights normalised by their sequential sum, and the first index whose running
  // sum is not below u (the last one's is 1). Tokens for a seed are as they were with it.
  if (keep < 2) return cand_[0].second;
  double norm = all_sum;  // the same additions in the same order when nothing was cut
  if (keep != all)
    norm = std::accumulate(prob_.begin(), prob_.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  const double u = std::generate_canonical<double, std::numeric_limits<double>::digits>(rng_);
  double cp = 0;
  for (std::size_t i = 0; i + 1 < keep; ++i) {
    cp += prob_[i] / norm;
    if (!(cp < u)) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

}  // namespace weir::inference
