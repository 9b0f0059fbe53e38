#include "langgraph_shapes.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>

#include <boost/json.hpp>

#include "langgraph_messages.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/sha256.hpp"

namespace weir::serve {

namespace json = boost::json;
using cluster::RunRecord;
using cluster::RunState;

std::string assistant_id_of(std::string_view graph_id) {
  // RFC 9562 5.5: SHA-1 of the namespace's 16 bytes and the name; version 5, variant 10. The
  // namespace is LangGraph's (6ba7b821-..., one digit off RFC 9562's URL namespace).
  static constexpr unsigned char kNamespace[16] = {0x6b, 0xa7, 0xb8, 0x21, 0x9d, 0xad, 0x11, 0xd1,
                                                   0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8};
  std::string in(reinterpret_cast<const char*>(kNamespace), 16);
  in += graph_id;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(in.data(), in.size(), md, &n, EVP_sha1(), nullptr);
  md[6] = static_cast<unsigned char>((md[6] & 0x0f) | 0x50);
  md[8] = static_cast<unsigned char>((md[8] & 0x3f) | 0x80);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

// Unix ms as ISO 8601 in UTC: "2026-11-28T06:26:01.776Z"; null for 0 (not yet).
json::value iso_time(std::int64_t ms) {
  if (ms <= 0) return nullptr;
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[80];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return json::string(buf);
}

json::object assistant_json(std::int64_t created_ms, const std::string& name,
                            const graph::WorkflowSpec& spec) {
  return json::object{{"assistant_id", assistant_id_of(name)},
                      {"graph_id", name},
                      {"config", json::object{}},
                      {"context", json::object{}},
                      {"metadata", json::object{{"created_by", "system"}}},
                      {"name", name},
                      {"description", spec.description.empty() ? json::value(nullptr)
                                                               : json::value(spec.description)},
                      {"version", 1},
                      {"created_at", iso_time(created_ms)},
                      {"updated_at", iso_time(created_ms)}};
}

static std::string lg_node(const std::string& n) {
  return n == "START" ? "__start__" : n == "END" ? "__end__" : n;
}

// The graph as LangGraph draws it: __start__, the nodes, __end__, and the edges (a route's
// targets are conditional edges).
json::object graph_json(const graph::WorkflowSpec& spec) {
  json::array nodes, edges;
  nodes.push_back(json::object{{"id", "__start__"}, {"type", "schema"}, {"data", "__start__"}});
  for (const auto& n : spec.nodes)
    nodes.push_back(json::object{
        {"id", n.name},
        {"type", "runnable"},
        {"data", json::object{{"id", json::array{"weir", graph::node_kind_name(n.kind)}},
                              {"name", n.name}}},
        {"metadata", json::object{}}});
  nodes.push_back(json::object{{"id", "__end__"}, {"type", "schema"}, {"data", "__end__"}});
  for (const auto& e : spec.edges) {
    const bool conditional = static_cast<bool>(e.route);
    for (const auto& t : conditional ? e.route->all_targets() : e.to)
      edges.push_back(json::object{
          {"source", lg_node(e.from)}, {"target", lg_node(t)}, {"conditional", conditional}});
  }
  return json::object{{"nodes", std::move(nodes)}, {"edges", std::move(edges)}};
}

// A JSON Schema object with one property per channel (weir channels take any JSON value).
static json::value channels_schema(const std::string& title,
                                   const std::vector<std::string>& names) {
  json::object props;
  for (const auto& n : names) props[n] = json::object{};
  return json::object{{"title", title}, {"type", "object"}, {"properties", std::move(props)}};
}

json::object schemas_json(const std::string& name, const graph::WorkflowSpec& spec) {
  std::vector<std::string> all;
  for (const auto& c : spec.channels) all.push_back(c.name);
  return json::object{
      {"graph_id", name},
      {"input_schema", channels_schema(name + " input", spec.input.empty() ? all : spec.input)},
      {"output_schema", channels_schema(name + " output", spec.output.empty() ? all : spec.output)},
      {"state_schema", channels_schema(name + " state", all)},
      {"config_schema", nullptr},
      {"context_schema", nullptr}};
}

// --- threads ------------------------------------------------------------------------------

// An interrupt as LangGraph shows it: {"id", "value"}; the id is stable per checkpoint.
json::array interrupts_of(const graph::Checkpoint& c) {
  json::array out;
  const auto* i = c.pending.if_contains("interrupt");
  // A breakpoint (interrupt_before/after) stops with no interrupt of a node, as LangGraph's.
  if (!i || !i->is_object() || i->as_object().contains("breakpoint")) return out;
  const auto* payload = i->as_object().if_contains("payload");
  out.push_back(json::object{{"id", sha256_hex(c.thread_id + "/" + c.checkpoint_id).substr(0, 32)},
                             {"value", payload ? *payload : json::value(nullptr)}});
  return out;
}

std::string pending_status(const graph::Checkpoint& c) {
  const auto* s = c.pending.if_contains("status");
  return s && s->is_string() ? std::string(s->as_string()) : std::string();
}

bool at_breakpoint(const graph::Checkpoint& c) {
  const auto* i = c.pending.if_contains("interrupt");
  return pending_status(c) == "interrupted" && i && i->is_object() &&
         i->as_object().contains("breakpoint");
}

std::string interrupted_node(const graph::Checkpoint& c) {
  const auto* i = c.pending.if_contains("interrupt");
  const auto* n = i && i->is_object() ? i->as_object().if_contains("node") : nullptr;
  return n && n->is_string() ? std::string(n->as_string()) : std::string("?");
}

json::object checkpoint_ref(const std::string& thread, const std::string& id) {
  return json::object{{"thread_id", thread},
                      {"checkpoint_ns", ""},
                      {"checkpoint_id", id},
                      {"checkpoint_map", nullptr}};
}

json::array next_nodes(const graph::Checkpoint& c) {
  json::array next;
  if (const auto* n = c.pending.if_contains("next"); n && n->is_array())
    for (const auto& x : n->as_array())
      if (x.is_string()) next.push_back(x);
  if (const auto* s = c.pending.if_contains("sends"); s && s->is_array())
    for (const auto& x : s->as_array())
      if (const auto* node = x.is_object() ? x.as_object().if_contains("node") : nullptr;
          node && node->is_string())
        next.push_back(*node);
  return next;
}

// A checkpoint as LangGraph's ThreadState.
Result<json::object> client_state_at(const graph::Checkpointer& cp, std::string_view thread,
                                     std::string_view checkpoint) {
  auto values = cp.state_at(thread, checkpoint);
  if (!values) return values;
  inline_messages(cp, thread, *values);
  return values;
}

void inline_messages(const graph::Checkpointer& cp, std::string_view thread, json::object& values) {
  for (auto& kv : values) {
    auto* list = kv.value().if_array();
    if (!list) continue;
    for (auto& item : *list) {
      const auto ref = ArtifactRef::from_json(item);
      if (!ref || ref->media_type != "application/json" || ref->bytes > kMaxInlinedMessage)
        continue;
      auto blob = cp.get_artifact(thread, ref->id);
      if (!blob || !*blob) continue;
      boost::system::error_code ec;
      json::value m = json::parse((**blob).bytes, ec);
      const auto* role = m.is_object() ? m.as_object().if_contains("role") : nullptr;
      if (!ec && role && role->is_string()) item = std::move(m);
    }
  }
}

Result<json::object> thread_state(const graph::Checkpointer& cp, const graph::Checkpoint& c) {
  auto values = client_state_at(cp, c.thread_id, c.checkpoint_id);
  if (!values) return std::move(values).error();
  json::array next = next_nodes(c);
  const json::array interrupts = interrupts_of(c);
  std::string interrupted_at;
  if (const auto* i = c.pending.if_contains("interrupt"); i && i->is_object())
    if (const auto* n = i->as_object().if_contains("node"); n && n->is_string())
      interrupted_at = n->as_string();
  json::array tasks;
  std::map<std::string, int> seen;  // a node with several tasks (Sends): an id for each
  for (const auto& n : next) {
    const std::string name = n.is_string() ? std::string(n.as_string()) : "";
    const int k = seen[name]++;
    tasks.push_back(json::object{
        {"id", sha256_hex(c.checkpoint_id + "/" + name + (k ? "/" + std::to_string(k) : ""))
                   .substr(0, 32)},
        {"name", name},
        {"error", nullptr},
        {"interrupts", name == interrupted_at ? json::value(interrupts) : json::array{}},
        {"checkpoint", nullptr},
        {"state", nullptr}});
  }
  if (!interrupted_at.empty() && next.empty())  // interrupted by a node of its own kind
    tasks.push_back(json::object{{"id", sha256_hex(c.checkpoint_id).substr(0, 32)},
                                 {"name", interrupted_at},
                                 {"error", nullptr},
                                 {"interrupts", interrupts},
                                 {"checkpoint", nullptr},
                                 {"state", nullptr}});
  json::object metadata = c.metadata;
  metadata.erase("subgraph_steps");  // the stream's (stream_subgraphs), not the clients'
  // (subgraph_steps_dropped stays: how many the stream could not show)
  metadata["step"] = c.step;
  if (!metadata.contains("source")) metadata["source"] = c.step < 0 ? "input" : "loop";
  return json::object{
      {"values", values_to_langchain(*values)},
      {"next", std::move(next)},
      {"tasks", std::move(tasks)},
      {"metadata", std::move(metadata)},
      {"created_at", iso_time(c.created_at_ms)},
      {"checkpoint", checkpoint_ref(c.thread_id, c.checkpoint_id)},
      {"parent_checkpoint",
       checkpoint_ref(c.thread_id,
                      c.parent_id.empty() ? std::string(kRootCheckpoint) : c.parent_id)},
      {"interrupts", interrupts}};
}

json::object root_state(const std::string& thread, std::int64_t created_ms) {
  return json::object{{"values", json::object{}},
                      {"next", json::array{"__start__"}},
                      {"tasks", json::array{json::object{
                                    {"id", sha256_hex(thread + "/root/__start__").substr(0, 32)},
                                    {"name", "__start__"},
                                    {"error", nullptr},
                                    {"interrupts", json::array{}},
                                    {"checkpoint", nullptr},
                                    {"state", nullptr}}}},
                      {"metadata", json::object{{"source", "input"}, {"step", -1}}},
                      {"created_at", iso_time(created_ms)},
                      {"checkpoint", checkpoint_ref(thread, std::string(kRootCheckpoint))},
                      {"parent_checkpoint", nullptr},
                      {"interrupts", json::array{}}};
}

const char* run_status(RunState s) {
  switch (s) {
    case RunState::queued:
      return "pending";
    case RunState::running:
      return "running";
    case RunState::succeeded:
    case RunState::interrupted:  // stopped at an interrupt: the thread is interrupted
      return "success";
    case RunState::failed:
      return "error";
    case RunState::cancelled:
      return "interrupted";
  }
  return "error";
}

json::object run_object(const RunRecord& r) {
  // What the request said of the run travels with it (RunRecord::controls).
  auto c = cluster::parse_controls(r.controls);
  return json::object{
      {"run_id", r.id},
      {"thread_id", r.thread_id},
      {"assistant_id",
       c && !c->assistant_id.empty() ? c->assistant_id : assistant_id_of(r.workflow_name)},
      {"metadata", c ? c->metadata : json::object{}},
      {"status", run_status(r.state)},
      {"multitask_strategy",
       c && !c->multitask_strategy.empty() ? c->multitask_strategy : std::string("reject")},
      {"created_at", iso_time(r.created_ms)},
      {"updated_at", iso_time(r.finished_ms  ? r.finished_ms
                              : r.started_ms ? r.started_ms
                                             : r.created_ms)}};
}

// What /wait and /join answer once the run ended: the last `values` chunk the run would have
// streamed: the thread's values, {"__interrupt__": [...]} when it stopped at an interrupt, or
// {"__error__": {"error", "message"}} when it failed.
Result<json::value> final_chunk(cluster::RunService& runs, const RunRecord& r,
                                const graph::Checkpoint* last) {
  if (r.state == RunState::failed)
    return json::value(json::object{
        {"__error__", json::object{{"error", r.error_code.empty() ? "error" : r.error_code},
                                   {"message", r.error}}}});
  const auto& cp = runs.checkpointer();
  std::optional<graph::Checkpoint> latest;
  if (!last) {
    auto l = cp.latest(r.thread_id);
    if (!l) return std::move(l).error();
    if (!*l) return json::value(nullptr);
    latest = std::move(*l);
    last = &*latest;
  }
  if (pending_status(*last) == "interrupted")
    return json::value(json::object{{"__interrupt__", interrupts_of(*last)}});
  auto v = client_state_at(cp, r.thread_id, last->checkpoint_id);
  if (!v) return std::move(v).error();
  return json::value(values_to_langchain(*v));
}

// What a step changed in a channel, as LangGraph's `updates` show a node's return: for a list
// (an append or messages channel, maybe windowed), the items after the longest tail of the old
// list that the new one starts with; else the new value.
json::value delta(const json::value* before, const json::value& after) {
  constexpr std::size_t kMaxCompared = 4096;  // longer lists are shown whole
  if (!before || !before->is_array() || !after.is_array()) return after;
  const auto& o = before->as_array();
  const auto& n = after.as_array();
  if (o.size() > kMaxCompared || n.size() > kMaxCompared) return after;
  for (std::size_t j = 0; j < o.size(); ++j) {  // n starts with o[j..]?
    const std::size_t k = o.size() - j;
    if (k > n.size() || o[j] != n[0]) continue;
    bool match = true;
    for (std::size_t i = 1; i < k && match; ++i) match = n[i] == o[j + i];
    if (match) return json::array(n.begin() + static_cast<std::ptrdiff_t>(k), n.end());
  }
  // Messages (objects) whose window evicted turns and put its summary first: the step added
  // those the list did not hold (by id; one without an id, such as the summary, by value) or
  // holds changed (a new summary, a replacement), not the turns that stayed.
  auto id_of = [](const json::value& m) -> const json::string* {
    const json::value* id = m.as_object().if_contains("id");
    return id ? id->if_string() : nullptr;
  };
  std::map<std::string_view, const json::value*> had;
  for (const auto& m : o) {
    if (!m.is_object()) return after;
    if (const json::string* id = id_of(m)) had.emplace(*id, &m);
  }
  json::array added;
  for (const auto& m : n) {
    if (!m.is_object()) return after;
    if (const json::string* id = id_of(m)) {
      auto it = had.find(*id);
      if (it == had.end() || *it->second != m) added.push_back(m);
    } else if (std::find(o.begin(), o.end(), m) == o.end()) {
      added.push_back(m);
    }
  }
  return added;
}

}  // namespace weir::serve
