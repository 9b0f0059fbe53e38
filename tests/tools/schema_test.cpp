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
            "schema /additionalProperties: expected a schema (an object or a boolean), got string");
  EXPECT_EQ(schema_error(R"({"items":[]})"),
            "schema /items: expected a schema (an object or a boolean), got array");
  EXPECT_EQ(schema_error(R"({"maxLength":-1})"),
            "schema /maxLength: expected a non-negative integer, got -1");
  EXPECT_EQ(schema_error(R"({"enum":{}})"), "schema /enum: expected an array, got object");
  EXPECT_EQ(schema_error(R"({"properties":{"a":3}})"),
            "schema /properties/a: expected a schema (an object or a boolean), got number");
}

TEST(SchemaTest, BooleanSchemas) {
  EXPECT_EQ(violation("true", "[1]"), "ok");
  EXPECT_EQ(violation("false", "1"), "(root): no value is allowed here (the schema is false)");
  EXPECT_EQ(violation(R"({"properties":{"payload":true,"gone":false}})", R"({"payload":{"a":1}})"),
            "ok");
  EXPECT_EQ(violation(R"({"properties":{"payload":true,"gone":false}})", R"({"gone":1})"),
            "/gone: no value is allowed here (the schema is false)");
}

TEST(SchemaTest, Const) {
  const char* s = R"({"properties":{"version":{"const":1},"kind":{"const":"set"}}})";
  EXPECT_EQ(violation(s, R"({"version":1.0,"kind":"set"})"), "ok");
  EXPECT_EQ(violation(s, R"({"version":2})"), "/version: expected 1, got 2");
  EXPECT_EQ(violation(s, R"({"kind":"tool"})"), R"(/kind: expected "set", got "tool")");
  // Structured values compare deeply; member order does not matter.
  EXPECT_EQ(
      violation(R"({"const":{"a":[1,{"b":null}],"c":true}})", R"({"c":true,"a":[1.0,{"b":null}]})"),
      "ok");
  EXPECT_EQ(violation(R"({"const":{"a":[1]}})", R"({"a":[1,2]})"),
            R"((root): expected {"a":[1]}, got {"a":[1,2]})");
}

TEST(SchemaTest, RefToDefsAndDefinitions) {
  const char* s = R"({"type":"object",
      "properties":{"name":{"$ref":"#/$defs/name"},"size":{"$ref":"#/definitions/size"}},
      "$defs":{"name":{"type":"string","minLength":1}},
      "definitions":{"size":{"type":"integer","minimum":0}}})";
  EXPECT_EQ(schema_error(s), "ok");
  EXPECT_EQ(violation(s, R"({"name":"a","size":3})"), "ok");
  EXPECT_EQ(violation(s, R"({"name":""})"),
            "/name: string of 0 characters is shorter than minLength 1");
  EXPECT_EQ(violation(s, R"({"size":-1})"), "/size: -1 is less than the minimum 0");
  // A recursive definition that consumes input on the way round is fine.
  const char* tree = R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object",
      "properties":{"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "additionalProperties":false}}})";
  EXPECT_EQ(violation(tree, R"({"children":[{"children":[]},{}]})"), "ok");
  EXPECT_EQ(violation(tree, R"({"children":[{"children":[{"leaf":1}]}]})"),
            "/children/0/children/0/leaf: unexpected property (allowed: children)");
  // "#" is the root; ~1 and ~0 are unescaped in the pointer.
  EXPECT_EQ(violation(R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"$ref":"#"}}]})",
                      "[1,[2,[3]]]"),
            "ok");
  EXPECT_EQ(violation(R"({"$ref":"#/$defs/a~1b","$defs":{"a/b":{"type":"null"}}})", "1"),
            "(root): expected null, got number");
  // A sub-schema validated on its own resolves against the root given.
  const auto root = json::parse(s);
  EXPECT_EQ(validate(root.at("properties").at("size"), json::value(-2), root).error().message,
            "(root): -2 is less than the minimum 0");
}

