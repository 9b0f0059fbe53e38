#include "chat_trace.hpp"

#include <boost/json.hpp>

namespace weir::agents {

namespace json = boost::json;
namespace asio = boost::asio;

namespace {

std::string messages_json(const std::vector<Message>& ms) {
  json::array a;
  for (const auto& m : ms) a.push_back(m.to_json());
  return json::serialize(a);
}

asio::awaitable<Result<ChatResponse>> chat_in_span(ChatModel& model, std::vector<Message> messages,
                                                   std::vector<ToolSpec> tools, ChatParams params,
                                                   trace::Context trace, const char* purpose) {
  const std::string name = model.name();
  trace::Span span = trace.start("chat " + name, trace::SpanKind::client);
  span.set(trace::attr::kOperation, "chat");
  span.set(trace::attr::kRequestModel, name);
  span.set("gen_ai.request.max_tokens", params.max_tokens);
  span.set("gen_ai.request.temperature", static_cast<double>(params.temperature));
  span.set("gen_ai.request.seed", static_cast<std::int64_t>(params.seed));
  span.set("weir.request.messages", messages.size());
  if (purpose) span.set("weir.chat.purpose", purpose);
  if (!tools.empty()) span.set("weir.request.tools", tools.size());
  if (params.response_schema) span.set("gen_ai.output.type", "json");
  if (span.capture_content()) span.set_content("gen_ai.input.messages", messages_json(messages));
  params.span = &span;
  auto op = model.async_chat(std::move(messages), std::move(tools), params);
  Result<ChatResponse> r = co_await std::move(op);
  // Ended here, not with the frame: Asio frees a coroutine's frame when its awaitable is
  // destroyed, which the caller may keep to the end of its own scope.
  if (!r) {
    span.set_error(r.error());
    span.end();
    co_return r;
  }
  span.set(trace::attr::kInputTokens, r->usage.prompt_tokens);
  span.set(trace::attr::kOutputTokens, r->usage.completion_tokens);
  span.set(trace::attr::kCachedInputTokens, r->usage.cached_prompt_tokens);
  span.set(trace::attr::kFinishReasons, std::vector<std::string>{r->finish_reason});
  if (!r->message.tool_calls.empty())
    span.set("weir.response.tool_calls", r->message.tool_calls.size());
  if (r->tool_call_error)
    span.add_event("weir.tool_call_malformed", {{"weir.error", *r->tool_call_error}});
  if (span.capture_content())
    span.set_content("gen_ai.output.messages", messages_json({r->message}));
  span.set_ok();
  span.end();
  co_return r;
}

}  // namespace

asio::awaitable<Result<ChatResponse>> async_traced_chat(ChatModel& model,
                                                        std::vector<Message> messages,
                                                        std::vector<ToolSpec> tools,
                                                        ChatParams params, trace::Context trace,
                                                        const char* purpose) {
  if (!trace) return model.async_chat(std::move(messages), std::move(tools), std::move(params));
  return chat_in_span(model, std::move(messages), std::move(tools), std::move(params),
                      std::move(trace), purpose);
}

}  // namespace weir::agents
