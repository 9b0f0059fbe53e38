#include "constraint.hpp"

#include <boost/json.hpp>

#include "weir/inference/constraint.hpp"
#include "weir/inference/engine.hpp"
#include "weir/inference/tokenizer.hpp"

namespace weir::serve {

namespace oa = http::openai;

std::optional<oa::ApiError> make_constraint(const oa::ChatRequest& request,
                                            const inference::Tokenizer& tokenizer,
                                            inference::GenerateRequest& out) {
  if (request.tool_choice == oa::ToolChoice::required ||
      request.tool_choice == oa::ToolChoice::named) {
    const std::string what = request.tool_choice == oa::ToolChoice::required
                                 ? "tool_choice 'required'"
                                 : "tool_choice naming function '" + request.tool_choice_name + "'";
    return oa::ApiError{400,
                        what +
                            " is not supported yet (use 'auto': tool calls are still parsed "
                            "into tool_calls)",
                        "tool_choice", "unsupported"};
  }
  inference::ConstraintSpec spec;
  switch (request.response_format) {
    case oa::ResponseFormat::text:
      return std::nullopt;
    case oa::ResponseFormat::json_object:
      spec.kind = inference::ConstraintSpec::Kind::json_object;
      break;
    case oa::ResponseFormat::json_schema: {
      // {"name", "schema", "strict"}: the schema itself; none means any JSON object.
      const auto* o = request.json_schema.if_object();
      const auto* schema = o ? o->if_contains("schema") : nullptr;
      if (!schema) {
        spec.kind = inference::ConstraintSpec::Kind::json_object;
        break;
      }
      spec.kind = inference::ConstraintSpec::Kind::json_schema;
      spec.text = boost::json::serialize(*schema);
      break;
    }
  }
  // Compiled once per schema and vocabulary (compile_constraint caches); a keyword weir cannot
  // enforce is refused here, naming it and its JSON pointer, never ignored.
  auto c = inference::compile_constraint(spec, tokenizer);
  if (!c) return oa::ApiError{400, c.error().message, "response_format", "invalid_schema"};
  out.constraint = std::move(*c);
  return std::nullopt;
}

}  // namespace weir::serve