TEST(SchemaTest, RefErrors) {
  EXPECT_EQ(
      schema_error(R"({"properties":{"a":{"$ref":"#/$defs/missing"}}})"),
      R"(schema /properties/a/$ref: cannot resolve $ref "#/$defs/missing" (no such definition in the schema))");
  EXPECT_EQ(
      schema_error(R"({"$ref":"other.json#/$defs/x"})"),
      R"(schema /$ref: cannot resolve $ref "other.json#/$defs/x" (only local references, "#/$defs/name", are supported))");
  EXPECT_EQ(schema_error(R"({"$ref":1})"), "schema /$ref: expected a string, got number");
  // Unchecked schemas still report what they cannot resolve.
  EXPECT_EQ(violation(R"({"$ref":"#/$defs/nope"})", "1"),
            R"((root): cannot resolve $ref "#/$defs/nope" (no such definition in the schema))");
}

TEST(SchemaTest, RefCycleThatConsumesNoInputIsAnError) {
  const char* s = R"({"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/b"},
                                                  "b":{"anyOf":[{"$ref":"#/$defs/a"}]}}})";
  EXPECT_EQ(schema_error(s), "ok");
  EXPECT_EQ(violation(s, R"({"x":1})"),
            "(root): matches none of the anyOf branches (0: (root): $ref cycle that consumes no "
            "input: #/$defs/a -> #/$defs/b -> #/$defs/a)");
  EXPECT_EQ(violation(R"({"$ref":"#"})", "1"), "(root): $ref cycle that consumes no input: # -> #");
}

TEST(SchemaTest, DepthCaps) {
  // Recursion through values: one level per array.
  const char* s = R"({"$defs":{"n":{"type":["array","integer"],"items":{"$ref":"#/$defs/n"}}},
                      "$ref":"#/$defs/n"})";
  std::string deep = "1";
  for (int i = 0; i < 20; ++i) deep = "[" + deep + "]";
  EXPECT_EQ(violation(s, deep), "ok");
  json::value nested(1);
  for (std::size_t i = 0; i < kMaxValueDepth + 5; ++i) nested = json::array{std::move(nested)};
  std::string pointer;
  for (std::size_t i = 0; i <= kMaxValueDepth; ++i) pointer += "/0";
  auto st = validate(json::parse(s), nested);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message, pointer + ": value nested more than 128 levels deep");
  // A chain of $refs longer than the cap, without a cycle.
  json::object defs;
  for (std::size_t i = 0; i < kMaxRefDepth + 2; ++i)
    defs["d" + std::to_string(i)] = json::object{{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  defs["d" + std::to_string(kMaxRefDepth + 2)] = json::object{{"type", "null"}};
  json::object chain{{"$ref", "#/$defs/d0"}, {"$defs", defs}};
  EXPECT_TRUE(check_schema(chain));
  auto deep_refs = validate(chain, json::value(nullptr));
  ASSERT_FALSE(deep_refs);
  EXPECT_EQ(deep_refs.error().message, "(root): more than 512 nested $refs (at \"#/$defs/d512\")");
}

TEST(SchemaTest, OneOfSaysWhichBranchesFailedOrMatched) {
  const char* s =
      R"({"oneOf":[{"type":"string"},{"type":"array","minItems":1},{"type":"number"}]})";
  EXPECT_EQ(violation(s, "\"a\""), "ok");
  EXPECT_EQ(violation(s, "[]"),
            "(root): matches none of the oneOf branches (0: (root): expected string, got array; "
            "1: (root): array of 0 items is shorter than minItems 1; 2: (root): expected number, "
            "got array)");
  EXPECT_EQ(violation(R"({"oneOf":[{"type":"integer"},{"minimum":0},{"type":"string"}]})", "3"),
            "(root): matches oneOf branches 0 and 1, expected exactly one");
  EXPECT_EQ(
      violation(R"({"properties":{"e":{"oneOf":[{"required":["to"]},{"required":["route"]}]}}})",
                R"({"e":{"from":"a"}})"),
      "/e: matches none of the oneOf branches (0: /e/to: missing required property; 1: "
      "/e/route: missing required property)");
}

TEST(SchemaTest, AnyOfAllOfNot) {
  const char* any = R"({"anyOf":[{"type":"string","maxLength":2},{"type":"integer"}]})";
  EXPECT_EQ(violation(any, "\"ab\""), "ok");
  EXPECT_EQ(violation(any, "7"), "ok");
  EXPECT_EQ(violation(any, "\"abc\""),
            "(root): matches none of the anyOf branches (0: (root): string of 3 characters is "
            "longer than maxLength 2; 1: (root): expected integer, got string)");
  const char* all = R"({"allOf":[{"type":"integer"},{"minimum":2},{"maximum":4}]})";
  EXPECT_EQ(violation(all, "3"), "ok");
  EXPECT_EQ(violation(all, "5"), "(root): 5 is greater than the maximum 4");
  const char* no = R"({"not":{"required":["secret"]}})";
  EXPECT_EQ(violation(no, R"({"a":1})"), "ok");
  EXPECT_EQ(violation(no, R"({"secret":1})"),
            R"((root): must not match the schema under "not" ({"required":["secret"]}))");
}

TEST(SchemaTest, IfThenElse) {
  const char* s = R"({"type":"object","properties":{"kind":{"enum":["set","tool"]}},
      "if":{"properties":{"kind":{"const":"set"}}},
      "then":{"required":["values"]},
      "else":{"required":["tool"],"properties":{"tool":{"type":"string"}}}})";
  EXPECT_EQ(violation(s, R"({"kind":"set","values":{}})"), "ok");
  EXPECT_EQ(violation(s, R"({"kind":"set"})"), "/values: missing required property");
  EXPECT_EQ(violation(s, R"({"kind":"tool","tool":"calc"})"), "ok");
  EXPECT_EQ(violation(s, R"({"kind":"tool","tool":1})"), "/tool: expected string, got number");
  EXPECT_EQ(violation(s, R"({"kind":"tool"})"), "/tool: missing required property");
  // "if" alone constrains nothing.
  EXPECT_EQ(violation(R"({"if":{"type":"string"}})", "1"), "ok");
}

TEST(SchemaTest, PatternAndPropertyNames) {
  const char* s = R"({"type":"string","pattern":"^[A-Za-z_][A-Za-z0-9_-]*$"})";
  EXPECT_EQ(violation(s, "\"node_1\""), "ok");
  EXPECT_EQ(violation(s, "\"1node\""),
            R"((root): "1node" does not match the pattern "^[A-Za-z_][A-Za-z0-9_-]*$")");
  // Not anchored unless the pattern says so.
  EXPECT_EQ(violation(R"({"pattern":"b+"})", "\"abbc\""), "ok");
  EXPECT_EQ(violation(R"({"pattern":"\\d{3}"})", "\"ab12\""),
            R"((root): "ab12" does not match the pattern "\\d{3}")");
  // A long value is shown cut.
  EXPECT_EQ(violation(R"({"pattern":"^x"})", "\"" + std::string(100, 'a') + "\""),
            "(root): \"" + std::string(64, 'a') + "...\" does not match the pattern \"^x\"");
  const char* names = R"({"type":"object","propertyNames":{"pattern":"^[a-z]+$","maxLength":4}})";
  EXPECT_EQ(violation(names, R"({"abc":1})"), "ok");
  EXPECT_EQ(violation(names, R"({"abc":1,"Ab":2})"),
            R"(/Ab: invalid property name: "Ab" does not match the pattern "^[a-z]+$")");
  EXPECT_EQ(violation(names, R"({"abcde":1})"),
            "/abcde: invalid property name: string of 5 characters is longer than maxLength 4");
}

TEST(SchemaTest, PatternInputIsBounded) {
  // Long strings match without exhausting the stack, even with a group under a star.
  const std::string long_ab = "\"" + std::string(200000, 'a') + "b\"";
  EXPECT_EQ(violation(R"({"pattern":"^(a|b)*$"})", long_ab), "ok");
  EXPECT_EQ(violation(R"({"pattern":"^(a|c)*$"})", long_ab),
            "(root): \"" + std::string(64, 'a') + "...\" does not match the pattern \"^(a|c)*$\"");
  std::string big(kMaxPatternInput + 1, 'a');
  EXPECT_EQ(violation(R"({"pattern":"^a*$"})", "\"" + big + "\""),
            "(root): string of 1048577 bytes is too long to match against the pattern \"^a*$\" "
            "(at most 1048576 bytes)");
  big.pop_back();
  EXPECT_EQ(violation(R"({"pattern":"^a*$"})", "\"" + big + "\""), "ok");
  // Back-references are not supported.
  EXPECT_EQ(schema_error(R"({"pattern":"(a)\\1"})")
                .rfind(R"(schema /pattern: invalid regular expression "(a)\\1": )", 0),
            0u);
}

TEST(SchemaTest, PatternPropertiesAndAdditionalPropertiesSchema) {
  const char* s = R"({"type":"object","properties":{"name":{"type":"string"}},
      "patternProperties":{"^x-":{"type":"string"},"^n_":{"type":"number"}},
      "additionalProperties":false})";
  EXPECT_EQ(violation(s, R"({"name":"a","x-note":"b","n_count":2})"), "ok");
  EXPECT_EQ(violation(s, R"({"x-note":3})"), "/x-note: expected string, got number");
  EXPECT_EQ(violation(s, R"({"n_count":"2"})"), "/n_count: expected number, got string");
  EXPECT_EQ(
      violation(s, R"({"other":1})"),
      R"(/other: unexpected property (allowed: name, names matching "^x-", names matching "^n_"))");
  const char* extra = R"({"properties":{"a":{}},"additionalProperties":{"type":"object",
      "required":["path"]}})";
  EXPECT_EQ(violation(extra, R"({"a":1,"m":{"path":"p"}})"), "ok");
  EXPECT_EQ(violation(extra, R"({"m":{}})"), "/m/path: missing required property");
}

