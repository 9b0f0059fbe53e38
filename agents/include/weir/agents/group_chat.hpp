// GroupChat: agents taking turns on one shared conversation (AutoGen's model), on the graph
// executor:  START -> select -> speak -> (select ... | END).
//
// Speaker selection: round robin, a function of the transcript, or the model (asked to name the
// next speaker; an answer that names nobody falls back to round robin). The speaker answers from
// its own system prompt and the shared transcript window (other agents' turns appear as user
// turns prefixed with their names). The transcript in state is a window (count and tokens); the
// chat ends when its termination condition holds, and in any case at the graph's
// recursion_limit.
//
// Termination conditions combine with && and ||:
//   Termination::max_messages(12) || Termination::text_mention("TERMINATE")
//
// Thread safety: a GroupChat is immutable after create(); runs may overlap.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>

#include "weir/agents/agent.hpp"

namespace weir::agents {

// What termination conditions look at, after each message.
struct ChatProgress {
  std::int64_t messages = 0;  // agent messages so far (the task not counted)
  std::string_view last_text;
  std::string_view last_speaker;
  std::int64_t tokens = 0;  // prompt + completion tokens so far
  std::chrono::milliseconds elapsed{0};
};

class Termination {
 public:
  static Termination max_messages(std::int64_t n);
  // The text appears in a message (of `speaker` only, when given).
  static Termination text_mention(std::string text, std::string speaker = {});
  static Termination token_usage(std::int64_t max_tokens);
  static Termination timeout(std::chrono::milliseconds t);
  Termination operator||(const Termination& o) const;
  Termination operator&&(const Termination& o) const;

  // Why the chat should stop ("max_messages 12 reached"), or nullopt to go on.
  std::optional<std::string> check(const ChatProgress& p) const;
  std::string describe() const;

  // From JSON: {"max_messages": 12} | {"text_mention": "DONE"} | {"token_usage": 5000} |
  // {"timeout_ms": 30000} | {"any": [...]} | {"all": [...]}. Errors: invalid_workflow with the
  // JSON pointer (`where`) of the problem.
  static Result<Termination> from_json(const boost::json::value& v, std::string where = "");

 private:
  struct Node;
  explicit Termination(std::shared_ptr<const Node> n) : node_(std::move(n)) {}
  std::shared_ptr<const Node> node_;
};

enum class SpeakerSelection { round_robin, model, function };

// (transcript, agent names) -> the next speaker's name.
using SpeakerSelector =
    std::function<std::string(const std::vector<Message>&, const std::vector<std::string>&)>;

struct GroupChatSpec {
  std::string name = "group_chat";
  std::vector<AgentSpec> agents;
  SpeakerSelection selection = SpeakerSelection::round_robin;
  SpeakerSelector selector;  // SpeakerSelection::function
  Termination termination = Termination::max_messages(10);
  HistoryWindow window;           // the shared transcript
  std::int32_t max_rounds = 100;  // backstop: recursion_limit = 2 * max_rounds + 2
};

struct GroupChatResult {
  std::vector<Message> transcript;  // the window at the end (the task first)
  std::string stop_reason;
  std::int64_t messages = 0;
  std::int64_t tokens = 0;
  std::int32_t steps = 0;
};

class GroupChat {
 public:
  // Errors: invalid_workflow (no agents, duplicate names, function selection without a
  // selector, max_rounds < 1).
  static Result<std::shared_ptr<const GroupChat>> create(GroupChatSpec spec,
                                                         std::shared_ptr<ChatModel> model);
  const GroupChatSpec& spec() const { return spec_; }
  const std::shared_ptr<const graph::CompiledGraph>& graph() const { return graph_; }

  boost::asio::awaitable<Result<GroupChatResult>> async_run(graph::GraphRuntime& runtime,
                                                            std::string task,
                                                            graph::RunOptions options) const;

  struct Impl;

 private:
  GroupChat() = default;
  GroupChatSpec spec_;
  std::shared_ptr<const Impl> impl_;
  std::shared_ptr<const graph::CompiledGraph> graph_;
};

}  // namespace weir::agents
