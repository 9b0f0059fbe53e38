// Logging front door. weir logs through spdlog; this header keeps spdlog out of public headers.
// The level comes from the environment variable WEIR_LOG (trace, debug, info, warn, error, off;
// default: warn), read once by init_logging(). Logs go to stderr.
//
// Thread safety: all functions may be called from any thread.
#pragma once

#include <string_view>

namespace weir {

enum class LogLevel { trace, debug, info, warn, error, off };

// Reads WEIR_LOG and configures the default logger. Idempotent; called by the CLI and tests.
void init_logging();
void set_log_level(LogLevel level);
void log(LogLevel level, std::string_view message);

}  // namespace weir
