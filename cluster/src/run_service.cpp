// The run service (run_service.hpp): opening a backend, the one JSON shape of a run, and what
// both backends share (run_service_impl.hpp).
#include "weir/cluster/run_service.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>

#include <boost/json.hpp>

#include "run_service_impl.hpp"
#include "weir/agents/crew_file.hpp"
#include "weir/agents/workflow.hpp"
#include "weir/graph/artifact_refs.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/sha256.hpp"

namespace weir::cluster {

namespace json = boost::json;
namespace fs = std::filesystem;

Result<std::unique_ptr<RunService>> RunService::open(RunServiceOptions options) {
  if (options.db.empty() && options.max_runs < 1)
    return Error(Errc::invalid_argument, "--max-runs must be at least 1");
  if (options.db.empty()) return open_local_runs(std::move(options));
  return open_postgres_runs(std::move(options));
}

// --- the one JSON shape -----------------------------------------------------------------------

namespace {

// Stored JSON text back as a value (text that does not parse is shown as a string).
json::value stored(const std::string& text) {
  if (text.empty()) return nullptr;
  auto p = parse_json(text, "stored");
  if (!p) return json::value(text);
  return std::move(p->value);
}

json::value ms_or_null(int64_t ms) {
  return ms > 0 ? json::value(ms) : json::value(nullptr);
}

json::value text_or_null(const std::string& s) {
  return s.empty() ? json::value(nullptr) : json::value(s);
}

}  // namespace

json::object run_json(const RunRecord& r) {
  json::object o{
      {"id", r.id},
      {"object", "run"},
      {"workflow", r.workflow_name},
      {"workflow_file", text_or_null(r.workflow_file)},
      {"workflow_sha256", text_or_null(r.workflow_sha256)},
      {"thread_id", r.thread_id},
      {"state", run_state_name(r.state)},
      {"attempts", r.attempts},
      {"max_attempts", r.max_attempts},
      {"cancel_requested", r.cancel_requested},
      {"worker", text_or_null(r.lease_owner)},
      {"lease_expires_at_ms", ms_or_null(r.lease_expires_ms)},
      {"fence", r.fence},
      {"created_at_ms", ms_or_null(r.created_ms)},
      {"started_at_ms", ms_or_null(r.started_ms)},
      {"finished_at_ms", ms_or_null(r.finished_ms)},
      {"input", stored(r.input)},
      {"result", stored(r.result)},
      {"error", r.error_code.empty() && r.error.empty()
                    ? json::value(nullptr)
                    : json::value(json::object{{"code", r.error_code}, {"message", r.error}})}};
  if (!r.resume.empty()) o["resume"] = stored(r.resume);
  o["traceparent"] = text_or_null(r.traceparent);
  return o;
}

std::string controls_text(const RunControls& c) {
  if (c.empty()) return {};
  json::object o;
  auto names = [](const std::vector<std::string>& v) {
    json::array a;
    for (const auto& n : v) a.emplace_back(n);
    return a;
  };
  if (!c.interrupt_before.empty()) o["interrupt_before"] = names(c.interrupt_before);
  if (!c.interrupt_after.empty()) o["interrupt_after"] = names(c.interrupt_after);
  if (c.recursion_limit > 0) o["recursion_limit"] = c.recursion_limit;
  if (!c.go_to.empty()) o["go_to"] = names(c.go_to);
  if (!c.go_to_sends.empty()) {
    json::array sends;
    for (const auto& [node, input] : c.go_to_sends)
      sends.push_back(json::object{{"node", node}, {"input", input}});
    o["go_to_sends"] = std::move(sends);
  }
  if (!c.metadata.empty()) o["metadata"] = c.metadata;
  if (!c.multitask_strategy.empty()) o["multitask_strategy"] = c.multitask_strategy;
  if (!c.assistant_id.empty()) o["assistant_id"] = c.assistant_id;
  if (c.subgraph_steps) o["subgraph_steps"] = true;
  return json::serialize(o);
}

Result<RunControls> parse_controls(std::string_view text) {
  RunControls c;
  if (text.empty()) return c;
  auto v = parse_json(text, "the run's controls");
  if (!v) return std::move(v).error();
  auto wrong = [&] {
    return Error(Errc::invalid_argument,
                 "the run's controls are not controls: " + std::string(text.substr(0, 200)));
  };
  if (!v->value.is_object()) return wrong();
  for (const auto& kv : v->value.as_object()) {
    if (kv.key() == "interrupt_before" || kv.key() == "interrupt_after" || kv.key() == "go_to") {
      auto& to = kv.key() == "interrupt_before" ? c.interrupt_before
                 : kv.key() == "go_to"          ? c.go_to
                                                : c.interrupt_after;
      if (!kv.value().is_array()) return wrong();
      for (const auto& n : kv.value().as_array()) {
        if (!n.is_string()) return wrong();
        to.emplace_back(n.as_string());
      }
    } else if (kv.key() == "go_to_sends" && kv.value().is_array()) {
      for (const auto& s : kv.value().as_array()) {
        const auto* o = s.if_object();
        const auto* node = o ? o->if_contains("node") : nullptr;
        if (!node || !node->is_string()) return wrong();
        const auto* input = o->if_contains("input");
        c.go_to_sends.emplace_back(std::string(node->as_string()),
                                   input ? *input : json::value(nullptr));
      }
    } else if (kv.key() == "recursion_limit" && kv.value().is_int64()) {
      c.recursion_limit = static_cast<int>(kv.value().as_int64());
    } else if (kv.key() == "metadata" && kv.value().is_object()) {
      c.metadata = kv.value().as_object();
    } else if (kv.key() == "multitask_strategy" && kv.value().is_string()) {
      c.multitask_strategy = kv.value().as_string();
    } else if (kv.key() == "assistant_id" && kv.value().is_string()) {
      c.assistant_id = kv.value().as_string();
    } else if (kv.key() == "subgraph_steps" && kv.value().is_bool()) {
      c.subgraph_steps = kv.value().as_bool();
    } else {
      return wrong();
    }
  }
  return c;
}

Status check_controls(const graph::WorkflowSpec& spec, const RunControls& c) {
  std::vector<std::string> go_to = c.go_to;  // a Send's node is a node goto names
  for (const auto& [node, input] : c.go_to_sends) go_to.push_back(node);
  for (const auto* list : {&c.interrupt_before, &c.interrupt_after,
                           static_cast<const std::vector<std::string>*>(&go_to)}) {
    const char* what = list == &c.interrupt_before  ? "interrupt_before"
                       : list == &c.interrupt_after ? "interrupt_after"
                                                    : "command.goto";
    for (const auto& n : *list) {
      if (n == "*" && list != &go_to) continue;
      const bool known = std::any_of(spec.nodes.begin(), spec.nodes.end(),
                                     [&](const graph::NodeSpec& s) { return s.name == n; });
      if (known) continue;
      std::string nodes;
      for (const auto& s : spec.nodes) nodes += (nodes.empty() ? "" : ", ") + s.name;
      return Error(Errc::invalid_argument, "'" + std::string(what) + "' names node '" +
                                               n.substr(0, 200) + "', which " + spec.name +
                                               " does not have (its nodes: " + nodes +
                                               (list == &go_to ? ")" : "; \"*\" for all)"));
    }
  }
  const int cap = spec.limits.recursion_limit ? static_cast<int>(*spec.limits.recursion_limit)
                                              : graph::GraphLimits{}.recursion_limit;
  if (c.recursion_limit < 0 || c.recursion_limit > cap)
    return Error(Errc::invalid_argument,
                 "'recursion_limit' " + std::to_string(c.recursion_limit) + " is not within 1 to " +
                     std::to_string(cap) + ", " + spec.name +
                     "'s cap (its limits.recursion_limit): a run may lower its cap, not raise it");
  return {};
}

std::string run_traceparent(std::string_view given) {
  if (auto p = trace::parse_traceparent(given)) return trace::format_traceparent(*p);
  return trace::format_traceparent({trace::random_trace_id(), trace::random_span_id(), 1, ""});
}

json::object run_list_json(const RunList& l) {
  json::array data;
  data.reserve(l.runs.size());
  for (const auto& r : l.runs) data.emplace_back(run_json(r));
  return json::object{
      {"object", "list"},
      {"data", std::move(data)},
      {"has_more", l.has_more},
      {"last_id", l.runs.empty() ? json::value(nullptr) : json::value(l.runs.back().id)}};
}

// --- workflows --------------------------------------------------------------------------------

std::string cpp_graph_text(std::string_view name) {
  return json::serialize(json::object{{"$cpp_graph", name}});
}

std::optional<std::string> cpp_graph_name(std::string_view workflow_text) {
  if (!workflow_text.starts_with(R"({"$cpp_graph":)")) return std::nullopt;  // the fast no
  boost::system::error_code ec;
  const json::value v = json::parse(workflow_text, ec);
  const auto* o = ec ? nullptr : v.if_object();
  const auto* n = o && o->size() == 1 ? o->if_contains("$cpp_graph") : nullptr;
  if (!n || !n->is_string()) return std::nullopt;
  return std::string(n->as_string());
}

Result<std::shared_ptr<WorkflowFile>> load_workflow_file(const fs::path& p, std::string text) {
  auto w = std::make_shared<WorkflowFile>();
  std::error_code ec;
  w->file = fs::absolute(p, ec).string();
  w->text = std::move(text);
  auto load = graph::load_workflow_text(w->text, w->file, agents::workflow_checks());
  if (!load.ok()) return Error(Errc::invalid_workflow, load.report());
  w->name = load.spec->name.empty() ? p.stem().string() : load.spec->name;
  w->sha256 = sha256_hex(w->text);
  w->spec = std::make_shared<const graph::WorkflowSpec>(std::move(*load.spec));
  return w;
}

Result<std::map<std::string, std::shared_ptr<const WorkflowFile>>> load_workflow_folder(
    const fs::path& dir, const fs::path& crew_model, std::vector<std::string>* left_out) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Error(Errc::invalid_argument, "--workflows: '" + dir.string() + "' is not a folder");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty())
    return Error(Errc::invalid_argument,
                 "--workflows: '" + dir.string() + "' holds no workflow file (*.json)");
  std::map<std::string, std::shared_ptr<const WorkflowFile>> out;
  for (const auto& p : files) {
    auto text = read_json_file(p);
    if (!text) return Error(text.error().code, "--workflows: " + text.error().message);
    // A crew file (samples/crews) runs as a workflow of one crew node when it has a model; a
    // group chat is left out, and said.
    boost::system::error_code jec;
    if (const auto doc = json::parse(*text, jec); !jec && agents::is_agents_document(doc)) {
      const bool crew = doc.as_object().at("kind") == "crew";
      if (!crew || crew_model.empty()) {
        if (left_out)
          left_out->push_back(
              p.filename().string() +
              (crew ? " (a crew file: it runs on the model --model gives, and none was given)"
                    : " (a group-chat file: run it with `weir run FILE`)"));
        continue;
      }
      auto wrapped = agents::crew_workflow_text(*text, p, crew_model);
      if (!wrapped) return Error(wrapped.error().code, "--workflows: " + wrapped.error().message);
      *text = std::move(*wrapped);
    }
    auto loaded = load_workflow_file(p, std::move(*text));
    if (!loaded)
      return Error(loaded.error().code,
                   "--workflows: " + p.string() + ":\n" + loaded.error().message);
    auto w = std::move(*loaded);
    if (auto it = out.find(w->name); it != out.end())
      return Error(Errc::invalid_argument, "--workflows: two workflows are named '" + w->name +
                                               "' (" + it->second->file + " and " + w->file + ")");
    out.emplace(w->name, std::move(w));
  }
  if (out.empty() && left_out && !left_out->empty()) {
    std::string list;
    for (const auto& c : *left_out) list += (list.empty() ? "" : "; ") + c;
    return Error(Errc::invalid_argument,
                 "--workflows: '" + dir.string() + "' holds nothing the run service runs: " + list);
  }
  return out;
}

