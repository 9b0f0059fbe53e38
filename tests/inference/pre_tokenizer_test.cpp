// The BPE pre-tokenizers that ../shared/testdata/vocab has no vectors for: each is checked on
// texts that show what makes it differ from the others (how digits group, how punctuation,
// spaces, newlines and CJK text split). The expected pieces follow from llama.cpp's regexes for
// each name, applied in order, every regex splitting each piece into its matches and the gaps.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer_impl.hpp"

namespace weir::inference {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(const std::string& pre, const std::string& text) {
  auto r = bpe_pre_split(pre, text);
  EXPECT_TRUE(r) << r.error().message;
  return r ? *r : Pieces{};
}

TEST(PreTokenizer, Llama3GroupsDigitsByThreeAndKeepsNewlinesWithPunctuation) {
  EXPECT_EQ(split("llama3", "Hello world 12345!!\n\nok"),
            (Pieces{"Hello", " world", " ", "123", "45", "!!\n\n", "ok"}));
  // Contractions in any case, a letter run absorbing one leading non-letter.
  EXPECT_EQ(split("llama3", "I'M here"), (Pieces{"I", "'M", " here"}));
  EXPECT_EQ(split("llama-bpe", "Hello world 12345"), split("llama3", "Hello world 12345"));
}

TEST(PreTokenizer, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split("qwen2", "x 2024"), (Pieces{"x", " ", "2", "0", "2", "4"}));
}

TEST(PreTokenizer, Gpt2FamilyKeepsDigitRunsAndStarcoderSplitsThem) {
  // gpt-2 (default, mpt, olmo): " 2024" is one piece with its space.
  EXPECT_EQ(split("mpt", "a 2024 b"), (Pieces{"a", " 2024", " b"}));
  EXPECT_EQ(split("mpt", "a 2024 b"), split("gpt-2", "a 2024 b"));
  // refact / starcoder / smollm: every digit first, then the gpt-2 rules on the rest.
  EXPECT_EQ(split("refact", "a 2024 b"), (Pieces{"a", " ", "2", "0", "2", "4", " b"}));
}

TEST(PreTokenizer, FalconSeparatesPunctuationRunsFirst) {
  // Punctuation runs split off before the gpt-2 rules, so " (x)" does not keep its space with
  // the parenthesis.
  EXPECT_EQ(split("falcon", "f(x)=1"), (Pieces{"f", "(", "x", ")=", "1"}));
  EXPECT_EQ(split("falcon", "a, b"), (Pieces{"a", ",", " b"}));
}

TEST(PreTokenizer, DeepseekLlmSplitsNewlinesLatinPunctuationAndCjk) {
  EXPECT_EQ(split("deepseek-llm", "Hi, you\n\xe4\xbd\xa0\xe5\xa5\xbd 42"),
            (Pieces{"Hi", ",", " you", "\n", "\xe4\xbd\xa0\xe5\xa5\xbd", " ", "42"}));
}

TEST(PreTokenizer, UnknownNamesAreRefusedWithTheKnownOnes) {
  auto r = bpe_pre_split("tekken", "x");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "bpe_pre_split: pre-tokenizer 'tekken' is not supported (weir knows: default, gpt-2, "
            "mpt, olmo, starcoder, refact, smollm, falcon, deepseek-coder, deepseek-llm, llama3, "
            "llama-bpe, qwen2)");
}

}  // namespace
}  // namespace weir::inference
