#include "weir/http/sse.hpp"

#include <gtest/gtest.h>

namespace weir::http {
namespace {

std::vector<std::string> feed_all(SseReader& r, const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const auto& p : pieces) {
    auto s = r.feed(p, [&](SseEvent& e) {
      out.push_back(e.event + "|" + e.data);
      return Status{};
    });
    EXPECT_TRUE(s) << s.error().message;
  }
  return out;
}

TEST(SseReader, EventsSplitAnywhereAreReassembled) {
  const std::string stream =
      ": comment\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: line1\ndata: line2\n\ndata:[DONE]\r\r";
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    SseReader r;
    auto ev = feed_all(r, {stream.substr(0, cut), stream.substr(cut)});
    ASSERT_EQ(ev.size(), 3u) << "cut at " << cut;
    EXPECT_EQ(ev[0], "|{\"a\":1}");
    EXPECT_EQ(ev[1], "x|line1\nline2");
    EXPECT_EQ(ev[2], "|[DONE]");
    EXPECT_FALSE(r.mid_event());
  }
}

TEST(SseReader, ByteAtATimeAndACutStreamIsSeen) {
  SseReader r;
  std::vector<std::string> pieces;
  for (char c : std::string("data: 1\n\ndata: par")) pieces.emplace_back(1, c);
  auto ev = feed_all(r, pieces);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(r.mid_event());
}

TEST(SseReader, LongLinesAndEventsAreRefusedWithTheLimit) {
  SseReader r(SseLimits{.max_line_bytes = 16, .max_event_bytes = 64});
  auto s = r.feed("data: 0123456789abcdef\n", [](SseEvent&) { return Status{}; });
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "event stream line longer than max_line_bytes=16");
  EXPECT_FALSE(r.feed("\n", [](SseEvent&) { return Status{}; }));  // stays failed

  SseReader e(SseLimits{.max_line_bytes = 16, .max_event_bytes = 20});
  auto s2 = e.feed("data: 0123456789\ndata: 0123456789\n", [](SseEvent&) { return Status{}; });
  ASSERT_FALSE(s2);
  EXPECT_EQ(s2.error().message, "event stream event larger than max_event_bytes=20");
}

TEST(SseReader, CallbackErrorStopsTheFeed) {
  SseReader r;
  int n = 0;
  auto s = r.feed("data: a\n\ndata: b\n\n", [&](SseEvent&) -> Status {
    ++n;
    return Error(Errc::model_error, "bad chunk");
  });
  ASSERT_FALSE(s);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(s.error().message, "bad chunk");
}

}  // namespace
}  // namespace weir::http
