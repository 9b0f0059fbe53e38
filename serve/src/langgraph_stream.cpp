#include "langgraph_stream.hpp"

#include <algorithm>
#include <charconv>
#include <optional>

#include <boost/json.hpp>

#include "langgraph_messages.hpp"
#include "langgraph_shapes.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/http/sse.hpp"
#include "weir/runtime/sha256.hpp"
#include "weir/runtime/text.hpp"

namespace weir::serve {

namespace json = boost::json;
using cluster::RunRecord;
using cluster::RunState;

namespace {

bool wants(const LangGraphStream& st, std::string_view mode) {
  return std::find(st.modes.begin(), st.modes.end(), mode) != st.modes.end();
}

std::string task_id(const std::string& checkpoint, const std::string& node) {
  return sha256_hex(checkpoint + "/" + node).substr(0, 32);
}

// The next nodes a checkpoint names, each once.
std::vector<std::string> next_of(const graph::Checkpoint& c) {
  std::vector<std::string> out;
  for (const auto& x : next_nodes(c))
    if (std::find(out.begin(), out.end(), x.as_string()) == out.end())
      out.emplace_back(x.as_string());
  return out;
}

// The events of one step, numbered; those a resumed stream has seen are left out.
class Frames {
 public:
  Frames(LangGraphStream& st, std::string checkpoint, std::string& out)
      : st_(st), checkpoint_(std::move(checkpoint)), out_(out) {
    if (st_.seen.checkpoint.empty()) return;
    if (st_.seen.checkpoint == checkpoint_) {
      skip_to_ = st_.seen.index;
      st_.seen.checkpoint.clear();  // from the next step on, everything is new
    } else {
      skip_to_ = 1L << 30;  // a step before the one the stream was cut in
    }
  }
  // A `debug` event: {"type", "timestamp", "step", "payload"}.
  void debug(std::string_view type, const json::value& timestamp, std::int64_t step,
             const json::value& payload) {
    add("debug",
        json::object{
            {"type", type}, {"timestamp", timestamp}, {"step", step}, {"payload", payload}});
  }
  // An event this stream does not send that another stream of the run would (a message sent
  // in pieces instead of whole): its number is taken, so that every stream numbers alike.
  void skip() { ++next_; }
  void add(std::string_view event, const json::value& data) {
    const long k = next_++;
    if (k <= skip_to_) return;
    out_ += "id: " + checkpoint_ + ":" + std::to_string(k) + "\n";
    out_ += http::sse_event(json::serialize(data), event);
  }
  // Where the pieces after this step resume from (piece_id).
  ~Frames() { st_.last_index = std::max(0L, next_ - 1); }

