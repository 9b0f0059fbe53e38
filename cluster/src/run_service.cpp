// The run service (run_service.hpp): opening a backend, the one JSON shape of a run, and what
// both backends share (run_service_impl.hpp).
#include "weir/cluster/run_service.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>

#include <boost/json.hpp>

#include "run_service_impl.hpp"
#include "weir/agents/workflow.hpp"
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

Result<std::map<std::string, std::shared_ptr<const WorkflowFile>>> load_workflow_folder(
    const fs::path& dir) {
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
    auto w = std::make_shared<WorkflowFile>();
    w->file = fs::absolute(p, ec).string();
    auto text = read_json_file(p);
    if (!text) return Error(text.error().code, "--workflows: " + text.error().message);
    w->text = std::move(*text);
    auto load = graph::load_workflow_text(w->text, w->file, agents::workflow_checks());
    if (!load.ok())
      return Error(Errc::invalid_workflow, "--workflows: " + p.string() + ":\n" + load.report());
    w->name = load.spec->name.empty() ? p.stem().string() : load.spec->name;
    w->sha256 = sha256_hex(w->text);
    w->spec = std::make_shared<const graph::WorkflowSpec>(std::move(*load.spec));
    if (auto it = out.find(w->name); it != out.end())
      return Error(Errc::invalid_argument, "--workflows: two workflows are named '" + w->name +
                                               "' (" + it->second->file + " and " + w->file + ")");
    out.emplace(w->name, std::move(w));
  }
  return out;
}

Status load_folder(
    const RunServiceOptions& options,
    std::map<std::string, std::shared_ptr<const WorkflowFile>>& folder,
    std::vector<std::string>& names,
    std::map<std::string, std::shared_ptr<const graph::WorkflowSpec>, std::less<>>& specs) {
  if (options.workflows.empty()) return {};
  auto f = load_workflow_folder(options.workflows);
  if (!f) return std::move(f).error();
  folder = std::move(*f);
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
  std::shared_ptr<const WorkflowFile> wf;
  if (!rq.workflow_file.empty()) {
    auto text = read_json_file(rq.workflow_file);
    if (!text) return std::move(text).error();
    auto w = std::make_shared<WorkflowFile>();
    std::error_code ec;
    w->file = fs::absolute(rq.workflow_file, ec).string();
    w->text = std::move(*text);
    auto load = graph::load_workflow_text(w->text, w->file, agents::workflow_checks());
    if (!load.ok()) return Error(Errc::invalid_workflow, load.report());
    w->name = load.spec->name.empty() ? rq.workflow_file.stem().string() : load.spec->name;
    w->sha256 = sha256_hex(w->text);
    w->spec = std::make_shared<const graph::WorkflowSpec>(std::move(*load.spec));
    wf = std::move(w);
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
  return wf;
}

Result<graph::Checkpoint> interrupted_checkpoint(const graph::Checkpointer& cp,
                                                 const std::string& thread_id) {
  auto latest = cp.latest(thread_id);
  if (!latest) return std::move(latest).error();
  if (!*latest) return Error(Errc::not_found, "no thread '" + thread_id + "'");
  const auto* status = (**latest).pending.if_contains("status");
  if (!status || *status != "interrupted")
    return Error(Errc::invalid_argument,
                 "thread '" + thread_id + "' is not interrupted (its last step is " +
                     (status && status->is_string() ? std::string(status->as_string()) : "?") +
                     "): only an interrupted thread can be resumed");
  return std::move(**latest);
}

// --- watches ----------------------------------------------------------------------------------

// The registry's state, shared with its handles: a handle may outlive the registry.
struct WatchRegistry::State {
  std::mutex mu;
  std::uint64_t next = 0;  // GUARDED_BY(mu)
  // run id -> (key, function)
  std::multimap<std::string, std::pair<std::uint64_t, std::function<void()>>> by_run;
};

class WatchRegistry::Handle final : public RunWatch {
 public:
  Handle(std::shared_ptr<State> s, std::string run, std::uint64_t key)
      : s_(std::move(s)), run_(std::move(run)), key_(key) {}
  ~Handle() override {
    std::lock_guard lock(s_->mu);
    auto [b, e] = s_->by_run.equal_range(run_);
    for (auto it = b; it != e; ++it) {
      if (it->second.first == key_) {
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

WatchRegistry::WatchRegistry() : s_(std::make_shared<State>()) {}

std::unique_ptr<RunWatch> WatchRegistry::add(std::string run_id, std::function<void()> on_change) {
  std::lock_guard lock(s_->mu);
  const std::uint64_t key = ++s_->next;
  s_->by_run.emplace(run_id, std::pair{key, std::move(on_change)});
  return std::make_unique<Handle>(s_, std::move(run_id), key);
}

void WatchRegistry::notify(const std::string& run_id) {
  std::lock_guard lock(s_->mu);
  auto [b, e] = s_->by_run.equal_range(run_id);
  for (auto it = b; it != e; ++it) it->second.second();
}

void WatchRegistry::notify_all() {
  std::lock_guard lock(s_->mu);
  for (auto& [run, entry] : s_->by_run) entry.second();
}

std::vector<std::string> WatchRegistry::watched() const {
  std::lock_guard lock(s_->mu);
  std::vector<std::string> out;
  for (const auto& [run, entry] : s_->by_run)
    if (out.empty() || out.back() != run) out.push_back(run);
  return out;
}

}  // namespace weir::cluster
