// Opening a document given on the command line (a workflow, crew or group-chat file): read once
// with its size checked first ("-" and pipes read with a cap), parsed once, then classified.
#pragma once

#include <string>

#include "weir/runtime/error.hpp"
#include "weir/runtime/json_parse.hpp"

namespace weir::cli {

struct Document {
  std::string path;  // as given
  std::string text;  // padded for simdjson (read_json_file)
  ParsedJson parsed;
  bool agents = false;  // a crew or group-chat file ("kind": "crew" | "group_chat")
  bool from_stdin() const { return path == "-" || path == "/dev/stdin"; }
};

// Errors: read_json_file's (a directory, too large, unreadable) and parse_json's, with
// "path:line:column: what".
Result<Document> open_document(const std::string& path);

}  // namespace weir::cli
