// OpenAI requests: bodies parsed into the codec's structs, with errors that name the field.
#include "weir/http/openai.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <boost/json.hpp>

#include "weir/http/error_body.hpp"
#include "weir/runtime/json_fields.hpp"
#include "weir/runtime/json_parse.hpp"

namespace weir::http::openai {

namespace json = boost::json;

std::string ApiError::body() const {
  return error_json(message, error_type_for_status(status), param, code);
}

namespace {

ApiError bad(std::string param, std::string message) {
  return ApiError{400, std::move(message), std::move(param), {}};
}

// What a value was, for a 400: runtime's phrase, except that OpenAI's API has no integers apart
// from numbers ("must be a string, not a number").
const char* kind(const json::value& v) {
  return v.is_number() ? "a number" : json_kind_phrase(v);
}

std::string num_text(double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", d);
  return buf;
}

// Reads an optional number field within [lo, hi].
std::optional<ApiError> number(const json::object& o, const char* key, double lo, double hi,
                               std::optional<double>& out) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_number())
    return bad(key, std::string("'") + key + "' must be a number, not " + kind(*v));
  double d = v->to_number<double>();
  if (!(d >= lo && d <= hi))
    return bad(key, std::string("'") + key + "' must be between " + num_text(lo) + " and " +
                        num_text(hi) + ", got " + json::serialize(*v));
  out = d;
  return std::nullopt;
}

std::optional<ApiError> integer(const json::object& o, const char* key, std::int64_t lo,
                                std::int64_t hi, std::optional<std::int64_t>& out) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_int64() && !v->is_uint64() &&
      !(v->is_double() && std::floor(v->as_double()) == v->as_double()))
    return bad(key, std::string("'") + key + "' must be an integer, not " + kind(*v));
  double d = v->to_number<double>();
  if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi)))
    return bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " +
                        std::to_string(hi) + ", got " + json::serialize(*v));
  out = static_cast<std::int64_t>(d);
  return std::nullopt;
}

std::optional<ApiError> boolean(const json::object& o, const char* key, bool& out) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_bool()) return bad(key, std::string("'") + key + "' must be true or false");
  out = v->as_bool();
  return std::nullopt;
}

std::optional<ApiError> string_field(const json::object& o, const char* key, std::string& out,
                                     bool required) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) {
    if (required) return bad(key, std::string("'") + key + "' is required");
    return std::nullopt;
  }
  if (!v->is_string())
    return bad(key, std::string("'") + key + "' must be a string, not " + kind(*v));
  out = v->as_string();
  return std::nullopt;
}

