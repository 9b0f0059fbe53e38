// weir submit, weir worker, weir runs, weir cancel: the run queue in PostgreSQL, through the run
// service (weir::cluster; docs/scale-out.md): the runs API's doors, record and JSON shape.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <boost/json.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "trace_flags.hpp"
#include "weir/cluster/run_queue.hpp"
#include "weir/cluster/run_service.hpp"
#include "weir/cluster/worker.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/json_write.hpp"

namespace weir::cli {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

// --db, else $WEIR_DB; nullopt (after saying so) when neither is given.
std::optional<std::string> db_of(Flags& f) {
  if (auto d = f.get("--db")) return d;
  if (const char* e = std::getenv("WEIR_DB"); e && *e) return std::string(e);
  f.fail("give the queue's database: --db postgres://USER@HOST:PORT/DB (or set WEIR_DB)");
  return std::nullopt;
}

// The queue's service as a client: no worker of its own (max_runs 0).
// `weir submit`'s default bound on queued runs: a queue in PostgreSQL holds runs on disk, and an
// operator queues batches (serve's HTTP clients keep its smaller --max-queued-runs default).
constexpr std::size_t kSubmitMaxQueuedRuns = 100'000;

Result<std::unique_ptr<cluster::RunService>> open_queue(
    const std::string& db, std::size_t max_queued_runs = kSubmitMaxQueuedRuns) {
  cluster::RunServiceOptions o;
  o.db = db;
  o.max_runs = 0;
  o.max_queued_runs = max_queued_runs;
  return cluster::RunService::open(std::move(o));
}

std::string ago(std::int64_t then_ms) {
  if (then_ms == 0) return "-";
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  const auto s = std::max<std::int64_t>(0, (now - then_ms) / 1000);
  if (s < 120) return std::to_string(s) + " s ago";
  if (s < 7200) return std::to_string(s / 60) + " min ago";
  return std::to_string(s / 3600) + " h ago";
}

// What `weir cancel` did, in words. A queued run that had run before (its worker stopped or it
// was handed back) is told apart from one that never started, with the steps it had committed.
std::string cancel_text(const cluster::RunService& runs, const cluster::CancelOutcome& c) {
  using cluster::RunState;
  const auto& before = c.before;
  if (c.after.state == RunState::running)
    return "cancel requested; its worker stops it before its next superstep";
  // Running when read, ended when read again: its worker took the cancel that quickly, or the
  // run ended on its own in between.
  if (before.state == RunState::running)
    return c.after.state == RunState::cancelled
               ? std::string("cancelled; its worker stopped it before its next superstep")
               : std::string("it ended ") + cluster::run_state_name(c.after.state) +
                     " before the cancel reached it";
  if (before.state != RunState::queued || c.after.state != RunState::cancelled)
    return std::string("already ") + cluster::run_state_name(before.state) + "; nothing to cancel";
  if (before.started_ms == 0) return "cancelled (it had not started)";
  // Its checkpoints on its thread (newest first, until another run's).
  std::size_t steps = 0;
  auto list = runs.checkpointer().list(before.thread_id, 100000);
  if (list) {
    for (const auto& cp : *list) {
      const auto* q = cp.metadata.if_contains("queue_run");
      if (!q || !q->is_string() || q->as_string() != before.id) break;
      ++steps;
    }
  }
  return "cancelled while it waited to continue (it had started: " +
         (list ? std::to_string(steps) + " checkpoint" + (steps == 1 ? "" : "s")
               : std::string("its checkpoints could not be read: ") + list.error().message) +
         " on thread '" + before.thread_id + "', kept)";
}

std::atomic<cluster::Worker*> g_worker{nullptr};
extern "C" void on_stop_signal(int) {
  if (auto* w = g_worker.load()) w->stop();
}

}  // namespace

