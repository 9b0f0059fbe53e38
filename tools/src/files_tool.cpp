#include <algorithm>
#include <fstream>
#include <system_error>
#include <vector>

#include <boost/json/parse.hpp>

#include "json_util.hpp"
#include "weir/runtime/text.hpp"
#include "weir/tools/builtin.hpp"

namespace weir::tools {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr std::uint64_t kDefaultReadBytes = 16384;
constexpr std::uint64_t kMaxReadBytes = 1u << 20;
constexpr std::uint64_t kDefaultListEntries = 200;

Error refuse(const std::string& msg) {
  return Error(Errc::invalid_argument, "files: " + msg);
}

// True when `p` is `root` or below it (both canonical).
bool within(const fs::path& root, const fs::path& p) {
  auto [r, q] = std::mismatch(root.begin(), root.end(), p.begin(), p.end());
  return r == root.end();
}

class FilesTool final : public BasicTool {
 public:
  explicit FilesTool(fs::path root)
      : BasicTool(
            "files",
            "Reads text files and lists folders under a fixed root folder. op \"list\" lists a "
            "folder (path \".\" for the root); op \"read\" returns a file's text from byte "
            "`offset`, at most `limit` bytes. Paths are relative to the root; '..' and absolute "
            "paths are refused.",
            json::parse(R"json({
          "type": "object",
          "properties": {
            "op": {"type": "string", "enum": ["read", "list"]},
            "path": {"type": "string", "maxLength": 4096,
                     "description": "relative to the root, e.g. \"notes/todo.md\" or \".\""},
            "offset": {"type": "integer", "minimum": 0,
                       "description": "read: first byte; list: first entry (default 0)"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1048576,
                      "description": "read: bytes (default 16384); list: entries (default 200)"}
          },
          "required": ["op", "path"],
          "additionalProperties": false
        })json")
                .as_object()),
        root_(std::move(root)) {}

  ToolOptions options() const override {
    ToolOptions o;
    o.timeout = std::chrono::milliseconds(10000);
    return o;
  }
  boost::asio::awaitable<Result<std::string>> invoke(json::object args,
                                                     const ToolContext& ctx) override {
    co_return run(args);
  }

  Result<std::string> run(const json::object& args) const {
    const std::string op(args.at("op").as_string());
    const std::string path(args.at("path").as_string());
    auto resolved = resolve(path);
    if (!resolved) return std::move(resolved).error();
    std::error_code ec;
    const auto st = fs::status(*resolved, ec);
    if (ec || !fs::exists(st))
      return Error(Errc::not_found, "files: '" + path + "' does not exist");
    const std::uint64_t offset = detail::arg_u64(args, "offset", 0);
    if (op == "list") {
      if (!fs::is_directory(st))
        return refuse("'" + path + "' is a file, not a folder; use op \"read\"");
      return list(path, *resolved, offset, detail::arg_u64(args, "limit", kDefaultListEntries));
    }
    if (fs::is_directory(st)) return refuse("'" + path + "' is a folder; use op \"list\"");
    if (!fs::is_regular_file(st)) return refuse("'" + path + "' is not a regular file");
    return read(path, *resolved, offset,
                std::min(detail::arg_u64(args, "limit", kDefaultReadBytes), kMaxReadBytes));
  }

 private:
  Result<fs::path> resolve(const std::string& path) const {
    if (path.find('\0') != std::string::npos) return refuse("the path contains a NUL character");
    std::error_code ec;
    const fs::path root = fs::canonical(root_, ec);
    if (ec)
      return Error(Errc::not_found,
                   "files: the root folder '" + root_.string() + "' does not exist");
    if (path.empty() || path == ".") return root;
    const fs::path rel(path);
    if (rel.is_absolute() || rel.has_root_name() || rel.has_root_directory())
      return refuse("absolute path '" + path + "' refused; give a path relative to the files root");
    for (const auto& part : rel)
      if (part == "..") return refuse("path '" + path + "' refused: '..' is not allowed");
    const fs::path full = fs::weakly_canonical(root / rel, ec);
    if (ec) return Error(Errc::io_error, "files: cannot resolve '" + path + "': " + ec.message());
    if (!within(root, full))
      return refuse("path '" + path +
                    "' refused: it resolves outside the files root (through a symbolic link)");
    return full;
  }

