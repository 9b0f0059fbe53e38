#include "weir/runtime/json_write.hpp"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace weir {
namespace {

namespace json = boost::json;

TEST(JsonWrite, DoublesReadAsPeopleWriteThem) {
  // boost::json::serialize writes 25.5 as "2.55E1": numbers a user reads must not look so.
  EXPECT_EQ(to_json_text(json::value(25.5)), "25.5");
  EXPECT_EQ(to_json_text(json::value(0.001)), "0.001");
  EXPECT_EQ(to_json_text(json::value(2.0)), "2.0");
  EXPECT_EQ(to_json_text(json::value(-3.25)), "-3.25");
  EXPECT_EQ(to_json_text(json::value(1e300)), "1e+300");
  EXPECT_EQ(to_json_text(json::value(0.1 + 0.2)), "0.30000000000000004");  // round-trips
}

TEST(JsonWrite, EverythingElseAsBoostWritesIt) {
  json::value v =
      json::parse(R"({"a":[1,-2,18446744073709551615,true,null,"x\"\n\u0001"],"b":{}})");
  EXPECT_EQ(to_json_text(v), json::serialize(v));
  json::object o{
      {"tok_s", 1234.5}, {"n", 3}, {"nested", json::array{0.5, json::object{{"p", 99.25}}}}};
  EXPECT_EQ(to_json_text(o), R"({"tok_s":1234.5,"n":3,"nested":[0.5,{"p":99.25}]})");
  // Written text reads back to the same values.
  EXPECT_EQ(json::parse(to_json_text(o)), json::value(o));
}

}  // namespace
}  // namespace weir
