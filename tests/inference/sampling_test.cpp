#include "engine/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <random>

#include <gtest/gtest.h>

namespace weir::inference {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 3.0f, 2.0f, -1.0f};

std::map<std::int32_t, int> histogram(SamplingParams p, int n = 4000) {
  Sampler s(p);
  std::map<std::int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(kLogits, {})];
  return h;
}

TEST(Sampling, GreedyTakesTheLowestIdOnTies) {
  Sampler s({});
  EXPECT_EQ(s.sample(kLogits, {}), 1);
}

TEST(Sampling, RepetitionPenaltyDemotesRecentTokens) {
  Sampler s({.repetition_penalty = 2.0f});
  std::vector<std::int32_t> history = {1, 2};
  EXPECT_EQ(s.sample(kLogits, history), 3);  // 3 and 3 become 1.5; 2.0 wins
}

TEST(Sampling, TopKOneIsGreedyAndTopKLimitsTheSupport) {
  auto h1 = histogram({.temperature = 1.0f, .top_k = 1, .seed = 3});
  EXPECT_EQ(h1.size(), 1u);
  EXPECT_EQ(h1.begin()->first, 1);
  auto h3 = histogram({.temperature = 1.0f, .top_k = 3, .seed = 3});
  EXPECT_EQ(h3.size(), 3u);
  EXPECT_EQ(h3.count(0) + h3.count(4), 0u);
}

TEST(Sampling, TopPKeepsTheNucleusAndMinPDropsTheTail) {
  // softmax(1,3,3,2,-1): the two 3s hold ~0.78; top_p 0.7 keeps just them.
  auto hp = histogram({.temperature = 1.0f, .top_p = 0.7f, .seed = 4});
  EXPECT_EQ(hp.size(), 2u);
  auto hm = histogram({.temperature = 1.0f, .min_p = 0.3f, .seed = 4});  // keeps p >= 0.3 * p(top)
  EXPECT_EQ(hm.count(4), 0u);
  EXPECT_EQ(hm.count(0), 0u);
  EXPECT_EQ(hm.count(3), 1u);
  // Frequencies follow the distribution: the two 3s about equally, each more than the 2.
  EXPECT_NEAR(double(hm[1]) / hm[2], 1.0, 0.15);
  EXPECT_GT(hm[1], hm[3]);
}

TEST(Sampling, TheSameSeedRepeats) {
  Sampler a({.temperature = 0.8f, .seed = 42}), b({.temperature = 0.8f, .seed = 42}),
      c({.temperature = 0.8f, .seed = 7});
  std::vector<std::int32_t> sa, sb, sc;
  for (int i = 0; i < 64; ++i)
    sa.push_back(a.sample(kLogits, {})), sb.push_back(b.sample(kLogits, {})),
        sc.push_back(c.sample(kLogits, {}));
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

// Greedy over a vocabulary-sized row: the largest logit, the lowest id among equal ones,
// wherever they fall relative to the 16-wide lanes and the tail.
TEST(Sampling, GreedyPicksTheLowestIdOfTheLargestLogit) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> U(-10, 10);
  Sampler s({});
  for (int n : {1, 15, 16, 31, 32, 33, 100, 32000}) {
    std::vector<float> logits(static_cast<std::size_t>(n));
    for (auto& l : logits) l = U(rng);
    auto naive = [&] {
      int best = 0;
      for (int i = 1; i < n; ++i)
        if (logits[i] > logits[best]) best = i;
      return best;
    };
    EXPECT_EQ(s.sample(logits, {}), naive()) << "n=" << n;
    // Ties: copies of the maximum at later and earlier ids, in other lanes and in the tail.
    for (int at : {n - 1, n / 2, 17, 3, 0}) {
      if (at >= n) continue;
      logits[static_cast<std::size_t>(at)] = 20.0f;
      EXPECT_EQ(s.sample(logits, {}), naive()) << "n=" << n << " tie at " << at;
    }
  }
}

