// Text runs and text masks (constraint/mask.cpp): inside a string, multi-byte characters are
// taken whole and the tokens that spell text come from one mask per length. Every shortcut must
// leave the mask exactly the tokens the matcher accepts, token by token, with and without a
// budget, on a byte-level vocabulary built to hold every shape of UTF-8 character, characters
// cut short, ill-formed sequences, escapes and quotes, and tokens longer than any text mask.
#include "constraint/vocab_trie.hpp"
#include "structured_util.hpp"

namespace weir::inference {
namespace {

using namespace structured_testing;

std::string utf8(std::uint32_t cp) {
  std::string u;
  if (cp < 0x80) {
    u += static_cast<char>(cp);
  } else if (cp < 0x800) {
    u += static_cast<char>(0xC0 | (cp >> 6));
    u += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    u += static_cast<char>(0xE0 | (cp >> 12));
    u += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    u += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    u += static_cast<char>(0xF0 | (cp >> 18));
    u += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    u += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    u += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return u;
}

// The raw bytes of the vocabulary's tokens (every byte is one: the text paths need it).
std::vector<std::string> text_pieces() {
  std::vector<std::string> raw;
  std::set<std::string> seen;
  auto add = [&](std::string p) {
    if (!p.empty() && seen.insert(p).second) raw.push_back(std::move(p));
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
  // Characters of every lead group, many under one lead (subtrees of more than 16 nodes).
  for (std::uint32_t cp = 0xC0; cp < 0x100; ++cp) add(utf8(cp));     // C3
  for (std::uint32_t cp = 0x4E00; cp < 0x4E40; ++cp) add(utf8(cp));  // E4 B8
  for (std::uint32_t cp = 0x0900; cp < 0x0914; ++cp) add(utf8(cp));  // E0
  for (std::uint32_t cp = 0x0400; cp < 0x0440; ++cp) add(utf8(cp));  // D0: text only
  add(utf8(0x400) + "a");
  add(utf8(0x401) + "bc");
  for (std::uint32_t cp = 0xD55C; cp < 0xD564; ++cp) add(utf8(cp));         // ED
  for (std::uint32_t cp : {0xE000u, 0xFF01u, 0xFFFDu}) add(utf8(cp));       // EE, EF
  for (std::uint32_t cp = 0x1F600; cp < 0x1F614; ++cp) add(utf8(cp));       // F0
  for (std::uint32_t cp : {0x40000u, 0x100000u, 0x10FFFFu}) add(utf8(cp));  // F1, F4
  // Characters cut short, alone or after others.
  for (const char* p : {"\xE4\xB8", "\xF0\x9F", "\xF0\x9F\x98", "a\xC3", "\xE4\xB8\xAD\xE4",
                        " \xE2\x82", "\xC3\xA9\xF0\x9F\x98"})
    add(p);
  // Text of several characters, some longer than every text mask (70 characters).
  for (const char* p :
       {"caf\xC3\xA9", "\xC3\xA9t\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87", "\xE4\xB8\xAD\xE6\x96\x87",
        "a\xE4\xB8\xAD"
        "b",
        "\xC3\xA9!", " the", " them", " theme", " \xF0\x9F\x98\x80",
        "\xF0\x9F\x98\x80\xF0\x9F\x98\x81"})
    add(p);
  std::string e;
  for (int k = 0; k < 70; ++k) e += "\xC3\xA9";
  add(e);
  add(e.substr(0, 40));
  std::string abc;
  for (char c = 'a'; c <= 'z'; ++c) add(abc += c);  // a plain subtree 26 high
  for (int k = 2; k <= 12; ++k) add(std::string(static_cast<std::size_t>(k), ' '));
  // Ill-formed: a bad continuation, overlong, a surrogate, past U+10FFFF, a lone continuation.
  for (const char* p :
       {"\xC3(", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80",
        "\x80"
        "abc",
        "\xC0\xAF"})
    add(p);
  // Escapes, quotes and JSON punctuation.
  for (const char* p :
       {"\\n", "\\u00e9", "\\\"",       "\\u4e2d",         "\\\\",    "\\",     "\"",
        "\":", "\": \"",  "\xC3\xA9\"", "\xE4\xB8\xAD\"}", "\"}",     "\"}}",   "\",\"",
        "{\"", "\"]",     "[\"",        "\", \"",          "q\": \"", "s\": \""})
    add(p);
  return raw;
}

// The vocabulary as a byte-level BPE tokenizer (gpt-2's byte alphabet), written once.
const Tokenizer& text_vocab() {
  static std::unique_ptr<Tokenizer> tok = [] {
    std::string map[256];
    for (int b = 0, extra = 0; b < 256; ++b) {
      const bool direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      map[b] =
          utf8(direct ? static_cast<std::uint32_t>(b) : 256u + static_cast<std::uint32_t>(extra++));
    }
    std::vector<std::string> tokens;
    std::vector<std::int32_t> types;
    for (const auto& r : text_pieces()) {
      std::string t;
      for (unsigned char c : r) t += map[c];
      tokens.push_back(std::move(t));
      types.push_back(1);
    }
    tokens.push_back("<|endoftext|>");
    types.push_back(3);
    GgufWriter g;
    g.add_string("general.architecture", "llama");
    g.add_string("tokenizer.ggml.model", "gpt2");
    g.add_strings("tokenizer.ggml.tokens", tokens);
    g.add_i32s("tokenizer.ggml.token_type", types);
    g.add_strings("tokenizer.ggml.merges", {map[' '] + " t"});
    g.add_u32("tokenizer.ggml.eos_token_id", static_cast<std::uint32_t>(tokens.size() - 1));
    g.add_u32("tokenizer.ggml.bos_token_id", static_cast<std::uint32_t>(tokens.size() - 1));
    const fs::path path =
        fs::temp_directory_path() / ("weir_text_vocab_" + std::to_string(::getpid()) + ".gguf");
    EXPECT_TRUE(g.write(path));
    auto f = GgufFile::open(path);
    EXPECT_TRUE(f);
    auto t = Tokenizer::from_gguf(**f);
    EXPECT_TRUE(t);
    fs::remove(path);
    return std::move(*t);
  }();
  return *tok;
}

// Strings bounded and not, a class that holds some multi-byte characters only, an enum of
// them, strings in an array: masks walked by random allowed tokens, each compared with the
// matcher token by token, without a budget and within one that shrinks to the end.
TEST(StructuredText, MaskIsExactlyTheTokensTheMatcherAcceptsInsideStrings) {
  const Tokenizer& t = text_vocab();
  for (const std::string& p : text_pieces()) ASSERT_FALSE(p.empty());
  const char* schemas[] = {
      R"({"type":"object","properties":{"q":{"type":"string","maxLength":5},"s":{"type":"string"},"r":{"type":"string","minLength":2,"maxLength":40}},"required":["q","s","r"],"additionalProperties":false})",
      R"({"type":"string","maxLength":3})",
      R"({"type":"string","maxLength":70})",
      R"({"type":"string","pattern":"^[a-z\u00e9\u4e2d]{1,6}$"})",
      R"({"enum":["\u4e2d\u6587","\u00e9","ab"]})",
      // Some characters of a lead group only; characters two by two (a character leads
      // elsewhere than a plain byte).
      R"({"type":"string","pattern":"^[a-z\u0400]{1,6}$"})",
      R"({"type":"string","pattern":"^([a-z]|[\u0080-\u07ff]{2}){1,6}$"})",
      R"({"type":"array","items":{"type":"string","maxLength":12},"maxItems":3})",
  };
  std::vector<std::uint64_t> mask(mask_words(t.n_vocab()));
  int compared = 0, multi_byte = 0;
  for (const char* s : schemas) {
    SCOPED_TRACE(s);
    auto c = schema(s, t);
    ASSERT_TRUE(c) << c.error().message;
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      std::mt19937_64 rng(seed);
      ConstraintMatcher m(*c);
      // Odd seeds without a budget; even ones within min_tokens and a little more.
      int budget = seed % 2 ? 0 : (*c)->min_tokens() + static_cast<int>(rng() % 8);
      std::string out;
      for (int step = 0; step < 40 && !m.finished() && (budget == 0 || budget > 0); ++step) {
        if (budget == 0)
          m.fill_mask(mask);
        else
          m.fill_mask(mask, budget);
        std::vector<std::int32_t> allowed;
        for (std::int32_t id = 0; id < t.n_vocab(); ++id) {
          const bool in_mask = (mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1;
          ConstraintMatcher copy = m;
          const bool ok =
              copy.accept(id) && (budget == 0 || t.is_eog(id) || copy.min_tokens() <= budget - 1);
          ASSERT_EQ(in_mask, ok) << "token '" << t.token_to_piece(id) << "' after '" << out
                                 << "', budget " << budget;
          if (in_mask && !t.is_eog(id)) allowed.push_back(id);
          ++compared;
        }
        if (allowed.empty()) break;
        const std::int32_t tok = allowed[rng() % allowed.size()];
        ASSERT_TRUE(m.accept(tok));
        out += t.token_to_piece(tok);
        if (budget > 0) --budget;
        if (budget == 0 && seed % 2 == 0) break;
      }
      multi_byte += std::count_if(out.begin(), out.end(),
                                  [](char ch) { return static_cast<unsigned char>(ch) >= 0xC2; });
    }
  }
  EXPECT_GT(compared, 100000);
  EXPECT_GT(multi_byte, 20);  // the walks did write multi-byte characters
}

// The text masks hold each token that spells text, by its characters; the cut ones are listed;
// ill-formed ones, and those longer than 63 characters, are in none.
TEST(StructuredText, TextMasksHoldTheTokensThatSpellTextByLength) {
  const Tokenizer& t = text_vocab();
  const auto v = constraint::build_trie(t);
  auto id_of = [&](const std::string& piece) {
    for (std::int32_t id = 0; id < t.n_vocab(); ++id)
      if (t.token_to_piece(id) == piece) return id;
    ADD_FAILURE() << "no token " << piece;
    return std::int32_t{0};
  };
  auto in_bucket = [&](const std::string& piece, std::uint32_t chars) {
    for (const auto& b : v->text_masks) {
      if (b.chars != chars) continue;
      const auto id = static_cast<std::uint32_t>(id_of(piece));
      return ((b.words[id >> 6] >> (id & 63)) & 1) != 0;
    }
    ADD_FAILURE() << "no bucket of " << chars;
    return false;
  };
  EXPECT_TRUE(in_bucket("\xE4\xB8\xAD\xE6\x96\x87", 2));  // 中文: 2 characters
  EXPECT_FALSE(in_bucket("\xE4\xB8\xAD\xE6\x96\x87", 1));
  EXPECT_TRUE(in_bucket("\xE4\xB8", 1));  // cut: counts as one
  EXPECT_TRUE(in_bucket("\xF0\x9F\x98\x80", 1));
  EXPECT_TRUE(in_bucket("\xF4\x8F\xBF\xBF", 1));  // U+10FFFF
  for (const char* bad : {"\xC3(", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\"", "\\n",
                          "\x80"
                          "abc"})
    EXPECT_FALSE(in_bucket(bad, 63)) << bad;
  std::string e;
  for (int k = 0; k < 70; ++k) e += "\xC3\xA9";
  EXPECT_FALSE(in_bucket(e, 63));
  EXPECT_TRUE(in_bucket(e.substr(0, 40), 20));
  const std::set<std::int32_t> cut(v->text_cut.begin(), v->text_cut.end());
  EXPECT_TRUE(cut.count(id_of("\xE4\xB8")));
  EXPECT_TRUE(cut.count(id_of("a\xC3")));
  EXPECT_TRUE(cut.count(id_of("\xC3\xA9\xF0\x9F\x98")));
  EXPECT_FALSE(cut.count(id_of("\xE4\xB8\xAD")));
}

}  // namespace
}  // namespace weir::inference
