// The one seam between serve and constrained decoding (structured output).
//
// response_format json_object / json_schema constrain sampling through inference's
// constraint.hpp (compile_constraint(spec, tokenizer), cached; GenerateRequest::constraint): the
// output always parses, and validates against the schema. A schema keyword weir cannot enforce
// is a 400 naming it and its pointer. tool_choice "required" / a named function with a JSON
// response_format is a 400 (the tool call's constraint is set by the chat route, from the
// model's tool-call format); every other request goes through untouched.
#pragma once

#include <optional>

#include "weir/http/openai.hpp"

namespace weir::inference {
struct GenerateRequest;
class Tokenizer;
}  // namespace weir::inference

namespace weir::serve {

// Sets out.constraint for requests that need one; returns
// the error to send when the request cannot be served. A request needing no constraint
// (response_format text, tool_choice auto/none) returns nullopt and leaves `out` unchanged.
std::optional<http::openai::ApiError> make_constraint(const http::openai::ChatRequest& request,
                                                      const inference::Tokenizer& tokenizer,
                                                      inference::GenerateRequest& out);

}  // namespace weir::serve