Status load_folder(
    const RunServiceOptions& options,
    std::map<std::string, std::shared_ptr<const WorkflowFile>>& folder,
    std::vector<std::string>& names,
    std::map<std::string, std::shared_ptr<const graph::WorkflowSpec>, std::less<>>& specs) {
  if (!options.workflows.empty()) {
    std::vector<std::string> left_out;
    auto f = load_workflow_folder(options.workflows, options.crew_model, &left_out);
    if (!f) return std::move(f).error();
    if (options.log)
      for (const auto& c : left_out)
        options.log(options.workflows.string() + "/" + c + ": left out");
    folder = std::move(*f);
  }
  for (const auto& g : options.graphs) {
    if (g.name.empty() || !g.graph)
      return Error(Errc::invalid_argument, "a C++ graph needs a name and a compiled graph");
    if (auto it = folder.find(g.name); it != folder.end())
      return Error(
          Errc::invalid_argument,
          "two workflows are named '" + g.name + "' (the C++ graph and " +
              (it->second->file.empty() ? std::string("another C++ graph") : it->second->file) +
              ")");
    auto w = std::make_shared<WorkflowFile>();
    w->name = g.name;
    w->text = cpp_graph_text(g.name);
    w->sha256 = sha256_hex(w->text);
    w->spec = std::make_shared<const graph::WorkflowSpec>(g.graph->describe(g.name, g.description));
    folder.emplace(g.name, std::move(w));
  }
  for (const auto& [n, w] : folder) {
    names.push_back(n);
    specs[n] = w->spec;
  }
  return {};
}