int cmd_submit(Args args) {
  Flags f("submit",
          {"--input", "--db", "--thread", "--max-attempts", "--max-queued-runs", "--otlp-endpoint",
           "--trace"},
          {"--trace-content"});
  if (!f.parse(args)) return kExitInvalidInput;
  if (f.positional().size() != 1) return f.fail("give one workflow file"), kExitInvalidInput;
  const std::string file = f.positional()[0];
  if (file == "-" || file == "/dev/stdin")
    return f.fail(
               "a queued run carries its workflow file's text and path: give a file, not "
               "standard input"),
           kExitInvalidInput;
  cluster::RunRequest req;
  req.workflow_file = file;
  req.input_source = "--input";
  req.max_attempts = cluster::kDefaultMaxAttempts;
  if (!f.integer("--max-attempts", req.max_attempts, 1, 1000)) return kExitInvalidInput;
  std::size_t max_queued = kSubmitMaxQueuedRuns;
  if (!f.integer("--max-queued-runs", max_queued, std::size_t{1}, std::size_t{10'000'000}))
    return kExitInvalidInput;
  auto db = db_of(f);
  if (!db) return kExitInvalidInput;
  if (auto in = f.get("--input")) {
    std::string source = "--input", raw = *in;
    if (!raw.empty() && raw[0] == '@') {
      source = raw.substr(1);
      auto t = read_json_file(source);
      if (!t)
        return std::fprintf(stderr, "weir submit: --input: %s\n", t.error().message.c_str()),
               kExitInvalidInput;
      raw = std::move(*t);
    }
    auto parsed = parse_json(raw, source);
    if (!parsed)
      return std::fprintf(stderr, "weir submit: %s\n", parsed.error().message.c_str()),
             kExitInvalidInput;
    if (!parsed->value.is_object())
      return f.fail("--input must be a JSON object of channel values"), kExitInvalidInput;
    req.input = std::move(parsed->value.as_object());
  }
  req.thread_id = f.get("--thread").value_or("");
  if (f.has("--thread") && req.thread_id.empty())
    return f.fail("--thread is empty (leave it out and the run's id names its thread)"),
           kExitInvalidInput;
  auto queue = open_queue(*db, max_queued);
  if (!queue) return store_failed("submit", queue.error());
  // The run's trace: this submit's span when traced (else the service starts a trace of the
  // run's own), so every worker that takes the run (after a crash, another) continues one trace.
  std::shared_ptr<trace::Tracer> tracer;
  if (!open_tracer(f, tracer)) return kExitInvalidInput;
  trace::Span span;
  if (tracer) {
    span = tracer->start_span("submit " + req.workflow_file.stem().string(), nullptr,
                              trace::SpanKind::client);
    span.set("weir.workflow.file", req.workflow_file.string());
  }
  if (span.context().valid()) req.traceparent = trace::format_traceparent(span.context());
  auto run = (*queue)->submit(std::move(req));
  if (run) span.set("weir.workflow.name", run->workflow_name);
  if (run) span.set(trace::attr::kRunId, run->id);
  if (!run) span.set_error(run.error());
  span.end();
  close_tracer(tracer);
  if (!run) {
    // A file that does not load prints its report as `weir validate` does.
    if (run.error().is(Errc::invalid_workflow)) {
      const std::string& m = run.error().message;
      std::fputs((m.empty() || m.back() == '\n' ? m : m + "\n").c_str(), stderr);
      return kExitInvalidInput;
    }
    return store_failed("submit", run.error());
  }
  std::printf("%s\n", run->id.c_str());
  std::fprintf(stderr, "weir submit: queued %s (%s, thread '%s') in %s\n", run->id.c_str(),
               run->workflow_name.c_str(), run->thread_id.c_str(), (*queue)->description().c_str());
  return kExitOk;
}

