// A tool call streamed as OpenAI's tool-call deltas while it is generated.
//
// With tool_choice "required" or a named function the reply is one call, constrained to
// `{"name": "<tool>", "arguments": {...}}` (one optional space around `:` and `,`). As its text
// arrives, the first delta goes out once the name is complete and "arguments" has begun: the
// call's index, id, type "function" and full name, with arguments "". Every later delta holds
// only the index and the next fragment of the arguments' JSON text, up to the brace that
// closes them; the fragments concatenate to that text, which is valid JSON (the constraint
// made it so). This is what the official clients' stream helpers and LangChain's chunk
// concatenation assemble.
//
// Thread safety: a value used by one thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "weir/http/openai.hpp"

namespace weir::serve {

class CallStream {
 public:
  CallStream(std::string id, int index) : id_(std::move(id)), index_(index) {}

  // The call's deltas that `text` (the next generated text) completes; none while the name
  // is not known yet.
  std::vector<http::openai::ToolCall> push(std::string_view text);
  // The arguments' closing brace has arrived.
  bool complete() const { return state_ == State::done; }
  // The first delta has gone out.
  bool started() const { return state_ != State::head; }

 private:
  enum class State { head, arguments, done };
  std::string id_;
  int index_;
  State state_ = State::head;
  std::string head_;  // the text before the arguments, until the name is known
  // The arguments' JSON scanned so far: nesting depth, inside a string, after a backslash.
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false;
};

}  // namespace weir::serve
