// The subcommands of the `weir` binary. Each lives in its own cmd_<name>.cpp and is listed in
// main.cpp's table. A command returns the process exit code (see README: 0 success, 1 invalid
// input, 2 run failed, 3 overloaded, 4 the store or queue failed).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "weir/graph/checkpointer.hpp"
#include "weir/runtime/error.hpp"

namespace weir::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitInvalidInput = 1;
inline constexpr int kExitRunFailed = 2;
inline constexpr int kExitOverloaded = 3;
inline constexpr int kExitStoreFailed = 4;

// The exit code for an error of the checkpoint store or the run queue, whichever command met
// it: 1 when it is about what the user gave (a connection string libpq cannot parse, an unknown
// run or thread), 3 overloaded (a full queue), 4 for the store itself (a database that cannot
// be reached or refused a statement, a file that cannot be opened or is not a store).
inline int store_exit_code(const Error& e) {
  if (e.is(Errc::invalid_argument) || e.is(Errc::not_found)) return kExitInvalidInput;
  // A thread with a run in progress refuses another for now, as admission does.
  if (e.is(Errc::overloaded) || e.is(Errc::thread_busy)) return kExitOverloaded;
  return kExitStoreFailed;
}

// The exit code for a run's error: 3 overloaded (admission, or the thread has a run in progress:
// thread_busy, as README.md says); 4 when the store failed under it (io_error,
// corrupt_data: as store_exit_code); 1 when the run was refused before it started (its input
// names a channel it does not take, the thread does not exist or is not paused); 2 when it
// started and failed. An error from inside the run names its node ("node 'x': ..."), and a
// checkpoint the store refused names its put, so an invalid_argument a node returns (a tool's
// arguments, say) is a run failure, not bad input.
inline int run_exit_code(const Error& e) {
  if (e.is(Errc::overloaded) || e.is(Errc::thread_busy)) return kExitOverloaded;
  const bool inside =
      e.message.rfind("node '", 0) == 0 || e.message.rfind("checkpoint put", 0) == 0;
  if ((e.is(Errc::io_error) || e.is(Errc::corrupt_data)) && !inside) return kExitStoreFailed;
  const bool before_start = (e.is(Errc::invalid_argument) || e.is(Errc::not_found)) && !inside;
  return before_start ? kExitInvalidInput : kExitRunFailed;
}

// Prints "weir <command>: <message>" on stderr; returns store_exit_code(e).
int store_failed(const char* command, const Error& e);

using Args = std::span<const std::string_view>;  // the arguments after the command name

struct Command {
  std::string_view name;
  std::string_view summary;  // one line for `weir help`
  std::string_view usage;    // the text of `weir COMMAND --help`, with examples
  int (*run)(Args args);
};

// Written from the command table (docs_gen.cpp): `weir --print-completion bash`, `--print-man`.
void print_bash_completion(std::span<const Command> commands);
void print_man(std::span<const Command> commands);
// A command's artifact store lives in a per-process folder, $TMPDIR/weir-<command>-<pid>,
// removed when the command exits. One killed with SIGKILL leaves its folder behind: this removes
// the folders whose process is gone (called when a command opens its own). What a thread needs
// after its process is stored with its checkpoints (--store), never only here.
void remove_stale_artifact_dirs();

// "30d", "12h", "15m", "45s", "500ms": a positive whole number and a unit; nullopt otherwise.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view s);

int cmd_demo(Args args);
int cmd_validate(Args args);
int cmd_graph(Args args);
int cmd_tokenize(Args args);
int cmd_generate(Args args);
int cmd_inspect(Args args);
int cmd_run(Args args);
int cmd_batch(Args args);
int cmd_resume(Args args);
int cmd_mcp(Args args);
int cmd_serve(Args args);
int cmd_submit(Args args);
int cmd_worker(Args args);
int cmd_runs(Args args);
int cmd_cancel(Args args);
int cmd_store(Args args);
int cmd_trace(Args args);

class Flags;
// The checkpoint store a command names: --store, else $WEIR_STORE, else
// $XDG_DATA_HOME/weir/checkpoints.db. A path (SQLite) or a postgres:// URI.
std::filesystem::path store_path(const Flags& f);
Result<std::unique_ptr<graph::Checkpointer>> open_store(const std::filesystem::path& db);

}  // namespace weir::cli
