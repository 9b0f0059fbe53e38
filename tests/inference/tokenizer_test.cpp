// Tokenizer conformance: every vector in ../shared/testdata/vocab (llama.cpp's), exactly, and
// decoding round-trips; plus the reference model's golden prompt tokens.
#include "weir/inference/tokenizer.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace weir::inference {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Conformance, EveryVectorMatchesAndRoundTrips) {
  fs::path base =
      fs::path(WEIR_SHARED_DIR) / "testdata/vocab" / ("ggml-vocab-" + GetParam() + ".gguf");
  if (!fs::exists(base))
    GTEST_SKIP() << "tokenizer vectors not found at " << base << " (../shared absent)";
  auto file = GgufFile::open(base);
  ASSERT_TRUE(file) << file.error().message;
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok) << tok.error().message;
  std::string inp = read_all(base.string() + ".inp"), outp = read_all(base.string() + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (std::size_t p = 0, q; (q = inp.find(sep, p)) != std::string::npos; p = q + sep.size())
    inputs.push_back(inp.substr(p, q - p));
  std::vector<std::string> expected;
  std::stringstream lines(outp);
  for (std::string line; std::getline(lines, line);) expected.push_back(line);
  ASSERT_EQ(inputs.size(), expected.size());
  int failures = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto ids = (*tok)->encode(inputs[i], /*add_special=*/false);
    std::string got;
    for (auto id : ids) got += " " + std::to_string(id);
    if (got != expected[i]) {
      ADD_FAILURE() << GetParam() << " vector " << i << " [" << inputs[i] << "]\n  got:     " << got
                    << "\n  expected:" << expected[i];
      if (++failures > 5) return;
      continue;
    }
    // encode_marked reads the same text the same way: all of it markup is encode() with
    // special-token parsing; none of it markup is encode() with no special token matched.
    const std::vector<TextRange> whole = {{0, inputs[i].size()}};
    EXPECT_EQ((*tok)->encode_marked(inputs[i], whole, false),
              (*tok)->encode(inputs[i], false, true))
        << "vector " << i;
    EXPECT_EQ((*tok)->encode_marked(inputs[i], {}, false), ids) << "vector " << i;
    std::string decoded = (*tok)->decode(ids);
    std::string want =
        (*tok)->model() == "llama" && !inputs[i].empty() ? " " + inputs[i] : inputs[i];
    EXPECT_EQ(decoded, want) << "round trip of vector " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, Conformance,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "deepseek-coder",
                                           "starcoder"));

TEST(Tokenizer, GoldenPromptTokensAndStreaming) {
  fs::path model = fs::path(WEIR_SHARED_DIR) / "models/aidreams260K.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << "reference models not found (../shared absent)";
  auto file = GgufFile::open(model);
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok);
  EXPECT_EQ((*tok)->encode("I dream of"),
            (std::vector<std::int32_t>{1, 303, 281, 269, 435, 447, 275}));
  EXPECT_EQ((*tok)->encode(""), (std::vector<std::int32_t>{1}));
  // "é" is not a token: two byte tokens. Streamed, nothing is emitted until both arrived.
  auto ids = (*tok)->encode("\xc3\xa9", false);
  ASSERT_EQ(ids.size(), 3u);  // "▁" then the two bytes
  StreamDecoder sd(**tok);
  EXPECT_EQ(sd.push(ids[0]), " ");
  EXPECT_EQ(sd.push(ids[1]), "");
  EXPECT_EQ(sd.push(ids[2]), "\xc3\xa9");
  EXPECT_EQ(sd.push(ids[1]), "");
  EXPECT_EQ(sd.flush(), "\xef\xbf\xbd");
  EXPECT_TRUE((*tok)->is_eog(2));
}

TEST(Tokenizer, FilesWithoutATokenizerSayTheyHaveNone) {
  fs::path model = fs::path(WEIR_SHARED_DIR) / "models/stories260K-gqa.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << "reference models not found (../shared absent)";
  std::string bytes = read_all(model);
  // Rename the key so the tokenizer is gone.
  auto pos = bytes.find("tokenizer.ggml.tokens");
  ASSERT_NE(pos, std::string::npos);
  bytes[pos] = 'X';
  auto f = GgufFile::from_memory(std::as_bytes(std::span(bytes.data(), bytes.size())), "m.gguf");
  ASSERT_TRUE(f);
  auto t = Tokenizer::from_gguf(**f);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().message, "m.gguf: no tokenizer (tokenizer.ggml.tokens is missing)");
}

}  // namespace
}  // namespace weir::inference