TEST(SchemaTest, MinMaxProperties) {
  const char* s = R"({"type":"object","minProperties":1,"maxProperties":2})";
  EXPECT_EQ(violation(s, R"({"a":1})"), "ok");
  EXPECT_EQ(violation(s, "{}"), "(root): object of 0 properties has fewer than minProperties 1");
  EXPECT_EQ(violation(s, R"({"a":1,"b":2,"c":3})"),
            "(root): object of 3 properties has more than maxProperties 2");
}

TEST(SchemaTest, ExclusiveBoundsAndMultipleOf) {
  const char* s = R"({"exclusiveMinimum":0,"exclusiveMaximum":10})";
  EXPECT_EQ(violation(s, "0.5"), "ok");
  EXPECT_EQ(violation(s, "0"), "(root): 0 is not greater than the exclusive minimum 0");
  EXPECT_EQ(violation(s, "10"), "(root): 10 is not less than the exclusive maximum 10");
  EXPECT_EQ(violation(R"({"multipleOf":3})", "9"), "ok");
  EXPECT_EQ(violation(R"({"multipleOf":3})", "10"), "(root): 10 is not a multiple of 3");
  EXPECT_EQ(violation(R"({"multipleOf":0.1})", "0.3"), "ok");
  EXPECT_EQ(violation(R"({"multipleOf":0.5})", "1.25"), "(root): 1.25E0 is not a multiple of 5E-1");
}

