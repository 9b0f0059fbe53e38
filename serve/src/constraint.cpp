#include "constraint.hpp"

#include <boost/json.hpp>

#include "weir/inference/constraint.hpp"
#include "weir/inference/engine.hpp"
#include "weir/inference/tokenizer.hpp"

namespace weir::serve {

namespace oa = http::openai;

std::string tool_choice_text(const oa::ChatRequest& request) {
  if (request.tool_choice == oa::ToolChoice::named)
    return "tool_choice naming function '" + request.tool_choice_name + "'";
  return "tool_choice 'required'";
}

std::optional<oa::ApiError> make_constraint(const oa::ChatRequest& request,
                                            const inference::Tokenizer& tokenizer,
                                            inference::GenerateRequest& out) {
  if ((request.tool_choice == oa::ToolChoice::required ||
       request.tool_choice == oa::ToolChoice::named) &&
      request.response_format != oa::ResponseFormat::text) {
    return oa::ApiError{400,
                        tool_choice_text(request) +
                            " cannot be combined with a JSON response_format: the reply is a "
                            "tool call, whose arguments follow the tool's parameters",
                        "tool_choice", "invalid_request"};
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

std::optional<oa::ApiError> check_budget(const inference::GenerateRequest& rq,
                                         const ReplyBudget& budget, const std::string& what,
                                         const std::string& value) {
  if (!rq.constraint || !rq.constraint_trigger.empty()) return std::nullopt;
  const std::int32_t need = rq.constraint->min_tokens();
  if (need <= budget.tokens) return std::nullopt;
  const std::string n = std::to_string(need);
  if (budget.max_tokens && *budget.max_tokens <= budget.tokens)
    return oa::ApiError{400,
                        budget.max_tokens_key + "=" + std::to_string(*budget.max_tokens) +
                            " is too few for " + what + ": its shortest valid " + value +
                            " takes " + n + " tokens of this model's vocabulary; raise " +
                            budget.max_tokens_key + " to at least " + n,
                        budget.max_tokens_key, "invalid_request"};
  const std::int64_t room = budget.context - budget.prompt_tokens;
  if (room <= budget.tokens)
    return oa::ApiError{400,
                        "the prompt's " + std::to_string(budget.prompt_tokens) + " tokens leave " +
                            std::to_string(room) + " of the model's context of " +
                            std::to_string(budget.context) + " tokens, too few for " + what +
                            ": its shortest valid " + value + " takes " + n +
                            " tokens of this model's vocabulary; shorten the prompt",
                        "messages", "context_length_exceeded"};
  return oa::ApiError{400,
                      "the reply may have " + std::to_string(budget.tokens) +
                          " tokens (the server's --default-max-tokens), too few for " + what +
                          ": its shortest valid " + value + " takes " + n +
                          " tokens of this model's vocabulary; set max_tokens to at least " + n,
                      "max_tokens", "invalid_request"};
}

}  // namespace weir::serve