std::shared_ptr<const graph::WorkflowSpec> RunService::workflow(std::string_view name) const {
  auto it = specs_.find(name);
  return it == specs_.end() ? nullptr : it->second;
}

Result<std::shared_ptr<const WorkflowFile>> resolve_request(
    const RunRequest& rq, const std::map<std::string, std::shared_ptr<const WorkflowFile>>& folder,
    const std::vector<std::string>& names) {
  if (rq.delay.count() < 0 || rq.delay > kMaxRunDelay)
    return Error(Errc::invalid_argument,
                 "a run's delay must be from 0 to " + std::to_string(kMaxRunDelay.count()) +
                     " ms (a day), got " + std::to_string(rq.delay.count()) + " ms");
  std::shared_ptr<const WorkflowFile> wf;
  if (!rq.workflow_file.empty()) {
    auto text = read_json_file(rq.workflow_file);
    if (!text) return std::move(text).error();
    auto w = load_workflow_file(rq.workflow_file, std::move(*text));
    if (!w) return std::move(w).error();
    wf = std::move(*w);
  } else {
    auto it = folder.find(rq.workflow);
    if (it == folder.end()) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      return Error(Errc::not_found,
                   "no workflow '" + rq.workflow + "' (this server runs: " + list + ")");
    }
    wf = it->second;
  }
  if (auto s = graph::check_input_channels(wf->spec->input, wf->name, rq.input, rq.input_source);
      !s)
    return std::move(s).error();
  if (auto s = check_controls(*wf->spec, rq.controls); !s) return std::move(s).error();
  return wf;
}