TEST(SchemaTest, UniqueItemsAndPrefixItems) {
  const char* u = R"({"type":"array","uniqueItems":true})";
  EXPECT_EQ(violation(u, R"([1,"1",[1],{"a":1}])"), "ok");
  EXPECT_EQ(violation(u, R"([1,2,1.0])"), "(root): items 0 and 2 are equal (uniqueItems)");
  EXPECT_EQ(violation(u, R"([{"a":1,"b":2},{"b":2,"a":1}])"),
            "(root): items 0 and 1 are equal (uniqueItems)");
  EXPECT_EQ(violation(R"({"uniqueItems":false})", "[1,1]"), "ok");
  const char* p =
      R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})";
  EXPECT_EQ(violation(p, R"(["a",1])"), "ok");
  EXPECT_EQ(violation(p, R"(["a"])"), "ok");
  EXPECT_EQ(violation(p, R"(["a","b"])"), "/1: expected integer, got string");
  EXPECT_EQ(violation(p, R"(["a",1,null])"), "/2: no value is allowed here (the schema is false)");
}

TEST(SchemaTest, AnnotationsAreIgnored) {
  const char* s = R"({"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x",
      "title":"t","description":"d","default":5,"examples":[1],"type":"integer"})";
  EXPECT_EQ(schema_error(s), "ok");
  EXPECT_EQ(violation(s, "\"a\""), "(root): expected integer, got string");
}

