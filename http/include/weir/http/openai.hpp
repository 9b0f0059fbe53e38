// OpenAI's wire format, defined once for both directions on one set of plain structs:
//
//   a server (weir serve)    parses requests  (parse_chat_request, parse_completion_request)
//                            builds responses (chat_completion, chat_chunk, completion, ...)
//   a client (remote models) builds requests  (chat_request_body, completion_request_body)
//                            parses responses (parse_chat_completion, parse_completion,
//                            StreamAssembler for the chunks of a stream, parse_error_body)
//
// so that what one side writes the other reads back field for field (tests/http/
// openai_codec_test.cpp runs every shape through both directions). One message on its own
// (message_json / parse_message) is also the shape weir keeps chat messages in run state.
//
// Request parsing is strict about what a field means: a known field with a wrong type or an
// out-of-range value is a 400 naming the field (`param`), and so is a known OpenAI field that
// would change the result but is not implemented (chat: logit_bias, audio, modalities other
// than ["text"], functions, function_call, reasoning_effort, verbosity, web_search_options, and
// a message's function_call or audio; completions: logit_bias, suffix, best_of above 1), unless
// it is null or empty. OpenAI's fields that change nothing in the answer (user, metadata, store,
// service_tier, prompt_cache_key, safety_identifier, prediction, parallel_tool_calls: weir
// answers with at most one tool call a turn) and unknown fields are ignored. Tool names are
// checked as OpenAI checks them (^[a-zA-Z0-9_-]{1,64}$, unique). Malformed JSON is a 400 with
// line and column. Response parsing is lenient where servers differ
// (arguments sent as an object, a missing tool-call index) and strict where memory is at stake
// (indexes are capped).
//
// No Asio here: the fuzz targets compile this code alone. Thread safety: pure functions and
// values; a StreamAssembler is used by one caller at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/runtime/error.hpp"

namespace weir::http::openai {

// An error answer: the HTTP status and OpenAI's error fields.
struct ApiError {
  int status = 400;
  std::string message;  // what to change
  std::string param;    // the offending field ("messages[2].role"); may be empty
  std::string code;     // e.g. "context_length_exceeded"; may be empty
  // {"error": {"message", "type", "param", "code"}}
  std::string body() const;
  bool operator==(const ApiError&) const = default;
};

// A server's error body read back: {"error": {"message", "param", "code"}}, {"error": "..."} or
// {"message": ...}; any other body becomes the message (its first 300 bytes, on one line).
ApiError parse_error_body(int status, std::string_view body);

// --- messages (requests, responses and run state) -------------------------------------------

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text, as OpenAI sends it
  // In a stream's delta: the call's index (-1: its position in the chunk), and an empty id or
  // name is left out (a call's later deltas carry only a fragment of its arguments).
  int index = -1;
  bool operator==(const ToolCall&) const = default;
};

struct ChatMessage {
  std::string role;     // system | user | assistant | tool ("developer" reads as system)
  std::string content;  // text parts concatenated
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;          // tool
  std::string name;
  bool operator==(const ChatMessage&) const = default;
};

// {"role", "content", "name"?, "tool_call_id"?, "tool_calls"?: [{"id", "type": "function",
// "function": {"name", "arguments"}}]}; content is null for an assistant message that only
// calls tools, as OpenAI writes it.
boost::json::object message_json(const ChatMessage& m);
// One message as parse_chat_request reads it; `where` names it in errors ("messages[2]").
// An assistant's tool call needs a function name and arguments that are a JSON object (as text,
// or an object); "" or null arguments read as "{}".
std::optional<ApiError> parse_message(const boost::json::value& v, std::string_view where,
                                      ChatMessage& out);

// --- requests -------------------------------------------------------------------------------

// Whether OpenAI accepts `name` as a tool's name: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'.
bool valid_tool_name(std::string_view name);

struct Tool {
  std::string name;  // valid_tool_name
  std::string description;
  boost::json::object
      parameters;  // JSON Schema; none (or {}) reads and is sent as {"type": "object"}
  bool operator==(const Tool&) const = default;
};

enum class ToolChoice { automatic, none, required, named };
enum class ResponseFormat { text, json_object, json_schema };

// How a client spelled a field that has two names: for messages only, not part of what the
// request means (== ignores it, so a request reads as its canonical form).
struct Spelling {
  std::string name;
  bool operator==(const Spelling&) const { return true; }
};

// Fields shared by chat and text completions.
struct Sampling {
  std::optional<std::int64_t> max_tokens;  // max_tokens or max_completion_tokens
  Spelling max_tokens_key{"max_tokens"};   // the one the request sent
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
  // Not OpenAI's: the sampling extensions vLLM and llama.cpp's server take, read so that a
  // client written for them is not silently ignored. Unset: the server's default (off).
  std::optional<std::int32_t> top_k;        // top_k; 0 (or -1 on the wire, vLLM's form): off
  std::optional<float> min_p;               // min_p in [0, 1]; 0: off
  std::optional<float> repetition_penalty;  // above 0; 1: off
  bool operator==(const Sampling&) const = default;
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
  bool operator==(const ChatRequest&) const = default;
};

