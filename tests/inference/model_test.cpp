// The model against the reference goldens in ../shared/models (README there): greedy tokens
// exactly, first-step logits within 1e-4.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "runner/forward_ref.hpp"
#include "weir/inference/gguf_writer.hpp"
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

// A file whose hyperparameters no model has (0 layers, a context of 0) is refused at load, naming
// the value: an engine sized from it divided by zero (SIGFPE in `weir generate` and `weir serve`).
TEST(Model, HyperparametersOutOfRangeAreRefused) {
  const fs::path dir = fs::temp_directory_path() / ("weir_hparams_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Case {
    RandomModelShape shape;
    const char* says;
  };
  RandomModelShape no_layers = RandomModelShape::tiny(), no_context = RandomModelShape::tiny();
  no_layers.n_layers = 0;
  no_context.context_length = 0;
  for (const Case& c :
       {Case{no_layers, "hyperparameter 'llama.block_count' is 0; it must be 1 to"},
        Case{no_context, "hyperparameter 'llama.context_length' is 0; it must be 1 to"}}) {
    const fs::path p = dir / "m.gguf";
    ASSERT_TRUE(write_random_llama(p, c.shape, GgmlType::q8_0, 3));
    auto m = Model::load(p);
    ASSERT_FALSE(m) << c.says;
    EXPECT_TRUE(m.error().is(Errc::model_error));
    EXPECT_NE(m.error().message.find(c.says), std::string::npos) << m.error().message;
  }
  fs::remove_all(dir);
}

// A FIFO given as a model is refused as a folder is, not opened for reading, which waits for a
// writer for ever (`weir generate`, `weir inspect`, and `weir serve`, which then could not stop).
TEST(Model, AFifoIsNotAModelFile) {
  const fs::path fifo = fs::temp_directory_path() / ("weir_fifo_" + std::to_string(::getpid()));
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto opened = std::async(std::launch::async, [&] { return GgufFile::open(fifo); });
  const bool answered = opened.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  if (!answered) ::close(::open(fifo.c_str(), O_WRONLY));  // lets the blocked open go on
  auto f = opened.get();
  fs::remove(fifo);
  ASSERT_TRUE(answered) << "opening a FIFO waited for a writer";
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().message.find("is not a regular file"), std::string::npos)
      << f.error().message;
}

}  // namespace
}  // namespace weir::inference
