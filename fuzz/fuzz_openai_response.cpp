// Bytes from an OpenAI-compatible server -> what a remote model reads back: the codec's
// parsers (weir/http/openai.hpp: a chat completion, a text completion, the chunks of a stream
// given one SSE event's data per line, an error body) and the agents' mapping to a ChatResponse.
// No crash; a mapped reply holds at most kMaxToolCalls calls, each named; what the codec parsed
// from a whole body builds back into a body that parses to the same value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "weir/agents/chat.hpp"
#include "weir/http/openai.hpp"

namespace oa = weir::http::openai;

namespace {

void check(const oa::Completion& c) {
  auto r = weir::agents::from_openai(c);
  if (!r) return;
  if (r->message.tool_calls.size() > weir::agents::kMaxToolCalls) std::abort();
  for (const auto& call : r->message.tool_calls)
    if (call.name.empty() || call.id.empty()) std::abort();
}

// parse(build(x)) == x, usage aside (a body built always carries usage).
void round_trip(const oa::Completion& c, bool chat) {
  const oa::Usage u = c.usage.value_or(oa::Usage{});
  const std::string body = chat ? oa::chat_completion(c.envelope, c.choices, u)
                                : oa::completion(c.envelope, c.choices, u);
  auto back = chat ? oa::parse_chat_completion(body) : oa::parse_completion(body);
  if (!back) std::abort();
  back->usage = c.usage;
  if (!(*back == c)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      if (auto r = oa::parse_chat_completion(in)) {
        check(*r);
        round_trip(*r, true);
      }
      break;
    case 1:
      if (auto r = oa::parse_completion(in)) round_trip(*r, false);
      break;
    case 2: {
      oa::StreamAssembler a;
      bool ok = true;
      for (std::size_t at = 0; at <= in.size() && ok && !a.done();) {
        std::size_t nl = in.find('\n', at);
        if (nl == std::string_view::npos) nl = in.size();
        ok = static_cast<bool>(a.add(in.substr(at, nl - at)));
        at = nl + 1;
      }
      if (!ok) break;
      auto c = a.finish();
      if (c.choices.size() > oa::StreamAssembler::kMaxChoices) std::abort();
      for (const auto& ch : c.choices)
        if (ch.tool_calls.size() > oa::StreamAssembler::kMaxToolCalls) std::abort();
      check(c);
      break;
    }
    default: {
      auto e = oa::parse_error_body(500, in);
      if (e.message.empty() && !in.empty()) std::abort();
    }
  }
  return 0;
}
