// weir submit, weir worker, weir runs, weir cancel: the run queue in PostgreSQL (weir::cluster,
// docs/scale-out.md).
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

// Exit code for a queue error: 1 for what the user gave (a bad URL, an unknown run), 2 else.
int fail(const char* command, const Error& e) {
  std::fprintf(stderr, "weir %s: %s\n", command, e.message.c_str());
  return e.is(Errc::invalid_argument) || e.is(Errc::not_found) ? kExitInvalidInput : kExitRunFailed;
}

Result<std::unique_ptr<cluster::RunQueue>> open_queue(const std::string& db) {
  return cluster::RunQueue::open(db);
}

json::value record_json(const cluster::RunRecord& r) {
  json::object o{{"id", r.id},
                 {"state", cluster::run_state_name(r.state)},
                 {"attempts", r.attempts},
                 {"max_attempts", r.max_attempts},
                 {"workflow", r.workflow_name},
                 {"workflow_file", r.workflow_file},
                 {"workflow_sha256", r.workflow_sha256},
                 {"thread", r.thread_id},
                 {"fence", r.fence},
                 {"cancel_requested", r.cancel_requested},
                 {"created_ms", r.created_ms}};
  if (!r.lease_owner.empty()) {
    o["lease_owner"] = r.lease_owner;
    o["lease_expires_ms"] = r.lease_expires_ms;
  }
  if (r.started_ms) o["started_ms"] = r.started_ms;
  if (r.finished_ms) o["finished_ms"] = r.finished_ms;
  if (!r.result.empty()) {
    auto parsed = parse_json(r.result, "result");
    o["result"] = parsed ? parsed->value : json::value(r.result);
  }
  if (!r.error_code.empty() || !r.error.empty())
    o["error"] = json::object{{"code", r.error_code}, {"message", r.error}};
  return o;
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

std::atomic<cluster::Worker*> g_worker{nullptr};
extern "C" void on_stop_signal(int) {
  if (auto* w = g_worker.load()) w->stop();
}

}  // namespace

int cmd_submit(Args args) {
  Flags f("submit", {"--input", "--db", "--thread", "--max-attempts", "--otlp-endpoint", "--trace"},
          {"--trace-content"});
  if (!f.parse(args)) return kExitInvalidInput;
  if (f.positional().size() != 1) return f.fail("give one workflow file"), kExitInvalidInput;
  const std::string file = f.positional()[0];
  if (file == "-" || file == "/dev/stdin")
    return f.fail(
               "a queued run carries its workflow file's text and path: give a file, not "
               "standard input"),
           kExitInvalidInput;
  int max_attempts = cluster::kDefaultMaxAttempts;
  if (!f.integer("--max-attempts", max_attempts, 1, 1000)) return kExitInvalidInput;
  auto db = db_of(f);
  if (!db) return kExitInvalidInput;
  auto text = read_json_file(file);
  if (!text) return std::fprintf(stderr, "%s\n", text.error().message.c_str()), kExitInvalidInput;
  const fs::path abs = fs::absolute(file);
  auto load = graph::load_workflow_text(*text, abs);
  if (!load.ok()) return std::fputs(load.report().c_str(), stderr), kExitInvalidInput;
  json::object input;
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
    input = std::move(parsed->value.as_object());
  }
  if (const auto& allowed = load.spec->input; !allowed.empty()) {
    for (const auto& kv : input) {
      if (std::find(allowed.begin(), allowed.end(), std::string_view(kv.key())) != allowed.end())
        continue;
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      std::fprintf(stderr,
                   "weir submit: --input sets '%s', which %s does not take as input (its "
                   "\"input\": %s)\n",
                   std::string(kv.key()).c_str(), load.spec->name.c_str(), list.c_str());
      return kExitInvalidInput;
    }
  }
  auto queue = open_queue(*db);
  if (!queue) return fail("submit", queue.error());
  cluster::SubmitRequest req;
  req.workflow = std::string(text->data(), text->size());
  req.workflow_file = abs.string();
  req.workflow_name = load.spec->name;
  req.input = to_json_text(input);
  req.thread_id = f.get("--thread").value_or("");
  req.max_attempts = max_attempts;
  // The run's trace: the span of this submit when traced, else a fresh trace context, so that
  // every worker that takes the run (after a crash, another) continues one trace.
  std::shared_ptr<trace::Tracer> tracer;
  if (!open_tracer(f, tracer)) return kExitInvalidInput;
  trace::Span span;
  if (tracer) {
    span = tracer->start_span("submit " + req.workflow_name, nullptr, trace::SpanKind::client);
    span.set("weir.workflow.name", req.workflow_name);
  }
  trace::SpanContext tc = span.context();
  if (!tc.valid()) tc = {trace::random_trace_id(), trace::random_span_id(), 1, ""};
  req.traceparent = trace::format_traceparent(tc);
  auto id = (*queue)->submit(req);
  if (id) span.set(trace::attr::kRunId, *id);
  if (!id) span.set_error(id.error());
  span.end();
  close_tracer(tracer);
  if (!id) return fail("submit", id.error());
  std::printf("%s\n", id->c_str());
  std::fprintf(stderr, "weir submit: queued %s (%s, thread '%s') in %s\n", id->c_str(),
               req.workflow_name.c_str(),
               req.thread_id.empty() ? id->c_str() : req.thread_id.c_str(),
               (*queue)->description().c_str());
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
  if (!stats) return fail("worker", stats.error());
  std::fprintf(stderr,
               "weir worker: %zu claimed: %zu succeeded, %zu failed, %zu cancelled, %zu "
               "interrupted, %zu lost to another worker, %zu handed back\n",
               stats->claimed, stats->succeeded, stats->failed, stats->cancelled,
               stats->interrupted, stats->lost, stats->handed_back);
  return kExitOk;
}

