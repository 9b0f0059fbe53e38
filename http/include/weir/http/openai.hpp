// OpenAI's wire format, defined once: request bodies parsed into plain structs (with errors in
// OpenAI's shape that say what to change) and response bodies built from plain structs. Both
// the server (serve/) and a later HTTP chat-model client use these.
//
// Parsing is strict about what a field means and lenient about what it does not know: unknown
// fields are ignored; a known field with a wrong type or an out-of-range value is a 400 naming
// the field (`param`). Malformed JSON is a 400 with line and column.
//
// Thread safety: pure functions and values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

namespace weir::http::openai {

// An error answer: the HTTP status and OpenAI's error fields.
struct ApiError {
  int status = 400;
  std::string message;  // what to change
  std::string param;    // the offending field ("messages[2].role"); may be empty
  std::string code;     // e.g. "context_length_exceeded"; may be empty
  // {"error": {"message", "type", "param", "code"}}
  std::string body() const;
};

// --- requests -------------------------------------------------------------------------------

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text, as OpenAI sends it
  // In a stream's delta: the call's index (-1: its position in the chunk), and an empty id or
  // name is left out (a call's later deltas carry only a fragment of its arguments).
  int index = -1;
};

struct ChatMessage {
  std::string role;                  // system | developer | user | assistant | tool
  std::string content;               // text parts concatenated
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;          // tool
  std::string name;
};

struct Tool {
  std::string name;
  std::string description;
  boost::json::object parameters;  // JSON Schema
};

enum class ToolChoice { automatic, none, required, named };
enum class ResponseFormat { text, json_object, json_schema };

// Fields shared by chat and text completions.
struct Sampling {
  std::optional<std::int64_t> max_tokens;  // max_tokens or max_completion_tokens
  float temperature = 1.0f;                // OpenAI's default
  float top_p = 1.0f;
  std::optional<std::uint64_t> seed;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<std::string> stop;  // up to 4
  int n = 1;                      // 1..max_n
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Chat: logprobs (bool) + top_logprobs (0..20) -> -1 off, else top count.
  // Completions: logprobs (int 0..5) -> the same.
  int logprobs = -1;
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  std::vector<Tool> tools;
  ToolChoice tool_choice = ToolChoice::automatic;
  std::string tool_choice_name;  // ToolChoice::named
  ResponseFormat response_format = ResponseFormat::text;
  boost::json::value json_schema;  // response_format.json_schema (json_schema only)
  Sampling sampling;
};

struct CompletionRequest {
  std::string model;
  bool prompt_is_tokens = false;
  std::string prompt;                       // when !prompt_is_tokens
  std::vector<std::int32_t> prompt_tokens;  // when prompt_is_tokens
  bool echo = false;
  Sampling sampling;
};

struct Limits {
  int max_n = 8;
  int max_top_logprobs = 20;
  std::size_t max_stop = 4;
  std::size_t max_messages = 4096;
};

// Each returns nullopt on success. `body`: the raw request body.
std::optional<ApiError> parse_chat_request(std::string_view body, ChatRequest& out,
                                           const Limits& limits = {});
std::optional<ApiError> parse_completion_request(std::string_view body, CompletionRequest& out,
                                                 const Limits& limits = {});
// The body as a JSON object, or a 400 (malformed JSON with line and column; not an object).
std::optional<ApiError> parse_object(std::string_view body, boost::json::object& out);

// --- responses ------------------------------------------------------------------------------

struct TopLogprob {
  std::string token;  // the token's text (bytes as the tokenizer has them)
  float logprob = 0;
};
struct TokenLogprobs {
  std::string token;
  float logprob = 0;
  std::vector<TopLogprob> top;
};

struct Choice {
  int index = 0;
  std::string text;                  // chat: message content; completions: text
  std::vector<ToolCall> tool_calls;  // chat only
  std::string finish_reason;         // stop | length | tool_calls | ... ; "" in a mid-stream chunk
  std::optional<std::vector<TokenLogprobs>> logprobs;
};

struct Usage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int64_t cached_tokens = 0;
};

struct Envelope {
  std::string id;  // "chatcmpl-..." / "cmpl-..."
  std::int64_t created = 0;
  std::string model;
};

boost::json::object usage_json(const Usage& u);
// A whole chat.completion.
std::string chat_completion(const Envelope& e, const std::vector<Choice>& choices, const Usage& u);
// One chat.completion.chunk: `role` set on a choice's first chunk; text/tool_calls as deltas.
// A chunk with no choices and `usage` set is the stream's final usage chunk.
std::string chat_chunk(const Envelope& e, const std::vector<Choice>& choices, bool with_role,
                       const Usage* usage = nullptr);
std::string completion(const Envelope& e, const std::vector<Choice>& choices, const Usage& u);
std::string completion_chunk(const Envelope& e, const std::vector<Choice>& choices,
                             const Usage* usage = nullptr);

}  // namespace weir::http::openai