Status check_resumable(const std::string& thread_id, const graph::Checkpoint* latest) {
  if (!latest) return Error(Errc::not_found, "no thread '" + thread_id + "'");
  const auto* status = latest->pending.if_contains("status");
  if (!status || *status != "interrupted")
    return Error(Errc::invalid_argument,
                 "thread '" + thread_id + "' is not interrupted (its last step is " +
                     (status && status->is_string() ? std::string(status->as_string()) : "?") +
                     "): only an interrupted thread can be resumed");
  return {};
}

Result<graph::Checkpoint> interrupted_checkpoint(const graph::Checkpointer& cp,
                                                 const std::string& thread_id) {
  auto latest = cp.latest(thread_id);
  if (!latest) return std::move(latest).error();
  if (auto s = check_resumable(thread_id, *latest ? &**latest : nullptr); !s)
    return std::move(s).error();
  return std::move(**latest);
}

// --- watches ----------------------------------------------------------------------------------

// The registry's state, shared with its handles: a handle may outlive the registry.
struct WatchRegistry::State {
  struct Entry {
    std::uint64_t key = 0;
    std::function<void()> on_change;                         // add()
    std::function<void(const graph::MessageText&)> on_text;  // add_text()
  };
  std::mutex mu;
  std::uint64_t next = 0;                    // GUARDED_BY(mu)
  std::multimap<std::string, Entry> by_run;  // GUARDED_BY(mu)

  std::unique_ptr<RunWatch> add(const std::shared_ptr<State>& self, std::string run_id, Entry e);
};

class WatchRegistry::Handle final : public RunWatch {
 public:
  Handle(std::shared_ptr<State> s, std::string run, std::uint64_t key)
      : s_(std::move(s)), run_(std::move(run)), key_(key) {}
  ~Handle() override {
    std::lock_guard lock(s_->mu);
    auto [b, e] = s_->by_run.equal_range(run_);
    for (auto it = b; it != e; ++it) {
      if (it->second.key == key_) {
        s_->by_run.erase(it);
        break;
      }
    }
  }

 private:
  std::shared_ptr<State> s_;
  std::string run_;
  std::uint64_t key_;
};