// The sampler before it stopped sorting the whole vocabulary for each token (std::sort, then
// std::discrete_distribution over the kept prefix), kept as the reference: a seed must draw the
// same tokens from the same logits as it did.
std::int32_t reference_sample(const SamplingParams& p, std::mt19937_64& rng,
                              const std::vector<float>& logits) {
  const auto n = static_cast<std::int32_t>(logits.size());
  std::vector<std::pair<float, std::int32_t>> cand(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i)
    cand[static_cast<std::size_t>(i)] = {logits[static_cast<std::size_t>(i)] / p.temperature, i};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::size_t keep = cand.size();
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < keep) {
    keep = static_cast<std::size_t>(p.top_k);
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(keep), cand.end(),
                      by_logit);
  } else {
    std::sort(cand.begin(), cand.end(), by_logit);
  }
  const double top = cand[0].first;
  std::vector<double> prob(keep);
  double sum = 0;
  for (std::size_t i = 0; i < keep; ++i) sum += prob[i] = std::exp(cand[i].first - top);
  if (p.min_p > 0.0f) {
    std::size_t k = 1;
    while (k < keep && prob[k] >= p.min_p) ++k;
    for (std::size_t i = k; i < keep; ++i) sum -= prob[i];
    keep = k;
  }
  if (p.top_p < 1.0f) {
    double acc = 0;
    for (std::size_t i = 0; i < keep; ++i) {
      acc += prob[i] / sum;
      if (acc >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::discrete_distribution<std::size_t> dist(prob.begin(),
                                               prob.begin() + static_cast<std::ptrdiff_t>(keep));
  return cand[dist(rng)].second;
}

// Over vocabularies up to 32,000, logits spread, peaked, tied, masked (-inf) and flat, and
// temperature, top_p, min_p and top_k settings: every seed draws exactly the reference's tokens.
TEST(Sampling, ASeedDrawsTheSameTokensAsTheFullSortDid) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> U(-10, 10);
  int compared = 0;
  for (int n : {2, 5, 100, 1000, 32000}) {
    for (int shape = 0; shape < 5; ++shape) {
      std::vector<std::vector<float>> rows(n >= 1000 ? 6 : 24);
      for (auto& row : rows) {
        row.resize(static_cast<std::size_t>(n));
        for (auto& l : row) {
          l = U(gen);
          if (shape == 1) l = std::round(l);                                     // many ties
          if (shape == 2 && l < 0) l = -std::numeric_limits<float>::infinity();  // masked
          if (shape == 3) l = 0.5f;                                              // flat
          if (shape == 4) l *= 3;                                                // peaked
        }
        row[0] = std::max(row[0], 0.0f);  // at least one token stays unmasked
        if (shape == 1) row[static_cast<std::size_t>(n / 2)] = -0.0f;  // ties with +0
      }
      for (float temp : {0.3f, 0.8f, 1.0f, 1.7f})
        for (float top_p : {1.0f, 0.9f, 0.5f})
          for (float min_p : {0.0f, 0.05f})
            for (std::int32_t top_k : {0, 40}) {
              SamplingParams p{.temperature = temp,
                               .top_k = top_k,
                               .top_p = top_p,
                               .min_p = min_p,
                               .seed = static_cast<std::uint64_t>(compared)};
              Sampler s(p);
              std::mt19937_64 ref_rng(p.seed);
              for (const auto& row : rows) {
                ASSERT_EQ(s.sample(row, {}), reference_sample(p, ref_rng, row))
                    << "n=" << n << " shape=" << shape << " temp=" << temp << " top_p=" << top_p
                    << " min_p=" << min_p << " top_k=" << top_k;
                ++compared;
              }
            }
    }
  }
  EXPECT_GT(compared, 5000);
}

}  // namespace
}  // namespace weir::inference

// Logprobs are the raw logits' log-softmax, checked against a direct softmax; the top list is
// sorted, ties by lowest id.
TEST(Logprobs, MatchADirectSoftmax) {
  std::vector<float> logits = {1.5f, -2.0f, 3.25f, 0.0f, 3.25f, -7.0f};
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  auto lp = weir::inference::compute_logprobs(logits, 1, 3);
  EXPECT_EQ(lp.chosen.token, 1);
  EXPECT_NEAR(lp.chosen.logprob, std::log(std::exp(-2.0) / z), 1e-5);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].token, 2);
  EXPECT_EQ(lp.top[1].token, 4);
  EXPECT_EQ(lp.top[2].token, 0);
  for (const auto& t : lp.top)
    EXPECT_NEAR(t.logprob, std::log(std::exp(static_cast<double>(logits[t.token])) / z), 1e-5);
  EXPECT_EQ(weir::inference::compute_logprobs(logits, 0, 0).top.size(), 0u);
  EXPECT_EQ(weir::inference::compute_logprobs(logits, 0, 50).top.size(), logits.size());
}

// OpenAI's penalties count only generated tokens: with the prompt's token alone nothing moves.
TEST(Penalties, PresenceAndFrequencyCountGeneratedTokensOnly) {
  weir::inference::SamplingParams p;
  p.presence_penalty = 1.0f;
  p.frequency_penalty = 0.5f;
  weir::inference::Sampler s(p);
  std::vector<float> logits = {2.0f, 1.9f, 0.0f};
  std::vector<std::int32_t> history = {0};  // the prompt
  EXPECT_EQ(s.sample(logits, history), 0);  // the prompt's token is not penalised
  history.push_back(0);                     // now generated once: 2.0 - 1.5 < 1.9
  EXPECT_EQ(s.sample(logits, history), 1);
}
