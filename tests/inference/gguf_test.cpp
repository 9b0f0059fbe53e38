#include "weir/inference/gguf.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace weir::inference {
namespace {

namespace fs = std::filesystem;

fs::path shared(const std::string& rel) {
  return fs::path(WEIR_SHARED_DIR) / rel;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

#define REQUIRE_SHARED(path) \
  if (!fs::exists(path))     \
  GTEST_SKIP() << "reference fixtures not found at " << (path) << " (../shared absent)"

TEST(Gguf, ReadsTheReferenceModel) {
  auto path = shared("models/aidreams260K.gguf");
  REQUIRE_SHARED(path);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f) << f.error().message;
  const auto& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(**g.get_string("general.architecture"), "llama");
  EXPECT_EQ(**g.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(**g.get_int("llama.block_count"), 4);
  EXPECT_NEAR(**g.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
  auto tokens = **g.get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ((**g.get_float_array("tokenizer.ggml.scores")).size(), 512u);
  EXPECT_EQ((**g.get_int_array("tokenizer.ggml.token_type"))[3], 6);
  const auto* q = g.tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::f32);
  EXPECT_EQ(q->dims, (std::vector<std::uint64_t>{64, 64}));
  EXPECT_EQ(q->n_bytes, 64u * 64 * 4);
  EXPECT_EQ(g.tensor("output.weight"), nullptr);
  EXPECT_EQ(g.value_to_string("tokenizer.ggml.tokens"), "[512 items of string]");
  auto wrong = g.get_int("general.architecture");
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().message,
            path.string() + ": metadata 'general.architecture' is string, expected an integer");
}

// Cut at every offset of the header region and a sample beyond: always a clean error.
TEST(Gguf, TruncatedFilesGiveCleanErrors) {
  auto path = shared("models/aidreams260K.gguf");
  REQUIRE_SHARED(path);
  std::string bytes = read_all(path);
  auto whole =
      GgufFile::from_memory(std::as_bytes(std::span(bytes.data(), bytes.size())), "m.gguf");
  ASSERT_TRUE(whole);
  for (std::size_t cut = 0; cut < bytes.size(); cut += cut < 4000 ? 1 : 997) {
    auto r = GgufFile::from_memory(std::as_bytes(std::span(bytes.data(), cut)), "m.gguf");
    ASSERT_FALSE(r) << "a file cut at " << cut << " bytes was accepted";
    const auto& m = r.error().message;
    ASSERT_EQ(m.rfind("m.gguf: ", 0), 0u) << m;
  }
  auto r =
      GgufFile::from_memory(std::as_bytes(std::span(bytes.data(), bytes.size() - 100)), "m.gguf");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("extends past the end of the file"), std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("tensor '"), std::string::npos);
  auto head = GgufFile::from_memory(std::as_bytes(std::span(bytes.data(), 30)), "m.gguf");
  EXPECT_EQ(head.error().message,
            "m.gguf: metadata count 22 cannot fit at offset 24 (file is 30 bytes; truncated or "
            "corrupt GGUF)");
  auto mid = GgufFile::from_memory(std::as_bytes(std::span(bytes.data(), 2000)), "m.gguf");
  EXPECT_EQ(mid.error().message,
            "m.gguf: metadata 'tokenizer.ggml.tokens': 512 elements do not fit at offset 635 (file "
            "is 2000 bytes; truncated or corrupt GGUF)");
  auto in_string = GgufFile::from_memory(std::as_bytes(std::span(bytes.data(), 5000)), "m.gguf");
  EXPECT_NE(in_string.error().message.find("runs past the end of the file at offset"),
            std::string::npos)
      << in_string.error().message;
}

TEST(Gguf, CorruptCountsMagicAndVersion) {
  auto path = shared("models/aidreams260K.gguf");
  REQUIRE_SHARED(path);
  std::string bytes = read_all(path);
  std::string bad = bytes;
  bad[0] = 'X';
  auto r1 = GgufFile::from_memory(std::as_bytes(std::span(bad.data(), bad.size())), "x.gguf");
  EXPECT_EQ(r1.error().message, "x.gguf: not a GGUF file (it does not start with \"GGUF\")");
  bad = bytes;
  bad[4] = 9;
  auto r2 = GgufFile::from_memory(std::as_bytes(std::span(bad.data(), bad.size())), "x.gguf");
  EXPECT_TRUE(r2.error().is(Errc::unsupported));
  EXPECT_EQ(r2.error().message,
            "x.gguf: GGUF version 9 is not supported (weir reads versions 2 and 3)");
  bad = bytes;
  for (int i = 16; i < 24; ++i) bad[static_cast<std::size_t>(i)] = '\x7f';  // metadata count
  auto r3 = GgufFile::from_memory(std::as_bytes(std::span(bad.data(), bad.size())), "x.gguf");
  EXPECT_NE(r3.error().message.find("metadata count"), std::string::npos) << r3.error().message;
  // Flip bytes all over the header: never a crash, always parsed or a clean error.
  for (std::size_t i = 24; i < 4000; i += 3) {
    bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    auto r = GgufFile::from_memory(std::as_bytes(std::span(bad.data(), bad.size())), "x.gguf");
    if (!r) {
      EXPECT_EQ(r.error().message.rfind("x.gguf: ", 0), 0u);
    }
  }
  auto missing = GgufFile::open("/nonexistent/model.gguf");
  EXPECT_EQ(missing.error().message,
            "cannot open model file /nonexistent/model.gguf: No such file or directory");
}

}  // namespace
}  // namespace weir::inference