  static Result<std::string> read(const std::string& path, const fs::path& file,
                                  std::uint64_t offset, std::uint64_t limit) {
    std::error_code ec;
    const std::uint64_t size = fs::file_size(file, ec);
    if (ec) return Error(Errc::io_error, "files: cannot read '" + path + "': " + ec.message());
    if (offset > size)
      return refuse("offset " + std::to_string(offset) + " is past the end of '" + path + "' (" +
                    std::to_string(size) + " bytes)");
    std::ifstream in(file, std::ios::binary);
    if (!in) return Error(Errc::io_error, "files: cannot open '" + path + "'");
    // Read up to 3 bytes more so a character straddling the limit can be completed or dropped.
    const std::uint64_t want = std::min<std::uint64_t>(limit + 3, size - offset);
    std::string buf(want, '\0');
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(buf.data(), static_cast<std::streamsize>(want));
    buf.resize(static_cast<std::size_t>(in.gcount()));
    const std::size_t skip = offset > 0 ? utf8_skip_continuation(buf) : 0;
    std::size_t end = buf.size();
    if (end - skip > limit) end = skip + utf8_cut(std::string_view(buf).substr(skip), limit);
    std::string text = buf.substr(skip, end - skip);
    if (auto nul = text.find('\0'); nul != std::string::npos)
      return refuse("'" + path + "' is not a text file (a NUL byte at offset " +
                    std::to_string(offset + skip + nul) + ")");
    if (auto bad = find_invalid_utf8(text))
      return refuse("'" + path + "' is not UTF-8 text (invalid byte at offset " +
                    std::to_string(offset + skip + *bad) + ")");
    const std::uint64_t first = offset + skip, last = offset + end;
    if (last < size || first > 0) {
      text += "\n[bytes " + std::to_string(first) + "-" + std::to_string(last) + " of " +
              std::to_string(size);
      text +=
          last < size ? "; call again with offset=" + std::to_string(last) + " to read on]" : "]";
    }
    return text;
  }

  static Result<std::string> list(const std::string& path, const fs::path& dir,
                                  std::uint64_t offset, std::uint64_t limit) {
    std::error_code ec;
    std::vector<std::pair<std::string, std::string>> entries;  // name, line
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code e2;
      const auto st = it->status(e2);
      if (fs::is_directory(st)) {
        entries.emplace_back(name, name + "/");
      } else if (fs::is_regular_file(st)) {
        entries.emplace_back(name, name + " (" + std::to_string(it->file_size(e2)) + " bytes)");
      } else {
        entries.emplace_back(name, name + " (other)");
      }
    }
    if (ec) return Error(Errc::io_error, "files: cannot list '" + path + "': " + ec.message());
    std::sort(entries.begin(), entries.end());
    if (entries.empty()) return std::string("(empty folder)");
    std::string out;
    const std::uint64_t last = std::min<std::uint64_t>(entries.size(), offset + limit);
    for (std::uint64_t i = offset; i < last; ++i) out += entries[i].second + "\n";
    if (offset > 0 || last < entries.size()) {
      out += "[entries " + std::to_string(std::min<std::uint64_t>(offset, entries.size())) + "-" +
             std::to_string(last) + " of " + std::to_string(entries.size());
      out += last < entries.size() ? "; call again with offset=" + std::to_string(last) + "]\n"
                                   : "]\n";
    }
    return out;
  }

  fs::path root_;
};

}  // namespace

std::shared_ptr<Tool> make_files_tool(fs::path root) {
  return std::make_shared<FilesTool>(std::move(root));
}

}  // namespace weir::tools
