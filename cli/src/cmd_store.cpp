// weir store prune: applies a retention policy to every thread of a checkpoint store (age-based
// retention skips the threads in use, and says so).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include "args.hpp"
#include "commands.hpp"
#include "weir/cluster/run_service.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/ids.hpp"

namespace weir::cli {

std::optional<std::chrono::milliseconds> parse_duration(std::string_view s) {
  std::size_t i = 0;
  long long n = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9' && i < 12) n = n * 10 + (s[i++] - '0');
  if (i == 0 || n <= 0) return std::nullopt;
  const std::string_view unit = s.substr(i);
  long long ms_per = 0;
  if (unit == "ms")
    ms_per = 1;
  else if (unit == "s")
    ms_per = 1000;
  else if (unit == "m")
    ms_per = 60'000;
  else if (unit == "h")
    ms_per = 3'600'000;
  else if (unit == "d")
    ms_per = 86'400'000;
  else
    return std::nullopt;
  return std::chrono::milliseconds(n * ms_per);
}

int cmd_store(Args args) {
  if (args.empty() || args[0] != "prune") {
    std::fprintf(stderr,
                 "weir store: give a subcommand: weir store prune --keep N | "
                 "--older-than DURATION (see 'weir store --help')\n");
    return kExitInvalidInput;
  }
  Flags f("store prune", {"--store", "--keep", "--older-than", "--thread"}, {});
  if (!f.parse(args.subspan(1))) return kExitInvalidInput;
  if (!f.positional().empty())
    return f.fail("unexpected argument '" + f.positional()[0] + "'"), kExitInvalidInput;
  graph::Retention policy;
  if (!f.integer("--keep", policy.keep_last, std::size_t{1}, std::size_t{1'000'000'000}))
    return kExitInvalidInput;
  if (auto d = f.get("--older-than")) {
    auto ms = parse_duration(*d);
    if (!ms)
      return f.fail("--older-than expects a duration such as 30d, 12h, 15m, 45s or 500ms, got '" +
                    *d + "'"),
             kExitInvalidInput;
    policy.max_age = *ms;
  }
  if (!policy.enabled()) return f.fail("give --keep N or --older-than DURATION"), kExitInvalidInput;
  const auto db = store_path(f);
  auto store = open_store(db);
  if (!store) return store_failed("store prune", store.error());
  std::vector<std::string> threads;
  if (auto t = f.get("--thread")) {
    // The id rule first, then the thread must exist: an unknown thread is bad input (exit 1),
    // not "pruned 0 checkpoints from 1 threads".
    if (auto s = graph::check_id("--thread", *t); !s)
      return std::fprintf(stderr, "weir store prune: %s\n", s.error().message.c_str()),
             kExitInvalidInput;
    auto last = (*store)->latest(*t);
    if (!last) return store_failed("store prune", last.error());
    if (!*last)
      return std::fprintf(stderr, "weir store prune: no thread '%s'\n", t->c_str()),
             kExitInvalidInput;
    threads.push_back(*t);
  } else {
    auto all = (*store)->threads(SIZE_MAX);
    if (!all) return store_failed("store prune", all.error());
    threads = std::move(*all);
  }
  // Age-based retention never deletes a thread in use: one a live claim holds (the
  // checkpointer refuses it, thread_busy) or, in a PostgreSQL store, one a queued or running
  // run of the queue will continue. Such a thread gets --keep only, and a line saying so.
  std::map<std::string, std::string> unfinished;
  if (policy.max_age.count() > 0 && graph::is_postgres_uri(db.string())) {
    auto u = cluster::threads_with_unfinished_runs(db.string());
    if (!u) return store_failed("store prune", u.error());
    unfinished = std::move(*u);
  }
  std::size_t removed = 0, pruned_threads = 0;
  std::string skipped;
  for (const auto& t : threads) {
    Result<std::size_t> n = std::size_t{0};
    if (auto u = unfinished.find(t); u != unfinished.end()) {
      skipped += "skipped thread '" + t + "' for --older-than: " + u->second + "\n";
    } else {
      n = (*store)->prune(t, policy);
      if (!n && n.error().is(Errc::thread_busy)) {
        skipped += "skipped thread '" + t + "' for --older-than: " + n.error().message + "\n";
        n = std::size_t{0};
      } else {
        ++pruned_threads;
        if (!n) return store_failed("store prune", n.error());
        removed += *n;
        continue;
      }
    }
    if (policy.keep_last > 0) {  // the newest --keep checkpoints are all a run in flight needs
      n = (*store)->prune(t, graph::Retention{policy.keep_last, {}});
      if (!n) return store_failed("store prune", n.error());
      removed += *n;
    }
  }
  std::printf("pruned %zu checkpoints from %zu threads in %s\n%s", removed, pruned_threads,
              graph::redact_store(db.string()).c_str(), skipped.c_str());
  return kExitOk;
}

}  // namespace weir::cli
