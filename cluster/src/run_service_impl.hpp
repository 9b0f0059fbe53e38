// What the run service's two backends share (run_service.hpp): the folder of workflows, how a
// request becomes a run's record, and the registry of watches.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weir/cluster/run_service.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/events.hpp"
#include "weir/graph/workflow.hpp"

namespace weir::cluster {

// A workflow file a run may name: its text (what a run carries) and its checked spec.
struct WorkflowFile {
  std::string name;
  std::string file;  // absolute
  std::string text;
  std::string sha256;
  std::shared_ptr<const graph::WorkflowSpec> spec;
};

// Every *.json file of `dir`, loaded and checked, by name. Errors: invalid_argument (not a
// folder, no workflow in it, two with one name), invalid_workflow (a file's report).
// A crew file is served as a workflow of one crew node (agents::crew_workflow_text: its text
// is that workflow's, its file the crew file) when `crew_model` names a model; else it is left
// out. Group-chat files are left out. What is left out is added to `left_out` (when given), each
// with why; a folder with nothing else is invalid_argument saying so.
Result<std::map<std::string, std::shared_ptr<const WorkflowFile>>> load_workflow_folder(
    const std::filesystem::path& dir, const std::filesystem::path& crew_model = {},
    std::vector<std::string>* left_out = nullptr);

// options.workflows (when given) loaded into `folder`, its names into `names` (sorted), their
// specs into `specs`.
Status load_folder(
    const RunServiceOptions& options,
    std::map<std::string, std::shared_ptr<const WorkflowFile>>& folder,
    std::vector<std::string>& names,
    std::map<std::string, std::shared_ptr<const graph::WorkflowSpec>, std::less<>>& specs);

// The workflow a request names (a name of `folder`, or a file read now), with its input checked
// against the workflow's "input" list. Errors: see RunService::submit.
Result<std::shared_ptr<const WorkflowFile>> resolve_request(
    const RunRequest& rq, const std::map<std::string, std::shared_ptr<const WorkflowFile>>& folder,
    const std::vector<std::string>& names);

// A workflow file read and checked: its text, name (the file's stem when it has none), hash
// and spec. Errors: read_json_file's, invalid_workflow (the loader's report).
Result<std::shared_ptr<WorkflowFile>> load_workflow_file(const std::filesystem::path& p,
                                                         std::string text);

// The thread's latest checkpoint, which must say it is interrupted (for resume()).
Result<graph::Checkpoint> interrupted_checkpoint(const graph::Checkpointer& cp,
                                                 const std::string& thread_id);

// Watches by run id (RunService::watch). notify() calls the run's functions under the
// registry's lock, so a destroyed watch has no call in flight and none starts after; a watch
// may outlive the registry.
class WatchRegistry {
 public:
  WatchRegistry();
  std::unique_ptr<RunWatch> add(std::string run_id, std::function<void()> on_change);
  // A watch of the run's message text (RunService::watch_text), told by notify_text.
  std::unique_ptr<RunWatch> add_text(std::string run_id,
                                     std::function<void(const graph::MessageText&)> on_text);
  void notify(const std::string& run_id);
  void notify_text(const std::string& run_id, const graph::MessageText& text);
  void notify_all();
  std::vector<std::string> watched() const;  // the run ids watched now, sorted, once each

 private:
  struct State;
  class Handle;
  std::shared_ptr<State> s_;
};

// The backends (run_service_local.cpp, run_service_postgres.cpp).
Result<std::unique_ptr<RunService>> open_local_runs(RunServiceOptions options);
Result<std::unique_ptr<RunService>> open_postgres_runs(RunServiceOptions options);

}  // namespace weir::cluster
