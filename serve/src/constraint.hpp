// The one seam between serve and constrained decoding (structured output).
//
// response_format json_object / json_schema constrain sampling through inference's
// constraint.hpp (compile_constraint(spec, tokenizer), cached; GenerateRequest::constraint): the
// output always parses, and validates against the schema, within the reply's tokens (the
// budget rule); a reply too short for any valid value is a 400 naming both numbers
// (check_budget). A schema keyword weir cannot enforce is a 400 naming it and its pointer.
// tool_choice "required" / a named function with a JSON response_format is a 400 (the tool
// call's constraint is set by the chat route, from the model's tool-call format); every other
// request goes through untouched.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "weir/http/openai.hpp"

namespace weir::inference {
struct GenerateRequest;
class Tokenizer;
}  // namespace weir::inference

namespace weir::serve {

// A forced tool_choice as errors name it: "tool_choice 'required'", "tool_choice naming
// function 'f'".
std::string tool_choice_text(const http::openai::ChatRequest& request);

// Sets out.constraint for requests that need one; returns
// the error to send when the request cannot be served. A request needing no constraint
// (response_format text, tool_choice auto/none) returns nullopt and leaves `out` unchanged.
std::optional<http::openai::ApiError> make_constraint(const http::openai::ChatRequest& request,
                                                      const inference::Tokenizer& tokenizer,
                                                      inference::GenerateRequest& out);

// What limits a reply's tokens, for the budget check's message.
struct ReplyBudget {
  std::int32_t tokens = 0;                 // the reply's most tokens (max_new_tokens)
  std::optional<std::int64_t> max_tokens;  // as the client sent it
  std::int64_t prompt_tokens = 0, context = 0;
  std::string max_tokens_key = "max_tokens";  // or max_completion_tokens, as sent
};

// A constraint that starts at once (response_format, a forced tool call) must fit the reply:
// a 400 naming both numbers, the fewest tokens of this vocabulary its shortest valid value
// takes and the budget, when it cannot (`what`: "the response_format's schema", "tool_choice
// 'required'"; `value`: "value", "call"). nullopt when it fits or `rq` has no such constraint.
std::optional<http::openai::ApiError> check_budget(const inference::GenerateRequest& rq,
                                                   const ReplyBudget& budget,
                                                   const std::string& what,
                                                   const std::string& value);

}  // namespace weir::serve
