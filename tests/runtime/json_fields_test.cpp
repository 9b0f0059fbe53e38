#include "weir/runtime/json_fields.hpp"

#include <gtest/gtest.h>
#include <boost/json.hpp>

namespace weir {
namespace {

namespace json = boost::json;

// A document and the readers' diagnostics, located in its text.
struct Doc {
  std::string text;
  ParsedJson parsed;
  explicit Doc(std::string t) : text(std::move(t)) {
    auto p = parse_json(text, "f.json");
    EXPECT_TRUE(p) << p.error().message;
    parsed = std::move(*p);
  }
  JsonFields fields(std::size_t max = 100) {
    return JsonFields(
        "f.json", [this](std::string_view ptr) { return parsed.locate(text, ptr); }, max);
  }
  const json::object& root() const { return parsed.value.as_object(); }
};

TEST(JsonFields, TypedReadersSayWhatTheyExpectedAndWhere) {
  Doc d(R"({"name": 7,
 "n": 0, "big": 5000, "f": 1.5, "flag": "yes", "size": "12 parsecs",
 "list": ["a", 2], "env": {"A": "x", "B": false}, "obj": []})");
  auto f = d.fields();
  const auto& o = d.root();
  EXPECT_EQ(f.string_at(o, "name", ""), std::nullopt);
  EXPECT_EQ(f.string_at(o, "missing", "", true), std::nullopt);
  EXPECT_EQ(f.int_at(o, "n", "", 1), std::nullopt);
  EXPECT_EQ(f.int_at(o, "big", "", 1, 4096), std::nullopt);
  EXPECT_EQ(f.int_at(o, "f", "", 0), std::nullopt);
  EXPECT_EQ(f.bool_at(o, "flag", ""), std::nullopt);
  EXPECT_EQ(f.bytes_at(o, "size", ""), std::nullopt);
  EXPECT_EQ(f.strings_at(o, "list", ""), std::nullopt);
  EXPECT_EQ(f.string_map_at(o, "env", ""), std::nullopt);
  EXPECT_EQ(f.object_at(o, "obj", ""), nullptr);
  EXPECT_EQ(f.number_at(o, "f", ""), 1.5);
  EXPECT_FALSE(f.ok());
  EXPECT_EQ(f.report(),
            "f.json:1:10: /name: expected a string, got an integer\n"
            "f.json:1:1: missing required key 'missing'\n"
            "f.json:2:7: /n: must be at least 1, got 0\n"
            "f.json:2:17: /big: must be at most 4096, got 5000\n"
            "f.json:2:28: /f: expected an integer, got a number\n"
            "f.json:2:41: /flag: expected true or false, got a string\n"
            "f.json:2:56: /size: expected a byte size like 4096 or \"256MiB\"\n"
            "f.json:3:16: /list/1: expected a string, got an integer\n"
            "f.json:3:43: /env/B: expected a string, got a boolean\n"
            "f.json:3:58: /obj: expected an object, got an array");
}

TEST(JsonFields, UnknownKeysGetASuggestionOrTheList) {
  Doc d(R"({"timeot_ms": 1, "zzz": 2, "Model": "m"})");
  auto f = d.fields();
  f.check_keys(d.root(), "", {"timeout_ms", "model"});
  EXPECT_EQ(f.report(),
            "f.json:1:15: /timeot_ms: unknown key 'timeot_ms'; did you mean 'timeout_ms'?\n"
            "f.json:1:25: /zzz: unknown key 'zzz' (expected one of: timeout_ms, model)\n"
            "f.json:1:37: /Model: unknown key 'Model'; did you mean 'model'?");
}

TEST(JsonFields, PastTheCapProblemsAreCountedAndWithoutATextOnlyThePointer) {
  Doc d(R"({"a": 1, "b": 2, "c": 3})");
  auto f = d.fields(1);
  for (const char* k : {"a", "b", "c"}) f.int_at(d.root(), k, "", 10);
  const auto all = f.diagnostics();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].to_string(), "f.json: 2 more errors not shown");
  JsonFields bare("flow.json");
  bare.error("/tools/x/root", "folder 'x' does not exist");
  EXPECT_EQ(bare.report(), "flow.json: /tools/x/root: folder 'x' does not exist");
}

TEST(ByteSize, ParsesUnits) {
  EXPECT_EQ(parse_byte_size(json::value(4096)), 4096);
  EXPECT_EQ(parse_byte_size(json::value("256MiB")), 256 << 20);
  EXPECT_EQ(parse_byte_size(json::value("1.5 GiB")), std::int64_t{3} << 29);
  EXPECT_EQ(parse_byte_size(json::value("2KB")), 2000);
  EXPECT_EQ(parse_byte_size(json::value(-1)), std::nullopt);
  EXPECT_EQ(parse_byte_size(json::value("12 parsecs")), std::nullopt);
  EXPECT_EQ(parse_byte_size(json::value(std::uint64_t{1} << 63)), std::nullopt);
  EXPECT_EQ(parse_byte_size(json::value("99999999999 GiB")), std::nullopt);
}

TEST(JsonKind, Phrases) {
  EXPECT_STREQ(json_kind_phrase(json::value(1)), "an integer");
  EXPECT_STREQ(json_kind_phrase(json::value(1.5)), "a number");
  EXPECT_STREQ(json_kind_phrase(json::value(json::array())), "an array");
  EXPECT_STREQ(json_kind_phrase(json::value()), "null");
}

}  // namespace
}  // namespace weir
