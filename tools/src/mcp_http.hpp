// The Streamable HTTP transport of MCP (spec 2025-06-18, "Transports"): every message the
// client sends is one POST to the server's endpoint; the answer comes back as the response's
// JSON body, or as the events of the text/event-stream the response opens (the server may send
// requests and notifications before the answer on that stream); notifications and responses
// are acknowledged with 202 and no body. The Mcp-Session-Id the server assigns in answer to
// initialize is sent with every later request, and so is MCP-Protocol-Version once negotiated;
// what the initialize response streams is handed on only once that response (and so its
// session id) is complete, so the client's next message cannot leave without the id.
// Private to weir::tools (see weir/tools/mcp.hpp).
//
// How failures reach the client (which sees a stream of messages, as over stdio):
//   - a request answered with another status (401, 500, ...) gets a JSON-RPC error for its id
//     naming the status and the body's first bytes; the connection stays up;
//   - 404 once a session exists (the server ended it), a refused or reset connection, or a
//     message over max_message_bytes end the connection: async_read_message fails with the
//     reason, and the client reconnects (a new initialize, a new session) as it restarts a
//     stdio server.
// Bounds: messages waiting to be read are capped (max_in_flight answers plus a margin); one
// message or one event is at most max_message_bytes.
//
// Not implemented: the optional GET stream for messages the server sends unprompted (so
// notifications/tools/list_changed sent outside a request's stream is not seen); resuming a
// cut stream with Last-Event-ID (a cut stream fails the requests it carried).
//
// Thread safety: confined to the executor it was made for (the MCP client's I/O thread).
#pragma once

#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>

#include "weir/tools/mcp.hpp"

namespace weir::tools::detail {

class HttpTransport final : public Transport {
 public:
  // Errors: invalid_argument for a URL weir cannot use.
  static Result<std::unique_ptr<HttpTransport>> open(boost::asio::any_io_executor ex,
                                                     const McpServerConfig& cfg);
  ~HttpTransport() override;

  boost::asio::awaitable<Result<std::string>> async_read_message() override;
  boost::asio::awaitable<Status> async_write_message(std::string message) override;
  void close() override;
  std::string exit_reason() override;
  void set_protocol_version(std::string version) override;

  struct State;

 private:
  explicit HttpTransport(std::shared_ptr<State> state);
  std::shared_ptr<State> s_;
};

}  // namespace weir::tools::detail