std::optional<ApiError> parse_sampling(const json::object& o, Sampling& s, const Limits& lim) {
  std::optional<double> d;
  std::optional<std::int64_t> i;
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    i.reset();
    if (auto e = integer(o, key, 1, std::int64_t{1} << 40, i)) return e;
    if (i) {
      s.max_tokens = *i;
      s.max_tokens_key.name = key;
      break;
    }
  }
  if (auto e = number(o, "temperature", 0, 2, d)) return e;
  if (d) s.temperature = static_cast<float>(*d);
  d.reset();
  if (auto e = number(o, "top_p", 0, 1, d)) return e;
  if (d) {
    if (*d <= 0) return bad("top_p", "'top_p' must be above 0 (1 turns it off), got 0");
    s.top_p = static_cast<float>(*d);
  }
  d.reset();
  if (auto e = number(o, "presence_penalty", -2, 2, d)) return e;
  if (d) s.presence_penalty = static_cast<float>(*d);
  d.reset();
  if (auto e = number(o, "frequency_penalty", -2, 2, d)) return e;
  if (d) s.frequency_penalty = static_cast<float>(*d);
  i.reset();
  if (const auto* v = o.if_contains("seed"); v && !v->is_null()) {
    if (v->is_int64())
      s.seed = static_cast<std::uint64_t>(v->as_int64());
    else if (v->is_uint64())
      s.seed = v->as_uint64();
    else
      return bad("seed", std::string("'seed' must be an integer, not ") + kind(*v));
  }
  i.reset();
  if (auto e = integer(o, "n", 1, lim.max_n, i)) return e;
  if (i) s.n = static_cast<int>(*i);
  if (auto e = boolean(o, "stream", s.stream)) return e;
  if (const auto* so = o.if_contains("stream_options"); so && !so->is_null()) {
    if (!so->is_object())
      return bad("stream_options",
                 "'stream_options' must be an object, not " + std::string(kind(*so)));
    if (auto e = boolean(so->as_object(), "include_usage", s.include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  // vLLM's and llama.cpp's sampling extensions.
  i.reset();
  if (auto e = integer(o, "top_k", -1, INT32_MAX, i)) return e;
  if (i) s.top_k = static_cast<std::int32_t>(std::max<std::int64_t>(0, *i));
  d.reset();
  if (auto e = number(o, "min_p", 0, 1, d)) return e;
  if (d) s.min_p = static_cast<float>(*d);
  d.reset();
  if (auto e = number(o, "repetition_penalty", 0, 1e9, d)) return e;
  if (d) {
    if (*d <= 0)
      return bad("repetition_penalty",
                 "'repetition_penalty' must be above 0 (1 turns it off), got " + num_text(*d));
    s.repetition_penalty = static_cast<float>(*d);
  }
  if (const auto* v = o.if_contains("stop"); v && !v->is_null()) {
    if (v->is_string()) {
      s.stop.emplace_back(v->as_string());
    } else if (v->is_array()) {
      for (const auto& x : v->as_array()) {
        if (!x.is_string()) return bad("stop", "'stop' must be a string or an array of strings");
        s.stop.emplace_back(x.as_string());
      }
    } else {
      return bad("stop", "'stop' must be a string or an array of strings");
    }
    if (s.stop.size() > lim.max_stop)
      return bad("stop", "'stop' has " + std::to_string(s.stop.size()) + " sequences; at most " +
                             std::to_string(lim.max_stop) + " are allowed");
    for (const auto& x : s.stop)
      if (x.empty()) return bad("stop", "'stop' sequences must not be empty");
  }
  return std::nullopt;
}

std::string text_content(const json::value& c, std::string_view where,
                         std::optional<ApiError>& err) {
  if (c.is_null()) return {};
  if (c.is_string()) return std::string(c.as_string());
  if (c.is_array()) {
    std::string s;
    for (const auto& part : c.as_array()) {
      const auto* po = part.if_object();
      const auto* type = po ? po->if_contains("type") : nullptr;
      if (!po || !type || !type->is_string()) {
        err = bad(std::string(where), "content parts must be objects with a 'type'");
        return {};
      }
      if (type->as_string() != "text") {
        err = bad(std::string(where), "content part type '" + std::string(type->as_string()) +
                                          "' is not supported (text only)");
        return {};
      }
      const auto* t = po->if_contains("text");
      if (!t || !t->is_string()) {
        err = bad(std::string(where), "a text content part needs a string 'text'");
        return {};
      }
      s += t->as_string();
    }
    return s;
  }
  err = bad(std::string(where), "'content' must be a string or an array of text parts");
  return {};
}

// A known OpenAI field this codec's server does not implement and that would change the result:
// refused by name unless absent or null. `instead`: what to send in its place, if anything.
std::optional<ApiError> refuse_if_set(const json::object& o, const char* key,
                                      std::string_view instead = {}) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) return std::nullopt;
  std::string msg =
      std::string("'") + key + "' is not supported; remove it (it would change the result)";
  if (!instead.empty()) msg += ": send '" + std::string(instead) + "' instead";
  return bad(key, std::move(msg));
}