std::unique_ptr<RunWatch> WatchRegistry::State::add(const std::shared_ptr<State>& self,
                                                    std::string run_id, Entry e) {
  std::lock_guard lock(mu);
  e.key = ++next;
  const std::uint64_t key = e.key;
  by_run.emplace(run_id, std::move(e));
  return std::make_unique<Handle>(self, std::move(run_id), key);
}

WatchRegistry::WatchRegistry() : s_(std::make_shared<State>()) {}

std::unique_ptr<RunWatch> WatchRegistry::add(std::string run_id, std::function<void()> on_change) {
  return s_->add(s_, std::move(run_id), State::Entry{0, std::move(on_change), {}});
}

std::unique_ptr<RunWatch> WatchRegistry::add_text(
    std::string run_id, std::function<void(const graph::MessageText&)> on_text) {
  return s_->add(s_, std::move(run_id), State::Entry{0, {}, std::move(on_text)});
}

void WatchRegistry::notify(const std::string& run_id) {
  std::lock_guard lock(s_->mu);
  auto [b, e] = s_->by_run.equal_range(run_id);
  for (auto it = b; it != e; ++it)
    if (it->second.on_change) it->second.on_change();
}

void WatchRegistry::notify_text(const std::string& run_id, const graph::MessageText& text) {
  std::lock_guard lock(s_->mu);
  auto [b, e] = s_->by_run.equal_range(run_id);
  for (auto it = b; it != e; ++it)
    if (it->second.on_text) it->second.on_text(text);
}

void WatchRegistry::notify_all() {
  std::lock_guard lock(s_->mu);
  for (auto& [run, entry] : s_->by_run)
    if (entry.on_change) entry.on_change();
}

std::vector<std::string> WatchRegistry::watched() const {
  std::lock_guard lock(s_->mu);
  std::vector<std::string> out;
  for (const auto& [run, entry] : s_->by_run)
    if (entry.on_change && (out.empty() || out.back() != run)) out.push_back(run);
  return out;
}

// --- threads outside runs -------------------------------------------------------------------

