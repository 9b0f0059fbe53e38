// The demo built-ins: `lorem` (a payload of a given size) and `sleep` (a stand-in for a slow
// model or API). They were once written into weir::graph's workflow builder; as tools they get
// the registry's argument checks and fences like every other tool.
#include <algorithm>
#include <chrono>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>

#include "weir/tools/builtin.hpp"

namespace weir::tools {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// Many runs may use a demo tool at once (a benchmark's hundreds of sleeping runs): the
// registry's concurrency fence stays, set far above what one process runs.
constexpr std::int32_t kDemoConcurrency = 4096;

class LoremTool final : public BasicTool {
 public:
  LoremTool()
      : BasicTool("lorem",
                  "Returns deterministic filler text of exactly `bytes` bytes (big payloads for "
                  "demos and tests).",
                  json::parse(R"json({
          "type": "object",
          "properties": {
            "bytes": {"type": "integer", "minimum": 0, "maximum": 67108864,
                      "description": "how many bytes of text (at most 64 MiB)"}
          },
          "required": ["bytes"],
          "additionalProperties": false
        })json")
                      .as_object(),
                  defaults()) {}
  static ToolOptions defaults() {
    ToolOptions o;
    o.max_concurrency = kDemoConcurrency;
    return o;
  }
  asio::awaitable<Result<std::string>> invoke(json::object args, const ToolContext&) override {
    static constexpr std::string_view kWords =
        "weir holds the level while the water passes: bounded queues, budgets and references "
        "keep agent crews alive under load. ";
    const auto bytes = static_cast<std::size_t>(args.at("bytes").to_number<double>());
    std::string out;
    out.reserve(bytes);
    while (out.size() < bytes) out.append(kWords.substr(0, bytes - out.size()));
    co_return out;
  }
};

class SleepTool final : public BasicTool {
 public:
  SleepTool()
      : BasicTool("sleep",
                  "Waits `ms` milliseconds without holding a thread, then returns the "
                  "milliseconds waited (a stand-in for a slow model or API).",
                  json::parse(R"json({
          "type": "object",
          "properties": {
            "ms": {"type": "number", "minimum": 0, "maximum": 3600000,
                   "description": "milliseconds to wait (at most an hour)"}
          },
          "required": ["ms"],
          "additionalProperties": false
        })json")
                      .as_object(),
                  defaults()) {}
  static ToolOptions defaults() {
    ToolOptions o;
    o.timeout = std::chrono::minutes(61);  // the longest sleep, and room to answer
    o.max_concurrency = kDemoConcurrency;
    o.json_output = true;
    return o;
  }
  // Looks at ctx.cancel and ctx.abandoned every 50 ms, so neither a cancelled run nor a call
  // past its timeout waits the sleep out.
  asio::awaitable<Result<std::string>> invoke(json::object args, const ToolContext& ctx) override {
    using Clock = std::chrono::steady_clock;
    const auto total =
        std::chrono::milliseconds(static_cast<std::int64_t>(args.at("ms").to_number<double>()));
    const auto until = Clock::now() + total;
    asio::steady_timer timer(co_await asio::this_coro::executor);
    auto cancelled = [&] {
      return (ctx.cancel && ctx.cancel->load(std::memory_order_relaxed)) ||
             (ctx.abandoned && ctx.abandoned->load(std::memory_order_relaxed));
    };
    while (!cancelled() && Clock::now() < until) {
      timer.expires_at(std::min(until, Clock::now() + std::chrono::milliseconds(50)));
      co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    if (cancelled()) co_return Error(Errc::cancelled, "sleep: the run was cancelled");
    co_return std::to_string(total.count());
  }
};

}  // namespace

std::shared_ptr<Tool> make_lorem_tool() {
  return std::make_shared<LoremTool>();
}

std::shared_ptr<Tool> make_sleep_tool() {
  return std::make_shared<SleepTool>();
}

}  // namespace weir::tools