// logit_bias: an object of token id -> bias; an empty one asks for nothing.
std::optional<ApiError> refuse_logit_bias(const json::object& o) {
  const auto* lb = o.if_contains("logit_bias");
  if (!lb || lb->is_null()) return std::nullopt;
  if (!lb->is_object())
    return bad("logit_bias", "'logit_bias' must be an object, not " + std::string(kind(*lb)));
  if (lb->as_object().empty()) return std::nullopt;
  return refuse_if_set(o, "logit_bias");
}

// The fields OpenAI's chat completions take that change the answer and that weir does not
// implement. (Those that change nothing in the answer, as user, metadata, store, service_tier,
// prompt_cache_key, safety_identifier and prediction, are ignored; parallel_tool_calls is read
// and needs nothing: weir answers with at most one tool call a turn.)
std::optional<ApiError> refuse_unsupported_chat_fields(const json::object& o) {
  if (auto e = refuse_logit_bias(o)) return e;
  for (const char* key : {"audio", "reasoning_effort", "verbosity", "web_search_options"})
    if (auto e = refuse_if_set(o, key)) return e;
  if (auto e = refuse_if_set(o, "functions", "tools")) return e;
  if (auto e = refuse_if_set(o, "function_call", "tool_choice")) return e;
  if (const auto* m = o.if_contains("modalities"); m && !m->is_null()) {
    bool text_only = m->is_array();
    if (text_only)
      for (const auto& x : m->as_array()) text_only &= x.is_string() && x.as_string() == "text";
    if (!text_only)
      return bad("modalities", "'modalities' may only be [\"text\"]: this server answers text");
  }
  bool parallel = true;
  if (auto e = boolean(o, "parallel_tool_calls", parallel)) return e;
  return std::nullopt;
}

}  // namespace

bool valid_tool_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

std::optional<ApiError> parse_object(std::string_view body, json::object& out) {
  if (body.empty())
    return bad("",
               "the request body is empty; send a JSON object (Content-Type: application/json)");
  // The parsed value may take what the most wasteful valid document takes (an array of one-digit
  // numbers: 25 times its text), so no valid body is refused here; the server fences a
  // request's memory itself (weir serve: --request-memory-mb).
  JsonParseOptions options;
  options.max_value_bytes = 32 * body.size() + (std::size_t{1} << 20);
  auto parsed = weir::parse_json(body, "request body", options);
  if (!parsed) {  // only text that is not JSON is "malformed"; a limit says which it is
    const bool malformed = parsed.error().is(Errc::corrupt_data);
    return bad("",
               malformed ? "malformed JSON: " + parsed.error().message : parsed.error().message);
  }
  if (!parsed->value.is_object())
    return bad("",
               std::string("the request body must be a JSON object, not ") + kind(parsed->value));
  out = std::move(parsed->value.as_object());
  return std::nullopt;
}