namespace {

// Runs `f(token)` with `thread` held (RunService::hold_thread) and claimed.
template <class F>
auto with_thread(graph::Checkpointer& cp, const std::string& thread,
                 Result<std::shared_ptr<void>> held, F f) -> decltype(f(std::string())) {
  if (!held) return std::move(held).error();
  const std::string token = graph::new_claim_token();
  auto claim = cp.claim_thread(thread, graph::this_process_holder(token, 30'000));
  if (!claim) return std::move(claim).error();
  auto out = f(token);
  (void)cp.release_thread(thread, token);
  return out;
}

// A checkpoint written outside a run takes the metadata of the one it follows, but is no step
// of that checkpoint's run: the run is named "branched_from_run" instead of "queue_run" (what
// tells a run's steps, and its end, from others'), so a resume still finds the workflow by it.
json::object branch_metadata(json::object m) {
  if (auto q = m.find("queue_run"); q != m.end()) {
    json::value run = q->value();
    m.erase("queue_run");
    m.erase("attempt");
    m["branched_from_run"] = std::move(run);
  }
  return m;
}

}  // namespace

Result<graph::Checkpoint> RunService::branch_thread(const std::string& thread,
                                                    const std::string& from, json::object writes,
                                                    json::object metadata, bool settle) {
  graph::Checkpointer& cp = writable_checkpointer();
  return with_thread(
      cp, thread, hold_thread(thread), [&](const std::string& token) -> Result<graph::Checkpoint> {
        auto base = from.empty() ? cp.latest(thread) : cp.get(thread, from);
        if (!base) return std::move(base).error();
        if (!*base)
          return Error(Errc::not_found,
                       from.empty()
                           ? "thread '" + thread + "' has no checkpoint"
                           : "checkpoint '" + from + "' is not one of thread '" + thread + "'");
        const graph::Checkpoint& b = **base;
        graph::Checkpoint c;
        c.thread_id = thread;
        c.step = b.step + (writes.empty() ? 0 : 1);
        c.checkpoint_id = graph::new_checkpoint_id(c.step);
        c.parent_id = b.checkpoint_id;
        c.writes = std::move(writes);
        c.pending = settle ? json::object{{"status", "done"}, {"next", json::array{}}} : b.pending;
        c.metadata = branch_metadata(b.metadata);
        for (const auto& kv : metadata) c.metadata[kv.key()] = kv.value();
        c.claim_token = token;
        if (auto s = cp.put(c); !s) return std::move(s).error();
        c.claim_token.clear();
        auto stored = cp.get(thread, c.checkpoint_id);
        if (!stored) return std::move(stored).error();
        return stored->value_or(std::move(c));
      });
}

Result<graph::Checkpoint> RunService::root_thread(const std::string& thread,
                                                  json::object metadata) {
  graph::Checkpointer& cp = writable_checkpointer();
  return with_thread(cp, thread, hold_thread(thread),
                     [&](const std::string& token) -> Result<graph::Checkpoint> {
                       graph::Checkpoint c;
                       c.thread_id = thread;
                       c.step = -1;
                       c.checkpoint_id = graph::new_checkpoint_id(c.step);
                       c.pending = json::object{{"status", "done"}, {"next", json::array{}}};
                       c.metadata = std::move(metadata);
                       c.claim_token = token;
                       if (auto s = cp.put(c); !s) return std::move(s).error();
                       c.claim_token.clear();
                       return c;
                     });
}

Status RunService::copy_thread(const std::string& from, const std::string& to) {
  graph::Checkpointer& cp = writable_checkpointer();
  // Not a thread a run is changing: its copy would be a state half-way through a step's run.
  auto source = hold_thread(from);
  if (!source) return std::move(source).error();
  constexpr std::size_t kMaxCopied = 100'000;
  auto list = cp.list(from, kMaxCopied + 1);
  if (!list) return std::move(list).error();
  if (list->empty()) return Error(Errc::not_found, "no thread '" + from + "'");
  if (list->size() > kMaxCopied)
    return Error(Errc::invalid_argument, "thread '" + from + "' has more than " +
                                             std::to_string(kMaxCopied) +
                                             " checkpoints: too many to copy");
  return with_thread(cp, to, hold_thread(to), [&](const std::string& token) -> Status {
    auto there = cp.latest(to);
    if (!there) return std::move(there).error();
    if (*there) return Error(Errc::invalid_argument, "thread '" + to + "' exists already");
    for (auto it = list->rbegin(); it != list->rend(); ++it) {  // oldest first: parents first
      graph::Checkpoint c = std::move(*it);
      std::vector<std::string> ids;
      const auto add = [&](const std::string& id) { ids.push_back(id); };
      graph::for_each_artifact_id(c.writes, add);
      graph::for_each_artifact_id(c.pending, add);
      for (const auto& id : ids) {
        auto a = cp.get_artifact(from, id);
        if (!a) return std::move(a).error();
        if (*a) c.artifacts.push_back(std::move(**a));
      }
      c.thread_id = to;
      c.claim_token = token;
      if (auto s = cp.put(c); !s) return s;
    }
    return {};
  });
}

Status RunService::delete_thread(const std::string& thread) {
  graph::Checkpointer& cp = writable_checkpointer();
  auto held = hold_thread(thread);
  if (!held) return std::move(held).error();
  // A claim of a run that ended without releasing it would stand in the way: delete_thread
  // removes the claim too, so no claim is taken here.
  return cp.delete_thread(thread);
}

Result<std::size_t> RunService::keep_latest(const std::string& thread) {
  graph::Checkpointer& cp = writable_checkpointer();
  return with_thread(cp, thread, hold_thread(thread),
                     [&](const std::string& token) -> Result<std::size_t> {
                       auto latest = cp.latest(thread);
                       if (!latest) return std::move(latest).error();
                       if (!*latest) return Error(Errc::not_found, "no thread '" + thread + "'");
                       const graph::Checkpoint& l = **latest;
                       auto state = cp.state_at(thread, l.checkpoint_id);
                       if (!state) return std::move(state).error();
                       graph::Checkpoint c;
                       c.thread_id = thread;
                       c.checkpoint_id = graph::new_checkpoint_id(l.step);
                       c.parent_id = l.checkpoint_id;
                       c.step = l.step;
                       c.writes = std::move(*state);
                       c.writes["$snapshot"] = true;
                       c.pending = l.pending;
                       c.metadata = branch_metadata(l.metadata);
                       c.metadata["source"] = "prune";
                       c.claim_token = token;
                       if (auto s = cp.put(c); !s) return std::move(s).error();
                       graph::Retention keep;
                       keep.keep_last = 1;
                       return cp.prune(thread, keep);
                     });
}

}  // namespace weir::cluster
