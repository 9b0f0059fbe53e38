// The model against the reference goldens in ../shared/models (README there): greedy tokens
// exactly, first-step logits within 1e-4.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "runner/forward_ref.hpp"
#include "weir/inference/model.hpp"

namespace weir::inference {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

struct Golden {
  std::string name;
  std::vector<std::int32_t> prompt, greedy;
  std::vector<std::vector<float>> logits;
};

std::vector<Golden> load_goldens(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  auto doc = json::parse(ss.str());
  std::vector<Golden> out;
  for (const auto& c : doc.at("cases").as_array()) {
    Golden g;
    g.name = c.at("name").as_string();
    for (const auto& t : c.at("prompt_tokens").as_array())
      g.prompt.push_back(static_cast<std::int32_t>(t.as_int64()));
    for (const auto& t : c.at("greedy_tokens").as_array())
      g.greedy.push_back(static_cast<std::int32_t>(t.as_int64()));
    for (const auto& row : c.at("logits_first_steps").as_array()) {
      std::vector<float> r;
      for (const auto& v : row.as_array()) r.push_back(static_cast<float>(v.to_number<double>()));
      g.logits.push_back(std::move(r));
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::int32_t argmax(const std::vector<float>& v) {
  return static_cast<std::int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

class Goldens : public ::testing::TestWithParam<std::string> {};

TEST_P(Goldens, ReferencePathMatchesExactly) {
  fs::path dir = fs::path(WEIR_SHARED_DIR) / "models";
  fs::path model_path = dir / (GetParam() + ".gguf");
  if (!fs::exists(model_path))
    GTEST_SKIP() << "reference models not found at " << dir << " (../shared absent)";
  auto model = Model::load(model_path);
  ASSERT_TRUE(model) << model.error().message;
  for (const auto& g : load_goldens(dir / (GetParam() + ".golden.json"))) {
    SCOPED_TRACE(g.name);
    ReferenceSession s(**model);
    std::vector<float> logits;
    std::int32_t pos = 0;
    for (auto t : g.prompt) logits = s.step(t, pos++);
    std::vector<std::int32_t> out;
    for (std::size_t k = 0; k < g.greedy.size(); ++k) {
      if (k < g.logits.size()) {
        for (std::size_t i = 0; i < logits.size(); ++i)
          ASSERT_NEAR(logits[i], g.logits[k][i], 1e-4) << "step " << k << " logit " << i;
      }
      std::int32_t next = argmax(logits);
      out.push_back(next);
      if (next == 2) break;  // EOS
      logits = s.step(next, pos++);
    }
    EXPECT_EQ(out, g.greedy);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Goldens, ::testing::Values("aidreams260K", "stories260K-gqa"));

TEST(Model, ClearErrorsForUnusableFiles) {
  fs::path vocab = fs::path(WEIR_SHARED_DIR) / "testdata/vocab/ggml-vocab-gpt-2.gguf";
  if (!fs::exists(vocab)) GTEST_SKIP() << "vocab fixtures not found (../shared absent)";
  auto r = Model::load(vocab);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::unsupported));
  EXPECT_NE(r.error().message.find("architecture 'gpt2' is not supported; weir runs: llama"),
            std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace weir::inference