TEST(SchemaTest, CheckSchemaNewKeywords) {
  EXPECT_EQ(schema_error(R"({"pattern":"(unclosed"})")
                .rfind(R"(schema /pattern: invalid regular expression "(unclosed": )", 0),
            0u);
  EXPECT_EQ(schema_error(R"({"patternProperties":{"[":{}}})")
                .rfind(R"(schema /patternProperties/[: invalid regular expression "[": )", 0),
            0u);
  EXPECT_EQ(schema_error(R"({"pattern":3})"),
            "schema /pattern: expected a string (a regular expression), got number");
  EXPECT_EQ(schema_error(R"({"oneOf":[]})"),
            "schema /oneOf: expected a non-empty array of schemas, got array");
  EXPECT_EQ(schema_error(R"({"anyOf":[{"type":"string"},3]})"),
            "schema /anyOf/1: expected a schema (an object or a boolean), got number");
  EXPECT_EQ(schema_error(R"({"allOf":[{"if":{"minimum":"0"}}]})"),
            "schema /allOf/0/if/minimum: expected a number, got string");
  EXPECT_EQ(schema_error(R"({"$defs":{"a":{"type":"str"}}})"),
            "schema /$defs/a/type: unknown type \"str\"");
  EXPECT_EQ(schema_error(R"({"multipleOf":0})"),
            "schema /multipleOf: expected a number greater than 0, got 0");
  EXPECT_EQ(schema_error(R"({"minProperties":1.5})"),
            "schema /minProperties: expected a non-negative integer, got 1.5E0");
  EXPECT_EQ(schema_error(R"({"uniqueItems":1})"),
            "schema /uniqueItems: expected a boolean, got number");
  EXPECT_EQ(schema_error(R"({"exclusiveMinimum":"0"})"),
            "schema /exclusiveMinimum: expected a number, got string");
  EXPECT_EQ(schema_error(R"({"propertyNames":[]})"),
            "schema /propertyNames: expected a schema (an object or a boolean), got array");
  EXPECT_EQ(schema_error(R"({"not":{"const":[1,2]},"else":true,"then":false})"), "ok");
}

TEST(SchemaTest, UncheckedBadPatternIsReportedAtValidation) {
  EXPECT_EQ(violation(R"({"pattern":"("})", "\"x\"")
                .rfind(R"((root): the schema has an invalid regular expression "(": )", 0),
            0u);
}

TEST(SchemaTest, CompiledSchemaValidatesManyValues) {
  auto schema = Schema::compile(json::parse(
      R"({"type":"object","propertyNames":{"$ref":"#/$defs/name"},
          "additionalProperties":{"type":"integer"},
          "$defs":{"name":{"type":"string","pattern":"^[a-z]+$"}}})"));
  ASSERT_TRUE(schema) << schema.error().message;
  EXPECT_TRUE(schema->validate(json::parse(R"({"a":1,"bc":2})")));
  EXPECT_EQ(schema->validate(json::parse(R"({"a":"x"})")).error().message,
            "/a: expected integer, got string");
  EXPECT_EQ(schema->validate(json::parse(R"({"A":1})")).error().message,
            R"(/A: invalid property name: "A" does not match the pattern "^[a-z]+$")");
  const Schema copy = *schema;  // shares the compiled form
  EXPECT_TRUE(copy.validate(json::parse(R"({"zz":3})")));
  EXPECT_TRUE(copy.json().is_object());
  EXPECT_EQ(Schema::compile(json::parse(R"j({"pattern":")"})j"))
                .error()
                .message.rfind(R"j(schema /pattern: invalid regular expression ")": )j", 0),
            0u);
  EXPECT_EQ(Schema::compile(json::value(3)).error().message,
            "schema (root): expected a schema (an object or a boolean), got number");
  EXPECT_TRUE(Schema::compile(json::value(false)));
}

}  // namespace
}  // namespace weir::tools
