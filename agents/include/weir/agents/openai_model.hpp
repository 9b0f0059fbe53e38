// OpenAIChatModel: a ChatModel on any OpenAI-compatible endpoint (OpenAI, vLLM, llama.cpp's
// server, Ollama's /v1, `weir serve`), over weir::http.
//
// POST {base_url}/chat/completions with the conversation (system, user, assistant with
// tool_calls, tool results as role "tool" with tool_call_id), `tools` in OpenAI's function
// format, `tool_choice`, temperature, seed, max_tokens, stop; optionally streamed (SSE deltas
// assembled into one message). Bodies are written and read by the OpenAI codec
// (weir/http/openai.hpp) and mapped to weir's messages by agents::to_openai / from_openai
// (chat.hpp). Tool calls come back as weir ToolCalls; arguments that are not a JSON object
// become ChatResponse::tool_call_error for the agent loop to feed back.
//
// Several endpoints for one model (more_base_urls): least-outstanding balancing with prefix
// affinity, failover and a circuit breaker per endpoint (see OpenAIModelOptions).
//
// Fences (per model object, all its endpoints together):
//   max_concurrency / max_queued   requests in flight, then a bounded queue, then overloaded
//   requests_per_minute            token bucket (burst = one minute's worth); 0 = off
//   max_retries, backoff, Retry-After, retry_budget  on 429, 500, 502, 503, 504 and connection
//                                  errors; exponential backoff with jitter, Retry-After honoured
//   timeout                        the whole call: every attempt and wait, from its first
//                                  attempt's start; deadline_exceeded past it
//   attempt_timeout                with an endpoint not tried yet, an attempt that has not begun
//                                  to answer by then (no byte of a JSON answer, no token of a
//                                  stream) is sent to that endpoint at once
//   connect_timeout / max_response_bytes   as in weir::http::Client
// A stream request answered with one JSON body (a server that ignores `stream: true`) is read
// as the whole answer; a 2xx answer that is neither is a model_error, not retried.
//
// Every failure is an Error whose message starts "openai <base_url>: " (the endpoint of the
// last attempt), e.g.
//   "openai http://127.0.0.1:8080/v1: 503 Service Unavailable after 3 attempts: <server's message>"
// codes: overloaded (429 or the queue), model_error (5xx, a bad body), invalid_argument (400,
// 401, 403, 422), not_found (404), io_error (connection), deadline_exceeded, cancelled,
// memory_budget_exceeded (response over max_response_bytes).
//
// The API key is read from the environment variable named by api_key_env when the model is
// opened, never from a file; it is sent as "Authorization: Bearer ..." and never logged.
//
// Thread safety: async_chat may be called concurrently from any coroutines; the model must
// outlive the calls it started. It may outlive the execution contexts it ran on.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weir/agents/chat.hpp"

namespace weir::agents {

struct OpenAIModelOptions {
  std::string base_url;  // "http://127.0.0.1:8080/v1"
  // More endpoints serving the same model (base_url is the first): requests go to the endpoint
  // with the fewest outstanding requests, except that a prompt goes where prompts that start
  // the same went (its prefix cache) while that endpoint is healthy and not more than
  // affinity_slack requests busier than the least busy one. A retryable failure is retried on
  // another endpoint at once. An endpoint that fails breaker_failures times in a row is
  // skipped for breaker_cooldown, then probed by one request.
  std::vector<std::string> more_base_urls;
  std::size_t affinity_slack = 4;
  std::int32_t breaker_failures = 3;
  std::chrono::milliseconds breaker_cooldown{5'000};
  std::string model;        // the "model" field sent
  std::string api_key_env;  // environment variable holding the key; "" = no key
  std::size_t max_concurrency = 32;
  std::size_t max_queued = 1024;
  double requests_per_minute = 0;  // 0: no rate limit
  std::int32_t max_retries = 3;    // attempts = max_retries + 1
  std::chrono::milliseconds initial_backoff{500};
  std::chrono::milliseconds max_backoff{20'000};   // one wait, Retry-After included
  std::chrono::milliseconds retry_budget{60'000};  // all waits of one request together
  std::chrono::milliseconds timeout{60'000};       // the whole call, every attempt and wait
  // An attempt that has not begun to answer by then moves to an endpoint not tried yet (when
  // there is one); 0: timeout shared evenly among the endpoints one call may try.
  std::chrono::milliseconds attempt_timeout{0};
  std::chrono::milliseconds connect_timeout{10'000};
  std::size_t max_response_bytes = 16u << 20;
  bool stream = false;               // ask for SSE and assemble the deltas
  std::string tool_choice = "auto";  // "auto", "none", "required" (sent only with tools)
  // The model's context in tokens, reported to agents (they size their windows to it); 0: ask
  // the server (GET /models), once.
  std::int64_t context_length = 0;
};

class OpenAIChatModel final : public ChatModel {
 public:
  // Errors: invalid_argument (a bad base_url, an empty model, api_key_env naming an unset
  // variable, a zero limit).
  static Result<std::shared_ptr<OpenAIChatModel>> open(OpenAIModelOptions options);
  ~OpenAIChatModel() override;

  std::string name() const override;
  boost::asio::awaitable<Result<ChatResponse>> async_chat(std::vector<Message> messages,
                                                          std::vector<ToolSpec> tools,
                                                          ChatParams params) override;
  // The context: options.context_length when set, else what the server published at
  // GET {base_url}/models for this model (max_model_len, as vLLM and weir serve publish it, or
  // context_length), asked once by async_context_length; 0 until known or when not published.
  std::int64_t context_length() const override;
  boost::asio::awaitable<std::int64_t> async_context_length() override;
  // Bytes / the bytes one of the server's tokens holds: 4 until learned, from the server's
  // POST /tokenize (weir serve, vLLM) of a sample text when async_context_length asks, and from
  // every answer's usage.prompt_tokens against the prompt's bytes (never counting fewer tokens
  // than the server did, its chat template included).
  std::int64_t count_tokens(std::string_view text) const override;

  // The JSON body sent for a conversation (exposed for tests).
  std::string request_body(const std::vector<Message>& messages, const std::vector<ToolSpec>& tools,
                           const ChatParams& params) const;

  struct Impl;
  explicit OpenAIChatModel(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// "openai:http://host:8080/v1/MODEL": the base URL and the model (the last path segment), the
// key from $OPENAI_API_KEY when that is set (the --model form of the command line).
// Errors: invalid_argument naming the expected form.
Result<OpenAIModelOptions> parse_openai_model_ref(std::string_view ref);

}  // namespace weir::agents