int cmd_worker(Args args) {
  Flags f("worker",
          {"--db", "--max-runs", "--lease", "--memory", "--name", "--poll", "--connect-timeout",
           "--otlp-endpoint", "--trace"},
          {"--once", "--exit-when-idle", "--trace-content"});
  if (!f.parse(args)) return kExitInvalidInput;
  if (!f.positional().empty())
    return f.fail("unexpected argument '" + f.positional()[0] + "'"), kExitInvalidInput;
  cluster::WorkerOptions o;
  if (!f.integer("--max-runs", o.max_runs, std::size_t{1}, std::size_t{10'000}))
    return kExitInvalidInput;
  for (auto [flag, out, min] :
       {std::tuple{"--lease", &o.lease, std::chrono::milliseconds(100)},
        std::tuple{"--poll", &o.poll, std::chrono::milliseconds(10)},
        std::tuple{"--connect-timeout", &o.connect_timeout, std::chrono::milliseconds(1)}}) {
    if (auto d = f.get(flag)) {
      if (std::string_view(flag) == "--connect-timeout" && (*d == "0" || *d == "0s")) {
        *out = std::chrono::milliseconds(0);  // try once
        continue;
      }
      auto ms = parse_duration(*d);
      if (!ms || *ms < min)
        return f.fail(std::string(flag) + " expects a duration of at least " +
                      std::to_string(min.count()) + "ms such as 10s or 500ms, got '" + *d + "'"),
               kExitInvalidInput;
      *out = *ms;
    }
  }
  if (auto m = f.get("--memory")) {
    auto bytes = graph::parse_byte_size(json::value(json::string(*m)));
    if (!bytes || *bytes < (1 << 20))
      return f.fail("--memory expects a size of at least 1MiB such as 512MiB or 2GiB, got '" + *m +
                    "'"),
             kExitInvalidInput;
    o.memory_limit = static_cast<std::size_t>(*bytes);
  }
  o.once = f.has("--once");
  o.exit_when_idle = f.has("--exit-when-idle");
  if (o.once && o.exit_when_idle)
    return f.fail("--once and --exit-when-idle exclude each other"), kExitInvalidInput;
  o.name = f.get("--name").value_or("");
  auto db = db_of(f);
  if (!db) return kExitInvalidInput;
  o.db = *db;
  o.log = [](const std::string& line) { std::fprintf(stderr, "weir worker: %s\n", line.c_str()); };
  std::shared_ptr<trace::Tracer> tracer;
  if (!open_tracer(f, tracer)) return kExitInvalidInput;
  o.tracer = tracer.get();
  cluster::Worker worker(std::move(o));
  g_worker = &worker;
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  auto stats = worker.run();
  g_worker = nullptr;
  close_tracer(tracer);
  if (!stats) return store_failed("worker", stats.error());
  std::fprintf(stderr,
               "weir worker: %zu claimed: %zu succeeded, %zu failed, %zu cancelled, %zu "
               "interrupted, %zu lost to another worker, %zu handed back\n",
               stats->claimed, stats->succeeded, stats->failed, stats->cancelled,
               stats->interrupted, stats->lost, stats->handed_back);
  return kExitOk;
}

int cmd_runs(Args args) {
  Flags f("runs", {"--db", "--state", "--limit", "--after"}, {"--json"});
  if (!f.parse(args)) return kExitInvalidInput;
  if (f.positional().size() > 1) return f.fail("give at most one run id"), kExitInvalidInput;
  cluster::RunListQuery q;
  q.limit = 50;
  if (!f.integer("--limit", q.limit, std::size_t{1}, std::size_t{1'000'000}))
    return kExitInvalidInput;
  if (auto s = f.get("--state")) {
    q.state = cluster::parse_run_state(*s);
    if (!q.state)
      return f.fail(
                 "--state expects queued, running, succeeded, failed, cancelled or "
                 "interrupted, got '" +
                 *s + "'"),
             kExitInvalidInput;
  }
  q.after = f.get("--after").value_or("");
  auto db = db_of(f);
  if (!db) return kExitInvalidInput;
  auto queue = open_queue(*db);
  if (!queue) return store_failed("runs", queue.error());
  if (f.positional().size() == 1) {  // one run, in full
    auto r = (*queue)->get(f.positional()[0]);
    if (!r) return store_failed("runs", r.error());
    std::printf("%s\n", to_json_text(cluster::run_json(*r)).c_str());
    return kExitOk;
  }
  auto page = (*queue)->list(q);
  if (!page) return store_failed("runs", page.error());
  if (f.has("--json")) {  // the page as GET /v1/runs answers it
    std::printf("%s\n", to_json_text(cluster::run_list_json(*page)).c_str());
    return kExitOk;
  }
  std::printf("%-18s  %-11s  %-8s  %-20s  %-18s  %-12s  %s\n", "ID", "STATE", "ATTEMPTS",
              "WORKFLOW", "THREAD", "CREATED", "DETAIL");
  for (const auto& r : page->runs) {
    std::string detail = r.error;
    if (r.state == cluster::RunState::running)
      detail = "held by " + r.lease_owner + (r.cancel_requested ? ", cancelling" : "");
    if (detail.size() > 100) detail = detail.substr(0, 97) + "...";
    std::printf("%-18s  %-11s  %-8s  %-20s  %-18s  %-12s  %s\n", r.id.c_str(),
                cluster::run_state_name(r.state),
                (std::to_string(r.attempts) + "/" + std::to_string(r.max_attempts)).c_str(),
                r.workflow_name.c_str(), r.thread_id.c_str(), ago(r.created_ms).c_str(),
                detail.c_str());
  }
  if (page->runs.empty())
    std::fprintf(stderr, "weir runs: no runs in %s\n", (*queue)->description().c_str());
  if (page->has_more)
    std::fprintf(stderr, "weir runs: more runs follow: weir runs --after %s%s\n",
                 page->runs.back().id.c_str(), f.get("--limit") ? " --limit N" : "");
  return kExitOk;
}

int cmd_cancel(Args args) {
  Flags f("cancel", {"--db"}, {});
  if (!f.parse(args)) return kExitInvalidInput;
  if (f.positional().size() != 1) return f.fail("give one run id"), kExitInvalidInput;
  auto db = db_of(f);
  if (!db) return kExitInvalidInput;
  auto queue = open_queue(*db);
  if (!queue) return store_failed("cancel", queue.error());
  const std::string& id = f.positional()[0];
  auto done = (*queue)->cancel(id);
  if (!done) return store_failed("cancel", done.error());
  std::printf("%s: %s\n", id.c_str(), cancel_text(**queue, *done).c_str());
  return kExitOk;
}

}  // namespace weir::cli
