// Agent: a role, a goal, tools and a model, run as a reason-act loop on the state-graph executor.
//
// The loop is a compiled StateGraph:
//
//     START -> think --(tool calls)--> act -> think ... --(an answer)--> END
//
// `think` asks the model for the next step with the conversation window; `act` runs the tool
// calls through the ToolRegistry (validated arguments, timeouts, output caps: a large output is
// an artifact and the model sees its head and the reference). Every fence is structural:
//   - max_iter model calls (default 10); the last one is asked for a final answer without
//     tools, so a looping agent still ends with an answer; the graph's recursion_limit backs it;
//   - the history window by count and by tokens, the system prompt kept; evicted turns are
//     archived as an artifact and folded into a bounded rolling summary written by the model;
//   - max tokens per turn, and the run's token budget (GraphLimits::token_budget), charged with
//     each call's prompt and completion tokens;
//   - a malformed tool call, an unknown tool, invalid arguments, a tool that throws or hangs:
//     the error goes back to the model as a message and counts as an iteration.
//
// Channels of the loop graph (inputs and results of a run):
//   task (string, input), preamble (array of messages, optional input: given after the task,
//   e.g. prefetched tool results), messages (the window), iterations, tool_calls,
//   prompt_tokens, completion_tokens, output (the final answer).
//
// Thread safety: an Agent is immutable after create() and may run any number of times at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include "weir/agents/chat.hpp"
#include "weir/graph/state_graph.hpp"

namespace weir::tools {
class ToolRegistry;
}

namespace weir::agents {

struct HistoryWindow {
  std::int64_t max_messages = 24;  // the system prompt is kept besides these
  std::int64_t max_tokens = 2048;  // the conversation sent to the model, system prompt included
  std::size_t max_summary_bytes = 1024;
};

struct AgentSpec {
  std::string name;  // unique in a crew; used in logs and events
  std::string role;
  std::string goal;
  std::string backstory;
  std::vector<std::string> tools;  // names in the ToolRegistry
  std::int32_t max_iter = 10;
  HistoryWindow history;
  std::int32_t max_tokens_per_turn = 256;
  float temperature = 0.0f;
  std::uint64_t seed = 0;
};

// "You are <role>. <backstory>\nYour goal: <goal>".
std::string agent_system_prompt(const AgentSpec& spec);

struct AgentResult {
  std::string output;
  std::int32_t iterations = 0;            // model calls
  std::int32_t tool_calls = 0;            // calls run (refused ones included)
  std::int32_t malformed_tool_calls = 0;  // replies whose call could not be parsed
  std::int32_t refused_tool_calls = 0;    // unknown tool, or arguments the schema refused
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int32_t steps = 0;  // supersteps of the loop graph
};

// Reads an AgentResult from the final state of a loop graph run.
AgentResult agent_result(const graph::RunResult& run);

class Agent {
 public:
  // Errors: invalid_argument (no name, max_iter < 1, a tool the registry does not have, with
  // the available ones listed).
  static Result<std::shared_ptr<const Agent>> create(AgentSpec spec,
                                                     std::shared_ptr<ChatModel> model,
                                                     std::shared_ptr<tools::ToolRegistry> tools);

  const AgentSpec& spec() const { return spec_; }
  ChatModel& model() const { return *model_; }
  const std::vector<ToolSpec>& tool_specs() const { return tool_specs_; }
  // The reason-act loop, compiled once; run it alone or use it as a subgraph.
  const std::shared_ptr<const graph::CompiledGraph>& graph() const { return graph_; }

  // Runs the loop on `task` (with optional preamble messages). With `output_schema`, the final
  // answer is one JSON value valid against it (a reply that offered tools and does not validate
  // is asked again, constrained). Errors: the graph's (caps, token budget, memory budget,
  // cancelled), model_error when the model fails, invalid_argument for a schema the model
  // cannot enforce.
  boost::asio::awaitable<Result<AgentResult>> async_run(
      graph::GraphRuntime& runtime, std::string task, std::vector<Message> preamble,
      graph::RunOptions options,
      std::optional<boost::json::object> output_schema = std::nullopt) const;

 private:
  Agent() = default;
  struct Loop;
  AgentSpec spec_;
  std::shared_ptr<ChatModel> model_;
  std::shared_ptr<tools::ToolRegistry> tools_;
  std::vector<ToolSpec> tool_specs_;
  std::shared_ptr<const graph::CompiledGraph> graph_;
};

// Keeps `messages` within `window`: the first `pinned` messages (the system prompt and the
// task) stay, the oldest turns after them go first, and a tool result whose call was dropped
// goes with it. Returns the dropped messages in order. A single turn larger than the window is
// not cut here: the agent clips tool results to half the window when they arrive.
std::vector<Message> fit_window(std::vector<Message>& messages, const HistoryWindow& window,
                                const ChatModel& model, std::size_t pinned);

// `text` cut (on a character boundary, with a note) to at most half the window's tokens.
std::string clip_to_window(std::string text, const HistoryWindow& window, const ChatModel& model);

}  // namespace weir::agents
