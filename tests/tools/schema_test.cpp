#include "weir/tools/schema.hpp"

#include <gtest/gtest.h>
#include <boost/json/parse.hpp>

namespace weir::tools {
namespace {

namespace json = boost::json;

std::string violation(std::string_view schema, std::string_view value) {
  auto s = validate(json::parse(schema), json::parse(value));
  if (s) return "ok";
  EXPECT_TRUE(s.error().is(Errc::invalid_argument));
  return s.error().message;
}

std::string schema_error(std::string_view schema) {
  auto s = check_schema(json::parse(schema).as_object());
  return s ? "ok" : s.error().message;
}

TEST(SchemaTest, TypeKeyword) {
  const char* s = R"({"type":"object","properties":{"expression":{"type":"string"}}})";
  EXPECT_EQ(violation(s, R"({"expression":"1+1"})"), "ok");
  EXPECT_EQ(violation(s, R"({"expression":3})"), "/expression: expected string, got number");
  EXPECT_EQ(violation(s, "[1]"), "(root): expected object, got array");
  EXPECT_EQ(violation(R"({"type":"boolean"})", "null"), "(root): expected boolean, got null");
  EXPECT_EQ(violation(R"({"type":"null"})", "null"), "ok");
  EXPECT_EQ(violation(R"({"type":"array"})", "{}"), "(root): expected array, got object");
}

TEST(SchemaTest, IntegerAcceptsIntegralNumbersOnly) {
  const char* s = R"({"type":"integer"})";
  EXPECT_EQ(violation(s, "3"), "ok");
  EXPECT_EQ(violation(s, "3.0"), "ok");
  EXPECT_EQ(violation(s, "-7"), "ok");
  EXPECT_EQ(violation(s, "2.5"), "(root): expected integer, got 2.5E0");
  EXPECT_EQ(violation(s, "\"3\""), "(root): expected integer, got string");
  EXPECT_EQ(violation(R"({"type":"number"})", "2.5"), "ok");
}

TEST(SchemaTest, TypeList) {
  const char* s = R"({"type":["string","null"]})";
  EXPECT_EQ(violation(s, "null"), "ok");
  EXPECT_EQ(violation(s, "\"x\""), "ok");
  EXPECT_EQ(violation(s, "1"), "(root): expected string or null, got number");
}

TEST(SchemaTest, RequiredAndAdditionalProperties) {
  const char* s =
      R"({"type":"object","properties":{"op":{"type":"string"},"path":{"type":"string"}},
                      "required":["op","path"],"additionalProperties":false})";
  EXPECT_EQ(violation(s, R"({"op":"read","path":"a"})"), "ok");
  EXPECT_EQ(violation(s, R"({"op":"read"})"), "/path: missing required property");
  EXPECT_EQ(violation(s, R"({"op":"read","path":"a","mode":1})"),
            "/mode: unexpected property (allowed: op, path)");
  // Without additionalProperties: false, extra members pass.
  EXPECT_EQ(violation(R"({"type":"object","properties":{"a":{"type":"string"}}})", R"({"b":1})"),
            "ok");
  // A schema for extra members.
  EXPECT_EQ(violation(R"({"type":"object","additionalProperties":{"type":"number"}})",
                      R"({"x":1,"y":"z"})"),
            "/y: expected number, got string");
}

TEST(SchemaTest, NestedPointersAndEscaping) {
  const char* s = R"({"type":"object","properties":{"steps":{"type":"array","items":
      {"type":"object","properties":{"a/b":{"type":"integer"}}}}}})";
  EXPECT_EQ(violation(s, R"({"steps":[{"a/b":1},{"a/b":"x"}]})"),
            "/steps/1/a~1b: expected integer, got string");
}

TEST(SchemaTest, Enum) {
  const char* s = R"({"enum":["read","list",3]})";
  EXPECT_EQ(violation(s, "\"list\""), "ok");
  EXPECT_EQ(violation(s, "3.0"), "ok");
  EXPECT_EQ(violation(s, "\"write\""), R"((root): expected one of "read", "list", 3, got "write")");
}

TEST(SchemaTest, MinimumMaximum) {
  const char* s = R"({"type":"integer","minimum":1,"maximum":20})";
  EXPECT_EQ(violation(s, "1"), "ok");
  EXPECT_EQ(violation(s, "20"), "ok");
  EXPECT_EQ(violation(s, "0"), "(root): 0 is less than the minimum 1");
  EXPECT_EQ(violation(s, "21"), "(root): 21 is greater than the maximum 20");
}

TEST(SchemaTest, StringLengthCountsCharacters) {
  const char* s = R"({"type":"string","minLength":2,"maxLength":3})";
  EXPECT_EQ(violation(s, "\"\u00e9\u00e9\u00e9\""), "ok");  // 3 characters, 6 bytes
  EXPECT_EQ(violation(s, "\"a\""), "(root): string of 1 characters is shorter than minLength 2");
  EXPECT_EQ(violation(s, "\"abcd\""), "(root): string of 4 characters is longer than maxLength 3");
}

TEST(SchemaTest, ArrayItemCounts) {
  const char* s = R"({"type":"array","minItems":1,"maxItems":2,"items":{"type":"string"}})";
  EXPECT_EQ(violation(s, R"(["a"])"), "ok");
  EXPECT_EQ(violation(s, "[]"), "(root): array of 0 items is shorter than minItems 1");
  EXPECT_EQ(violation(s, R"(["a","b","c"])"), "(root): array of 3 items is longer than maxItems 2");
  EXPECT_EQ(violation(s, R"(["a",2])"), "/1: expected string, got number");
}

TEST(SchemaTest, CheckSchemaRejectsWrongKeywordTypes) {
  EXPECT_EQ(schema_error(R"({"type":"object","description":"x","x-custom":{}})"), "ok");
  EXPECT_EQ(schema_error(R"({"type":"thing"})"), "schema /type: unknown type \"thing\"");
  EXPECT_EQ(schema_error(R"({"type":5})"),
            "schema /type: expected a string or an array of strings, got number");
  EXPECT_EQ(schema_error(R"({"properties":{"k":{"minimum":"1"}}})"),
            "schema /properties/k/minimum: expected a number, got string");
  EXPECT_EQ(schema_error(R"({"required":"a"})"),
            "schema /required: expected an array of strings, got string");
  EXPECT_EQ(schema_error(R"({"required":["a",1]})"),
            "schema /required/1: expected a string, got number");
  EXPECT_EQ(schema_error(R"({"additionalProperties":"no"})"),
            "schema /additionalProperties: expected a boolean or an object (a schema), got string");
  EXPECT_EQ(schema_error(R"({"items":[]})"),
            "schema /items: expected an object (a schema), got array");
  EXPECT_EQ(schema_error(R"({"maxLength":-1})"),
            "schema /maxLength: expected a non-negative integer, got -1");
  EXPECT_EQ(schema_error(R"({"enum":{}})"), "schema /enum: expected an array, got object");
  EXPECT_EQ(schema_error(R"({"properties":{"a":3}})"),
            "schema /properties/a: expected an object (a schema), got number");
}

}  // namespace
}  // namespace weir::tools
