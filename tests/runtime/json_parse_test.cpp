#include "weir/runtime/json_parse.hpp"

#include <gtest/gtest.h>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace weir {
namespace {

TEST(JsonParse, ParsesObjectsWithLocations) {
  std::string text =
      "{\n  \"name\": \"flow\",\n  \"nodes\": [\n    {\"id\": \"a\", \"n\": -3},\n"
      "    {\"id\": \"b\", \"x\": 1.5e3, \"big\": 18446744073709551615}\n  ]\n}\n";
  auto r = parse_json(text, "flow.json", {.record_locations = true});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(
      boost::json::serialize(r->value),
      R"({"name":"flow","nodes":[{"id":"a","n":-3},{"id":"b","x":1.5E3,"big":18446744073709551615}]})");
  EXPECT_TRUE(r->value.at("nodes").at(0).at("n").is_int64());
  EXPECT_TRUE(r->value.at("nodes").at(1).at("big").is_uint64());
  auto loc = r->locate(text, "/nodes/1/id");
  EXPECT_EQ(loc.line, 5);
  EXPECT_EQ(loc.column, 12);
  // A pointer below a recorded value falls back to its nearest ancestor.
  EXPECT_EQ(r->locate(text, "/nodes/1/missing").line, 5);
  EXPECT_EQ(r->locate(text, "/nodes").line, 3);
}

TEST(JsonParse, SyntaxErrorsGiveSourceLineColumnAndPointer) {
  std::string text = "{\n  \"nodes\": [\n    {\"id\": \"a\" \"kind\": \"tool\"}\n  ]\n}";
  auto r = parse_json(text, "flow.json");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::corrupt_data));
  EXPECT_EQ(r.error().message.substr(0, 17), "flow.json:3:16: s") << r.error().message;
  EXPECT_NE(r.error().message.find("(at /nodes/0"), std::string::npos) << r.error().message;
}

TEST(JsonParse, TruncatedAndTrailingAndEmpty) {
  auto trunc = parse_json("{\"a\": [1, 2", "x.json");
  ASSERT_FALSE(trunc);
  EXPECT_EQ(trunc.error().message.substr(0, 11), "x.json:1:12") << trunc.error().message;
  auto trailing = parse_json("{\"a\": 1} {", "x.json");
  ASSERT_FALSE(trailing);
  EXPECT_EQ(trailing.error().message, "x.json:1:10: unexpected content after the JSON value");
  auto empty = parse_json("  \n ", "x.json");
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().message, "x.json:2:2: the document is empty: expected a JSON value");
}

TEST(JsonParse, ScalarsAndUnicode) {
  auto s = parse_json(" \"h\\u00e9llo\" ", "model output");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->value.as_string(), "h\xc3\xa9llo");
  auto n = parse_json("42", "model output");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->value.as_int64(), 42);
  // Columns count characters, not bytes.
  std::string text = "{\"é\": [1,, 2]}";
  auto bad = parse_json(text, "u.json");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message.substr(0, 11), "u.json:1:10") << bad.error().message;
  EXPECT_NE(bad.error().message.find("(at /\xc3\xa9/1)"), std::string::npos);
}

// Valid JSON is never called malformed (found by the breaking pass: a schema with "minimum":
// 18446744073709551616 was refused as "Problem while parsing a number"). An integer past 64 bits
// is read as the nearest double, as Boost.JSON and JavaScript read it; a number past a double's
// range is refused naming it and its place.
TEST(JsonParse, NumbersPastSixtyFourBitsAreDoublesAndPastADoubleAreNamed) {
  auto big = parse_json(R"({"minimum": 18446744073709551616, "n": [-18446744073709551617, 7]})",
                        "request body");
  ASSERT_TRUE(big) << big.error().message;
  EXPECT_EQ(big->value.at("minimum").as_double(), 18446744073709551616.0);
  EXPECT_EQ(big->value.at("n").at(0).as_double(), -18446744073709551617.0);
  EXPECT_EQ(big->value.at("n").at(1).as_int64(), 7);
  auto huge = parse_json(R"({"x": {"default": 1e999}})", "request body");
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().message,
            "request body:1:19: the number 1e999 is out of range (a JSON number here must fit a "
            "double: at most about 1.8e308) (at /x/default)");
  EXPECT_TRUE(parse_json(R"([1.5e300, -2E-400, 18446744073709551615])", "x"));
}

TEST(JsonParse, LimitsOnSizeAndDepth) {
  auto big = parse_json(std::string(100, ' ') + "1", "in", {.max_bytes = 50});
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().to_string(),
            "invalid_argument: in: 101 bytes of JSON, more than the limit of 50");
  std::string deep = std::string(40, '[') + std::string(40, ']');
  auto d = parse_json(deep, "in", {.max_depth = 16});
  ASSERT_FALSE(d);
  EXPECT_TRUE(d.error().is(Errc::invalid_argument));
  EXPECT_NE(d.error().message.find("nesting deeper than 16 levels"), std::string::npos)
      << d.error().message;
}

