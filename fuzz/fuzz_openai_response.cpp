// Bytes from an OpenAI-compatible server -> what OpenAIChatModel reads back: a chat completion
// body, the chunks of a streamed one (one SSE event's data per line), an error body. No crash,
// no tool call past the cap, and a parsed reply's tool calls carry names.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "openai_wire.hpp"
#include "weir/agents/openai_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto check = [](const weir::agents::ChatResponse& r) {
    if (r.message.tool_calls.size() > 128) std::abort();  // kMaxToolCalls
    for (const auto& c : r.message.tool_calls)
      if (c.name.empty()) std::abort();
  };
  switch (data[0] % 3) {
    case 0:
      if (auto r = weir::agents::parse_chat_completion(in)) check(*r);
      break;
    case 1: {
      weir::agents::ChatStreamAssembler a;
      bool ok = true;
      for (std::size_t at = 0; at <= in.size() && ok && !a.done();) {
        std::size_t nl = in.find('\n', at);
        if (nl == std::string_view::npos) nl = in.size();
        ok = static_cast<bool>(a.add(in.substr(at, nl - at)));
        at = nl + 1;
      }
      if (ok) check(a.finish());
      break;
    }
    default:
      (void)weir::agents::server_message(in);
  }
  return 0;
}
