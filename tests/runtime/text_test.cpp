#include "weir/runtime/text.hpp"

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

}  // namespace
}  // namespace weir
