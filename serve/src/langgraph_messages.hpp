// Chat messages between LangChain's shape (what the LangGraph SDKs and Agent Chat UI send and
// read: {"type": "human" | "ai" | "tool" | "system", "content", "id", "tool_calls": [{"id",
// "name", "args": {...}}], "tool_call_id"}) and weir's one message shape in run state (OpenAI's
// chat message, http/openai.hpp message_json: docs/agents.md "Messages"). Both directions go
// through the OpenAI codec (parse_message, message_json), so a message that codec refuses is
// refused here too. A message's LangChain "id" is kept in weir's state next to it and given back;
// a message without one is given a stable id (its text and position among equal messages).
// No Asio: fuzzed with the request bodies (fuzz_langgraph_request).
//
// Which values are messages: in input, a messages channel's value (with the workflow given:
// a list, one message or a text, each item checked: LangChain's shape, OpenAI's, or a text for a
// human message), else a list whose items all have a LangChain "type"; in state, a list holding
// an object with an OpenAI "role" (its other items shown as they are). Any other value passes
// unchanged.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string_view>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/runtime/error.hpp"

namespace weir::graph {
struct WorkflowSpec;
}  // namespace weir::graph

namespace weir::serve {

// A run's input (channel -> value) with its LangChain message lists turned into weir's.
// `spec` (may be null): the workflow, whose messages channels take messages only. `field`: how
// errors name the value ("input", "values", "command.update").
// Errors: invalid_argument naming the message ("'input.messages[1]': ...").
Result<boost::json::object> input_from_langchain(const boost::json::object& input,
                                                 const graph::WorkflowSpec* spec = nullptr,
                                                 std::string_view field = "input");

// True when `v` is a list of weir's messages (objects with an OpenAI "role").
bool is_message_list(const boost::json::value& v);

// State values (channel -> value) with weir's message lists shown in LangChain's shape.
boost::json::object values_to_langchain(const boost::json::object& values);

// A piece of an AI message's text as LangChain's AIMessageChunk (what a token stream sends):
// {"type": "AIMessageChunk", "content": text, "id", "name": null, "tool_calls": [],
//  "tool_call_chunks": [], ...}.
boost::json::object ai_chunk_to_langchain(std::string_view id, std::string_view text);

}  // namespace weir::serve
