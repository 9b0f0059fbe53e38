// The rearranged copy of a model file; see weight_cache.hpp.
#include "model/weight_cache.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "model/repack.hpp"

namespace weir::inference {

namespace {

constexpr char kMagic[8] = {'W', 'E', 'I', 'R', 'X', '1', '6', '\n'};

struct Header {
  char magic[8];
  std::uint32_t format;
  std::uint32_t layout_version;
  std::uint64_t source_size;
  std::int64_t source_mtime_ns;
  std::uint64_t gguf_header_bytes;
  std::uint64_t source_inode;    // format 2
  std::int64_t source_ctime_ns;  // format 2
};

Header header_for(const CacheSource& src) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.format = kCacheFormat;
  h.layout_version = kX16LayoutVersion;
  h.source_size = src.size;
  h.source_mtime_ns = src.mtime_ns;
  h.gguf_header_bytes = src.gguf_header.size();
  h.source_inode = src.inode;
  h.source_ctime_ns = src.ctime_ns;
  return h;
}

// FNV-1a, 64 bits: names a model's copy in a shared cache directory.
std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool pread_all(int fd, std::byte* dst, std::uint64_t size, std::uint64_t offset) {
  std::uint64_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, dst + done, std::min<std::uint64_t>(size - done, 16u << 20),
                        static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::uint64_t>(n);
  }
  return true;
}

bool write_all(int fd, const std::byte* p, std::uint64_t size) {
  std::uint64_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, p + done, std::min<std::uint64_t>(size - done, 64u << 20));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::uint64_t>(n);
  }
  return true;
}

}  // namespace

std::optional<std::filesystem::path> cache_location(const std::filesystem::path& model_in,
                                                    const std::filesystem::path& dir) {
  std::filesystem::path where = dir;
  if (where.empty()) {
    const char* env = std::getenv("WEIR_MODEL_CACHE");
    std::string v = env ? env : "";
    // A word, spaces around it or not, in any case: off, or on (the default place, beside the
    // model); anything else names a folder, as written.
    const auto first = v.find_first_not_of(" \t\r\n"), last = v.find_last_not_of(" \t\r\n");
    std::string word = first == std::string::npos ? "" : v.substr(first, last - first + 1);
    std::transform(word.begin(), word.end(), word.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (word == "off" || word == "0" || word == "false" || word == "no") return std::nullopt;
    if (word.empty() || word == "on" || word == "1" || word == "true" || word == "yes")
      where.clear();
    else
      where = v;
  }
  // One copy per file, however its path is spelt (relative, "..", a symbolic link): the copy
  // goes beside the file a link names, and a cache directory names it by the resolved path.
  std::error_code ec;
  auto model = std::filesystem::canonical(model_in, ec);
  if (ec) model = std::filesystem::absolute(model_in, ec);
  if (ec) model = model_in;
  if (where.empty()) return std::filesystem::path(model.string() + ".weir-x16");
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(model.string())));
  return where / (model.filename().string() + "-" + hex + ".weir-x16");
}

Result<int> open_cache(const std::filesystem::path& path, const CacheSource& src) {
  // O_NONBLOCK: a FIFO at the path must not hang the load (it is refused below).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      return Error(Errc::not_found, path.string() + " does not exist");
    return Error(Errc::corrupt_data,
                 path.string() + " cannot be opened: " + std::string(std::strerror(errno)));
  }
  auto bad = [&](const std::string& why) -> Result<int> {
    ::close(fd);
    return Error(Errc::corrupt_data, path.string() + " " + why);
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) return bad("cannot be read");
  if (!S_ISREG(st.st_mode)) return bad("is not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) != kCacheHeaderBytes + src.size)
    return bad("is " + std::to_string(st.st_size) + " bytes, expected " +
               std::to_string(kCacheHeaderBytes + src.size) + " (truncated or not a weir copy)");
  Header h{};
  if (!pread_all(fd, reinterpret_cast<std::byte*>(&h), sizeof h, 0)) return bad("cannot be read");
  const Header want = header_for(src);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return bad("is not a weir x16 copy");
  if (h.format != want.format || h.layout_version != want.layout_version)
    return bad("was written by another weir version (format " + std::to_string(h.format) +
               ", layouts " + std::to_string(h.layout_version) + "; this one: " +
               std::to_string(want.format) + ", " + std::to_string(want.layout_version) + ")");
  if (h.source_size != want.source_size || h.source_mtime_ns != want.source_mtime_ns ||
      h.gguf_header_bytes != want.gguf_header_bytes || h.source_inode != want.source_inode ||
      h.source_ctime_ns != want.source_ctime_ns)
    return bad(
        "is stale: it records another model file (its size, times, inode or header "
        "differ: the model was replaced or changed since the copy was written)");
  std::vector<std::byte> head(src.gguf_header.size());
  if (!pread_all(fd, head.data(), head.size(), kCacheHeaderBytes) ||
      std::memcmp(head.data(), src.gguf_header.data(), head.size()) != 0)
    return bad("does not hold this model (its GGUF header differs)");
  return fd;
}

