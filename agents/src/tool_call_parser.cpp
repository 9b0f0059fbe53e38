#include "weir/agents/tool_call_parser.hpp"

#include <algorithm>

#include "weir/runtime/json_parse.hpp"

namespace weir::agents {

namespace json = boost::json;

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kHowTo =
    "Write each tool call as <tool_call>{\"name\": \"TOOL\", \"arguments\": {...}}</tool_call>.";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

const json::value* first_of(const json::object& o, std::initializer_list<std::string_view> keys) {
  for (auto k : keys) {
    if (const auto* v = o.if_contains(k)) return v;
  }
  return nullptr;
}

bool looks_like_call(const json::value& v) {
  const auto* o = v.if_object();
  return o && first_of(*o, {"name", "tool", "function"}) != nullptr;
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// One call from a parsed object; an error text for the model otherwise.
std::optional<std::string> to_call(const json::value& v, int index,
                                   const std::vector<std::string>& known, ToolCall& out) {
  const std::string which = "tool call " + std::to_string(index);
  const auto* o = v.if_object();
  if (!o) return which + " must be a JSON object. " + std::string(kHowTo);
  const auto* name = first_of(*o, {"name", "tool", "function"});
  if (name && name->is_object()) {  // {"function": {"name": ..., "arguments": ...}}
    return to_call(*name, index, known, out);
  }
  if (!name || !name->is_string() || name->as_string().empty()) {
    return which + " has no \"name\". " + std::string(kHowTo);
  }
  out.name = name->as_string();
  if (!known.empty() && std::find(known.begin(), known.end(), out.name) == known.end()) {
    return which + " names unknown tool '" + out.name + "'; the tools are: " + join(known) + ".";
  }
  const auto* args = first_of(*o, {"arguments", "args", "parameters", "input"});
  if (!args || args->is_null()) {
    out.arguments = {};
  } else if (args->is_object()) {
    out.arguments = args->as_object();
  } else if (args->is_string()) {  // arguments as a JSON string (OpenAI style)
    auto parsed = parse_json(args->as_string(), which + " arguments");
    if (!parsed || !parsed->value.is_object()) {
      return which + ": \"arguments\" must be a JSON object" +
             (parsed ? std::string() : " (" + parsed.error().message + ")") + ".";
    }
    out.arguments = parsed->value.as_object();
  } else {
    return which + ": \"arguments\" must be a JSON object, not " +
           std::string(args->is_array() ? "an array" : "a scalar") + ".";
  }
  return std::nullopt;
}

// Adds the calls in `v` (an object or an array of objects).
std::optional<std::string> collect(const json::value& v, const std::vector<std::string>& known,
                                   int& next_index, std::vector<ToolCall>& calls) {
  if (const auto* arr = v.if_array()) {
    for (const auto& item : *arr) {
      if (auto e = collect(item, known, next_index, calls)) return e;
    }
    return std::nullopt;
  }
  ToolCall c;
  int index = next_index++;
  if (auto e = to_call(v, index, known, c)) return e;
  c.id = "call_" + std::to_string(index);
  calls.push_back(std::move(c));
  return std::nullopt;
}

}  // namespace

ParsedToolCalls parse_tool_calls(std::string_view text, const std::vector<std::string>& known,
                                 int first_id) {
  ParsedToolCalls out;
  int next = first_id;
  std::string content;

  // 1. Tagged calls.
  std::size_t pos = 0;
  bool tagged = false;
  while (true) {
    std::size_t open = text.find(kOpen, pos);
    if (open == std::string_view::npos) break;
    tagged = true;
    content.append(text.substr(pos, open - pos));
    std::size_t body = open + kOpen.size();
    std::size_t close = text.find(kClose, body);
    if (close == std::string_view::npos) {
      out.error = "tool call " + std::to_string(next) + " has no closing </tool_call>. " +
                  std::string(kHowTo);
      pos = text.size();
      break;
    }
    auto parsed =
        parse_json(trim(text.substr(body, close - body)), "tool call " + std::to_string(next));
    if (!parsed) {
      out.error = parsed.error().message + ". " + std::string(kHowTo);
    } else if (auto e = collect(parsed->value, known, next, out.calls)) {
      out.error = *e;
    }
    pos = close + kClose.size();
  }
  if (tagged) {
    content.append(text.substr(std::min(pos, text.size())));
    out.content = trim(content);
    return out;
  }

  // 2. A fenced JSON block holding a call.
  for (std::size_t fence = text.find("```"); fence != std::string_view::npos;
       fence = text.find("```", fence + 3)) {
    std::size_t body = text.find('\n', fence);
    std::size_t end = body == std::string_view::npos ? body : text.find("```", body);
    if (end == std::string_view::npos) break;
    auto inner = trim(text.substr(body, end - body));
    if (inner.empty() || (inner.front() != '{' && inner.front() != '[')) {
      fence = end;
      continue;
    }
    auto parsed = parse_json(inner, "tool call");
    if (parsed && (looks_like_call(parsed->value) ||
                   (parsed->value.is_array() && !parsed->value.as_array().empty() &&
                    looks_like_call(parsed->value.as_array()[0])))) {
      if (auto e = collect(parsed->value, known, next, out.calls)) out.error = *e;
      out.content = trim(std::string(text.substr(0, fence)) + std::string(text.substr(end + 3)));
      return out;
    }
    fence = end;
  }

  // 3. The whole reply is a call.
  auto whole = trim(text);
  if (!whole.empty() && (whole.front() == '{' || whole.front() == '[')) {
    auto parsed = parse_json(whole, "tool call");
    if (parsed && (looks_like_call(parsed->value) || parsed->value.is_array())) {
      if (auto e = collect(parsed->value, known, next, out.calls)) out.error = *e;
      return out;
    }
    if (!parsed && whole.front() == '{' && whole.find("\"name\"") != std::string_view::npos) {
      out.error = parsed.error().message + ". " + std::string(kHowTo);
      return out;
    }
  }
  out.content = whole;
  return out;
}

}  // namespace weir::agents
