#include "weir/runtime/text.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace weir {
namespace {

TEST(PercentDecode, DecodesEscapesAndKeepsWhatIsNotOne) {
  EXPECT_EQ(percent_decode("t%201%2Fa"), "t 1/a");
  EXPECT_EQ(percent_decode("%e2%9C%93"), "\xe2\x9c\x93");  // either case of hex digit
  EXPECT_EQ(percent_decode("100%"), "100%");               // a lone '%' at the end
  EXPECT_EQ(percent_decode("%4"), "%4");                   // one digit only
  EXPECT_EQ(percent_decode("%zz%41"), "%zzA");             // not hex, then an escape
  EXPECT_EQ(percent_decode("a+b"), "a+b");                 // '+' stays (not form data)
  EXPECT_EQ(percent_decode(""), "");
}

TEST(Utf8, FindsTheFirstInvalidSequence) {
  EXPECT_EQ(find_invalid_utf8("plain \u00e9\u4e2d\U0001F600"), std::nullopt);
  EXPECT_EQ(find_invalid_utf8("ab\xC3"), 2u);             // truncated at the end
  EXPECT_EQ(find_invalid_utf8("a\xC0\xAF"), 1u);          // overlong '/'
  EXPECT_EQ(find_invalid_utf8("\xED\xA0\x80"), 0u);       // a surrogate
  EXPECT_EQ(find_invalid_utf8("x\xF4\x90\x80\x80"), 1u);  // past U+10FFFF
  EXPECT_EQ(find_invalid_utf8("\x80"), 0u);               // a lone continuation byte
}

TEST(Utf8, CutsAndCountsOnCharacterBoundaries) {
  const std::string s = "a\u00e9\u4e2d";  // 1 + 2 + 3 bytes
  EXPECT_EQ(utf8_cut(s, 2), 1u);          // inside the 2-byte character
  EXPECT_EQ(utf8_cut(s, 3), 3u);
  EXPECT_EQ(utf8_cut(s, 5), 3u);
  EXPECT_EQ(utf8_cut(s, 100), 6u);
  EXPECT_EQ(utf8_skip_continuation(std::string_view(s).substr(2)), 1u);
  EXPECT_EQ(utf8_length(s), 3u);
  EXPECT_EQ(utf8_abbreviate(s, 4), "a\u00e9...");
  EXPECT_EQ(utf8_abbreviate(s, 6), s);
  Utf8Stream v;
  EXPECT_TRUE(v.feed("a\xE4"));
  EXPECT_FALSE(v.finish());  // a character is unfinished
  EXPECT_TRUE(v.feed("\xB8\xAD"));
  EXPECT_TRUE(v.finish());
  EXPECT_FALSE(v.feed(std::string_view("\0", 1)));  // NUL is refused
}

// One rule for every "did you mean" (the workflow loader, the crew files, the tool registry
// had three): ASCII case does not count, and a suggestion is at most max(2, |word| / 3) edits
// away.
TEST(DidYouMean, OneRuleForEverySuggestion) {
  const std::vector<std::string> names = {"summarize", "counter", "calculator", "doc_search"};
  EXPECT_EQ(closest_match("sumarize", names), "summarize");
  EXPECT_EQ(closest_match("Calculator", names), "calculator");  // case only: 0 edits
  EXPECT_EQ(closest_match("countr", names), "counter");
  EXPECT_EQ(closest_match("web_browser", names), std::nullopt);
  EXPECT_EQ(closest_match("ab", std::vector<std::string>{"ax"}), "ax");  // within the floor of 2
  EXPECT_EQ(closest_match("ab", std::vector<std::string>{"xy"}), std::nullopt);  // shares nothing
  EXPECT_EQ(closest_match("abc", std::vector<std::string>{"xyz"}), std::nullopt);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(did_you_mean("docsearch", names), "; did you mean 'doc_search'?");
  EXPECT_EQ(did_you_mean("zzz", names), "");
}

TEST(DidYouMean, UnknownNameMessages) {
  const std::vector<std::string> channels = {"counter", "items"};
  EXPECT_EQ(unknown_name_message("channel", "countr", channels),
            "unknown channel 'countr'; did you mean 'counter'?");
  EXPECT_EQ(unknown_name_message("channel", "zzz", channels),
            "unknown channel 'zzz' (known: counter, items)");
  EXPECT_EQ(unknown_name_message("model", "m", {}), "unknown model 'm' (none are defined)");
  std::vector<std::string> many;
  for (int i = 0; i < 30; ++i) many.push_back("node" + std::to_string(i));
  EXPECT_EQ(unknown_name_message("node", "zzz", many), "unknown node 'zzz' (30 are defined)");
}

// A peer's garbage shown in a log line or an error (breaking pass break-doors 9: an MCP server's
// malformed line was copied raw, ESC and NUL included).
TEST(EscapeControl, ControlsAndInvalidUtf8AreEscapedTextIsKept) {
  EXPECT_EQ(escape_control("plain text, caf\xc3\xa9 \xe2\x9c\x93"),
            "plain text, caf\xc3\xa9 \xe2\x9c\x93");
  EXPECT_EQ(escape_control(std::string("a\x1b[2Jb\0c\x7f", 9)), "a\\x1b[2Jb\\x00c\\x7f");
  EXPECT_EQ(escape_control("line\nforged: 1\r\t"), "line\\nforged: 1\\r\\t");
  // A stray byte, a cut sequence, an overlong form and a C1 control (U+009B, CSI).
  EXPECT_EQ(escape_control("\xff\xe2\x9c \xc0\xaf \xc2\x9b"),
            "\\xff\\xe2\\x9c \\xc0\\xaf \\xc2\\x9b");
  EXPECT_EQ(escape_control("abcdef", 3), "abc...");
  EXPECT_EQ(escape_control("ab\xc3\xa9", 3), "ab...");  // not cut inside a character
}

TEST(PlainName, LettersDigitsUnderscoresAndDashes) {
  EXPECT_TRUE(is_plain_name("fs"));
  EXPECT_TRUE(is_plain_name("_a-b_9"));
  EXPECT_FALSE(is_plain_name(""));
  EXPECT_FALSE(is_plain_name("9a"));
  EXPECT_FALSE(is_plain_name("fs/x"));
  EXPECT_FALSE(is_plain_name("a b"));
}

}  // namespace
}  // namespace weir
