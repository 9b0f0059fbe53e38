// The front ends' corners: number ranges with fractional and huge bounds (exact grammars, and
// refusals that name the keyword and the limit), quantified groups that can match nothing in
// regex and GBNF, and refusals that speak the user's syntax (never a rule the user did not
// write).
#include "structured_util.hpp"

namespace weir::inference {
namespace {

using namespace structured_testing;

struct Case {
  const char* schema;
  std::vector<const char*> good, bad;
};

[[maybe_unused]] void check_cases(const std::vector<Case>& cases) {
  auto& t = *tiny().tok;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.schema);
    auto k = schema(c.schema, t);
    ASSERT_TRUE(k) << k.error().message;
    auto v = tools::Schema::compile(json::parse(c.schema));
    ASSERT_TRUE(v);
    for (const char* g : c.good) {
      EXPECT_TRUE(accepts(*k, g)) << "should allow " << g;
      EXPECT_TRUE(v->validate(json::parse(g))) << "test case is wrong: " << g;
    }
    for (const char* b : c.bad) {
      EXPECT_FALSE(accepts(*k, b)) << "should forbid " << b;
      EXPECT_FALSE(v->validate(json::parse(b))) << "test case is wrong: " << b;
    }
  }
}

// Quantified groups that can match the empty string are normalised, in regex and in GBNF:
// (a*)*b matches what a*b matches.
TEST(StructuredRegex, QuantifiedNullableGroupsCompile) {
  auto& t = *tiny().tok;
  using K = ConstraintSpec::Kind;
  struct R {
    ConstraintSpec spec;
    std::vector<const char*> good, bad;
  };
  const std::vector<R> cases = {
      {{K::regex, "(a*)*b", {}}, {"b", "ab", "aaab"}, {"a", "ba", "abb", ""}},
      {{K::regex, "(a?)*b", {}}, {"b", "ab", "aaab"}, {"a", "ba"}},
      {{K::regex, "(a|)*b", {}}, {"b", "ab", "aaab"}, {"a", "bb"}},
      {{K::regex, "(|a)+b", {}}, {"b", "ab", "aab"}, {"a", "bab"}},
      {{K::regex, "((a*)*)*c", {}}, {"c", "aac"}, {"ca"}},
      {{K::regex, "(a*|b)+c", {}}, {"c", "abac", "bbc"}, {"cc"}},
      {{K::regex, "(a?){2,}b", {}}, {"b", "aaaab"}, {"ba"}},
      {{K::regex, "(a*b*)*c", {}}, {"c", "abbac"}, {"ca"}},
      {{K::gbnf, "root ::= (\"a\"*)* \"b\"\n", {}}, {"b", "aab"}, {"a"}},
      {{K::gbnf, "root ::= x* \"b\"\nx ::= \"a\"?\n", {}}, {"b", "aaab"}, {"ab a"}},
      {{K::gbnf, "root ::= x+ \"b\"\nx ::= y\ny ::= \"a\" | \"\"\n", {}}, {"b", "ab"}, {"a"}},
      {{K::json_schema, R"({"type":"string","pattern":"^(a*)*b$"})", {}},
       {R"("b")", R"("aab")"},
       {R"("a")"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.spec.text);
    auto k = compile_constraint(c.spec, t);
    ASSERT_TRUE(k) << k.error().message;
    for (const char* g : c.good) EXPECT_TRUE(accepts(*k, g)) << "should allow " << g;
    for (const char* b : c.bad) EXPECT_FALSE(accepts(*k, b)) << "should forbid " << b;
  }
}

// A GBNF rule may have any name, including the names weir gives its own helper rules.
TEST(StructuredRegex, GbnfRuleNamesAreTheUsers) {
  auto& t = *tiny().tok;
  for (const char* name : {"star", "group", "opt", "plus", "char", "repeat", "empty", "alt"}) {
    SCOPED_TRACE(name);
    const std::string g = std::string("root ::= \"x\"* ") + name + " [a-c]? (\"y\" | \"z\")+\n" +
                          name + " ::= \"q\"\n";
    auto k = compile_constraint({ConstraintSpec::Kind::gbnf, g, {}}, t);
    ASSERT_TRUE(k) << k.error().message;
    EXPECT_TRUE(accepts(*k, "xxqay"));
    EXPECT_TRUE(accepts(*k, "qzz"));
    EXPECT_FALSE(accepts(*k, "xx"));
    EXPECT_FALSE(accepts(*k, "ay")) << "the rule '" << name << "' is one \"q\"";
    EXPECT_FALSE(accepts(*k, "xqqay"));
  }
}

// Every refusal speaks the syntax the user wrote: a GBNF rule by its name, a JSON Schema by
// its keyword and pointer, a regex by its offset.
TEST(StructuredErrors, RefusalsSpeakTheUsersSyntax) {
  using K = ConstraintSpec::Kind;
  EXPECT_EQ(schema_error(R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},
                   "$ref":"#/$defs/a"})"),
            "JSON Schema '$ref' to '#/$defs/a' is left-recursive: the schema can start with itself "
            "before any text is written; put the reference inside an object or an array");
  EXPECT_EQ(schema_error(R"({"type":"object","properties":{"c":{"$ref":"#"}},"required":["c"]})"),
            "the constraint matches no finite output: the '$ref' to '#' never ends (every value "
            "it allows contains another one)");
  EXPECT_EQ(schema_error(R"({"enum":[]})"),
            "the constraint matches no finite output: 'enum' at (root) is empty");
  EXPECT_EQ(schema_error(R"({"type":"integer","enum":["a", 1.5]})"),
            "the constraint matches no finite output: 'enum' at (root) has no value of type "
            "integer");
  EXPECT_EQ(error_of({K::regex, "a[^\\s\\S]", {}}),
            "the constraint matches no finite output: regex at offset 1: the character class "
            "matches no character");
  EXPECT_EQ(schema_error(R"({"type":"string","pattern":"^[^\\s\\S]$"})"),
            "the constraint matches no finite output: JSON Schema keyword 'pattern' at "
            "(root)/pattern: regex at offset 1: the character class matches no character");
  EXPECT_EQ(error_of({K::gbnf, "root ::= \"a\" root\n", {}}),
            "the constraint matches no finite output: rule 'root' never ends (each of its "
            "alternatives refers to a rule that never ends)");
  EXPECT_EQ(error_of({K::gbnf, "root ::= x\nx ::= [^\\x00-\\U0010FFFF]\n", {}}),
            "the constraint matches no finite output: gbnf line 2 column 7: the character class "
            "matches no character");
  EXPECT_EQ(error_of({K::gbnf, "root ::= x \"a\"\nx ::= y\ny ::= x | \"b\"?\n", {}}),
            "rule 'x' is left-recursive (it can start with itself); rewrite it with "
            "repetition, e.g. x ::= y (\",\" y)*");
}

}  // namespace
}  // namespace weir::inference
