// Finds tool calls in a model's text output.
//
// Small local models write tool calls in a few common shapes; all are accepted:
//   <tool_call>{"name": "search", "arguments": {"query": "kv cache"}}</tool_call>   (Hermes, Qwen)
//   ```json\n{"tool": "search", "args": {"query": "kv cache"}}\n```                  (fenced)
//   {"name": "search", "arguments": {...}}                                           (bare JSON)
// Keys: "name" | "tool" | "function" for the name; "arguments" | "args" | "parameters" | "input"
// for the arguments (an object, or a string holding a JSON object). Several calls may appear.
// Text outside the calls is returned as the message content.
//
// A call that is recognisably attempted but malformed (bad JSON inside <tool_call>, a missing
// name, arguments that are not an object, an unknown tool) yields an error message written for
// the model ("tool call 1: ... at line 1 column 18; answer with ..."), which the agent loop feeds
// back so the model can correct itself.
//
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weir/agents/chat.hpp"

namespace weir::agents {

struct ParsedToolCalls {
  std::string content;               // the text with the calls removed (trimmed)
  std::vector<ToolCall> calls;       // ids "call_<n>" numbered from `first_id`
  std::optional<std::string> error;  // set when an attempted call was malformed
};

// `known_tools`: when not empty, a call naming another tool is an error listing the known ones.
ParsedToolCalls parse_tool_calls(std::string_view text, const std::vector<std::string>& known_tools,
                                 int first_id = 1);

}  // namespace weir::agents