TEST(JsonParse, NamesTheBytesThatAreNotJson) {
  // A UTF-8 byte order mark is skipped; positions still count from the file's first byte.
  auto bom = parse_json("\xEF\xBB\xBF{\"a\": 1}", "b.json");
  ASSERT_TRUE(bom) << bom.error().message;
  EXPECT_EQ(bom->value.at("a").as_int64(), 1);
  auto nul = parse_json(std::string("{\"a\":\n 1\0}", 10), "n.json");
  ASSERT_FALSE(nul);
  EXPECT_EQ(nul.error().message, "n.json:2:3: a NUL byte (0x00), which JSON text cannot contain");
  auto utf8 = parse_json("{\"a\": \"caf\xE9\"}", "u.json");
  ASSERT_FALSE(utf8);
  EXPECT_EQ(utf8.error().message,
            "u.json:1:11: invalid UTF-8 (byte 0xE9); JSON files must be UTF-8");
  auto utf16 = parse_json("\xFF\xFE{\0}\0", "w.json");
  ASSERT_FALSE(utf16);
  EXPECT_EQ(utf16.error().message,
            "w.json:1:1: a UTF-16 byte order mark: JSON files must be UTF-8; save the file as "
            "UTF-8");
}

TEST(JsonParse, ParsedValueIsCapped) {
  std::string text = "[" + std::string(1000, '1');
  text = "[\"" + std::string(500, 'x') + "\", \"" + std::string(500, 'y') + "\"]";
  auto r = parse_json(text, "in", {.max_value_bytes = 600});
  ASSERT_FALSE(r);
  EXPECT_EQ(
      r.error().to_string(),
      "invalid_argument: in: the parsed document needs more than 600 bytes of memory (its limit)");
  EXPECT_TRUE(parse_json(text, "in"));
}

TEST(JsonParse, ReadJsonFileRefusesBeforeReading) {
  auto dir = std::filesystem::temp_directory_path() / "weir_read_json_test";
  std::filesystem::create_directories(dir);
  auto d = read_json_file(dir);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().message, dir.string() + ": is a directory, not a JSON file");
  auto missing = read_json_file(dir / "nope.json");
  ASSERT_FALSE(missing);
  EXPECT_TRUE(missing.error().is(Errc::not_found));
  auto f = dir / "big.json";
  {
    std::FILE* out = std::fopen(f.c_str(), "w");
    std::fputs("[1, 2, 3]", out);
    std::fclose(out);
  }
  auto small = read_json_file(f, 8);
  ASSERT_FALSE(small);
  EXPECT_EQ(small.error().message, f.string() + ": 9 bytes of JSON, more than the limit of 8");
  auto ok = read_json_file(f);
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, "[1, 2, 3]");
  EXPECT_GE(ok->capacity(), ok->size() + 64);
  auto parsed = parse_json(*ok, "big.json", {.text_is_padded = true});
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->value.as_array().size(), 3u);
  // A pipe has no size: it is read with the cap.
  auto pipe = read_json_file("/dev/stdin", 4);
  (void)pipe;  // stdin of a test may be anything; the cap itself is covered by the file case
  std::filesystem::remove_all(dir);
}

// A document over 1 MiB: `nodes` objects with a long description each, then `tail`.
std::string large_document(const std::string& tail = "1") {
  std::string text = "{\"nodes\": [\n";
  for (int i = 0; text.size() < (std::size_t{3} << 19); ++i) {
    text += (i ? ",\n" : "") + std::string("  {\"id\": ") + std::to_string(i) +
            ", \"description\": \"" + std::string(200, 'a' + i % 26) + "\", \"x\": 1.5}";
  }
  return text + "\n],\n\"tail\": " + tail + "}\n";
}

std::size_t count_lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

