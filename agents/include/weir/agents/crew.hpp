// Crew: agents and tasks, run as a state graph (CrewAI's model with weir's fences).
//
// Sequential process: three graph nodes per task, in order. `<task>` renders the task's
// description with the inputs ("{{topic}}") and its context, and runs the task's prefetch tool
// calls (retrieval that should always happen, given to the agent as tool results);
// `<task>/agent` is the agent's reason-act loop graph as a subgraph, with its own caps, sharing
// the crew's token budget, artifacts and event stream; `<task>/done` stores the output in the
// ArtifactStore and leaves in the crew's state only {agent, summary (bounded), artifact
// reference, counters}. A later task sees the results of its `context` tasks (default: the previous
// task) as summaries plus references it can read in slices with the `artifacts` tool: never as the
// full outputs concatenated, so context stays bounded however long the crew runs.
//
// Hierarchical process: a manager agent gets the task list and a `delegate_work` tool
// ({"coworker": name, "task": text}); each delegation runs the coworker's loop as a child run
// and returns its bounded summary and reference. The manager's answer ends the crew.
//
// Thread safety: a Crew is immutable after create(); kickoff may run any number of times at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include "weir/agents/agent.hpp"

namespace weir::agents {

struct TaskSpec {
  std::string name;
  std::string description;  // "{{key}}" is replaced by inputs[key]
  std::string expected_output;
  std::string agent;                 // sequential: required; hierarchical: a hint to the manager
  std::vector<std::string> context;  // earlier tasks it sees; empty: the previous task
  bool context_none = false;         // true: sees no earlier task
  std::vector<ToolCall> prefetch;    // run before the agent starts ("{{key}}" in string args)
  // The task's result is one JSON value valid against this schema (sequential process).
  std::optional<boost::json::object> output_schema;
};

enum class Process { sequential, hierarchical };

struct CrewSpec {
  std::string name = "crew";
  std::vector<AgentSpec> agents;
  std::vector<TaskSpec> tasks;
  Process process = Process::sequential;
  std::optional<AgentSpec> manager;  // hierarchical; a default manager when absent
  std::size_t summary_bytes = 600;   // each task result's summary in state and in prompts
  graph::GraphLimits limits;         // the crew graph's own limits (the loops have theirs)
};

// What is wrong with a crew's agents and tasks as written (two of one name, a task naming an
// agent the crew lacks or taking context from a task that does not come before it), each with
// the JSON pointer of its place in a crew file ("/tasks/1/agent"). Crew::create refuses a spec
// with any; a crew file's reader reports them at their place.
struct CrewProblem {
  std::string pointer, message;
};
std::vector<CrewProblem> crew_problems(const CrewSpec& spec);

struct TaskResult {
  std::string task, agent, summary;
  std::string artifact_id;  // the full output (empty without an artifact store)
  std::uint64_t output_bytes = 0;
  std::optional<bool> output_valid;  // with an output_schema: the output validates against it
  AgentResult loop;
};

struct CrewResult {
  std::vector<TaskResult> tasks;  // in order (hierarchical: one per delegation, then the manager)
  std::string final_output;       // the last task's output (or the manager's answer), bounded
  std::int32_t steps = 0;         // supersteps, the loops' included
  std::int32_t iterations = 0;    // model calls of the loops
  std::int32_t tool_calls = 0;
  std::int32_t malformed_tool_calls = 0;  // see AgentResult
  std::int32_t refused_tool_calls = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  graph::RunResult run;  // the crew graph's run
};

class Crew {
 public:
  // `child` options are used for the agents' loop runs (share the crew runtime's budget and
  // artifact store). Errors: invalid_workflow listing every problem (no tasks, duplicate names,
  // a task naming an unknown agent, context naming a later or unknown task, unknown tools).
  static Result<std::shared_ptr<const Crew>> create(CrewSpec spec, std::shared_ptr<ChatModel> model,
                                                    std::shared_ptr<tools::ToolRegistry> tools,
                                                    graph::RuntimeOptions child = {});
  ~Crew();

  const CrewSpec& spec() const { return spec_; }
  const std::shared_ptr<const graph::CompiledGraph>& graph() const { return graph_; }

  // Runs the crew on `inputs`. Errors: a task's error prefixed with its name, the caps.
  boost::asio::awaitable<Result<CrewResult>> async_kickoff(graph::GraphRuntime& runtime,
                                                           boost::json::object inputs,
                                                           graph::RunOptions options) const;

  struct Impl;

 private:
  Crew() = default;
  CrewSpec spec_;
  std::shared_ptr<Impl> impl_;
  std::shared_ptr<const graph::CompiledGraph> graph_;
};

// "{{key}}" -> inputs[key] (strings as they are, other values as JSON); unknown keys are left
// as they are.
std::string render_inputs(std::string_view text, const boost::json::object& inputs);

// At most `max_bytes` of `text`, cut at a word boundary on a UTF-8 character, with " ..." when
// cut.
std::string bounded_summary(std::string_view text, std::size_t max_bytes);

}  // namespace weir::agents