struct CompletionRequest {
  std::string model;
  bool prompt_is_tokens = false;
  std::string prompt;                       // when !prompt_is_tokens
  std::vector<std::int32_t> prompt_tokens;  // when prompt_is_tokens
  bool echo = false;
  Sampling sampling;
  bool operator==(const CompletionRequest&) const = default;
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

// The bodies a client sends. A field at OpenAI's default is left out, except `temperature`,
// which is always sent (a server's own default may differ: vLLM's is the model's); `max_tokens`
// is sent under that name (every server knows it). tool_choice is sent with tools, or when not
// automatic. The extensions (top_k, min_p, repetition_penalty) are sent only when set.
std::string chat_request_body(const ChatRequest& r);
std::string completion_request_body(const CompletionRequest& r);

// --- responses ------------------------------------------------------------------------------

struct TopLogprob {
  std::string token;  // the token's text (bytes as the tokenizer has them)
  float logprob = 0;
  bool operator==(const TopLogprob&) const = default;
};
struct TokenLogprobs {
  std::string token;
  float logprob = 0;
  std::vector<TopLogprob> top;
  bool operator==(const TokenLogprobs&) const = default;
};

struct Choice {
  int index = 0;
  std::string text;                  // chat: message content; completions: text
  std::vector<ToolCall> tool_calls;  // chat only
  std::string finish_reason;         // stop | length | tool_calls | ... ; "" in a mid-stream chunk
  std::optional<std::vector<TokenLogprobs>> logprobs;
  // Completions: where `text` starts in the choice's whole text (an echoed prompt before it, a
  // stream's earlier chunks), the base of logprobs.text_offset. Written, not read.
  std::size_t text_offset = 0;
  bool operator==(const Choice&) const = default;
};

struct Usage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int64_t cached_tokens = 0;
  bool operator==(const Usage&) const = default;
};

struct Envelope {
  std::string id;  // "chatcmpl-..." / "cmpl-..."
  std::int64_t created = 0;
  std::string model;
  bool operator==(const Envelope&) const = default;
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

// A whole response read back (or a stream assembled).
struct Completion {
  Envelope envelope;
  std::vector<Choice> choices;  // in index order
  std::optional<Usage> usage;   // absent when the server sent none
  bool operator==(const Completion&) const = default;
};

// The assistant message of a chat choice.
ChatMessage assistant_message(const Choice& c);

// A chat.completion / text_completion body read back. A tool call is kept as sent (arguments
// sent as an object become its JSON text; one without a function or name keeps an empty name:
// the caller decides); a refusal with no content becomes the text. Errors: model_error for a
// body that is not JSON ("chat completion:1:2: ..."), has no choices, or a chat choice without a
// message.
Result<Completion> parse_chat_completion(std::string_view body);
Result<Completion> parse_completion(std::string_view body);

// Assembles a streamed response from its SSE events' data: chat.completion.chunk or
// text_completion chunks, then "[DONE]". Per choice, text and tool-call fragments are
// concatenated in arrival order (a tool call keyed by its `index`, else by its place in the
// delta), a call's id is its last non-empty one, the finish reason is kept, usage comes from any
// chunk that carries it.
class StreamAssembler {
 public:
  static constexpr std::size_t kMaxChoices = 128;
  static constexpr std::size_t kMaxToolCalls = 128;  // per choice

  // Errors (model_error): a chunk that is not a JSON object, one that carries an "error" (its
  // message), a choice or tool-call index past the caps.
  Status add(std::string_view data);
  bool done() const noexcept { return done_; }  // "[DONE]" arrived
  // Every choice seen has its finish_reason (a stream that ended without "[DONE]" is complete).
  bool finished() const noexcept;
  // A token arrived: text or a tool-call fragment, not only a role.
  bool has_tokens() const noexcept { return tokens_; }
  // The text of choice `index` so far ("" before any).
  std::string_view text(std::size_t index = 0) const noexcept {
    return index < parts_.size() ? std::string_view(parts_[index].text) : std::string_view();
  }
  // What arrived so far, choices in index order (a call slot that never got a fragment is left
  // out).
  Completion finish() const;

 private:
  struct Part {
    bool seen = false;
    std::string text, refusal, finish_reason;
    std::vector<ToolCall> calls;
    std::vector<bool> call_seen;
    std::optional<std::vector<TokenLogprobs>> logprobs;
  };
  Envelope envelope_;
  std::vector<Part> parts_;  // by choice index
  std::optional<Usage> usage_;
  bool done_ = false;
  bool tokens_ = false;
};

}  // namespace weir::http::openai
