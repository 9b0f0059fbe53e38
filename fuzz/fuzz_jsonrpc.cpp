// jsonrpc::parse (the MCP client's and server's message parser) must never crash, hang or
// throw, whatever the line; what it accepts must serialize back into a message it accepts.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "weir/tools/jsonrpc.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace rpc = weir::tools::jsonrpc;
  std::string_view line(reinterpret_cast<const char*>(data), size);
  auto m = rpc::parse(line);
  if (!m) return 0;
  std::string again;
  switch (m->kind) {
    case rpc::Kind::request:
      again = rpc::request(m->id, m->method, m->params);
      break;
    case rpc::Kind::notification:
      again = rpc::notification(m->method, m->params);
      break;
    case rpc::Kind::response:
      again = rpc::response(m->id, m->result);
      break;
    case rpc::Kind::error:
      again = rpc::error_response(m->id, m->error_code, m->error_message);
      break;
  }
  auto r = rpc::parse(again);
  if (!r || r->kind != m->kind) __builtin_trap();
  return 0;
}