 private:
  LangGraphStream& st_;
  std::string checkpoint_;
  std::string& out_;
  long next_ = 0, skip_to_ = -1;
};

json::object config_of(const std::string& thread, const std::string& checkpoint) {
  return json::object{{"configurable", checkpoint_ref(thread, checkpoint)}};
}

// A checkpoint as the `checkpoints` mode shows it (Python's server's shape).
Result<json::object> checkpoint_payload(const graph::Checkpointer& cp, const graph::Checkpoint& c) {
  auto state = thread_state(cp, c);
  if (!state) return std::move(state).error();
  const json::value parent = state->at("parent_checkpoint");
  return json::object{
      {"config", config_of(c.thread_id, c.checkpoint_id)},
      {"parent_config", parent.is_null() ? json::value(nullptr)
                                         : json::value(json::object{{"configurable", parent}})},
      {"values", state->at("values")},
      {"metadata", state->at("metadata")},
      {"next", state->at("next")},
      {"tasks", state->at("tasks")}};
}

// The namespace of a subgraph's call (LangGraph's checkpoint_ns): "<node>:<task id>" per
// enclosing call, outermost first, joined by '|'. `calls` are the calls' keys, outermost first:
// a subgraph node's name (its first call in the step), else name, task and step; `base` is the
// checkpoint before the step.
std::string namespace_of(std::string base,
                         const std::vector<std::pair<std::string, std::string>>& calls) {
  std::string ns;
  for (const auto& [node, key] : calls) {
    base = task_id(base, key);
    ns += (ns.empty() ? "" : "|") + node + ":" + base;
  }
  return ns;
}

// A node's name as the stream shows it and its namespace: a subgraph's node ("outer/inner",
// graph::MessageText::node) is "inner" under "outer:<task id>" (the first call of outer in the
// step: a piece does not say which call it came from).
std::pair<std::string, std::string> node_and_ns(const std::string& node,
                                                const std::string& parent_checkpoint) {
  const auto slash = node.rfind('/');
  if (slash == std::string::npos) return {node, node + ":" + task_id(parent_checkpoint, node)};
  std::vector<std::pair<std::string, std::string>> calls;
  for (std::size_t from = 0;;) {
    const auto to = node.find('/', from);
    const std::string part = node.substr(from, to == std::string::npos ? to : to - from);
    calls.emplace_back(part, part);
    if (to == std::string::npos) break;
    from = to + 1;
  }
  return {node.substr(slash + 1), namespace_of(parent_checkpoint, calls)};
}

// The metadata of a message a step's node wrote (or is writing), as LangGraph's
// StreamMessagesHandler gives it.
json::object message_meta(const LangGraphStream& st, std::int64_t step, const std::string& name,
                          const std::string& parent_checkpoint) {
  const auto [node, ns] = node_and_ns(name, parent_checkpoint);
  return json::object{{"run_id", st.run_id},
                      {"thread_id", st.thread_id},
                      {"graph_id", st.graph_id},
                      {"assistant_id", assistant_id_of(st.graph_id)},
                      {"langgraph_step", step},
                      {"langgraph_node", node},
                      {"langgraph_triggers", json::array{"branch:to:" + node}},
                      {"langgraph_path", json::array{"__pregel_pull", node}},
                      {"langgraph_checkpoint_ns", ns}};
}

// The namespace part of a piece's event name: "|<ns>" for a subgraph's node when the run
// streams subgraphs, else "".
std::string piece_ns(const LangGraphStream& st, const std::string& node) {
  if (!st.subgraphs || node.find('/') == std::string::npos) return {};
  const auto [name, ns] = node_and_ns(node, st.last_checkpoint);
  return "|" + ns.substr(0, ns.rfind('|'));
}

// An `events` mode event (LangChain's astream_events v2 shape): {"event", "name", "run_id",
// "tags", "metadata", "data", "parent_ids"}. The graph's run id is the run's; a node's is its
// task's id; a model call's is the message's id.
json::object stream_event(const LangGraphStream& st, std::string_view kind, std::string_view name,
                          std::string run_id, json::object data, json::object metadata,
                          bool nested) {
  if (metadata.empty())
    metadata = json::object{{"graph_id", st.graph_id},
                            {"assistant_id", assistant_id_of(st.graph_id)},
                            {"run_id", st.run_id},
                            {"thread_id", st.thread_id}};
  return json::object{{"event", kind},
                      {"name", name},
                      {"run_id", std::move(run_id)},
                      {"tags", json::array{}},
                      {"metadata", std::move(metadata)},
                      {"data", std::move(data)},
                      {"parent_ids", nested ? json::array{st.run_id} : json::array{}}};
}

// A piece's event id (see the header): "" when there is none to give.
std::string piece_id(const LangGraphStream& st) {
  if (st.last_checkpoint.empty()) return {};
  std::string out = st.last_checkpoint + ":" + std::to_string(st.last_index);
  std::size_t n = 0;
  auto add = [&](const std::string& id, std::uint64_t bytes) {
    if (++n > kMaxPieceIds || id.find_first_of(";=\r\n") != std::string::npos || id.size() > 256)
      return false;
    out += ";" + id + "=" + std::to_string(bytes);
    return true;
  };
  for (const auto& [id, text] : st.texts)
    if (!add(id, text.size())) return {};
  for (const auto& [id, bytes] : st.skip)  // a rejoin's, not met again here yet
    if (!st.texts.contains(id) && !add(id, bytes)) return {};
  return out;
}

void add_piece(const LangGraphStream& st, std::string& out, const json::value& data,
               std::string_view event) {
  if (const std::string id = piece_id(st); !id.empty()) out += "id: " + id + "\n";
  out += http::sse_event(json::serialize(data), event);
}

// The held pieces of message text of steps up to `upto` (all of them: nullopt), in order; the
// others stay held.
void piece_events(LangGraphStream& st, std::string& out, std::optional<std::int64_t> upto) {
  std::vector<graph::MessageText> later;
  std::vector<std::string> grown;  // messages mode: the messages whose text grew
  for (auto& p : st.held) {
    if (upto && p.step > *upto) {
      later.push_back(std::move(p));
      continue;
    }
    // A piece of a step streamed already (its message went with it) or of a message whose
    // pieces stopped.
    if ((st.last_step && p.step <= *st.last_step) || st.missed.count(p.message_id)) continue;
    // A piece of an attempt older than the run's (a worker that lost the run, still sending).
    if (const auto dot = p.run_id.rfind('.'); dot != std::string::npos) {
      const std::string_view n = std::string_view(p.run_id).substr(dot + 1);
      std::int64_t a = 0;
      if (std::from_chars(n.data(), n.data() + n.size(), a).ec == std::errc() && a < st.attempt)
        continue;
    }
    const auto sent = st.texts.find(p.message_id);
    if (p.offset != (sent == st.texts.end() ? 0 : sent->second.size())) {
      // Began before this stream (its text comes whole with its step), or a piece that never
      // came (a full queue, a lost notification): no more pieces; what they missed goes as one
      // more with the step.
      st.missed.insert(p.message_id);
      continue;
    }
    const json::object meta = message_meta(st, p.step, p.node, st.last_checkpoint);
    const std::string ns = piece_ns(st, p.node);
    auto [at, first] = st.texts.try_emplace(p.message_id);
    at->second += p.text;
    // A rejoined stream's client has the first bytes of the message already.
    std::string_view fresh = p.text;
    if (auto k = st.skip.find(p.message_id); k != st.skip.end()) {
      const std::uint64_t from = at->second.size() - p.text.size();
      fresh = k->second >= at->second.size() ? std::string_view()
              : k->second > from             ? fresh.substr(k->second - from)
                                             : fresh;
      // A forged count inside a character: from the next whole one (never half a character).
      if (k->second > from) fresh.remove_prefix(utf8_skip_continuation(fresh));
    }
    if (wants(st, "messages-tuple") && !fresh.empty())
      add_piece(st, out, json::array{ai_chunk_to_langchain(p.message_id, fresh), meta},
                "messages" + ns);
    if (wants(st, "events") && !fresh.empty())
      add_piece(st, out,
                stream_event(st, "on_chat_model_stream", p.node, p.message_id,
                             json::object{{"chunk", ai_chunk_to_langchain(p.message_id, fresh)}},
                             meta, true),
                "events");
    if (wants(st, "messages")) {
      if (first)
        add_piece(st, out, json::object{{p.message_id, json::object{{"metadata", meta}}}},
                  "messages/metadata");
      // One partial a message a call: each holds the text so far, so one per piece would send
      // a long reply's text over and over.
      if (std::find(grown.begin(), grown.end(), p.message_id) == grown.end())
        grown.push_back(p.message_id);
    }
  }
  for (const auto& id : grown)
    add_piece(st, out, json::array{ai_chunk_to_langchain(id, st.texts.at(id))}, "messages/partial");
  st.held = std::move(later);
}

// The steps of the subgraphs step `c` called (metadata "subgraph_steps", recorded when the run
// streams subgraphs), as LangGraph's namespaced events: "values|<ns>" (a subgraph's state after
// each of its steps, its input first) and "updates|<ns>" ({node: what the step changed}).
void subgraph_events(const graph::Checkpointer& cp, const LangGraphStream& st,
                     const graph::Checkpoint& c, Frames& f) {
  const auto* steps = c.metadata.if_contains("subgraph_steps");
  if (!st.subgraphs || !steps || !steps->is_array()) return;
  std::map<std::string, json::object> states;     // ns -> its subgraph's state so far
  std::map<std::string, std::string> first_call;  // "<parent ns>/<node>" -> its first call
  for (const auto& rec : steps->as_array()) {
    const auto* o = rec.if_object();
    const auto* path = o ? o->if_contains("path") : nullptr;
    const auto* writes = o ? o->if_contains("writes") : nullptr;
    const auto* step = o ? o->if_contains("step") : nullptr;
    const auto* nodes = o ? o->if_contains("nodes") : nullptr;
    if (!path || !path->is_array() || path->as_array().empty() || !writes || !writes->is_object() ||
        !step || !step->is_int64() || !nodes || !nodes->is_array())
      continue;  // not a record this weir wrote
    std::vector<std::pair<std::string, std::string>> calls;
    std::string parent_ns;
    for (const auto& e : path->as_array()) {
      const auto* call = e.if_object();
      const auto* node = call ? call->if_contains("node") : nullptr;
      if (!node || !node->is_string()) break;
      const std::string name(node->as_string());
      const std::string at = json::serialize(e);
      auto [first, fresh] = first_call.try_emplace(parent_ns + "/" + name, at);
      calls.emplace_back(name, first->second == at ? name : name + "#" + at);
      parent_ns += "/" + calls.back().second;
    }
    if (calls.size() != path->as_array().size()) continue;
    const std::string ns = namespace_of(c.parent_id, calls);
    json::object& state = states[ns];
    json::object raw;
    for (const auto& kv : writes->as_object()) {
      raw[kv.key()] = delta(state.if_contains(kv.key()), kv.value());
      state[kv.key()] = kv.value();
    }
    if (step->as_int64() > 0 && wants(st, "updates") && !nodes->as_array().empty()) {
      inline_messages(cp, c.thread_id, raw);
      const json::object changed = values_to_langchain(raw);
      json::object update;
      for (const auto& n : nodes->as_array())
        if (n.is_string()) update[n.as_string()] = changed;  // two nodes in a step: their merge
      f.add("updates|" + ns, update);
    }
    if (wants(st, "values")) {
      json::object shown = state;
      inline_messages(cp, c.thread_id, shown);
      f.add("values|" + ns, values_to_langchain(shown));
    }
  }
}

std::optional<std::int64_t> pieces_due(const LangGraphStream& st) {
  if (!st.last_step) return std::nullopt;
  return *st.last_step + 1;
}

// Where the pieces of a stream start before any step of it was streamed: after the step its
// thread had before the run (the thread's latest checkpoint, or the one before the run's
// first; -1 for a new thread).
Status stream_start(const graph::Checkpointer& cp, const RunRecord& r,
                    const std::vector<graph::Checkpoint>& steps, LangGraphStream& st) {
  if (st.last_step) return {};
  if (!steps.empty()) {
    st.last_step = steps.front().step - 1;
    return {};
  }
  auto latest = cp.list(r.thread_id, 1);
  if (!latest) return std::move(latest).error();
  if (latest->empty()) {
    st.last_step = -1;
    return {};
  }
  const auto& c = latest->front();
  const auto* q = c.metadata.if_contains("queue_run");
  const bool ours = q && q->is_string() && q->as_string() == r.id;  // committed since the look
  st.last_step = c.step - (ours ? 1 : 0);
  return {};
}

}  // namespace

std::string langgraph_text_events(std::vector<graph::MessageText> pieces, LangGraphStream& st) {
  std::string out;
  for (auto& p : pieces) st.held.push_back(std::move(p));
  piece_events(st, out, pieces_due(st));
  return out;
}

std::vector<std::string> start_nodes(const graph::WorkflowSpec& spec) {
  std::vector<std::string> out;
  for (const auto& e : spec.edges)
    if (e.from == "START")
      for (const auto& t : e.to)
        if (t != "END") out.push_back(t);
  return out;
}

Result<std::string> langgraph_stream_events(const graph::Checkpointer& cp, const RunRecord& r,
                                            const std::vector<graph::Checkpoint>& steps,
                                            std::vector<graph::MessageText> pieces,
                                            LangGraphStream& st) {
  std::string out;
  st.run_id = r.id;
  st.thread_id = r.thread_id;
  st.attempt = r.attempts;
  if (!st.controls_read) {
    st.controls_read = true;
    const auto controls = cluster::parse_controls(r.controls);
    st.subgraphs = controls && controls->subgraph_steps;
  }
  for (auto& p : pieces) st.held.push_back(std::move(p));
  const bool messages = wants(st, "messages-tuple") || wants(st, "messages") || wants(st, "events");
  if (messages)
    if (auto s = stream_start(cp, r, steps, st); !s) return std::move(s).error();
  const bool tasks = wants(st, "tasks") || wants(st, "debug");
  for (const auto& c : steps) {
    if (!st.state && !c.parent_id.empty()) {  // the run's first step: its parent says who ran
      auto parent = cp.get(c.thread_id, c.parent_id);
      if (!parent) return std::move(parent).error();
      if (*parent) {
        st.ran = next_of(**parent);
        auto before = client_state_at(cp, c.thread_id, c.parent_id);
        if (!before) return std::move(before).error();
        st.state = std::move(*before);
      }
    } else if (!st.state && c.step > 0) {  // a thread's first step, with no input before it
      st.ran = st.entry;
      st.state = json::object();
    }
    auto after = client_state_at(cp, c.thread_id, c.checkpoint_id);
    if (!after) return std::move(after).error();
    if (messages) piece_events(st, out, c.step);  // the text generated in this step
    Frames f(st, c.checkpoint_id, out);
    if (!st.opened) {  // a resume's stream opens with the state it resumes from, as LangGraph's
      st.opened = true;
      if (wants(st, "events")) {  // the graph's run begins, with its input
        boost::system::error_code ec;
        json::value in = json::parse(r.input.empty() ? "{}" : r.input, ec);
        f.add("events",
              stream_event(
                  st, "on_chain_start", "LangGraph", st.run_id,
                  json::object{{"input", ec || !in.is_object()
                                             ? json::value(json::object())
                                             : json::value(values_to_langchain(in.as_object()))}},
                  {}, false));
      }
      if (!r.resume.empty() && st.state && wants(st, "values"))
        f.add("values", values_to_langchain(*st.state));
    }
    st.last_step = c.step;
    st.last_checkpoint = c.checkpoint_id;
    if (pending_status(c) == "interrupted") {
      // The step stopped at an interrupt: it changed nothing; its chunk says so.
      if (wants(st, "checkpoints") || wants(st, "debug")) {
        auto payload = checkpoint_payload(cp, c);
        if (!payload) return std::move(payload).error();
        if (wants(st, "checkpoints")) f.add("checkpoints", *payload);
        if (wants(st, "debug")) f.debug("checkpoint", iso_time(c.created_at_ms), c.step, *payload);
      }
      const json::object chunk{{"__interrupt__", interrupts_of(c)}};
      if (wants(st, "updates")) f.add("updates", chunk);
      if (wants(st, "values")) f.add("values", chunk);
      st.state = std::move(*after);
      st.ran = next_of(c);
      continue;
    }
    subgraph_events(cp, st, c, f);  // what the subgraphs it called did, first
    // What the step changed, per channel (a list: what it added).
    json::object raw;
    for (const auto& kv : c.writes) {
      if (kv.key() == "$snapshot") continue;
      const json::value* was = st.state ? st.state->if_contains(kv.key()) : nullptr;
      // The value as clients see it (client_state_at), like `was`.
      const json::value* now = after->if_contains(kv.key());
      const json::value& value = now ? *now : kv.value();
      if (c.writes.contains("$snapshot") && was && *was == value) continue;
      raw[kv.key()] = delta(was, value);
    }
    const json::object changed = values_to_langchain(raw);
    const json::value timestamp = iso_time(c.created_at_ms);
    if (tasks && !st.ran.empty()) {
      json::array result;
      for (const auto& kv : changed) result.push_back(json::array{kv.key(), kv.value()});
      for (const auto& n : st.ran) {
        json::object payload{{"id", task_id(c.parent_id, n)},
                             {"name", n},
                             {"error", nullptr},
                             {"result", result},
                             {"interrupts", json::array{}}};
        if (wants(st, "tasks")) f.add("tasks", payload);
        if (wants(st, "debug")) f.debug("task_result", timestamp, c.step, payload);
      }
    }
    if (wants(st, "updates") && !st.ran.empty()) {
      json::object update;
      for (const auto& n : st.ran) update[n] = changed;  // two nodes in a step: their merge
      f.add("updates", update);
    }
    if (wants(st, "events"))  // each node's run ends with what the step changed
      for (const auto& n : st.ran)
        f.add("events",
              stream_event(st, "on_chain_end", n, task_id(c.parent_id, n),
                           json::object{{"output", changed},
                                        {"input", st.state ? json::value(*st.state)
                                                           : json::value(json::object())}},
                           message_meta(st, c.step, n, c.parent_id), true));
    if (messages && !st.ran.empty()) {
      const std::string node = st.ran.size() == 1 ? st.ran[0] : "";
      const json::object meta = message_meta(st, c.step, node, c.parent_id);
      for (const auto& kv : raw) {
        if (!is_message_list(kv.value())) continue;
        for (const auto& m : changed.at(kv.key()).as_array()) {
          const auto* id = m.as_object().if_contains("id");
          const std::string key = id && id->is_string() ? std::string(id->as_string()) : "";
          // A message sent in pieces is not sent again: what the pieces missed (a stream that
          // dropped some, a model that changed its text at the end) goes as one more.
          const auto sent = key.empty() ? st.texts.end() : st.texts.find(key);
          const auto had = key.empty() ? st.skip.end() : st.skip.find(key);
          if (sent == st.texts.end() && had == st.skip.end()) {
            if (wants(st, "messages-tuple")) f.add("messages", json::array{m, meta});
            if (wants(st, "messages")) {
              f.add("messages/metadata", json::object{{key, json::object{{"metadata", meta}}}});
              f.add("messages/complete", json::array{m});
            }
            continue;
          }
          // Sent in pieces, by this stream or (a rejoin) to its client before: what they
          // missed, if anything, goes as one more chunk.
          const auto* content = m.as_object().if_contains("content");
          const std::string_view whole = content && content->is_string()
                                             ? std::string_view(content->as_string())
                                             : std::string_view();
          std::string_view rest;
          if (sent != st.texts.end()) {
            if (whole.size() > sent->second.size() && whole.starts_with(sent->second))
              rest = whole.substr(sent->second.size());
          } else if (had->second < whole.size()) {
            rest = whole.substr(had->second);
            rest.remove_prefix(utf8_skip_continuation(rest));  // a count inside a character
          }
          if (wants(st, "messages-tuple")) {
            if (!rest.empty())
              f.add("messages", json::array{ai_chunk_to_langchain(key, rest), meta});
            else
              f.skip();
          }
          if (wants(st, "messages")) {
            f.skip();  // its metadata went with its first piece
            f.add("messages/complete", json::array{m});
          }
          if (sent != st.texts.end()) st.texts.erase(sent);
          if (had != st.skip.end()) st.skip.erase(had);
        }
      }
    }
    if (wants(st, "values")) f.add("values", values_to_langchain(*after));
    const auto next = next_of(c);
    if (wants(st, "checkpoints") || wants(st, "debug")) {
      auto payload = checkpoint_payload(cp, c);
      if (!payload) return std::move(payload).error();
      if (wants(st, "checkpoints")) f.add("checkpoints", *payload);
      if (wants(st, "debug")) f.debug("checkpoint", timestamp, c.step, *payload);
    }
    if (wants(st, "events") && pending_status(c) == "running")  // the next step's nodes begin
      for (const auto& n : next)
        f.add("events", stream_event(st, "on_chain_start", n, task_id(c.checkpoint_id, n),
                                     json::object{{"input", values_to_langchain(*after)}},
                                     message_meta(st, c.step + 1, n, c.checkpoint_id), true));
    if (tasks && pending_status(c) == "running") {
      for (const auto& n : next) {
        json::object payload{{"id", task_id(c.checkpoint_id, n)},
                             {"name", n},
                             {"input", values_to_langchain(*after)},
                             {"triggers", json::array{"branch:to:" + n}}};
        if (wants(st, "tasks")) f.add("tasks", payload);
        if (wants(st, "debug")) f.debug("task", timestamp, c.step + 1, payload);
      }
    }
    st.state = std::move(*after);
    st.ran = next;
  }
  if (messages) piece_events(st, out, pieces_due(st));
  // The graph's run ends once the record says so (every step it committed is in `steps` by
  // then: look_up reads the record first). No id: it follows the last step's events.
  if (wants(st, "events") && (r.state == RunState::succeeded || r.state == RunState::interrupted) &&
      st.seen.checkpoint != "end" && st.state)
    out += http::sse_event(
        json::serialize(stream_event(st, "on_chain_end", "LangGraph", st.run_id,
                                     json::object{{"output", *st.state}}, {}, false)),
        "events");
  // A failed run's end is its error; a cancelled one's says so (a reply cut in the middle is
  // not in the thread: the client is told the run stopped, not left with half a message).
  if ((r.state == RunState::failed || r.state == RunState::cancelled) &&
      st.seen.checkpoint != "end")
    out += "id: end\n" +
           http::sse_event(
               json::serialize(json::object{
                   {"error", !r.error_code.empty()            ? r.error_code
                             : r.state == RunState::cancelled ? std::string("cancelled")
                                                              : std::string("error")},
                   {"message", !r.error.empty() ? r.error : "run " + r.id + " was cancelled"}}),
               "error");
  return out;
}

}  // namespace weir::serve
