// Workflow files: JSON documents that describe a state graph (docs/workflow-format.md, schema
// schemas/workflow.schema.json). load_workflow() parses and validates one into a WorkflowSpec,
// the typed form the graph builder compiles; subgraph files are loaded too.
//
// Validation reports every problem in the file, each like a good compiler's diagnostic:
//   flow.json:14:13: /edges/3/to: unknown node 'sumarize'; did you mean 'summarize'?
// Unknown keys are errors everywhere, so typos never pass silently.
//
// Configuration is parsed by the layer that owns it: weir::graph reads the graph (state,
// nodes, edges, limits) and keeps the sections of the layers above it (models, tools,
// mcp_servers, agents) as JSON, knowing only their names. Their settings are checked by the
// WorkflowChecks those layers give (agents::workflow_checks()), with the same positioned
// diagnostics; loaded without them, a file's sections are checked when agents::build_workflow
// reads them (the same readers, with pointers but without lines).
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

#include <functional>
#include <span>
#include <string_view>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/runtime/error.hpp"
#include "weir/runtime/json_fields.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/text.hpp"

namespace weir::graph {

// The runtime's (weir/runtime/json_fields.hpp, weir/runtime/text.hpp), named here as before.
using weir::closest_match;
using weir::Diagnostic;
using weir::parse_byte_size;

enum class ReducerKind { last_value, append, messages, sum, max, min, merge };
const char* reducer_name(ReducerKind r);
// Every reducer's name, in enum order (reducer_names()[i] names ReducerKind(i)).
std::span<const std::string> reducer_names();

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

// `code`: a node written in C++ (CompiledGraph::describe's nodes); a file cannot declare one.
enum class NodeKind { set, tool, llm, agent, router, map, subgraph, interrupt, crew, code };
const char* node_kind_name(NodeKind k);
std::span<const std::string> node_kind_names();  // the kinds a file may write, in enum order

struct NodeSpec {
  std::string name;
  NodeKind kind = NodeKind::router;
  std::string description;
  std::optional<std::int64_t> max_visits;
  std::optional<RetrySpec> retry;
  std::optional<std::int64_t> timeout_ms;
  // Kind-specific settings, as written (validated): values, tool, args, output, model, prompt,
  // system, messages, max_tokens, agent, input, over, node, item_key, max_concurrency, path,
  // payload, crew, inputs, chat_input. Subgraph `input`/`output` mappings stay objects here.
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

struct WorkflowSpec {
  std::filesystem::path file;  // absolute
  std::string name, description;
  LimitsSpec limits;
  std::vector<ChannelSpec> channels;
  std::vector<std::string> input, output;
  // The sections of the layers above, as written (entries keyed by name; the agents layer reads
  // them: agents::build_workflow). An MCP server's tools are named "server/tool".
  boost::json::object models, tools, mcp_servers, agents;
  // Crews (crew files' documents, inline: agents layer, agents::build_workflow) run by crew
  // nodes; tasks and group_chats are kept as written, and nothing runs them yet.
  boost::json::object tasks, crews, group_chats;
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

// What a section's checker may need besides its entry.
struct SectionContext {
  std::filesystem::path base_dir;  // the file's folder (relative paths resolve against it)
  // The names the file declares.
  std::span<const std::string> models, tools, mcp_servers, channels;
};

// Checks one entry of a section (at `ptr`: "/models/far", ...; its name already checked) and
// reports each problem through `fields` at a pointer under `ptr`, a value that is not an
// object included.
using SectionCheck =
    std::function<void(std::string_view name, const boost::json::value& entry,
                       const std::string& ptr, const SectionContext& context, JsonFields& fields)>;
// The problems of an expression ({"$expr": ...}), each a message, or none.
using ExpressionCheck =
    std::function<std::vector<std::string>(std::string_view expr, const SectionContext& context)>;

// The checks of the layers above weir::graph. An unset member leaves its section's entries
// unchecked here (only their names, and that they are objects).
struct WorkflowChecks {
  SectionCheck model, tool, mcp_server, agent, crew;
  ExpressionCheck expression;
};

struct WorkflowLoad {
  std::optional<WorkflowSpec> spec;  // set when there are no diagnostics
  std::vector<Diagnostic> diagnostics;
  bool ok() const { return spec.has_value(); }
  // All diagnostics, one per line.
  std::string report() const;
};

// Parses and validates `text` as if read from `file` (relative paths resolve against its
// folder), with `checks` for the sections of the layers above (agents::workflow_checks()).
// `max_depth` bounds nested subgraph files.
WorkflowLoad load_workflow_text(std::string_view text, const std::filesystem::path& file,
                                const WorkflowChecks& checks = {}, int max_depth = 8);
// Reads the file with read_json_file (its size checked first; "-" is standard input).
WorkflowLoad load_workflow_file(const std::filesystem::path& file,
                                const WorkflowChecks& checks = {}, int max_depth = 8);
// How a workflow file is parsed, here and by a caller of load_workflow_json: its document on
// slabs (it is dropped as the spec is built), and a key given twice in an object is an error (one
// of the two values was kept unsaid).
inline const JsonParseOptions kWorkflowJson{.slabs = true, .reject_duplicate_keys = true};

// The same from a document already parsed from `text` (parse once, then decide what it is),
// with kWorkflowJson.
// `text` may be empty when `file` can be read again: it is then read only to place a
// diagnostic, so the caller can free a large file's text before the workflow is built.
WorkflowLoad load_workflow_json(ParsedJson parsed, std::string_view text,
                                const std::filesystem::path& file,
                                const WorkflowChecks& checks = {}, int max_depth = 8);

// The same, as a Result: Errc::invalid_workflow with report() as the message.
Result<WorkflowSpec> load_workflow(const std::filesystem::path& file,
                                   const WorkflowChecks& checks = {});

}  // namespace weir::graph
