// The workflow loader's private types: the Loader that reads one workflow file (and, through
// subgraph nodes, the files it includes) into a WorkflowSpec with located diagnostics. Its members
// are defined in workflow_loader.cpp (diagnostics, the top-level sections, edges, routes and
// reachability) and workflow_loader_nodes.cpp (the nodes section: one checker per node kind, and
// the subgraph files a subgraph node loads).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <boost/json.hpp>

#include "weir/graph/workflow.hpp"
#include "weir/runtime/json_fields.hpp"
#include "weir/runtime/json_parse.hpp"

namespace weir::graph {

namespace json = boost::json;
namespace fs = std::filesystem;

// Names in file order, with a set for lookups (a file may define hundreds of thousands).
struct Names {
  std::vector<std::string> list;
  std::unordered_set<std::string> set;
  void push_back(std::string s) {
    set.insert(s);
    list.push_back(std::move(s));
  }
  void emplace_back(std::string_view s) { push_back(std::string(s)); }
  bool contains(std::string_view s) const { return set.count(std::string(s)) != 0; }
};

// Diagnostics past this many are counted, not located: a broken generated file must not cost
// time in proportion to its errors times its size.
inline constexpr std::size_t kMaxDiagnostics = 100;

// Upper bounds of the counts a file sets: the runtime holds several in 32 bits, and a bound met
// here is a diagnostic instead of a value cut to something else.
inline constexpr std::int64_t kMaxRecursionLimit = 1'000'000;
inline constexpr std::int64_t kMaxConcurrency = 10'000;
inline constexpr std::int64_t kMaxConcurrentRuns = 100'000;
inline constexpr std::int64_t kMaxQueuedRuns = 10'000'000;
inline constexpr std::int64_t kMaxAttempts = 1'000;
inline constexpr std::int64_t kMaxTokens = 1'000'000;

class Loader {
 public:
  Loader(std::string_view text, fs::path file, const WorkflowChecks& checks, int depth,
         std::vector<fs::path> stack)
      : text_(text),
        file_(std::move(file)),
        checks_(checks),
        depth_(depth),
        stack_(std::move(stack)),
        fields_(
            file_.string(), [this](std::string_view ptr) { return locate(ptr); }, kMaxDiagnostics) {
  }

  WorkflowLoad run();

  // The file could not be read or parsed; the message already carries file:line:column.
  WorkflowLoad failed(const Error& e) const;

  WorkflowLoad run(ParsedJson parsed);

 private:
  // --- diagnostics and typed access (runtime's JsonFields) ------------------------------
  JsonLocation locate(std::string_view pointer);
  void error(std::string_view pointer, std::string msg) { fields_.error(pointer, std::move(msg)); }
  static std::string type_name(const json::value& v) { return json_kind_phrase(v); }
  // "unknown node 'x'; did you mean 'y'?" or the names known; `also` (START, END) is a name
  // the list does not hold.
  std::string unknown(std::string_view what, std::string_view name,
                      std::span<const std::string> known, const char* also = nullptr);
  std::string unknown(std::string_view what, std::string_view name, const Names& known,
                      const char* also = nullptr);
  void check_keys(const json::object& o, std::string_view ptr,
                  std::initializer_list<std::string_view> allowed) {
    fields_.check_keys(o, ptr, allowed);
  }
  void check_keys(const json::object& o, std::string_view ptr,
                  const std::vector<std::string_view>& allowed) {
    fields_.check_keys(o, ptr, allowed);
  }
  const json::object* object_at(const json::object& o, std::string_view key, std::string_view ptr,
                                bool required) {
    return fields_.object_at(o, key, ptr, required);
  }
  std::optional<std::string> string_at(const json::object& o, std::string_view key,
                                       std::string_view ptr, bool required) {
    return fields_.string_at(o, key, ptr, required);
  }
  std::optional<std::int64_t> int_at(const json::object& o, std::string_view key,
                                     std::string_view ptr, std::int64_t min,
                                     std::int64_t max = INT64_MAX) {
    return fields_.int_at(o, key, ptr, min, max);
  }
  std::optional<std::int64_t> ms_at(const json::object& o, std::string_view key,
                                    std::string_view ptr, std::int64_t min) {
    return fields_.ms_at(o, key, ptr, min);
  }
  std::optional<std::int64_t> bytes_at(const json::object& o, std::string_view key,
                                       std::string_view ptr) {
    return fields_.bytes_at(o, key, ptr);
  }
  std::optional<bool> bool_at(const json::object& o, std::string_view key, std::string_view ptr) {
    return fields_.bool_at(o, key, ptr);
  }
  bool check_name(const std::string& name, const std::string& ptr, std::string_view what);
  // "a" or ["a", "b"]
  std::vector<std::string> targets_at(const json::value& v, const std::string& ptr);

