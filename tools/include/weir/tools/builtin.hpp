// Built-in tools.
//
//   calculator  {"expression": string}                 -> the value ("1024")
//   files       {"op": "read"|"list", "path": string, "offset"?: integer, "limit"?: integer}
//               read: text of one file from byte `offset` (default 0), at most `limit` bytes
//               (default 16384, at most 1 MiB), cut on character boundaries, followed by a note
//               when more remains; list: one entry a line ("name/" for folders, "name (N bytes)"
//               for files), sorted, entries [offset, offset+limit) (default 200).
//               Confined to `root`: absolute paths, ".." and symbolic links that resolve outside
//               the root are refused (invalid_argument); a missing path is not_found.
//               A symlink swapped between the check and the open is not caught (no openat2).
//   artifacts   {"id": string, "offset"?/"length"? (bytes) | "line_start"?/"line_count"? (1-based
//               lines)} -> that slice of an artifact (at most 64 KiB), plus a note when more
//               remains. The artifact is read in bounded chunks, never whole.
//   doc_search  {"query": string, "k"?: integer 1..20 (default 5)} -> ranked hits, one block
//               each: "1. path (offset N, score S)" and an indented snippet.
//   lorem       {"bytes": integer 0..64 MiB} -> deterministic filler text of exactly that size
//               (big payloads for demos and tests).
//   sleep       {"ms": number 0..3600000} -> waits that long without holding a thread, then the
//               milliseconds waited (json_output: a number); ToolContext::cancel ends the wait
//               within 50 ms (Errc::cancelled). A stand-in for a slow model or API.
//
// Thread safety: every tool here may be invoked concurrently. make_artifacts_tool keeps a
// reference: the store must outlive the tool.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "weir/tools/tool.hpp"

namespace weir {
class ArtifactStore;
class JsonFields;
}  // namespace weir

namespace weir::tools {

class DocumentIndex;

std::shared_ptr<Tool> make_calculator();
std::shared_ptr<Tool> make_files_tool(std::filesystem::path root);
std::shared_ptr<Tool> make_artifacts_tool(ArtifactStore& store);
std::shared_ptr<Tool> make_doc_search_tool(std::shared_ptr<const DocumentIndex> index);
std::shared_ptr<Tool> make_lorem_tool();
std::shared_ptr<Tool> make_sleep_tool();

// --- built-ins by name, for configuration files ----------------------------------------------
// The one list of built-ins and the one reader of their settings, for every format that names
// them: a workflow's "tools" entries ({"calc": {"builtin": "calculator", ...}}), a crew file's
// "tools" ({"doc_search": {"folder": "../data"}}), `weir mcp --tools`.

// calculator, files, artifacts, doc_search, lorem, sleep.
std::span<const std::string> builtin_tool_names();
// files and doc_search work in a folder ("root").
bool builtin_tool_needs_root(std::string_view builtin) noexcept;

struct BuiltinToolConfig {
  std::string builtin;  // one of builtin_tool_names()
  // files, doc_search: the folder, resolved against the file's folder. Required for them.
  std::filesystem::path root;
  // Over the tool's own ToolOptions when set.
  std::optional<std::chrono::milliseconds> timeout;
  std::optional<std::int32_t> max_concurrency, rate_per_minute;
  std::optional<std::size_t> max_output_bytes;
};

// Reads the settings of built-in `builtin` (named at `builtin_ptr`) from the entry `o` at `ptr`:
// "root" (files and doc_search; doc_search also takes it as "folder", as crew files write it),
// "timeout_ms", "max_output_bytes" (a byte size), "max_concurrency" (1..4096),
// "rate_per_minute" (0..2^30, 0: no limit). Keys besides those and `extra_keys` are reported.
// nullopt, with every problem reported through `fields`, when the entry is not usable.
std::optional<BuiltinToolConfig> parse_builtin_tool(
    JsonFields& fields, std::string_view builtin, std::string_view builtin_ptr,
    const boost::json::object& o, std::string_view ptr, const std::filesystem::path& base_dir,
    std::span<const std::string_view> extra_keys = {});

// The tool, registered under `name` (the built-in's own name when empty), with the settings
// over its options. `artifacts` backs the artifacts tool. Errors: invalid_argument (a folder
// that does not exist, the artifacts tool without a store, an unknown built-in), and the
// document index's errors for doc_search.
Result<std::shared_ptr<Tool>> make_builtin_tool(const BuiltinToolConfig& config,
                                                ArtifactStore* artifacts, std::string name = {});

}  // namespace weir::tools
