// Chat messages, tool calls, and the ChatModel interface every agent talks to.
//
// A ChatModel turns a conversation (and the tools on offer) into the next assistant message:
// text, tool calls, or both, with token usage. Implementations: the local adapter on weir's
// engine (one engine per model file, shared by every agent) and a scripted model for tests.
//
// Thread safety: ChatModel implementations must allow concurrent async_chat calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/http/openai.hpp"
#include "weir/runtime/error.hpp"
#include "weir/runtime/trace.hpp"

namespace weir::agents {

struct ToolCall {
  std::string id;  // unique within the conversation ("call_3")
  std::string name;
  boost::json::object arguments;
};

enum class Role { system, user, assistant, tool };
const char* role_name(Role r);
std::optional<Role> parse_role(std::string_view s);

struct Message {
  Role role = Role::user;
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant messages only
  std::string tool_call_id;          // tool messages: the call answered
  std::string name;                  // tool messages: the tool's name; others: the speaker

  static Message system(std::string text) { return {Role::system, std::move(text), {}, {}, {}}; }
  static Message user(std::string text) { return {Role::user, std::move(text), {}, {}, {}}; }
  static Message assistant(std::string text) {
    return {Role::assistant, std::move(text), {}, {}, {}};
  }

  // OpenAI's chat message: the shape of messages in run state (an agent's window, a group
  // chat's transcript, a crew's preamble), written by http::openai::message_json:
  //   {"role", "content", "name"?, "tool_call_id"?,
  //    "tool_calls"?: [{"id", "type": "function", "function": {"name", "arguments": "<JSON>"}}]}
  // (content null when an assistant message only calls tools).
  boost::json::value to_json() const;
  // Reads that shape (errors: invalid_argument naming the field, as weir serve answers a
  // request). Tool calls in the shape weir 0.2 wrote ({"id", "name", "arguments": {...}}) are
  // read too, so its checkpoints resume.
  static Result<Message> from_json(const boost::json::value& v);
};

// The one mapping between weir's messages and OpenAI's wire types (weir/http/openai.hpp):
// requests a remote model is sent, what it answers, what weir serve is sent and answers, and
// messages in run state all go through these. A ToolCall's arguments object becomes its JSON
// text and back.
http::openai::ChatMessage to_openai(const Message& m);
http::openai::ToolCall to_openai(const ToolCall& c);
// Roles read as parse_role does (an unknown one reads as user: the codec has refused it
// already). A tool call weir cannot use (no function name, arguments that are not a JSON
// object) is left out and, when `unusable` is given, the first is described there (an agent
// feeds that back to the model).
Message from_openai(const http::openai::ChatMessage& m, std::string* unusable = nullptr);

// What a tool looks like to a model.
struct ToolSpec {
  std::string name;
  std::string description;
  boost::json::object parameters;  // JSON Schema
};

struct ChatParams {
  std::int32_t max_tokens = 256;
  float temperature = 0.0f;
  std::uint64_t seed = 0;
  std::vector<std::string> stop;
  // The reply is one JSON value valid against this JSON Schema (a task's or an llm node's
  // output_schema). Models that can constrain decoding (LocalChatModel) do so when the turn
  // has no tools; a keyword they cannot enforce is an invalid_argument naming it.
  std::optional<boost::json::object> response_schema;
  // The reply's text as it is generated, in pieces whose concatenation is its content (an llm
  // node's message streamed to a client: NodeContext::message_text). Called from any thread;
  // must be quick. A model that does not stream (a remote one without `stream`; a turn with
  // tools, whose calls are parsed at the end; on a local model one with stop strings, cut at
  // the end) does not call it: the reply comes whole. Empty: not called.
  std::function<void(std::string_view)> on_text;
  // The call's `chat <model>` span (async_traced_chat, chat_trace.hpp), or null: a model adds
  // what only it knows (the engine's timings, a remote endpoint's retries) and a remote model
  // sends the span's W3C context (traceparent). REQUIRES: outlives the call.
  trace::Span* span = nullptr;
};

struct ChatUsage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int64_t cached_prompt_tokens = 0;
};

struct ChatResponse {
  Message message;  // role assistant
  ChatUsage usage;
  std::string finish_reason;  // "stop", "length", "tool_calls", "eos", "cancelled"
  // Set when the model tried to call a tool but the call could not be parsed: the agent loop
  // feeds this back to the model as an error message (and counts an iteration).
  std::optional<std::string> tool_call_error;
};

// A remote model's answer (its first choice) as a ChatResponse, through from_openai: a call
// without an id gets "call_<n>"; calls past kMaxToolCalls are dropped and reported in
// tool_call_error, as are calls from_openai leaves out. Errors: model_error for an answer
// without choices.
inline constexpr std::size_t kMaxToolCalls = 128;
Result<ChatResponse> from_openai(const http::openai::Completion& c);

class ChatModel {
 public:
  virtual ~ChatModel() = default;
  virtual std::string name() const = 0;
  virtual boost::asio::awaitable<Result<ChatResponse>> async_chat(std::vector<Message> messages,
                                                                  std::vector<ToolSpec> tools,
                                                                  ChatParams params) = 0;
  // Tokens in `text` for this model (history windows count with it). Default: ~4 bytes/token.
  virtual std::int64_t count_tokens(std::string_view text) const {
    return static_cast<std::int64_t>(text.size() + 3) / 4;
  }
  // The most tokens a prompt and its reply may hold together (the engine's max_model_len);
  // 0 when unknown. Agents size their history windows to it.
  virtual std::int64_t context_length() const { return 0; }
  // context_length(), learning it first where that takes a request (a remote model asks its
  // server once). Agents await this before sizing a turn's window.
  virtual boost::asio::awaitable<std::int64_t> async_context_length() {
    co_return context_length();
  }
};

}  // namespace weir::agents
