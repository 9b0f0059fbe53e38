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

void check_cases(const std::vector<Case>& cases) {
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

// Scores and probabilities: fractional bounds are exact, inclusive and exclusive, on both
// sides of zero; integers with fractional bounds round inward; integers past 18 digits.
TEST(StructuredNumbers, FractionalAndHugeBoundsAreExact) {
  check_cases({
      {R"({"type":"number","minimum":0.1,"maximum":0.9})",
       {"0.1", "0.5", "0.9", "0.25", "0.899999", "0.10", "0.900"},
       {"0", "1", "0.09", "0.91", "0.95", "-0.5", "0.90001", "0.099999"}},
      {R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})",
       {"0.5", "0.001", "0.999999", "0.000000000000001"},
       {"0", "1", "0.0", "1.0", "-0.1", "1.5", "0.000"}},
      {R"({"type":"number","minimum":-2.5,"maximum":-0.25})",
       {"-2.5", "-1", "-0.25", "-0.3", "-2.49", "-2", "-0.250"},
       {"-2.51", "-0.2", "0", "-3", "0.3", "-0.24"}},
      {R"({"type":"number","minimum":1.5,"maximum":1.75})",
       {"1.5", "1.6", "1.75", "1.7499", "1.50"},
       {"1.4", "1.76", "1.8", "2", "1", "1.751"}},
      {R"({"type":"number","exclusiveMinimum":0.5,"maximum":2})",
       {"0.51", "1", "2", "0.5000001", "1.99", "2.0"},
       {"0.5", "0.50", "2.01", "0.4"}},
      {R"({"type":"number","minimum":-0.5,"exclusiveMaximum":0.5})",
       {"-0.5", "0", "0.49", "-0.1", "0.0"},
       {"0.5", "-0.51", "1", "-1"}},
      {R"({"type":"integer","minimum":0.5,"maximum":3.5})", {"1", "2", "3"}, {"0", "4", "1.5"}},
      {R"({"type":"integer","exclusiveMinimum":-1.5,"maximum":2})", {"-1", "0", "2"}, {"-2", "3"}},
      // (Past 2^53 a double-based validator rounds: the cases stay clear of the bounds.)
      {R"({"type":"integer","minimum":1e30})",
       {"1000000000000000000000000000000", "1000000000000000000000000000001"},
       {"99999999999999999999999999999", "1", "0"}},
      {R"({"type":"integer","maximum":-1e20})",
       {"-100000000000000000000", "-100000000000000000001"},
       {"-9999999999999999999", "0", "5"}},
      {R"({"type":"number","minimum":1e25,"maximum":1e26})",
       {"10000000000000000000000000", "50000000000000000000000000.5"},
       {"999999999999999999999999", "200000000000000000000000000", "0"}},
  });
}

// Random bounds (inclusive or exclusive, fractional or whole, either sign) against the
// validator, on numbers near and between the bounds: the grammar allows exactly what the
// schema allows, but for "-0" (never written) and, for integers, "1.0" (an integer to JSON
// Schema, never written either).
TEST(StructuredNumbers, RandomBoundsAgreeWithTheValidator) {
  auto& t = *tiny().tok;
  std::mt19937_64 rng(35);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  auto decimal = [&](double x, int places) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", places, x);
    std::string s = buf;
    if (s.find('.') != std::string::npos) {
      while (s.back() == '0') s.pop_back();
      if (s.back() == '.') s.pop_back();
    }
    return s == "-0" ? std::string("0") : s;
  };
  int checked = 0;
  for (int round = 0; round < 300; ++round) {
    const bool integer = pick(3) == 0;
    json::object s{{"type", integer ? "integer" : "number"}};
    std::vector<double> near;
    for (const char* side : {"minimum", "maximum"}) {
      if (pick(4) == 0) continue;
      const double v = (pick(2001) - 1000) / std::pow(10.0, pick(4));
      const std::string key =
          pick(2) ? std::string("exclusive") + (side[1] == 'i' ? "Minimum" : "Maximum") : side;
      s[key] = json::parse(decimal(v, 3));
      near.push_back(s[key].to_number<double>());
    }
    SCOPED_TRACE(json::serialize(s));
    auto k = schema(json::serialize(s), t);
    auto v = tools::Schema::compile(s);
    ASSERT_TRUE(v);
    if (!k) {  // only when the validator too allows no number near the bounds
      EXPECT_NE(k.error().message.find("the constraint matches no finite output: "),
                std::string::npos)
          << k.error().message;
      continue;
    }
    std::vector<std::string> candidates = {"0", "1", "-1", "10", "-10", "0.5", "-0.5"};
    for (double b : near) {
      for (double d : {0.0, 1e-3, -1e-3, 1e-2, -1e-2, 0.5, -0.5, 1.0, -1.0, 7.25, -7.25}) {
        for (int places : {0, 1, 2, 3, 4}) candidates.push_back(decimal(b + d, places));
      }
    }
    for (const auto& c : candidates) {
      if (integer && c.find('.') != std::string::npos) continue;
      SCOPED_TRACE(c);
      EXPECT_EQ(accepts(*k, c), static_cast<bool>(v->validate(json::parse(c))));
      ++checked;
    }
  }
  EXPECT_GT(checked, 5000);
}