int cmd_runs(Args args) {
  Flags f("runs", {"--db", "--state", "--limit"}, {"--json"});
  if (!f.parse(args)) return kExitInvalidInput;
  if (f.positional().size() > 1) return f.fail("give at most one run id"), kExitInvalidInput;
  std::size_t limit = 50;
  if (!f.integer("--limit", limit, std::size_t{1}, std::size_t{1'000'000}))
    return kExitInvalidInput;
  std::optional<cluster::RunState> only;
  if (auto s = f.get("--state")) {
    only = cluster::parse_run_state(*s);
    if (!only)
      return f.fail(
                 "--state expects queued, running, succeeded, failed, cancelled or "
                 "interrupted, got '" +
                 *s + "'"),
             kExitInvalidInput;
  }
  auto db = db_of(f);
  if (!db) return kExitInvalidInput;
  auto queue = open_queue(*db);
  if (!queue) return fail("runs", queue.error());
  if (f.positional().size() == 1) {  // one run, in full
    auto r = (*queue)->get(f.positional()[0]);
    if (!r) return fail("runs", r.error());
    std::printf("%s\n", to_json_text(record_json(*r)).c_str());
    return kExitOk;
  }
  auto runs = (*queue)->list(limit, only);
  if (!runs) return fail("runs", runs.error());
  if (f.has("--json")) {
    json::array a;
    for (const auto& r : *runs) a.push_back(record_json(r));
    std::printf("%s\n", to_json_text(a).c_str());
    return kExitOk;
  }
  std::printf("%-18s  %-11s  %-8s  %-20s  %-18s  %-12s  %s\n", "ID", "STATE", "ATTEMPTS",
              "WORKFLOW", "THREAD", "CREATED", "DETAIL");
  for (const auto& r : *runs) {
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
  if (runs->empty())
    std::fprintf(stderr, "weir runs: no runs in %s\n", (*queue)->description().c_str());
  return kExitOk;
}

int cmd_cancel(Args args) {
  Flags f("cancel", {"--db"}, {});
  if (!f.parse(args)) return kExitInvalidInput;
  if (f.positional().size() != 1) return f.fail("give one run id"), kExitInvalidInput;
  auto db = db_of(f);
  if (!db) return kExitInvalidInput;
  auto queue = open_queue(*db);
  if (!queue) return fail("cancel", queue.error());
  const std::string& id = f.positional()[0];
  auto before = (*queue)->get(id);
  if (!before) return fail("cancel", before.error());
  auto after = (*queue)->cancel(id);
  if (!after) return fail("cancel", after.error());
  using cluster::RunState;
  if (*after == RunState::cancelled && before->state == RunState::queued)
    std::printf("%s: cancelled (it had not started)\n", id.c_str());
  else if (*after == RunState::running)
    std::printf("%s: cancel requested; its worker stops it before its next superstep\n",
                id.c_str());
  else
    std::printf("%s: already %s; nothing to cancel\n", id.c_str(), cluster::run_state_name(*after));
  return kExitOk;
}

}  // namespace weir::cli
