#include "weir/runtime/error.hpp"

#include <gtest/gtest.h>

namespace weir {
namespace {

TEST(Error, NamesTheCodeThenTheMessage) {
  Error e(Errc::memory_budget_exceeded, "run_state would need 5 MiB; raise limits.run_state");
  EXPECT_TRUE(e.is(Errc::memory_budget_exceeded));
  EXPECT_FALSE(e.is(Errc::overloaded));
  EXPECT_EQ(e.to_string(),
            "memory_budget_exceeded: run_state would need 5 MiB; raise limits.run_state");
  EXPECT_STREQ(e.code.category().name(), "weir");
  EXPECT_EQ(e.code.message(), "memory_budget_exceeded");
}

TEST(Error, CodesConvertToStdErrorCode) {
  std::error_code ec = Errc::overloaded;
  EXPECT_EQ(ec, make_error_code(Errc::overloaded));
  EXPECT_STREQ(errc_name(ec), "overloaded");
  EXPECT_STREQ(errc_name(std::make_error_code(std::errc::io_error)), "unknown");
}

TEST(Result, HoldsValueOrError) {
  Result<int> ok = 7;
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 7);
  Result<int> bad = Error(Errc::not_found, "artifact abc is not in the store");
  ASSERT_FALSE(bad);
  EXPECT_TRUE(bad.error().is(Errc::not_found));
  try {
    (void)bad.value();
    FAIL() << "value() of an error must throw";
  } catch (const Exception& ex) {
    EXPECT_STREQ(ex.what(), "not_found: artifact abc is not in the store");
    EXPECT_TRUE(ex.error().is(Errc::not_found));
  }
  Status s;
  EXPECT_TRUE(s);
  Status f = Error(Errc::cancelled, "stopped");
  EXPECT_FALSE(f);
  EXPECT_EQ(f.error().message, "stopped");
}

}  // namespace
}  // namespace weir