  // What a section's checker may need besides its entry: the names declared so far.
  SectionContext context() const;
  // An expression ({"$expr": "..."}): the layer above checks it (syntax, channel names).
  void check_expr(std::string_view e, const std::string& ptr);
  // The entries of a section another layer owns: their names here, their settings its.
  void section(const json::object& o, std::string_view key, std::string_view what,
               const SectionCheck& check, Names& names);

  // Channels named in templates ({{state.NAME}} or {{state.NAME.field}}) must exist.
  void check_templates(const json::value& v, const std::string& ptr);

  // --- sections ------------------------------------------------------------------------
  void load(json::object& root);

  LimitsSpec limits(const json::object& o, const std::string& ptr);

  void state(const json::object& o);

  void channel_list(const json::value& v, const std::string& ptr, std::vector<std::string>& dst);

  static bool has(const std::vector<std::string>& v, std::string_view s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  }
  static bool has(const Names& v, std::string_view s) { return v.contains(s); }
  void channel_ref(const json::object& o, std::string_view key, const std::string& ptr,
                   bool required);

  // --- nodes, by kind: each adds its keys to `allowed` ------------------------------------
  static void allow(std::vector<std::string_view>& allowed,
                    std::initializer_list<std::string_view> keys) {
    allowed.insert(allowed.end(), keys.begin(), keys.end());
  }
  // values: channels, and expressions the layer above checks.
  void set_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                std::vector<std::string_view>& allowed);
  // tool: a declared tool or an MCP server's "server/tool"; args are templates.
  void tool_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                 std::vector<std::string_view>& allowed);
  // model: a declared model; prompt or messages.
  void llm_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                std::vector<std::string_view>& allowed);
  // agent: a declared agent.
  void agent_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                  std::vector<std::string_view>& allowed);
  // crew: an entry of "crews"; model: one of the file's (optional when it has one); inputs:
  // the crew's inputs as templates; messages, output: channels; chat_input: the crew input the
  // last user message of `messages` fills.
  void crew_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                 std::vector<std::string_view>& allowed);
  // A crew entry's inputs: its "inputs" keys, then each {{name}} of its tasks' descriptions and
  // expected outputs (agents' crews fill those), each once, in that order.
  static std::vector<std::string> crew_inputs(const json::object& crew);
  // over: a channel; node: the worker, which is not the map itself.
  void map_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                std::vector<std::string_view>& allowed);
  // path: the file (loaded now); input/output: channel maps; limits of its own.
  void subgraph_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                     std::vector<std::string_view>& allowed);
  // payload: a template; output: the channel for the resume value.
  void interrupt_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                      std::vector<std::string_view>& allowed);

  // Takes `o` to move each node's settings out of the document (no second copy).
  void nodes(json::object& o);

  // "server/tool" of a declared MCP server (its tools are known once it is started).
  bool mcp_tool(std::string_view name) const;

  void subgraph(const std::string& node, const std::string& rel, const std::string& ptr);

  // Frees each edge's part of the document once it is read: a file's edges may hold more
  // memory in the document than in the spec.
  void edges(json::array& a);

  template <class Check>
  RouteSpec route(const json::object& r, const std::string& ptr, Check check_target);

  // Reachability from START, and a way to END for every node. A map reaches its worker; a
  // worker with edges continues through them (fan-in), one without returns to the barrier.
  void structure();

  fs::path resolve(const std::string& p) const;

  std::string_view text_;
  std::optional<std::string> reread_;  // the file, read again for positions when text_ is empty
  fs::path file_;
  const WorkflowChecks& checks_;
  int depth_;
  std::vector<fs::path> stack_;
  JsonFields fields_;  // every diagnostic, located through parsed_
  std::optional<ParsedJson> parsed_;
  WorkflowSpec spec_;
  Names channel_names_, model_names_, tool_names_, node_names_, mcp_names_, agent_names_,
      crew_names_;
  std::map<std::string, std::string> map_workers_;  // worker -> map node
};

}  // namespace weir::graph
