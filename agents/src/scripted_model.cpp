#include "weir/agents/scripted_model.hpp"

#include "weir/agents/tool_call_parser.hpp"

namespace weir::agents {

ScriptedChatModel::ScriptedChatModel(std::vector<std::string> replies, std::string name)
    : name_(std::move(name)), replies_(std::move(replies)) {}

ScriptedChatModel::ScriptedChatModel(Script script, std::string name)
    : name_(std::move(name)), script_(std::move(script)) {}

ChatResponse ScriptedChatModel::parse_reply(std::string_view text,
                                            const std::vector<ToolSpec>& tools,
                                            const std::vector<Message>& messages) {
  std::vector<std::string> names;
  for (const auto& t : tools) names.push_back(t.name);
  int first_id = 1;
  for (const auto& m : messages) first_id += static_cast<int>(m.tool_calls.size());
  ChatResponse r;
  r.message.role = Role::assistant;
  if (tools.empty()) {
    r.message.content = std::string(text);
  } else {
    auto parsed = parse_tool_calls(text, names, first_id);
    r.message.content = std::move(parsed.content);
    r.message.tool_calls = std::move(parsed.calls);
    r.tool_call_error = std::move(parsed.error);
  }
  r.finish_reason = r.message.tool_calls.empty() ? "stop" : "tool_calls";
  for (const auto& m : messages)
    r.usage.prompt_tokens += static_cast<std::int64_t>(m.content.size() + 3) / 4 + 4;
  r.usage.completion_tokens = static_cast<std::int64_t>(text.size() + 3) / 4;
  return r;
}

boost::asio::awaitable<Result<ChatResponse>> ScriptedChatModel::async_chat(
    std::vector<Message> messages, std::vector<ToolSpec> tools, ChatParams params) {
  std::string reply;
  {
    std::lock_guard lock(mu_);
    Call c{messages, {}, params};
    for (const auto& t : tools) c.tools.push_back(t.name);
    calls_.push_back(std::move(c));
    if (!script_) {
      if (replies_.empty())
        co_return Error(Errc::model_error, "scripted model '" + name_ + "' has no replies");
      reply = replies_[std::min(next_, replies_.size() - 1)];
      ++next_;
    }
  }
  if (script_) co_return script_(messages, tools);
  co_return parse_reply(reply, tools, messages);
}

std::vector<ScriptedChatModel::Call> ScriptedChatModel::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

std::size_t ScriptedChatModel::call_count() const {
  std::lock_guard lock(mu_);
  return calls_.size();
}

}  // namespace weir::agents
