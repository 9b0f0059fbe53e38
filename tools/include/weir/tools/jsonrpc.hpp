// JSON-RPC 2.0 messages as MCP's stdio transport carries them: one message per line.
//
// parse() classifies one line (no trailing newline) as a request, a notification, a response or
// an error response, checking what the spec requires ("jsonrpc": "2.0", an id that is a string
// or an integer, a string method, params an object or an array, exactly one of result/error,
// an error with an integer code and a string message). Batches (arrays) are refused: MCP
// 2025-06-18 removed them. Every failure is a value (Errc::corrupt_data) whose message says
// what was wrong; parse() never throws and nests at most max_depth levels.
//
// The writers return one line without its newline, ready for the transport.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/json/value.hpp>

#include "weir/runtime/error.hpp"

namespace weir::tools::jsonrpc {

inline constexpr std::int64_t kParseError = -32700;
inline constexpr std::int64_t kInvalidRequest = -32600;
inline constexpr std::int64_t kMethodNotFound = -32601;
inline constexpr std::int64_t kInvalidParams = -32602;
inline constexpr std::int64_t kInternalError = -32603;

enum class Kind { request, notification, response, error };

struct Message {
  Kind kind = Kind::notification;
  boost::json::value id;        // request, response, error: a string or an integer (error: or null)
  std::string method;           // request, notification
  boost::json::value params;    // request, notification: an object, an array or null (absent)
  boost::json::value result;    // response
  std::int64_t error_code = 0;  // error
  std::string error_message;    // error
  boost::json::value error_data;
};

// Errors: corrupt_data ("not JSON: ...", "not a JSON-RPC 2.0 message: ...").
Result<Message> parse(std::string_view line, std::size_t max_depth = 64);

std::string request(const boost::json::value& id, std::string_view method,
                    const boost::json::value& params);
std::string notification(std::string_view method, const boost::json::value& params);
std::string response(const boost::json::value& id, const boost::json::value& result);
std::string error_response(const boost::json::value& id, std::int64_t code,
                           std::string_view message);

// The error response to a line that parse() refused with `why`: -32700 (parse error) with a null
// id when the line is not JSON; else -32600 (invalid request) with the line's own "id" when that
// is a string or an integer, so that the client can match the answer, and null otherwise.
std::string refusal(std::string_view line, const Error& why, std::size_t max_depth = 64);

// The id as people read it: 7, "abc".
std::string id_text(const boost::json::value& id);

}  // namespace weir::tools::jsonrpc
