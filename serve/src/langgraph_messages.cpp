#include "langgraph_messages.hpp"

#include <algorithm>
#include <map>
#include <string>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "weir/graph/workflow.hpp"
#include "weir/http/openai.hpp"
#include "weir/runtime/json_fields.hpp"
#include "weir/runtime/sha256.hpp"

namespace weir::serve {

namespace json = boost::json;
namespace oa = weir::http::openai;

namespace {

bool has_string(const json::value& v, std::string_view key) {
  const auto* o = v.if_object();
  const auto* s = o ? o->if_contains(key) : nullptr;
  return s && s->is_string();
}

// A non-empty list whose items all have a string `key`.
bool list_of(const json::value& v, std::string_view key) {
  const auto* a = v.if_array();
  if (!a || a->empty()) return false;
  for (const auto& m : *a)
    if (!has_string(m, key)) return false;
  return true;
}

const char* role_of_type(std::string_view type) {
  if (type == "human" || type == "user") return "user";
  if (type == "ai" || type == "assistant") return "assistant";
  if (type == "system" || type == "developer") return "system";
  if (type == "tool") return "tool";
  return nullptr;
}

Result<json::object> checked_message(const json::object& o, const json::object& m,
                                     const std::string& where);

// One LangChain message as weir's: the OpenAI shape, then the codec's reading of it.
Result<json::object> from_langchain(const json::object& m, const std::string& where) {
  const std::string type(m.at("type").as_string());
  const char* role = role_of_type(type);
  if (!role)
    return Error(Errc::invalid_argument,
                 "'" + where + ".type' must be human, ai, system or tool, got '" + type + "'");
  json::object o{{"role", role}};
  for (const char* key : {"content", "name", "tool_call_id"})
    if (const auto* v = m.if_contains(key); v && !v->is_null()) o[key] = *v;
  if (const auto* calls = m.if_contains("tool_calls"); calls && !calls->is_null()) {
    if (!calls->is_array())
      return Error(Errc::invalid_argument, "'" + where + ".tool_calls' must be a list");
    json::array out;
    for (const auto& c : calls->as_array()) {
      const auto* co = c.if_object();
      if (!co)
        return Error(Errc::invalid_argument, "'" + where + ".tool_calls' holds a non-object");
      json::object fn;
      if (const auto* n = co->if_contains("name")) fn["name"] = *n;
      const auto* args = co->if_contains("args");
      if (args && !args->is_null() && !args->is_object())
        return Error(Errc::invalid_argument,
                     "'" + where + ".tool_calls[" + std::to_string(out.size()) +
                         "].args' must be an object, got " + std::string(json_kind_phrase(*args)));
      fn["arguments"] = args && !args->is_null() ? json::serialize(*args) : std::string("{}");
      json::object call{{"type", "function"}, {"function", std::move(fn)}};
      if (const auto* id = co->if_contains("id"); id && id->is_string()) call["id"] = *id;
      out.push_back(std::move(call));
    }
    if (!out.empty()) o["tool_calls"] = std::move(out);
  }
  return checked_message(o, m, where);
}

// An OpenAI-shaped message `o` as the codec reads it, with the id `m` gave it (a string).
Result<json::object> checked_message(const json::object& o, const json::object& m,
                                     const std::string& where) {
  if (const auto* id = m.if_contains("id"); id && !id->is_null() && !id->is_string())
    return Error(Errc::invalid_argument,
                 "'" + where + ".id' must be a string, got " + std::string(json_kind_phrase(*id)));
  oa::ChatMessage cm;
  if (auto e = oa::parse_message(o, where, cm)) return Error(Errc::invalid_argument, e->message);
  if (cm.role == "tool" && cm.tool_call_id.empty())
    return Error(Errc::invalid_argument,
                 "'" + where + ".tool_call_id' is required: a tool message answers a tool call");
  json::object stored = oa::message_json(cm);
  if (const auto* id = m.if_contains("id"); id && id->is_string()) stored["id"] = *id;
  return stored;
}

// A messages channel's input (LangGraph's add_messages takes a list, one message, or a text
// for a human message): every item a message, LangChain's shape or OpenAI's.
Result<json::array> messages_input(const json::value& v, const std::string& where) {
  json::array items;
  if (v.is_array())
    items = v.as_array();
  else if (v.is_object() || v.is_string())
    items.push_back(v);
  else
    return Error(Errc::invalid_argument, "'" + where +
                                             "' must be a list of messages, a message or a text, "
                                             "got " +
                                             std::string(json_kind_phrase(v)));
  json::array out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const auto& m = items[i];
    if (m.is_string()) {
      out.push_back(json::object{{"role", "user"}, {"content", m}});
      continue;
    }
    const auto* o = m.if_object();
    if (o && has_string(m, "type")) {
      auto w = from_langchain(*o, at);
      if (!w) return std::move(w).error();
      out.push_back(std::move(*w));
    } else if (o && has_string(m, "role")) {
      json::object plain = *o;
      plain.erase("id");
      auto w = checked_message(plain, *o, at);
      if (!w) return std::move(w).error();
      out.push_back(std::move(*w));
    } else {
      return Error(
          Errc::invalid_argument,
          "'" + at +
              "' must be a message ({\"type\": \"human\", \"content\": \"...\"}) or "
              "a text, got " +
              (o ? std::string("an object without 'type'") : std::string(json_kind_phrase(m))));
    }
  }
  return out;
}

json::value to_langchain(const json::value& v, std::map<std::string, int>& seen) {
  oa::ChatMessage cm;
  if (oa::parse_message(v, "message", cm)) return v;  // not a message the codec reads: as is
  std::string id;
  if (const auto* i = v.as_object().if_contains("id"); i && i->is_string()) id = i->as_string();
  if (id.empty()) {  // stable: the message's text and how many equal ones came before it
    const std::string text = json::serialize(v);
    id = "weir-" + sha256_hex(text + "#" + std::to_string(seen[text]++)).substr(0, 24);
  }
  const char* type = cm.role == "user"        ? "human"
                     : cm.role == "assistant" ? "ai"
                     : cm.role == "tool"      ? "tool"
                                              : "system";
  json::object o{{"type", type},
                 {"content", cm.content},
                 {"id", id},
                 {"name", cm.name.empty() ? json::value(nullptr) : json::value(cm.name)},
                 {"additional_kwargs", json::object{}},
                 {"response_metadata", json::object{}}};
  if (cm.role == "assistant") {
    json::array calls;
    for (const auto& c : cm.tool_calls) {
      boost::system::error_code ec;
      json::value args = json::parse(c.arguments, ec);
      if (ec || !args.is_object()) args = json::object{};
      calls.push_back(json::object{
          {"id", c.id}, {"name", c.name}, {"args", std::move(args)}, {"type", "tool_call"}});
    }
    o["tool_calls"] = std::move(calls);
    o["invalid_tool_calls"] = json::array{};
  }
  if (cm.role == "tool") {
    o["tool_call_id"] = cm.tool_call_id;
    o["status"] = "success";
  }
  return o;
}

}  // namespace