// What no grammar can give is refused naming the keywords and the limit; bounds that truly
// contradict each other say so.
TEST(StructuredNumbers, EmptyRangesNameTheKeywordsAndTheLimit) {
  EXPECT_EQ(schema_error(R"({"type":"number","minimum":5,"maximum":3})"),
            "the constraint matches no finite output: 'minimum' 5 and 'maximum' 3 at (root) "
            "contradict each other (no number lies between them)");
  EXPECT_EQ(schema_error(R"({"type":"integer","exclusiveMinimum":1,"exclusiveMaximum":2})"),
            "the constraint matches no finite output: 'exclusiveMinimum' 1 and "
            "'exclusiveMaximum' 2 at (root) leave no integer between them");
  EXPECT_EQ(schema_error(R"({"type":"integer","minimum":0.2,"maximum":0.8})"),
            "the constraint matches no finite output: 'minimum' 0.2 and 'maximum' 0.8 at (root) "
            "leave no integer between them");
  EXPECT_EQ(schema_error(R"({"type":"number","exclusiveMinimum":0,"maximum":1e-20})"),
            "the constraint matches no finite output: 'exclusiveMinimum' 0 and 'maximum' 1e-20 "
            "at (root) leave no number of at most 15 fraction digits (the limit of weir's number "
            "grammar)");
  EXPECT_EQ(schema_error(R"({"type":"object","properties":{"p":{"type":"number","minimum":1,
            "maximum":0}},"required":["p"]})"),
            "the constraint matches no finite output: 'minimum' 1 and 'maximum' 0 at "
            "/properties/p contradict each other (no number lies between them)");
  // A branch with no value is dropped when another branch has one.
  EXPECT_EQ(schema_error(R"({"anyOf":[{"type":"number","minimum":5,"maximum":3},
            {"type":"null"}]})"),
            "(compiled)");
}

// Counts (minLength, maxLength, minItems, maxItems) are whole numbers: a fraction is refused
// rather than rounded (minLength 1.5 truncated to 1 let "a" through), and a huge one is
// refused by name, never an overflow.
TEST(StructuredNumbers, CountsAreWholeNumbers) {
  for (const char* k : {"minLength", "maxLength"}) {
    EXPECT_EQ(
        schema_error(std::string(R"({"type":"string",")") + k + R"(":1.5})"),
        std::string("JSON Schema keyword '") + k + "' at (root) must be a non-negative integer");
  }
  for (const char* k : {"minItems", "maxItems"}) {
    EXPECT_EQ(
        schema_error(std::string(R"({"type":"array",")") + k + R"(":2.5})"),
        std::string("JSON Schema keyword '") + k + "' at (root) must be a non-negative integer");
  }
  EXPECT_EQ(schema_error(R"({"type":"string","minLength":2.0,"maxLength":3})"), "(compiled)");
  EXPECT_EQ(schema_error(R"({"type":"array","minItems":1e300})"),
            "JSON Schema keyword 'minItems' at (root) is 1E300, over the 400000 repetitions "
            "weir's grammar can hold; lower it");
  EXPECT_EQ(schema_error(R"({"type":"string","maxLength":1e300})"),
            "JSON Schema keyword 'maxLength' at (root) is 1E300, over the 400000 repetitions "
            "weir's grammar can hold; lower it");
}

// A schema whose shortest value is too long to plan (found by the breaking pass: nested minItems
// of 1000 held 14.7 GB while a request's admission planned its fewest tokens, and the kernel
// killed the server; a flat minItems of 100001 took 28 s on the engine's thread) is refused when
// it is compiled, naming the value's bytes and what to lower. Items of any value cost most (each
// position's every kind of value is a parse state); typed ones plan far longer values.
TEST(StructuredErrors, AValueTooLongToPlanIsRefusedAtCompile) {
  EXPECT_EQ(schema_error(R"({"type":"array","minItems":1000,)"
                         R"("items":{"type":"array","minItems":1000}})"),
            "constraint too large: planning the fewest tokens of its shortest valid value "
            "(2002001 bytes) takes more than 64 MiB of parse states; lower the sizes it asks "
            "for (minItems, minLength), or give untyped items a type");
  const std::string flat = schema_error(R"({"type":"array","minItems":100001})");
  EXPECT_EQ(flat.rfind("constraint too large: planning the fewest tokens of its shortest valid "
                       "value (200003 bytes)",
                       0),
            0u)
      << flat;
  EXPECT_EQ(schema_error(R"({"type":"array","minItems":10,)"
                         R"("items":{"type":"array","minItems":10}})"),
            "(compiled)");
  EXPECT_EQ(schema_error(R"({"type":"array","minItems":30,"items":{"type":"array",)"
                         R"("minItems":30,"items":{"type":"integer"}}})"),
            "(compiled)");
}

// An unbounded number always fits a double, so whatever reads the value (a tool call's parser,
// the client) holds it: exponents of two digits at most (found by the breaking pass: "x": 4E870
// in a forced call's arguments failed to parse, and the call came back as text).
TEST(StructuredNumbers, AnUnboundedNumberFitsADouble) {
  auto& t = *tiny().tok;
  auto k = schema(R"({"type":"object","properties":{"x":{"type":"number"}},"required":["x"]})", t);
  ASSERT_TRUE(k) << k.error().message;
  for (const char* good : {R"({"x":1e99})", R"({"x":-1.5E-12})", R"({"x":123456789012345678e+99})"})
    EXPECT_TRUE(accepts(*k, good)) << good;
  for (const char* bad : {R"({"x":4E870})", R"({"x":1e100})", R"({"x":1e-999})"})
    EXPECT_FALSE(accepts(*k, bad)) << bad;
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
