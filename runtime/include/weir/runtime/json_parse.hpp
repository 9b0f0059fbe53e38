// Parsing of JSON input (workflow files, model output, tool arguments) into Boost.JSON values,
// with errors that say where: "flow.json:3:15: expected ',' or '}' (at /nodes/2)".
//
// simdjson does the parsing (keeping it out of public headers); when it rejects a document,
// Boost.JSON's incremental parser re-reads it to find the exact byte of the error, and the
// common non-JSON bytes are named (invalid UTF-8, a NUL, a UTF-16 byte order mark). A UTF-8
// byte order mark at the start is skipped.
//
// Input fences: read_json_file() checks a file's size before reading it (and reads a pipe with
// a cap); parse_json() refuses text over `max_bytes` before parsing and allocates the parsed
// value from a resource that refuses to grow past `max_value_bytes`, so any input is accepted
// or refused in a few times its size. Positions are not recorded per value: ParsedJson::locate
// finds a pointer's byte on demand (only values that get an error message pay for it).
//
// Thread safety: free functions are reentrant; a ParsedJson may be read from one thread at a
// time (locate() fills a cache).
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/json/storage_ptr.hpp>
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

inline constexpr std::size_t kJsonMaxBytes = std::size_t{64} << 20;

struct JsonParseOptions {
  std::size_t max_bytes = kJsonMaxBytes;  // larger input is refused before parsing
  std::size_t max_depth = 256;            // nesting deeper than this is an error
  bool record_locations = false;          // unused: locate() works on every ParsedJson
  // Bytes the parsed value may occupy; 0: 3 × the text's size + 1 MiB. Past it the parse
  // fails with invalid_argument. Ignored when `storage` is set (that resource is the fence).
  std::size_t max_value_bytes = 0;
  // Where the value is allocated (e.g. an AccountingResource charging a MemoryBudget); its
  // exceptions (weir::Exception) become the returned error.
  std::optional<boost::json::storage_ptr> storage;
  // REQUIRES when true: 64 readable bytes follow the text (read_json_file's strings have
  // them); saves simdjson a padded copy.
  bool text_is_padded = false;
  // Allocate the value's small pieces from 64 KiB slabs (with `storage` unset): no malloc
  // header and rounding per piece, which for a document of many small values cost more than
  // the values. A slab is freed when all its pieces are, so memory comes back as a document is
  // dropped in about the order it was parsed (a workflow file read into a spec), while a piece
  // kept from it keeps its slab: copy out what must outlive the document.
  bool slabs = false;
  // A key given twice in one object is an error (corrupt_data: "source:line:column: duplicate
  // key \"k\" (at /pointer/k)", at its second place); without it the last value is kept.
  bool reject_duplicate_keys = false;
};

class JsonLocator;  // json_parse.cpp

struct ParsedJson {
  boost::json::value value;

  // The location of the value at `pointer` within `text` (the text that was parsed), or of its
  // nearest existing ancestor. The first call indexes the text once; later calls reuse it.
  JsonLocation locate(std::string_view text, std::string_view pointer) const;

  bool text_is_padded = false;
  mutable std::shared_ptr<JsonLocator> locator_;
};

// Parses `text`. `source` names it in messages (a file path, "model output").
// Errors: corrupt_data with "source:line:column: what (at pointer)" for malformed JSON,
// invalid_argument when the text exceeds max_bytes or max_depth or its value max_value_bytes,
// memory_budget_exceeded when `storage` refuses.
Result<ParsedJson> parse_json(std::string_view text, std::string_view source,
                              const JsonParseOptions& options = {});

// Reads a whole file for parsing, refusing before it reads: a directory ("is a directory"), a
// missing or unreadable file, a regular file over `max_bytes` (by its size). Anything else (a
// pipe, /dev/stdin, "-" for standard input) is read with a cap of `max_bytes`. The returned
// string has 64 spare bytes of capacity past its end (pass text_is_padded = true).
// Errors: not_found, invalid_argument, io_error; messages start with the path.
Result<std::string> read_json_file(const std::filesystem::path& path,
                                   std::size_t max_bytes = kJsonMaxBytes);

struct ParsedJsonFile {
  ParsedJson parsed;
  std::string text;  // the file's text; empty when it was parsed as it was read
};

// Reads and parses a file (read_json_file's checks and refusals, then parse_json's). A regular
// file of 1 MiB or more is parsed as it is read, a chunk at a time, so that its text and its
// value are not both in memory: `text` is then empty (read the file again to place a message).
// Malformed JSON gets the same message as parse_json's (the file is then read whole).
Result<ParsedJsonFile> parse_json_file(const std::filesystem::path& path,
                                       JsonParseOptions options = {});

}  // namespace weir
