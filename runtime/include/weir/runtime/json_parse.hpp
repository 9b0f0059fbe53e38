// Parsing of JSON input (workflow files, model output, tool arguments) into Boost.JSON values,
// with errors that say where: "flow.json:3:15: expected ',' or '}' (at /nodes/2)".
//
// simdjson does the parsing (keeping it out of public headers); when it rejects a document,
// Boost.JSON's incremental parser re-reads it to find the exact byte of the error. With
// `record_locations`, every value's JSON pointer maps to its byte offset, so later validation
// errors (an unknown node name, a wrong type) can point at line and column too.
//
// Thread safety: free functions; ParsedJson is a value.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>

#include <boost/json/value.hpp>

#include "weir/runtime/error.hpp"

namespace weir {

struct JsonLocation {
  std::size_t offset = 0;  // bytes from the start of the text
  int line = 1;            // 1-based
  int column = 1;          // 1-based, in characters (UTF-8 code points)
};

// Line and column of a byte offset within `text` (offset clipped to the text's size).
JsonLocation locate_offset(std::string_view text, std::size_t offset);

// "/nodes/2/name" from parts; escapes '~' and '/' per RFC 6901.
std::string json_pointer_append(std::string_view base, std::string_view token);
std::string json_pointer_append(std::string_view base, std::size_t index);

struct JsonParseOptions {
  std::size_t max_bytes = 64u << 20;  // larger input is refused before parsing
  std::size_t max_depth = 256;        // nesting deeper than this is an error
  bool record_locations = false;      // fill ParsedJson::offsets
};

struct ParsedJson {
  boost::json::value value;
  // JSON pointer ("" for the root) -> byte offset where that value starts.
  std::unordered_map<std::string, std::size_t> offsets;

  // The location of the value at `pointer`, or of its nearest recorded ancestor.
  JsonLocation locate(std::string_view text, std::string_view pointer) const;
};

// Parses `text`. `source` names it in messages (a file path, "model output").
// Errors: corrupt_data with "source:line:column: what (at pointer)" for malformed JSON,
// invalid_argument when the text exceeds max_bytes or max_depth.
Result<ParsedJson> parse_json(std::string_view text, std::string_view source,
                              const JsonParseOptions& options = {});

}  // namespace weir