std::optional<ApiError> parse_message(const json::value& m, std::string_view at, ChatMessage& cm) {
  const std::string where(at);
  const auto* mo = m.if_object();
  if (!mo) return bad(where, where + " must be an object");
  if (auto e = string_field(*mo, "role", cm.role, true)) {
    e->param = where + ".role";
    e->message = where + ": " + e->message;
    return e;
  }
  if (cm.role == "developer") cm.role = "system";
  if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool")
    return bad(where + ".role", where + ".role '" + cm.role +
                                    "' is not one of system, developer, user, assistant, tool");
  std::optional<ApiError> err;
  if (const auto* c = mo->if_contains("content"))
    cm.content = text_content(*c, where + ".content", err);
  if (err) return err;
  for (auto [key, out] : {std::pair{"name", &cm.name}, {"tool_call_id", &cm.tool_call_id}}) {
    if (auto e = string_field(*mo, key, *out, false)) {
      e->param = where + "." + key;
      e->message = where + "." + key + e->message.substr(e->message.find("' ") + 1);
      return e;
    }
  }
  if (cm.role != "tool") cm.tool_call_id.clear();
  if (const auto* fc = mo->if_contains("function_call"); fc && !fc->is_null())
    return bad(where + ".function_call",
               where + ".function_call is not supported: send 'tool_calls' instead");
  if (const auto* au = mo->if_contains("audio"); au && !au->is_null())
    return bad(where + ".audio", where + ".audio is not supported (audio output)");
  const auto* calls = mo->if_contains("tool_calls");
  if (!calls || calls->is_null()) return std::nullopt;
  if (!calls->is_array()) return bad(where + ".tool_calls", "'tool_calls' must be an array");
  std::size_t k = 0;
  for (const auto& c : calls->as_array()) {
    const std::string cw = where + ".tool_calls[" + std::to_string(k++) + "]";
    const auto* co = c.if_object();
    const auto* fn = co ? co->if_contains("function") : nullptr;
    if (!fn || !fn->is_object())
      return bad(cw, cw + " needs a 'function' object with 'name' and 'arguments'");
    ToolCall tc;
    if (const auto* id = co->if_contains("id"); id && id->is_string()) tc.id = id->as_string();
    if (auto e = string_field(fn->as_object(), "name", tc.name, true)) {
      e->param = cw + ".function.name";
      return e;
    }
    // The arguments are a JSON object, as text (OpenAI's form) or as an object: whoever reads
    // the call (a chat template, an agent) needs the object, so anything else is refused here
    // rather than dropped later.
    const std::string aw = cw + ".function.arguments";
    if (const auto* a = fn->as_object().if_contains("arguments")) {
      if (a->is_string())
        tc.arguments = a->as_string();
      else if (a->is_object())
        tc.arguments = json::serialize(*a);
      else if (!a->is_null())
        return bad(aw, aw + " must be a JSON object as a string, not " + kind(*a));
    }
    if (tc.arguments.empty()) tc.arguments = "{}";
    auto parsed = weir::parse_json(tc.arguments, "arguments");
    if (!parsed)
      return bad(aw, aw + " must be a JSON object as a string: " + parsed.error().message);
    if (!parsed->value.is_object())
      return bad(aw, aw + " must be a JSON object as a string, not " + kind(parsed->value));
    cm.tool_calls.push_back(std::move(tc));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_chat_request(std::string_view body, ChatRequest& out,
                                           const Limits& lim) {
  json::object o;
  if (auto e = parse_object(body, o)) return e;
  if (auto e = string_field(o, "model", out.model, false)) return e;
  const auto* msgs = o.if_contains("messages");
  if (!msgs || !msgs->is_array() || msgs->as_array().empty())
    return bad("messages", "'messages' must be a non-empty array of {\"role\", \"content\"}");
  if (msgs->as_array().size() > lim.max_messages)
    return bad("messages",
               "'messages' has more than " + std::to_string(lim.max_messages) + " entries");
  std::size_t idx = 0;
  for (const auto& m : msgs->as_array()) {
    ChatMessage cm;
    if (auto e = parse_message(m, "messages[" + std::to_string(idx++) + "]", cm)) return e;
    out.messages.push_back(std::move(cm));
  }
  if (const auto* tools = o.if_contains("tools"); tools && !tools->is_null()) {
    if (!tools->is_array()) return bad("tools", "'tools' must be an array");
    std::size_t k = 0;
    for (const auto& t : tools->as_array()) {
      const std::string tw = "tools[" + std::to_string(k++) + "]";
      const auto* to = t.if_object();
      if (const auto* type = to ? to->if_contains("type") : nullptr;
          type && type->is_string() && type->as_string() != "function")
        return bad(tw + ".type", tw + ".type '" + std::string(type->as_string()) +
                                     "' is not supported; only \"function\" tools are");
      const auto* fn = to ? to->if_contains("function") : nullptr;
      if (!fn || !fn->is_object())
        return bad(tw, tw + " must be {\"type\": \"function\", \"function\": {\"name\", ...}}");
      Tool tool;
      const auto& fo = fn->as_object();
      const std::string fw = tw + ".function.";
      if (auto e = string_field(fo, "name", tool.name, true)) {
        e->param = fw + "name";
        return e;
      }
      if (!valid_tool_name(tool.name))
        return bad(fw + "name", fw + "name '" + tool.name +
                                    "' must be 1 to 64 letters, digits, '_' or '-' (as OpenAI "
                                    "requires: ^[a-zA-Z0-9_-]{1,64}$)");
      for (const auto& other : out.tools)
        if (other.name == tool.name)
          return bad(fw + "name",
                     fw + "name '" + tool.name + "' is given twice; tool names must be unique");
      if (auto e = string_field(fo, "description", tool.description, false)) {
        e->param = fw + "description";
        return e;
      }
      // No parameters: a function of no arguments, which still takes an object.
      if (const auto* p = fo.if_contains("parameters"); p && !p->is_null()) {
        if (!p->is_object())
          return bad(fw + "parameters",
                     fw + "parameters must be a JSON Schema object, not " + kind(*p));
        tool.parameters = p->as_object();
      }
      if (tool.parameters.empty()) tool.parameters = {{"type", "object"}};
      bool strict = false;  // weir constrains a call to its schema whenever it can
      if (auto e = boolean(fo, "strict", strict)) {
        e->param = fw + "strict";
        return e;
      }
      out.tools.push_back(std::move(tool));
    }
  }
  if (const auto* tc = o.if_contains("tool_choice"); tc && !tc->is_null()) {
    if (tc->is_string()) {
      const auto& s = tc->as_string();
      if (s == "auto")
        out.tool_choice = ToolChoice::automatic;
      else if (s == "none")
        out.tool_choice = ToolChoice::none;
      else if (s == "required")
        out.tool_choice = ToolChoice::required;
      else
        return bad("tool_choice",
                   "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                   "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (const auto* fn = tc->is_object() ? tc->as_object().if_contains("function") : nullptr;
               fn && fn->is_object() && fn->as_object().contains("name") &&
               fn->as_object().at("name").is_string()) {
      out.tool_choice = ToolChoice::named;
      out.tool_choice_name = fn->as_object().at("name").as_string();
      bool known = false;
      for (const auto& t : out.tools) known |= t.name == out.tool_choice_name;
      if (!known)
        return bad("tool_choice",
                   "tool_choice names '" + out.tool_choice_name + "', which is not in 'tools'");
    } else {
      return bad("tool_choice",
                 "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                 "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if ((out.tool_choice == ToolChoice::required) && out.tools.empty())
      return bad("tool_choice", "tool_choice \"required\" needs 'tools'");
  }
  if (const auto* rf = o.if_contains("response_format"); rf && !rf->is_null()) {
    const auto* ro = rf->if_object();
    const auto* type = ro ? ro->if_contains("type") : nullptr;
    if (!type || !type->is_string())
      return bad("response_format",
                 "'response_format' must be {\"type\": \"text\" | "
                 "\"json_object\" | \"json_schema\"}");
    const auto& t = type->as_string();
    if (t == "text") {
      out.response_format = ResponseFormat::text;
    } else if (t == "json_object") {
      out.response_format = ResponseFormat::json_object;
    } else if (t == "json_schema") {
      out.response_format = ResponseFormat::json_schema;
      const auto* js = ro->if_contains("json_schema");
      if (!js || !js->is_object())
        return bad("response_format.json_schema",
                   "response_format json_schema needs 'json_schema': {\"name\", \"schema\"}");
      out.json_schema = *js;
    } else {
      return bad("response_format.type", "response_format type '" + std::string(t) +
                                             "' is not one of text, json_object, json_schema");
    }
  }
  if (auto e = refuse_unsupported_chat_fields(o)) return e;
  if (auto e = parse_sampling(o, out.sampling, lim)) return e;
  bool want = false;
  if (auto e = boolean(o, "logprobs", want)) return e;
  std::optional<std::int64_t> top;
  if (auto e = integer(o, "top_logprobs", 0, lim.max_top_logprobs, top)) return e;
  if (top && !want) return bad("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
  out.sampling.logprobs = want ? static_cast<int>(top.value_or(0)) : -1;
  return std::nullopt;
}

std::optional<ApiError> parse_completion_request(std::string_view body, CompletionRequest& out,
                                                 const Limits& lim) {
  json::object o;
  if (auto e = parse_object(body, o)) return e;
  if (auto e = string_field(o, "model", out.model, false)) return e;
  const auto* p = o.if_contains("prompt");
  const char* shape = "'prompt' must be a string or an array of token ids";
  if (!p || p->is_null()) return bad("prompt", "'prompt' is required (a string or token ids)");
  // The forms OpenAI takes: "text", ["text"], [ids...], [[ids...]] (the last two: a batch of
  // one); one reader for the ids of both, so they refuse the same ids.
  const json::array* ids = nullptr;
  if (p->is_string()) {
    out.prompt = p->as_string();
  } else if (p->is_array()) {
    const auto& a = p->as_array();
    if (a.size() == 1 && a[0].is_string())
      out.prompt = a[0].as_string();
    else if (a.size() == 1 && a[0].is_array())
      ids = &a[0].as_array();
    else
      ids = &a;
  } else {
    return bad("prompt", shape);
  }
  if (ids) {
    for (const auto& t : *ids) {
      if (t.is_string() || t.is_array())
        return bad("prompt", "one prompt per request: send several requests (or use n)");
      if (!t.is_int64() || t.as_int64() < 0 || t.as_int64() > INT32_MAX)
        return bad("prompt", "'prompt' token ids must be integers from 0 to 2147483647");
      out.prompt_tokens.push_back(static_cast<std::int32_t>(t.as_int64()));
    }
    if (out.prompt_tokens.empty()) return bad("prompt", "'prompt' is empty");
    out.prompt_is_tokens = true;
  }
  if (auto e = boolean(o, "echo", out.echo)) return e;
  std::optional<std::int64_t> best_of;
  if (auto e = integer(o, "best_of", 1, INT32_MAX, best_of)) return e;
  if (best_of && *best_of > 1) return bad("best_of", "'best_of' above 1 is not supported; use n");
  if (auto e = refuse_logit_bias(o)) return e;
  if (const auto* sx = o.if_contains("suffix");
      sx && !sx->is_null() && !(sx->is_string() && sx->as_string().empty()))
    return bad("suffix", "'suffix' is not supported; remove it (it would change the result)");
  if (auto e = parse_sampling(o, out.sampling, lim)) return e;
  std::optional<std::int64_t> lp;
  if (auto e = integer(o, "logprobs", 0, 5, lp)) return e;
  out.sampling.logprobs = lp ? static_cast<int>(*lp) : -1;
  return std::nullopt;
}

// --- requests built (a client's side) ------------------------------------------------------

namespace {

// A float as the double its shortest decimal form reads as: 0.3f goes out as 0.3, not as
// 0.30000001192092896, and reads back as the same float.
json::value wire_number(float f) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, f);
  if (ec != std::errc()) return static_cast<double>(f);
  double d = 0;
  std::from_chars(buf, end, d);
  return d;
}

void put_sampling(json::object& body, const Sampling& s, bool chat) {
  if (s.max_tokens) body["max_tokens"] = *s.max_tokens;
  body["temperature"] = wire_number(s.temperature);
  if (s.top_p != 1.0f) body["top_p"] = wire_number(s.top_p);
  if (s.seed) body["seed"] = *s.seed;
  if (s.presence_penalty != 0.0f) body["presence_penalty"] = wire_number(s.presence_penalty);
  if (s.frequency_penalty != 0.0f) body["frequency_penalty"] = wire_number(s.frequency_penalty);
  if (!s.stop.empty()) {
    json::array stop;
    for (const auto& x : s.stop) stop.emplace_back(x);
    body["stop"] = std::move(stop);
  }
  if (s.n != 1) body["n"] = s.n;
  if (s.top_k) body["top_k"] = *s.top_k;
  if (s.min_p) body["min_p"] = wire_number(*s.min_p);
  if (s.repetition_penalty) body["repetition_penalty"] = wire_number(*s.repetition_penalty);
  if (s.stream) {
    body["stream"] = true;
    if (s.include_usage) body["stream_options"] = json::object{{"include_usage", true}};
  }
  if (s.logprobs >= 0) {
    if (chat) {
      body["logprobs"] = true;
      if (s.logprobs > 0) body["top_logprobs"] = s.logprobs;
    } else {
      body["logprobs"] = s.logprobs;
    }
  }
}

}  // namespace

json::object message_json(const ChatMessage& m) {
  json::object o;
  o["role"] = m.role;
  if (m.content.empty() && !m.tool_calls.empty())
    o["content"] = nullptr;
  else
    o["content"] = m.content;
  if (!m.name.empty()) o["name"] = m.name;
  if (!m.tool_call_id.empty()) o["tool_call_id"] = m.tool_call_id;
  if (!m.tool_calls.empty()) {
    json::array calls;
    for (const auto& c : m.tool_calls)
      calls.push_back(
          json::object{{"id", c.id},
                       {"type", "function"},
                       {"function", json::object{{"name", c.name}, {"arguments", c.arguments}}}});
    o["tool_calls"] = std::move(calls);
  }
  return o;
}

std::string chat_request_body(const ChatRequest& r) {
  json::object body;
  if (!r.model.empty()) body["model"] = r.model;
  json::array msgs;
  for (const auto& m : r.messages) msgs.push_back(message_json(m));
  body["messages"] = std::move(msgs);
  if (!r.tools.empty()) {
    json::array ts;
    for (const auto& t : r.tools)
      ts.push_back(json::object{
          {"type", "function"},
          {"function",
           json::object{
               {"name", t.name},
               {"description", t.description},
               {"parameters", t.parameters.empty() ? json::value(json::object{{"type", "object"}})
                                                   : json::value(t.parameters)}}}});
    body["tools"] = std::move(ts);
  }
  if (!r.tools.empty() || r.tool_choice != ToolChoice::automatic) {
    switch (r.tool_choice) {
      case ToolChoice::automatic:
        body["tool_choice"] = "auto";
        break;
      case ToolChoice::none:
        body["tool_choice"] = "none";
        break;
      case ToolChoice::required:
        body["tool_choice"] = "required";
        break;
      case ToolChoice::named:
        body["tool_choice"] = json::object{
            {"type", "function"}, {"function", json::object{{"name", r.tool_choice_name}}}};
        break;
    }
  }
  switch (r.response_format) {
    case ResponseFormat::text:
      break;
    case ResponseFormat::json_object:
      body["response_format"] = json::object{{"type", "json_object"}};
      break;
    case ResponseFormat::json_schema:
      body["response_format"] =
          json::object{{"type", "json_schema"}, {"json_schema", r.json_schema}};
      break;
  }
  put_sampling(body, r.sampling, true);
  return json::serialize(body);
}

std::string completion_request_body(const CompletionRequest& r) {
  json::object body;
  if (!r.model.empty()) body["model"] = r.model;
  if (r.prompt_is_tokens) {
    json::array ids;
    for (auto t : r.prompt_tokens) ids.push_back(t);
    body["prompt"] = std::move(ids);
  } else {
    body["prompt"] = r.prompt;
  }
  if (r.echo) body["echo"] = true;
  put_sampling(body, r.sampling, false);
  return json::serialize(body);
}

}  // namespace weir::http::openai
