#include <gtest/gtest.h>

#include "test_util.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/tools/builtin.hpp"

namespace weir::tools {
namespace {

using test::invoke;
using test::show;

class ArtifactsToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = ArtifactStore::open({});
    ASSERT_TRUE(s) << s.error().message;
    store_ = std::move(*s);
    tool_ = make_artifacts_tool(*store_);
    auto ref = store_->put("line one\nline two\nline three\nline four", "text/plain");
    ASSERT_TRUE(ref);
    id_ = ref->id;
  }
  std::string call(const std::string& rest) {
    return show(invoke(*tool_, R"({"id":")" + id_ + "\"" + rest + "}"));
  }
  std::unique_ptr<ArtifactStore> store_;
  std::shared_ptr<Tool> tool_;
  std::string id_;
};

TEST_F(ArtifactsToolTest, WholeSmallArtifact) {
  EXPECT_EQ(call(""), "ok: line one\nline two\nline three\nline four");
}

TEST_F(ArtifactsToolTest, ByteRanges) {
  EXPECT_EQ(call(R"(,"offset":5,"length":3)"),
            "ok: one\n[bytes 5-8 of 38; continue with offset=8]");
  EXPECT_EQ(call(R"(,"offset":29)"), "ok: line four\n[bytes 29-38 of 38]");
  EXPECT_EQ(call(R"(,"offset":39)"),
            "invalid_argument: artifacts: offset 39 is past the end of artifact '" + id_ +
                "' (38 bytes)");
}

TEST_F(ArtifactsToolTest, LineRanges) {
  EXPECT_EQ(call(R"(,"line_start":2,"line_count":2)"), "ok: line two\nline three\n");
  EXPECT_EQ(call(R"(,"line_start":4)"), "ok: line four");
  EXPECT_EQ(call(R"(,"line_count":1)"), "ok: line one\n");
  EXPECT_EQ(call(R"(,"line_start":5)"),
            "invalid_argument: artifacts: line_start 5 is past the end of artifact '" + id_ +
                "' (4 lines)");
}

TEST_F(ArtifactsToolTest, LinesAcrossChunkBoundaries) {
  std::string big;
  for (int i = 1; i <= 20000; ++i) big += "row " + std::to_string(i) + "\n";  // > 64 KiB
  auto ref = store_->put(big, "text/plain");
  ASSERT_TRUE(ref);
  auto r = invoke(*tool_, R"({"id":")" + ref->id + R"(","line_start":15000,"line_count":2})");
  EXPECT_EQ(show(r), "ok: row 15000\nrow 15001\n");
}

TEST_F(ArtifactsToolTest, MixingModesIsRefused) {
  EXPECT_EQ(call(R"(,"offset":1,"line_start":2)"),
            "invalid_argument: artifacts: give either offset/length or line_start/line_count, "
            "not both");
}

TEST_F(ArtifactsToolTest, UnknownId) {
  auto r = invoke(*tool_, R"({"id":"0123abcd"})");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::not_found));
  EXPECT_EQ(r.error().message, "artifacts: no artifact with id '0123abcd'");
}

}  // namespace
}  // namespace weir::tools
