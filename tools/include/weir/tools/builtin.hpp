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

#include <filesystem>
#include <memory>

#include "weir/tools/tool.hpp"

namespace weir {
class ArtifactStore;
}

namespace weir::tools {

class DocumentIndex;

std::shared_ptr<Tool> make_calculator();
std::shared_ptr<Tool> make_files_tool(std::filesystem::path root);
std::shared_ptr<Tool> make_artifacts_tool(ArtifactStore& store);
std::shared_ptr<Tool> make_doc_search_tool(std::shared_ptr<const DocumentIndex> index);
std::shared_ptr<Tool> make_lorem_tool();
std::shared_ptr<Tool> make_sleep_tool();

}  // namespace weir::tools
