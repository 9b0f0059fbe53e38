// Running crew and group-chat files (weir run, weir demo), and choosing the model they run on.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <boost/json/object.hpp>

#include "weir/runtime/error.hpp"
#include "weir/runtime/trace.hpp"

namespace weir::cli {

struct ModelChoice {
  std::filesystem::path path;
  bool random = false;  // weir's own random-weight model (its text is noise)
};

// --model, else $WEIR_MODEL, else the small deterministic random-weight model weir writes
// itself (once, into the temp folder), announced on stdout.
Result<ModelChoice> choose_model(const std::optional<std::string>& flag);

struct AgentsRunOptions {
  int instances = 1;     // crew instances run at once (each a separate graph run)
  int concurrency = 16;  // admitted at once; the rest wait in the admission queue
  // The engine's context (--max-model-len); 0: the file's "engine" entry, else the model's
  // context length capped at 4096.
  std::int64_t max_model_len = 0;
  std::optional<std::string> model;
  boost::json::object inputs;             // over the file's defaults
  bool table = false;                     // the summary table (always with instances > 1)
  std::shared_ptr<trace::Tracer> tracer;  // --trace / --otlp-endpoint; null: off
};

// True when `path` holds a crew or group-chat file ("kind": "crew" | "group_chat").
bool is_agents_file(const std::string& path);

// Runs a crew or group-chat file. Returns the process exit code.
int run_agents_file(const std::filesystem::path& file, const AgentsRunOptions& options);

}  // namespace weir::cli
