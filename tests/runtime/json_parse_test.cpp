#include "weir/runtime/json_parse.hpp"

#include <gtest/gtest.h>
#include <boost/json/serialize.hpp>

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

TEST(JsonParse, PointerEscaping) {
  EXPECT_EQ(json_pointer_append("/a", "b/c~d"), "/a/b~1c~0d");
  EXPECT_EQ(json_pointer_append("", std::size_t{3}), "/3");
}

}  // namespace
}  // namespace weir
