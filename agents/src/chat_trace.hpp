// The one way the agents layer calls a model when a run is traced: inside a `chat <model>`
// span (OpenTelemetry GenAI semantic conventions: gen_ai.operation.name "chat",
// gen_ai.request.model, gen_ai.usage.input_tokens / output_tokens /
// cache_read.input_tokens, gen_ai.response.finish_reasons), with the prompt and the reply as
// gen_ai.input.messages / gen_ai.output.messages only when the tracer captures content. The
// model adds what only it knows through ChatParams::span.
#pragma once

#include <vector>

#include <boost/asio/awaitable.hpp>

#include "weir/agents/chat.hpp"
#include "weir/runtime/trace.hpp"

namespace weir::agents {

// model.async_chat(...) as it is when `trace` is empty; else the same inside its span.
// `purpose` (a static string) names a call that is not the agent's own turn (weir.chat.purpose:
// "summary" for the rolling summary of evicted turns). REQUIRES: `model` outlives the call.
boost::asio::awaitable<Result<ChatResponse>> async_traced_chat(
    ChatModel& model, std::vector<Message> messages, std::vector<ToolSpec> tools, ChatParams params,
    trace::Context trace, const char* purpose = nullptr);

}  // namespace weir::agents
