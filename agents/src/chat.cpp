#include "weir/agents/chat.hpp"

#include <boost/json.hpp>

#include "weir/runtime/json_parse.hpp"

namespace weir::agents {

namespace json = boost::json;

const char* role_name(Role r) {
  switch (r) {
    case Role::system:
      return "system";
    case Role::user:
      return "user";
    case Role::assistant:
      return "assistant";
    case Role::tool:
      return "tool";
  }
  return "user";
}

std::optional<Role> parse_role(std::string_view s) {
  if (s == "system") return Role::system;
  if (s == "user") return Role::user;
  if (s == "assistant") return Role::assistant;
  if (s == "tool") return Role::tool;
  return std::nullopt;
}

namespace oa = http::openai;

oa::ToolCall to_openai(const ToolCall& c) {
  return {c.id, c.name, json::serialize(c.arguments)};
}

oa::ChatMessage to_openai(const Message& m) {
  oa::ChatMessage w;
  w.role = role_name(m.role);
  w.content = m.content;
  w.tool_call_id = m.tool_call_id;
  w.name = m.name;
  for (const auto& c : m.tool_calls) w.tool_calls.push_back(to_openai(c));
  return w;
}

Message from_openai(const oa::ChatMessage& w, std::string* unusable) {
  Message m;
  m.role = parse_role(w.role).value_or(Role::user);
  m.content = w.content;
  m.tool_call_id = w.tool_call_id;
  m.name = w.name;
  auto refuse = [&](std::string why) {
    if (unusable && unusable->empty()) *unusable = std::move(why);
  };
  for (const auto& c : w.tool_calls) {
    if (c.name.empty()) {
      refuse("a tool call without a function name");
      continue;
    }
    ToolCall t;
    t.id = c.id;
    t.name = c.name;
    if (!c.arguments.empty()) {
      auto parsed = parse_json(c.arguments, "tool call arguments");
      if (!parsed || !parsed->value.is_object()) {
        refuse("the arguments of tool call '" + c.name + "' are not a JSON object: " +
               (parsed ? "got " + c.arguments.substr(0, 200) : parsed.error().message));
        continue;
      }
      t.arguments = std::move(parsed->value.get_object());
    }
    m.tool_calls.push_back(std::move(t));
  }
  return m;
}

Result<ChatResponse> from_openai(const oa::Completion& c) {
  if (c.choices.empty()) return Error(Errc::model_error, "an answer without choices");
  const oa::Choice& choice = c.choices.front();
  ChatResponse r;
  std::string unusable;
  r.message = from_openai(oa::assistant_message(choice), &unusable);
  r.message.role = Role::assistant;
  if (!unusable.empty()) r.tool_call_error = std::move(unusable);
  if (r.message.tool_calls.size() > kMaxToolCalls) {
    r.message.tool_calls.resize(kMaxToolCalls);
    r.tool_call_error =
        "more than " + std::to_string(kMaxToolCalls) + " tool calls in one reply; the rest dropped";
  }
  for (std::size_t i = 0; i < r.message.tool_calls.size(); ++i)
    if (r.message.tool_calls[i].id.empty())
      r.message.tool_calls[i].id = "call_" + std::to_string(i);
  r.finish_reason = choice.finish_reason;
  if (c.usage) {
    r.usage.prompt_tokens = c.usage->prompt_tokens;
    r.usage.completion_tokens = c.usage->completion_tokens;
    r.usage.cached_prompt_tokens = c.usage->cached_tokens;
  }
  return r;
}

json::value Message::to_json() const {
  return oa::message_json(to_openai(*this));
}

Result<Message> Message::from_json(const json::value& v) {
  const json::value* in = &v;
  // weir 0.2 wrote tool calls as {"id", "name", "arguments": {...}}: read them as OpenAI's.
  json::value upgraded;
  if (const auto* calls = v.is_object() ? v.as_object().if_contains("tool_calls") : nullptr;
      calls && calls->is_array()) {
    bool old = false;
    for (const auto& c : calls->as_array())
      old |= c.is_object() && c.as_object().contains("name") && !c.as_object().contains("function");
    if (old) {
      upgraded = v;
      for (auto& c : upgraded.as_object()["tool_calls"].as_array()) {
        auto* co = c.if_object();
        if (!co || co->contains("function")) continue;
        json::object fn{{"name", (*co)["name"]}};
        if (const auto* a = co->if_contains("arguments"))
          fn["arguments"] = a->is_object() ? json::value(json::serialize(*a)) : *a;
        co->erase("name");
        co->erase("arguments");
        (*co)["type"] = "function";
        (*co)["function"] = std::move(fn);
      }
      in = &upgraded;
    }
  }
  oa::ChatMessage w;
  if (auto e = oa::parse_message(*in, "message", w))
    return Error(Errc::invalid_argument, e->message);
  return from_openai(w);
}

}  // namespace weir::agents