TEST(JsonParse, LargeDocumentsParseAndFailAsSmallOnesDo) {
  // Over 1 MiB the parser is Boost.JSON's (simdjson's index would be 5.7x the text).
  const std::string text = large_document();
  ASSERT_GT(text.size(), std::size_t{1} << 20);
  auto r = parse_json(text, "big.json");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->value, boost::json::parse(text));
  EXPECT_EQ(r->locate(text, "/tail").line, static_cast<int>(count_lines(text)));
  // The error is placed the same way: line and column of the offending byte.
  const std::string bad = large_document("[1,, 2]");
  const int last = static_cast<int>(count_lines(bad));
  auto e = parse_json(bad, "big.json");
  ASSERT_FALSE(e);
  EXPECT_TRUE(e.error().is(Errc::corrupt_data));
  EXPECT_EQ(e.error().message, "big.json:" + std::to_string(last) + ":12: syntax error");
  auto trailing = parse_json(large_document() + "{", "big.json");
  ASSERT_FALSE(trailing);
  EXPECT_EQ(trailing.error().message,
            "big.json:" + std::to_string(last + 1) + ":1: unexpected content after the JSON value");
  auto nul = parse_json(large_document(std::string("\"a\0b\"", 5)), "big.json");
  ASSERT_FALSE(nul);
  EXPECT_EQ(nul.error().message, "big.json:" + std::to_string(last) +
                                     ":11: a NUL byte (0x00), which JSON text cannot contain");
  auto deep = parse_json(large_document(std::string(40, '[') + std::string(40, ']')), "big.json",
                         {.max_depth = 16});
  ASSERT_FALSE(deep);
  EXPECT_TRUE(deep.error().is(Errc::invalid_argument));
  EXPECT_NE(deep.error().message.find("nesting deeper than 16 levels"), std::string::npos)
      << deep.error().message;
  auto capped = parse_json(text, "big.json", {.max_value_bytes = 100000});
  ASSERT_FALSE(capped);
  EXPECT_EQ(capped.error().message,
            "big.json: the parsed document needs more than 100000 bytes of memory (its limit)");
}

TEST(JsonParse, SlabsHoldTheSameValuesAndLetThemGo) {
  const std::string text = large_document();
  for (const std::string& doc : {text, std::string(R"({"a": [1, "two", {"three": 3}]})")}) {
    auto r = parse_json(doc, "in", {.slabs = true});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->value, boost::json::parse(doc));
    // Freed and grown again in any order; a copy out of the document outlives it.
    boost::json::value kept;
    {
      ParsedJson p = std::move(*r);
      auto& o = p.value.as_object();
      boost::json::value first = o.begin()->value();  // a copy on the document's slabs
      o.erase(o.begin());
      o["added"] = boost::json::array{"x", std::string(300, 'y'), boost::json::object{{"k", 1}}};
      kept = boost::json::value(first, boost::json::storage_ptr());
      EXPECT_EQ(o.at("added").at(1).as_string().size(), 300u);
    }
    EXPECT_EQ(kept, boost::json::parse(doc).as_object().begin()->value());
  }
}

TEST(JsonParse, ParseJsonFileReadsLargeFilesAsItParses) {
  auto dir = std::filesystem::temp_directory_path() / "weir_parse_json_file_test";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    auto f = dir / name;
    std::FILE* out = std::fopen(f.c_str(), "wb");
    std::fwrite(text.data(), 1, text.size(), out);
    std::fclose(out);
    return f;
  };
  const std::string text = large_document();
  auto big = parse_json_file(write("big.json", text));
  ASSERT_TRUE(big) << big.error().message;
  EXPECT_TRUE(big->text.empty());  // never whole in memory
  EXPECT_EQ(big->parsed.value, boost::json::parse(text));
  auto bom = parse_json_file(write("bom.json", "\xEF\xBB\xBF" + text));
  ASSERT_TRUE(bom) << bom.error().message;
  EXPECT_EQ(bom->parsed.value, big->parsed.value);
  auto small = parse_json_file(write("small.json", "[1, 2]"));
  ASSERT_TRUE(small);
  EXPECT_EQ(small->text, "[1, 2]");
  // A malformed large file gets parse_json's message, line and column included.
  const std::string bad = large_document("[1,, 2]");
  auto e = parse_json_file(write("bad.json", bad));
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message, parse_json(bad, (dir / "bad.json").string()).error().message);
  EXPECT_NE(e.error().message.find(":12: syntax error"), std::string::npos) << e.error().message;
  auto over = parse_json_file(dir / "big.json", {.max_bytes = 1000});
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().message, (dir / "big.json").string() + ": " + std::to_string(text.size()) +
                                      " bytes of JSON, more than the limit of 1000");
  auto capped = parse_json_file(dir / "big.json", {.max_value_bytes = 100000});
  ASSERT_FALSE(capped);
  EXPECT_NE(capped.error().message.find("needs more than 100000 bytes"), std::string::npos);
  auto missing = parse_json_file(dir / "nope.json");
  ASSERT_FALSE(missing);
  EXPECT_TRUE(missing.error().is(Errc::not_found));
  auto folder = parse_json_file(dir);
  ASSERT_FALSE(folder);
  EXPECT_EQ(folder.error().message, dir.string() + ": is a directory, not a JSON file");
  std::filesystem::remove_all(dir);
}

TEST(JsonParse, PointerEscaping) {
  EXPECT_EQ(json_pointer_append("/a", "b/c~d"), "/a/b~1c~0d");
  EXPECT_EQ(json_pointer_append("", std::size_t{3}), "/3");
}

}  // namespace
}  // namespace weir
