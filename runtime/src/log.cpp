#include "weir/runtime/log.hpp"

#include <cstdlib>
#include <mutex>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace weir {
namespace {

spdlog::level::level_enum to_spdlog(LogLevel l) {
  switch (l) {
    case LogLevel::trace:
      return spdlog::level::trace;
    case LogLevel::debug:
      return spdlog::level::debug;
    case LogLevel::info:
      return spdlog::level::info;
    case LogLevel::warn:
      return spdlog::level::warn;
    case LogLevel::error:
      return spdlog::level::err;
    case LogLevel::off:
      return spdlog::level::off;
  }
  return spdlog::level::warn;
}

}  // namespace

void init_logging() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto logger = spdlog::stderr_color_mt("weir");
    logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::warn);
    if (const char* env = std::getenv("WEIR_LOG"); env && *env) {
      auto level = spdlog::level::from_str(env);  // unknown names give "off"
      if (level == spdlog::level::off && std::string(env) != "off") {
        spdlog::warn("WEIR_LOG='{}' is not a level (trace, debug, info, warn, error, off)", env);
      } else {
        spdlog::set_level(level);
      }
    }
  });
}

void set_log_level(LogLevel level) {
  init_logging();
  spdlog::set_level(to_spdlog(level));
}

void log(LogLevel level, std::string_view message) {
  init_logging();  // a program that never called it (a benchmark) still logs to stderr
  spdlog::log(to_spdlog(level), "{}", message);
}

}  // namespace weir
