#include "weir/agents/chat.hpp"

#include <boost/json.hpp>

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

json::value Message::to_json() const {
  json::object o;
  o["role"] = role_name(role);
  o["content"] = content;
  if (!name.empty()) o["name"] = name;
  if (!tool_call_id.empty()) o["tool_call_id"] = tool_call_id;
  if (!tool_calls.empty()) {
    json::array calls;
    for (const auto& c : tool_calls) {
      calls.push_back(json::object{{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}});
    }
    o["tool_calls"] = std::move(calls);
  }
  return o;
}

Result<Message> Message::from_json(const json::value& v) {
  const auto* o = v.if_object();
  if (!o)
    return Error(Errc::invalid_argument, "a message must be an object with 'role' and 'content'");
  Message m;
  const auto* role = o->if_contains("role");
  if (!role || !role->is_string())
    return Error(Errc::invalid_argument, "a message needs a string 'role'");
  auto r = parse_role(role->as_string());
  if (!r) {
    return Error(Errc::invalid_argument, "unknown message role '" + std::string(role->as_string()) +
                                             "' (system, user, assistant, tool)");
  }
  m.role = *r;
  if (const auto* c = o->if_contains("content")) {
    if (c->is_string())
      m.content = c->as_string();
    else if (!c->is_null())
      return Error(Errc::invalid_argument, "message 'content' must be a string");
  }
  if (const auto* n = o->if_contains("name"); n && n->is_string()) m.name = n->as_string();
  if (const auto* id = o->if_contains("tool_call_id"); id && id->is_string())
    m.tool_call_id = id->as_string();
  if (const auto* calls = o->if_contains("tool_calls"); calls && calls->is_array()) {
    for (const auto& c : calls->as_array()) {
      const auto* co = c.if_object();
      if (!co || !co->contains("name"))
        return Error(Errc::invalid_argument, "a tool call needs a 'name'");
      ToolCall tc;
      tc.name = json::value_to<std::string>(co->at("name"));
      if (const auto* id = co->if_contains("id"); id && id->is_string()) tc.id = id->as_string();
      if (const auto* a = co->if_contains("arguments"); a && a->is_object())
        tc.arguments = a->as_object();
      m.tool_calls.push_back(std::move(tc));
    }
  }
  return m;
}

}  // namespace weir::agents