// Whether a temporary copy nobody holds a lock on (see begin_cache) was left by a process that
// is gone: its id is no process, or this process (which is not writing it: it holds no lock),
// or a process that has not written to it for a while (the id is another process's by now,
// after a restart in a container or a reboot). A file written to in the last kFreshWrite whose
// process lives may be one whose writer has created it and not yet taken its lock.
bool left_over(const std::filesystem::path& file, pid_t pid) {
  constexpr auto kFreshWrite = std::chrono::seconds(10);
  if (pid == ::getpid() || (::kill(pid, 0) != 0 && errno != EPERM)) return true;
  std::error_code ec;
  const auto written = std::filesystem::last_write_time(file, ec);
  return !ec && std::filesystem::file_time_type::clock::now() - written > kFreshWrite;
}

Result<CacheWriter> begin_cache(const std::filesystem::path& path) {
  // Temporary copies beside it: one whose writer holds its lock (flock, until finish_cache
  // closes it) means that process is writing the copy (one writer is enough); one left by a
  // process that was killed is removed.
  const std::string prefix = path.filename().string() + ".tmp.";
  std::error_code ec;
  const auto parent = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  for (const auto& e : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;  // gone meanwhile, or not ours to read
    const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    const bool orphan = !held && left_over(e.path(), pid);
    if (orphan) {
      std::error_code rm;
      std::filesystem::remove(e.path(), rm);
    }
    ::close(fd);
    if (!orphan) return Error(Errc::io_error, "process " + digits + " is writing " + path.string());
  }
  CacheWriter w;
  w.path = path;
  w.tmp = path.string() + ".tmp." + std::to_string(::getpid());
  w.fd = ::open(w.tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (w.fd < 0)
    return Error(Errc::io_error, "cannot create " + w.tmp.string() + ": " + std::strerror(errno));
  ::flock(w.fd, LOCK_EX | LOCK_NB);  // a new file: nobody else holds it
  return w;
}

Status finish_cache(CacheWriter& w, const CacheSource& src, std::span<const std::byte> image) {
  std::vector<std::byte> head(kCacheHeaderBytes);
  const Header h = header_for(src);
  std::memcpy(head.data(), &h, sizeof h);
  bool ok = write_all(w.fd, head.data(), head.size()) &&
            write_all(w.fd, image.data(), image.size()) && ::fdatasync(w.fd) == 0;
  int err = errno;
  ok = ::close(w.fd) == 0 && ok;
  w.fd = -1;
  if (ok) {
    if (::rename(w.tmp.c_str(), w.path.c_str()) == 0) return {};
    err = errno;
  }
  ::unlink(w.tmp.c_str());
  return Error(Errc::io_error, "cannot write " + w.path.string() + ": " + std::strerror(err));
}

Status read_in_parallel(int fd, std::uint64_t offset, std::byte* dst, std::uint64_t size,
                        int threads, const std::string& name) {
  threads = std::max(1, std::min<int>(threads, static_cast<int>(size >> 24) + 1));
  std::atomic<int> failed{0};  // an errno
  auto part = [&](int t) {
    // Slices on 2 MiB boundaries: each huge page is faulted in by one thread.
    auto edge = [&](int i) {
      return std::min(size,
                      (size * static_cast<std::uint64_t>(i) / static_cast<std::uint64_t>(threads)) &
                          ~((std::uint64_t{2} << 20) - 1));
    };
    const std::uint64_t lo = edge(t), hi = t + 1 == threads ? size : edge(t + 1);
    if (!pread_all(fd, dst + lo, hi - lo, offset + lo)) failed = errno ? errno : EIO;
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(part, t);
  part(0);
  for (auto& th : pool) th.join();
  if (const int err = failed.load())
    return Error(Errc::io_error, "cannot read " + name + ": " + std::strerror(err));
  return {};
}

}  // namespace weir::inference
