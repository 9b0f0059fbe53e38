// ScriptedChatModel: a ChatModel whose answers are given in advance, for tests and examples.
//
// Either a list of replies consumed in order (each reply's text is parsed for tool calls the way
// the local adapter parses a real model's output), or a function of the conversation. Every call
// is recorded, so a test can check what the agent sent.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "weir/agents/chat.hpp"

namespace weir::agents {

class ScriptedChatModel final : public ChatModel {
 public:
  using Script = std::function<Result<ChatResponse>(const std::vector<Message>& messages,
                                                    const std::vector<ToolSpec>& tools)>;

  // Replies in order; after the last one, every call returns the last reply again.
  explicit ScriptedChatModel(std::vector<std::string> replies, std::string name = "scripted");
  explicit ScriptedChatModel(Script script, std::string name = "scripted");

  std::string name() const override { return name_; }
  boost::asio::awaitable<Result<ChatResponse>> async_chat(std::vector<Message> messages,
                                                          std::vector<ToolSpec> tools,
                                                          ChatParams params) override;

  struct Call {
    std::vector<Message> messages;
    std::vector<std::string> tools;  // the names offered
    ChatParams params;
  };
  std::vector<Call> calls() const;
  std::size_t call_count() const;

  // A reply's text -> a response: tool calls parsed from it (any form the parser accepts),
  // usage counted at ~4 bytes a token.
  static ChatResponse parse_reply(std::string_view text, const std::vector<ToolSpec>& tools,
                                  const std::vector<Message>& messages);

 private:
  std::string name_;
  std::vector<std::string> replies_;
  Script script_;
  mutable std::mutex mu_;
  std::size_t next_ = 0;     // GUARDED_BY(mu_)
  std::vector<Call> calls_;  // GUARDED_BY(mu_)
};

}  // namespace weir::agents
