// The OpenAI chat-completion wire format read back: a non-streamed body, the chunks of a streamed
// one, a server's error body. No Asio here: the fuzz build compiles this file alone.
#include <algorithm>
#include <array>

#include <boost/json.hpp>

#include "openai_wire.hpp"
#include "weir/agents/openai_model.hpp"
#include "weir/runtime/json_parse.hpp"

namespace weir::agents {

namespace json = boost::json;

namespace {

constexpr std::size_t kMaxToolCalls = 128;

const json::object* obj(const json::value* v) {
  return v ? v->if_object() : nullptr;
}
const json::value* field(const json::object* o, std::string_view k) {
  return o ? o->if_contains(k) : nullptr;
}
std::string str(const json::value* v) {
  if (v && v->is_string()) return std::string(v->get_string());
  return {};
}
std::int64_t num(const json::value* v) {
  if (v && v->is_int64()) return v->get_int64();
  if (v && v->is_uint64()) return static_cast<std::int64_t>(v->get_uint64());
  return 0;
}

void read_usage(const json::object* u, ChatUsage& usage) {
  if (!u) return;
  usage.prompt_tokens = num(field(u, "prompt_tokens"));
  usage.completion_tokens = num(field(u, "completion_tokens"));
  usage.cached_prompt_tokens = num(field(obj(field(u, "prompt_tokens_details")), "cached_tokens"));
}

// Tool calls with string arguments parsed into objects; the first unparsable one is reported.
// A call without a function name, or past kMaxToolCalls, is reported (tool_call_error) rather
// than handed to the agent loop.
void finish_calls(ChatResponse& r, std::vector<std::array<std::string, 3>> calls) {
  for (auto& [id, name, args] : calls) {
    if (name.empty()) {
      r.tool_call_error = "a tool call without a function name";
      continue;
    }
    if (r.message.tool_calls.size() >= kMaxToolCalls) {
      r.tool_call_error = "more than " + std::to_string(kMaxToolCalls) +
                          " tool calls in one reply; the rest dropped";
      break;
    }
    ToolCall c;
    c.id = id.empty() ? "call_" + std::to_string(r.message.tool_calls.size()) : id;
    c.name = name;
    if (!args.empty()) {
      auto parsed = parse_json(args, "tool call arguments");
      if (!parsed || !parsed->value.is_object()) {
        r.tool_call_error =
            "the arguments of tool call '" + name + "' are not a JSON object: " +
            (parsed ? std::string("got ") + args.substr(0, 200) : parsed.error().message);
        continue;
      }
      c.arguments = std::move(parsed->value.get_object());
    }
    r.message.tool_calls.push_back(std::move(c));
  }
}

}  // namespace

std::string server_message(std::string_view body) {
  auto parsed = parse_json(body, "error body");
  if (parsed) {
    const auto* o = parsed->value.if_object();
    const auto* e = field(o, "error");
    if (e && e->is_string()) return std::string(e->get_string());
    if (auto m = str(field(obj(e), "message")); !m.empty()) return m;
    if (auto m = str(field(o, "message")); !m.empty()) return m;
  }
  std::string s(body.substr(0, 300));
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

Result<ChatResponse> parse_chat_completion(std::string_view body) {
  auto parsed = parse_json(body, "chat completion");
  if (!parsed) return Error(Errc::model_error, parsed.error().message);
  const auto* root = parsed->value.if_object();
  const auto* choices = field(root, "choices");
  if (!choices || !choices->is_array() || choices->get_array().empty())
    return Error(Errc::model_error, "chat completion without choices: " + server_message(body));
  const auto* choice = obj(&choices->get_array()[0]);
  const auto* msg = obj(field(choice, "message"));
  if (!msg) return Error(Errc::model_error, "chat completion choice without a message");
  ChatResponse r;
  r.message.role = Role::assistant;
  r.message.content = str(field(msg, "content"));
  r.finish_reason = str(field(choice, "finish_reason"));
  read_usage(obj(field(root, "usage")), r.usage);
  std::vector<std::array<std::string, 3>> calls;
  if (const auto* tc = field(msg, "tool_calls"); tc && tc->is_array()) {
    for (const auto& c : tc->get_array()) {
      const auto* co = c.if_object();
      const auto* fn = obj(field(co, "function"));
      const auto* args = field(fn, "arguments");
      // Some servers send arguments as an object rather than a string.
      std::string a = args && args->is_object() ? json::serialize(*args) : str(args);
      calls.push_back({str(field(co, "id")), str(field(fn, "name")), std::move(a)});
    }
  }
  finish_calls(r, std::move(calls));
  return r;
}

Status ChatStreamAssembler::add(std::string_view data) {
  if (data == "[DONE]") {
    done_ = true;
    return {};
  }
  auto parsed = parse_json(data, "stream chunk");
  if (!parsed) return Error(Errc::model_error, parsed.error().message);
  const auto* root = parsed->value.if_object();
  if (field(root, "error"))
    return Error(Errc::model_error, "error in the stream: " + server_message(data));
  read_usage(obj(field(root, "usage")), usage_);
  const auto* choices = field(root, "choices");
  if (!choices || !choices->is_array() || choices->get_array().empty()) return {};
  const auto* choice = obj(&choices->get_array()[0]);
  if (auto f = str(field(choice, "finish_reason")); !f.empty()) finish_reason_ = f;
  const auto* delta = obj(field(choice, "delta"));
  content_ += str(field(delta, "content"));
  if (const auto* tc = field(delta, "tool_calls"); tc && tc->is_array()) {
    for (const auto& c : tc->get_array()) {
      const auto* co = c.if_object();
      auto index = static_cast<std::size_t>(std::max<std::int64_t>(0, num(field(co, "index"))));
      if (index >= kMaxToolCalls)
        return Error(Errc::model_error, "stream chunk names tool call index " +
                                            std::to_string(index) + " (at most " +
                                            std::to_string(kMaxToolCalls) + ")");
      if (calls_.size() <= index) calls_.resize(index + 1);
      auto& p = calls_[index];
      if (auto id = str(field(co, "id")); !id.empty()) p.id = id;
      const auto* fn = obj(field(co, "function"));
      p.name += str(field(fn, "name"));
      p.arguments += str(field(fn, "arguments"));
    }
  }
  return {};
}

ChatResponse ChatStreamAssembler::finish() {
  ChatResponse r;
  r.message.role = Role::assistant;
  r.message.content = std::move(content_);
  r.usage = usage_;
  r.finish_reason = std::move(finish_reason_);
  std::vector<std::array<std::string, 3>> calls;
  for (auto& c : calls_)
    if (!c.name.empty())
      calls.push_back({std::move(c.id), std::move(c.name), std::move(c.arguments)});
  finish_calls(r, std::move(calls));
  return r;
}

}  // namespace weir::agents
