// Opening a document given on the command line (a workflow, crew or group-chat file): read once
// with its size checked first ("-" and pipes read with a cap), parsed once, then classified.
#pragma once

#include <string>
#include <string_view>

#include "weir/runtime/error.hpp"
#include "weir/runtime/json_parse.hpp"

namespace weir::cli {

struct Document {
  std::string path;  // as given
  std::string text;  // padded for simdjson (read_json_file); empty for a large workflow file,
                     // which is parsed as it is read (parse_json_file)
  ParsedJson parsed;
  bool agents = false;  // a crew or group-chat file ("kind": "crew" | "group_chat")
  bool from_stdin() const { return path == "-" || path == "/dev/stdin"; }
  bool regular_file = false;  // can be read again

  // The text to hand graph::load_workflow_json. A regular file's is released here (the loader
  // reads the file again only to place a diagnostic), so a large file's text and its workflow
  // are not both in memory; a pipe's is kept.
  std::string_view text_for_loading() {
    if (!regular_file) return text;
    std::string().swap(text);
    return {};
  }
};

// Errors: read_json_file's (a directory, too large, unreadable) and parse_json's, with
// "path:line:column: what".
Result<Document> open_document(const std::string& path);

}  // namespace weir::cli