Result<json::object> input_from_langchain(const json::object& input,
                                          const graph::WorkflowSpec* spec, std::string_view field) {
  json::object out;
  for (const auto& kv : input) {
    const bool messages_channel =
        spec && std::any_of(spec->channels.begin(), spec->channels.end(), [&](const auto& c) {
          return c.name == kv.key() && c.reducer == graph::ReducerKind::messages;
        });
    if (messages_channel) {
      auto list = messages_input(kv.value(), std::string(field) + "." + std::string(kv.key()));
      if (!list) return std::move(list).error();
      out[kv.key()] = std::move(*list);
      continue;
    }
    if (!list_of(kv.value(), "type")) {
      out[kv.key()] = kv.value();
      continue;
    }
    json::array list;
    std::size_t i = 0;
    for (const auto& m : kv.value().as_array()) {
      const std::string where =
          std::string(field) + "." + std::string(kv.key()) + "[" + std::to_string(i++) + "]";
      auto w = from_langchain(m.as_object(), where);
      if (!w) return std::move(w).error();
      list.push_back(std::move(*w));
    }
    out[kv.key()] = std::move(list);
  }
  return out;
}

bool is_message_list(const json::value& v) {
  return list_of(v, "role");
}

// A list with a message in it is shown as messages (an item that is none stays as it is, so
// one odd item written by a node does not turn the others back into OpenAI's shape).
bool holds_a_message(const json::value& v) {
  const auto* a = v.if_array();
  if (!a) return false;
  for (const auto& m : *a)
    if (has_string(m, "role")) return true;
  return false;
}

json::object values_to_langchain(const json::object& values) {
  json::object out;
  for (const auto& kv : values) {
    if (!holds_a_message(kv.value())) {
      out[kv.key()] = kv.value();
      continue;
    }
    std::map<std::string, int> seen;
    json::array list;
    for (const auto& m : kv.value().as_array()) list.push_back(to_langchain(m, seen));
    out[kv.key()] = std::move(list);
  }
  return out;
}

json::object ai_chunk_to_langchain(std::string_view id, std::string_view text) {
  return json::object{{"type", "AIMessageChunk"},
                      {"content", text},
                      {"id", id},
                      {"name", nullptr},
                      {"additional_kwargs", json::object{}},
                      {"response_metadata", json::object{}},
                      {"tool_calls", json::array{}},
                      {"invalid_tool_calls", json::array{}},
                      {"tool_call_chunks", json::array{}},
                      {"usage_metadata", nullptr},
                      {"example", false}};
}

}  // namespace weir::serve
