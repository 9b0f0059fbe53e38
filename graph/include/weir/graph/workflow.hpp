// Workflow files: JSON documents that describe a state graph (docs/workflow-format.md, schema
// schemas/workflow.schema.json). load_workflow() parses and validates one into a WorkflowSpec,
// the typed form the graph builder compiles; subgraph files are loaded too.
//
// Validation reports every problem in the file, each like a good compiler's diagnostic:
//   flow.json:14:13: /edges/3/to: unknown node 'sumarize'; did you mean 'summarize'?
// Unknown keys are errors everywhere, so typos never pass silently.
//
// Thread safety: functions are reentrant; a WorkflowSpec is a value.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/runtime/error.hpp"
#include "weir/runtime/json_parse.hpp"

namespace weir::graph {

struct Diagnostic {
  std::string file;
  int line = 0, column = 0;
  std::string pointer;  // JSON pointer of the offending value
  std::string message;
  // "file:line:column: pointer: message"
  std::string to_string() const;
};

enum class ReducerKind { last_value, append, messages, sum, max, min, merge };
const char* reducer_name(ReducerKind r);

struct ChannelSpec {
  std::string name;
  ReducerKind reducer = ReducerKind::last_value;
  std::optional<boost::json::value> default_value;
  std::optional<std::int64_t> max_items;
  std::optional<std::int64_t> max_bytes;
  std::optional<std::int64_t> window_max_messages;
  std::optional<std::int64_t> window_max_tokens;
  bool keep_system = true;
};

struct MemoryLimits {
  std::optional<std::int64_t> total, run_state, artifacts, history, kv_cache, activations;
};

struct LimitsSpec {
  std::optional<std::int64_t> recursion_limit, max_concurrency, deadline_ms, inline_limit,
      max_state_bytes, token_budget, max_concurrent_runs, max_queued_runs, max_thread_steps;
  MemoryLimits memory;
};

struct RetrySpec {
  std::int64_t max_attempts = 1;
  std::int64_t backoff_ms = 100;
  std::int64_t max_backoff_ms = 5000;
};

enum class NodeKind { set, tool, llm, agent, router, map, subgraph, interrupt };
const char* node_kind_name(NodeKind k);

struct NodeSpec {
  std::string name;
  NodeKind kind = NodeKind::router;
  std::string description;
  std::optional<std::int64_t> max_visits;
  std::optional<RetrySpec> retry;
  std::optional<std::int64_t> timeout_ms;
  // Kind-specific settings, as written (validated): values, tool, args, output, model, prompt,
  // system, messages, max_tokens, agent, input, over, node, item_key, max_concurrency, path,
  // payload. Subgraph `input`/`output` mappings stay objects here.
  boost::json::object params;
};

// A conditional route: exactly one of the three forms is set.
struct RouteSpec {
  // on + cases + default
  std::string on;
  std::vector<std::pair<std::string, std::vector<std::string>>> cases;
  std::vector<std::string> default_targets;
  // when + then + else
  std::string when_channel, when_op;
  std::optional<boost::json::value> when_value;
  std::vector<std::string> then_targets, else_targets;
  // tool_calls + default
  std::vector<std::string> tool_calls_targets;
  enum class Form { cases, when, tool_calls } form = Form::cases;
  // Every node this route may choose (END included), for validation and drawing.
  std::vector<std::string> all_targets() const;
};

struct EdgeSpec {
  std::string from;
  std::vector<std::string> to;  // static edge targets (empty when `route` is set)
  // Held by pointer: a RouteSpec is large and most edges have none (a file may hold hundreds
  // of thousands of edges).
  std::shared_ptr<const RouteSpec> route;
};

struct ModelSpec {
  std::string name;
  std::filesystem::path path;  // resolved against the workflow's folder
  std::string chat_template;
  boost::json::object engine;
  // "provider": "openai": an OpenAI-compatible endpoint instead of a file. `remote` holds the
  // entry's other keys as written (base_url, model, api_key_env, max_concurrency, ...; their
  // shape checked here); the agents layer builds the client from them.
  std::string provider = "local";
  boost::json::object remote;
};

struct ToolSpecEntry {
  std::string name;
  std::string builtin;
  std::filesystem::path root;  // resolved; empty when not given
  boost::json::object settings;
};

struct WorkflowSpec {
  std::filesystem::path file;  // absolute
  std::string name, description;
  LimitsSpec limits;
  std::vector<ChannelSpec> channels;
  std::vector<std::string> input, output;
  std::vector<ModelSpec> models;
  std::vector<ToolSpecEntry> tools;
  // "mcp_servers" as written (shape checked); the agents layer starts them. Their tools are
  // named "server/tool".
  boost::json::object mcp_servers;
  boost::json::object agents, tasks, crews, group_chats;  // semantics: the agents layer
  std::vector<NodeSpec> nodes;
  std::vector<EdgeSpec> edges;
  // Subgraph files, keyed by the node that uses them.
  std::map<std::string, std::shared_ptr<const WorkflowSpec>> subgraphs;

  const ChannelSpec* channel(std::string_view name) const;
  const NodeSpec* node(std::string_view name) const;
  // A finished run's result: the channels named by "output", or all of `state` when it names
  // none.
  boost::json::object output_of(boost::json::object state) const;
};

struct WorkflowLoad {
  std::optional<WorkflowSpec> spec;  // set when there are no diagnostics
  std::vector<Diagnostic> diagnostics;
  bool ok() const { return spec.has_value(); }
  // All diagnostics, one per line.
  std::string report() const;
};

// Parses and validates `text` as if read from `file` (relative paths resolve against its
// folder). `max_depth` bounds nested subgraph files.
WorkflowLoad load_workflow_text(std::string_view text, const std::filesystem::path& file,
                                int max_depth = 8);
// Reads the file with read_json_file (its size checked first; "-" is standard input).
WorkflowLoad load_workflow_file(const std::filesystem::path& file, int max_depth = 8);
// The same from a document already parsed from `text` (parse once, then decide what it is).
// `text` may be empty when `file` can be read again: it is then read only to place a
// diagnostic, so the caller can free a large file's text before the workflow is built.
WorkflowLoad load_workflow_json(ParsedJson parsed, std::string_view text,
                                const std::filesystem::path& file, int max_depth = 8);

// The same, as a Result: Errc::invalid_workflow with report() as the message.
Result<WorkflowSpec> load_workflow(const std::filesystem::path& file);

// "256MiB", "1.5 GiB", "4096", 4096 -> bytes; nullopt when malformed.
std::optional<std::int64_t> parse_byte_size(const boost::json::value& v);

// The closest candidate within a small edit distance, for "did you mean" hints.
std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates);

}  // namespace weir::graph
