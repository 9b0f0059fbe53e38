#include <algorithm>

#include <boost/json/parse.hpp>

#include "json_util.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/text.hpp"
#include "weir/tools/builtin.hpp"

namespace weir::tools {

namespace json = boost::json;

namespace {

constexpr std::uint64_t kMaxSlice = 65536;
constexpr std::uint64_t kDefaultLength = 16384;
constexpr std::uint64_t kChunk = 65536;

class ArtifactsTool final : public BasicTool {
 public:
  explicit ArtifactsTool(ArtifactStore& store)
      : BasicTool(
            "artifacts",
            "Reads part of a stored artifact (a large tool output or document) by its id: bytes "
            "[offset, offset+length) or `line_count` lines from line `line_start` (1-based). "
            "Give either offset/length or line_start/line_count.",
            json::parse(R"json({
          "type": "object",
          "properties": {
            "id": {"type": "string", "minLength": 1, "maxLength": 128},
            "offset": {"type": "integer", "minimum": 0},
            "length": {"type": "integer", "minimum": 1, "maximum": 65536},
            "line_start": {"type": "integer", "minimum": 1},
            "line_count": {"type": "integer", "minimum": 1, "maximum": 10000}
          },
          "required": ["id"],
          "additionalProperties": false
        })json")
                .as_object()),
        store_(store) {}

  boost::asio::awaitable<Result<std::string>> invoke(json::object args,
                                                     const ToolContext& ctx) override {
    co_return run(args);
  }

  Result<std::string> run(const json::object& args) const {
    const std::string id(args.at("id").as_string());
    const bool bytes = args.contains("offset") || args.contains("length");
    const bool lines = args.contains("line_start") || args.contains("line_count");
    if (bytes && lines)
      return Error(Errc::invalid_argument,
                   "artifacts: give either offset/length or line_start/line_count, not both");
    auto st = store_.stat(id);
    if (!st) {
      if (st.error().is(Errc::not_found))
        return Error(Errc::not_found, "artifacts: no artifact with id '" + id + "'");
      return Error(st.error().code, "artifacts: " + st.error().message);
    }
    const std::uint64_t size = st->bytes;
    if (lines)
      return read_lines(id, size, detail::arg_u64(args, "line_start", 1),
                        detail::arg_u64(args, "line_count", 100));
    return read_bytes(id, size, detail::arg_u64(args, "offset", 0),
                      std::min(detail::arg_u64(args, "length", kDefaultLength), kMaxSlice));
  }

 private:
  Result<std::string> read_bytes(const std::string& id, std::uint64_t size, std::uint64_t offset,
                                 std::uint64_t length) const {
    if (offset > size)
      return Error(Errc::invalid_argument, "artifacts: offset " + std::to_string(offset) +
                                               " is past the end of artifact '" + id + "' (" +
                                               std::to_string(size) + " bytes)");
    auto r = store_.get_range(id, offset, length + 3);
    if (!r) return Error(r.error().code, "artifacts: " + r.error().message);
    std::string_view s = *r;
    const std::size_t skip = offset > 0 ? utf8_skip_continuation(s) : 0;
    s.remove_prefix(skip);
    s = s.substr(0, s.size() > length ? utf8_cut(s, length) : s.size());
    std::string out(s);
    if (find_invalid_utf8(out) || out.find('\0') != std::string::npos)
      return Error(Errc::invalid_argument,
                   "artifacts: artifact '" + id + "' is not text; it cannot be shown");
    const std::uint64_t first = offset + skip, last = first + out.size();
    if (first > 0 || last < size) {
      out += "\n[bytes " + std::to_string(first) + "-" + std::to_string(last) + " of " +
             std::to_string(size);
      out += last < size ? "; continue with offset=" + std::to_string(last) + "]" : "]";
    }
    return out;
  }

  // Streams the artifact in chunks: finds line `start`, then collects `count` lines (at most
  // kMaxSlice bytes).
  Result<std::string> read_lines(const std::string& id, std::uint64_t size, std::uint64_t start,
                                 std::uint64_t count) const {
    std::uint64_t line = 1, pos = 0;
    std::string out;
    std::uint64_t taken = 0;
    bool truncated = false;
    char last_char = 0;
    while (pos < size && taken < count) {
      auto r = store_.get_range(id, pos, kChunk);
      if (!r) return Error(r.error().code, "artifacts: " + r.error().message);
      if (r->empty()) break;
      for (char c : *r) {
        last_char = c;
        if (line >= start) {
          if (out.size() >= kMaxSlice) {
            truncated = true;
            break;
          }
          out += c;
        }
        if (c == '\n') {
          if (line >= start) ++taken;
          ++line;
          if (taken == count) break;
        }
      }
      if (truncated) break;
      pos += r->size();
    }
    if (out.empty()) {
      // Scanned everything without reaching `start`: line - 1 newlines were seen.
      const std::uint64_t total = size == 0 ? 0 : (last_char == '\n' ? line - 1 : line);
      return Error(Errc::invalid_argument, "artifacts: line_start " + std::to_string(start) +
                                               " is past the end of artifact '" + id + "' (" +
                                               std::to_string(total) + " lines)");
    }
    if (truncated) out.resize(utf8_cut(out, kMaxSlice));
    if (find_invalid_utf8(out) || out.find('\0') != std::string::npos)
      return Error(Errc::invalid_argument,
                   "artifacts: artifact '" + id + "' is not text; it cannot be shown");
    if (truncated) out += "\n[cut at " + std::to_string(kMaxSlice) + " bytes; ask for fewer lines]";
    return out;
  }

  ArtifactStore& store_;
};

}  // namespace

std::shared_ptr<Tool> make_artifacts_tool(ArtifactStore& store) {
  return std::make_shared<ArtifactsTool>(store);
}

}  // namespace weir::tools
