// The subcommands of the `weir` binary. Each lives in its own cmd_<name>.cpp and is listed in
// main.cpp's table. A command returns the process exit code (see README: 0 success, 1 invalid
// input, 2 run failed, 3 overloaded).
#pragma once

#include <span>
#include <string_view>

namespace weir::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitInvalidInput = 1;
inline constexpr int kExitRunFailed = 2;
inline constexpr int kExitOverloaded = 3;

using Args = std::span<const std::string_view>;  // the arguments after the command name

struct Command {
  std::string_view name;
  std::string_view summary;  // one line for `weir help`
  std::string_view usage;    // the text of `weir COMMAND --help`, with examples
  int (*run)(Args args);
};

int cmd_demo(Args args);
int cmd_validate(Args args);
int cmd_graph(Args args);
int cmd_tokenize(Args args);
int cmd_generate(Args args);
int cmd_inspect(Args args);
int cmd_run(Args args);
int cmd_batch(Args args);
int cmd_resume(Args args);

}  // namespace weir::cli
