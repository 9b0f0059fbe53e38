#include "weir/runtime/artifact_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <list>
#include <mutex>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include <boost/json.hpp>

#include "hash.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/runtime/sha256.hpp"

namespace weir {

namespace fs = std::filesystem;
namespace json = boost::json;

// --- ArtifactRef ----------------------------------------------------------------------------

json::value ArtifactRef::to_json() const {
  return json::object{
      {"$artifact", id}, {"bytes", bytes}, {"media_type", media_type}, {"preview", preview}};
}

std::optional<ArtifactRef> ArtifactRef::from_json(const json::value& v) {
  const auto* o = v.if_object();
  if (!o) return std::nullopt;
  const auto* id = o->if_contains("$artifact");
  if (!id || !id->is_string()) return std::nullopt;
  ArtifactRef r;
  r.id = id->as_string();
  if (const auto* b = o->if_contains("bytes"); b && b->is_number())
    r.bytes = b->to_number<std::uint64_t>();
  if (const auto* m = o->if_contains("media_type"); m && m->is_string())
    r.media_type = m->as_string();
  if (const auto* p = o->if_contains("preview"); p && p->is_string()) r.preview = p->as_string();
  return r;
}

// --- file format --------------------------------------------------------------------------
//
// "WEIRART1" | u64 length | u32 chunk_size | u32 n_chunks | u32 len + media type |
// u32 len + preview | u32 crc[n_chunks] | u32 header_crc | payload
// Each payload chunk has a CRC-32, so a range read verifies only the chunks it touches; the
// header has its own CRC. Written to a temporary file in the same folder, then renamed.

namespace {

constexpr char kMagic[8] = {'W', 'E', 'I', 'R', 'A', 'R', 'T', '1'};
constexpr std::uint32_t kChunk = 64 * 1024;
constexpr std::uint64_t kMaxMeta = 1 << 20;

struct FileHeader {
  std::uint64_t length = 0;
  std::uint32_t chunk = kChunk;
  std::string media_type, preview;
  std::vector<std::uint32_t> crcs;
  std::uint64_t payload_offset = 0;
};

void put_u32(std::string& s, std::uint32_t v) {
  s.append(reinterpret_cast<const char*>(&v), 4);
}
void put_u64(std::string& s, std::uint64_t v) {
  s.append(reinterpret_cast<const char*>(&v), 8);
}

std::string encode_header(std::string_view payload, std::string_view media,
                          std::string_view preview) {
  std::string h(kMagic, 8);
  put_u64(h, payload.size());
  put_u32(h, kChunk);
  const auto n = static_cast<std::uint32_t>((payload.size() + kChunk - 1) / kChunk);
  put_u32(h, n);
  put_u32(h, static_cast<std::uint32_t>(media.size()));
  h += media;
  put_u32(h, static_cast<std::uint32_t>(preview.size()));
  h += preview;
  for (std::uint32_t i = 0; i < n; ++i) {
    std::size_t off = std::size_t{i} * kChunk;
    put_u32(h, detail::crc32(payload.data() + off,
                             std::min<std::size_t>(kChunk, payload.size() - off)));
  }
  put_u32(h, detail::crc32(h.data(), h.size()));
  return h;
}

bool read_exact(int fd, void* dst, std::size_t n, std::uint64_t off) {
  auto* p = static_cast<char*>(dst);
  while (n) {
    ssize_t got = ::pread(fd, p, n, static_cast<off_t>(off));
    if (got <= 0) return false;
    p += got, n -= static_cast<std::size_t>(got), off += static_cast<std::uint64_t>(got);
  }
  return true;
}

// Reads and checks the header; an error names the problem.
Result<FileHeader> read_header(int fd, const fs::path& path, std::uint64_t file_size) {
  auto corrupt = [&](const std::string& what) {
    return Error(Errc::corrupt_data, "artifact file " + path.string() + " is corrupt: " + what);
  };
  std::string raw(24, '\0');
  if (file_size < 24 || !read_exact(fd, raw.data(), 24, 0))
    return corrupt("shorter than its header");
  if (std::memcmp(raw.data(), kMagic, 8) != 0) return corrupt("not a weir artifact (bad magic)");
  FileHeader h;
  std::uint32_t n = 0;
  std::memcpy(&h.length, raw.data() + 8, 8);
  std::memcpy(&h.chunk, raw.data() + 16, 4);
  std::memcpy(&n, raw.data() + 20, 4);
  if (h.chunk == 0 || n != (h.length + h.chunk - 1) / h.chunk)
    return corrupt("inconsistent chunk table");
  std::uint64_t off = 24;
  auto read_str = [&](std::string& s) -> bool {
    std::uint32_t len = 0;
    if (off + 4 > file_size || !read_exact(fd, &len, 4, off) || len > kMaxMeta ||
        off + 4 + len > file_size)
      return false;
    raw.append(reinterpret_cast<char*>(&len), 4);
    s.resize(len);
    if (len && !read_exact(fd, s.data(), len, off + 4)) return false;
    raw += s;
    off += 4 + len;
    return true;
  };
  if (!read_str(h.media_type) || !read_str(h.preview)) return corrupt("truncated header");
  if (off + 4ull * n + 4 > file_size) return corrupt("truncated chunk table");
  h.crcs.resize(n);
  if (n && !read_exact(fd, h.crcs.data(), 4ull * n, off)) return corrupt("truncated chunk table");
  raw.append(reinterpret_cast<const char*>(h.crcs.data()), 4ull * n);
  off += 4ull * n;
  std::uint32_t hcrc = 0;
  if (!read_exact(fd, &hcrc, 4, off)) return corrupt("truncated header");
  if (hcrc != detail::crc32(raw.data(), raw.size())) return corrupt("header checksum mismatch");
  h.payload_offset = off + 4;
  if (h.payload_offset + h.length != file_size) {
    return corrupt("holds " + std::to_string(file_size - std::min(file_size, h.payload_offset)) +
                   " payload bytes, expected " + std::to_string(h.length) +
                   " (truncated or extended)");
  }
  return h;
}

// The first bytes as valid UTF-8, cut on a character boundary; "" when the prefix is binary.
std::string make_preview(std::string_view bytes, std::size_t max) {
  std::size_t end = std::min(bytes.size(), max);
  std::size_t i = 0, last_ok = 0;
  while (i < end) {
    auto c = static_cast<unsigned char>(bytes[i]);
    std::size_t len = c < 0x80         ? 1
                      : (c >> 5) == 6  ? 2
                      : (c >> 4) == 14 ? 3
                      : (c >> 3) == 30 ? 4
                                       : 0;
    if (len == 0 || (c < 0x20 && c != '\n' && c != '\t' && c != '\r')) return {};
    if (i + len > end) break;
    for (std::size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(bytes[i + k]) & 0xC0) != 0x80) return {};
    }
    i += len;
    last_ok = i;
  }
  return std::string(bytes.substr(0, last_ok));
}

bool is_hex_id(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

// --- the store ----------------------------------------------------------------------------

struct ArtifactStore::Impl {
  struct Blob {
    std::uint64_t bytes = 0;
    std::string media_type, preview;
    std::shared_ptr<const std::string> data;  // memory tier; null when only on disk
    bool on_disk = false;
    std::optional<std::string> corrupt;  // found broken when the store was opened
    std::unordered_map<std::string, std::uint32_t> owners;
    std::list<std::string>::iterator lru;  // valid while data != null
    MemoryBudget::Reservation reservation;
    std::uint64_t file_bytes = 0;
  };

  ArtifactStoreConfig config;
  mutable std::mutex mu;
  std::unordered_map<std::string, Blob> blobs;                                // GUARDED_BY(mu)
  std::unordered_map<std::string, std::unordered_set<std::string>> by_owner;  // GUARDED_BY(mu)
  mutable std::list<std::string> lru;    // GUARDED_BY(mu): front = most recent
  ArtifactStats stats;                   // GUARDED_BY(mu)
  mutable std::uint64_t disk_reads = 0;  // GUARDED_BY(mu)

  fs::path path_of(const std::string& id) const { return config.dir / id.substr(0, 2) / id; }

  ArtifactRef ref_of(const std::string& id, const Blob& b) const {
    return {id, b.bytes, b.media_type, b.preview};
  }

  Status write_file(const std::string& id, Blob& b, std::string_view payload) {
    std::string header = encode_header(payload, b.media_type, b.preview);
    const std::uint64_t total = header.size() + payload.size();
    if (stats.disk_bytes + total > config.disk_limit) {
      return Error(Errc::memory_budget_exceeded,
                   "the artifact store's disk tier would grow to " +
                       format_bytes(stats.disk_bytes + total) +
                       ", over disk_limit=" + format_bytes(config.disk_limit) +
                       "; raise artifacts.disk_limit or release artifacts");
    }
    fs::path final_path = path_of(id);
    std::error_code ec;
    fs::create_directories(final_path.parent_path(), ec);
    thread_local std::mt19937_64 rng{std::random_device{}()};
    fs::path tmp =
        final_path.parent_path() / (".tmp-" + id.substr(0, 16) + "-" + std::to_string(rng()));
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      return Error(Errc::io_error, "cannot create " + tmp.string() + ": " + std::strerror(errno));
    }
    bool ok = ::write(fd, header.data(), header.size()) == static_cast<ssize_t>(header.size());
    std::size_t off = 0;
    while (ok && off < payload.size()) {
      ssize_t w = ::write(fd, payload.data() + off, payload.size() - off);
      ok = w > 0;
      if (ok) off += static_cast<std::size_t>(w);
    }
    int saved = errno;
    ::close(fd);
    if (!ok || ::rename(tmp.c_str(), final_path.c_str()) != 0) {
      if (ok) saved = errno;
      fs::remove(tmp, ec);
      return Error(Errc::io_error,
                   "cannot write artifact " + final_path.string() + ": " + std::strerror(saved));
    }
    b.on_disk = true;
    b.file_bytes = total;
    stats.disk_bytes += total;
    ++stats.disk_blobs;
    return {};
  }

  void drop_memory(Blob& b) {
    if (!b.data) return;
    lru.erase(b.lru);
    stats.memory_bytes -= b.bytes;
    --stats.memory_blobs;
    b.data.reset();
    b.reservation.release();
  }

  // Moves least recently used blobs to disk until `need` more bytes fit in memory.
  bool make_room(std::uint64_t need) {
    while (stats.memory_bytes + need > config.memory_limit && !lru.empty()) {
      const std::string victim = lru.back();
      Blob& v = blobs.at(victim);
      if (config.dir.empty()) return false;
      if (!v.on_disk && !write_file(victim, v, *v.data)) return false;
      drop_memory(v);
      ++stats.spills;
    }
    return stats.memory_bytes + need <= config.memory_limit;
  }

  bool to_memory(const std::string& id, Blob& b, std::shared_ptr<const std::string> data) {
    if (b.bytes > config.memory_limit || !make_room(b.bytes)) return false;
    if (config.budget) {
      auto r = config.budget->try_reserve(BudgetCategory::artifacts, b.bytes);
      while (!r && !lru.empty() && !config.dir.empty()) {  // give budget back by spilling
        const std::string victim = lru.back();
        Blob& v = blobs.at(victim);
        if (!v.on_disk && !write_file(victim, v, *v.data)) break;
        drop_memory(v);
        ++stats.spills;
        r = config.budget->try_reserve(BudgetCategory::artifacts, b.bytes);
      }
      if (!r) return false;
      b.reservation = std::move(*r);
    }
    b.data = std::move(data);
    lru.push_front(id);
    b.lru = lru.begin();
    stats.memory_bytes += b.bytes;
    ++stats.memory_blobs;
    return true;
  }

  void erase(const std::string& id) {
    auto it = blobs.find(id);
    if (it == blobs.end()) return;
    Blob& b = it->second;
    drop_memory(b);
    if (b.on_disk || b.corrupt) {
      std::error_code ec;
      fs::remove(path_of(id), ec);
      if (b.on_disk) {
        stats.disk_bytes -= b.file_bytes;
        --stats.disk_blobs;
      }
    }
    blobs.erase(it);
  }

  Result<std::string> read_disk(const std::string& id, std::uint64_t offset,
                                std::uint64_t length) const {
    fs::path p = path_of(id);
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return Error(Errc::io_error,
                   "cannot open artifact file " + p.string() + ": " + std::strerror(errno));
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    std::error_code ec;
    auto size = fs::file_size(p, ec);
    auto h = read_header(fd, p, ec ? 0 : size);
    if (!h) return std::move(h).error();
    offset = std::min(offset, h->length);
    length = std::min(length, h->length - offset);
    if (length == 0) return std::string();
    const std::uint64_t first = offset / h->chunk, last = (offset + length - 1) / h->chunk;
    std::string buf;
    buf.resize(static_cast<std::size_t>(std::min<std::uint64_t>(h->length, (last + 1) * h->chunk) -
                                        first * h->chunk));
    if (!read_exact(fd, buf.data(), buf.size(), h->payload_offset + first * h->chunk)) {
      return Error(Errc::corrupt_data,
                   "artifact file " + p.string() + " is corrupt: truncated payload");
    }
    for (std::uint64_t c = first; c <= last; ++c) {
      std::size_t off = static_cast<std::size_t>((c - first) * h->chunk);
      std::size_t n = std::min<std::size_t>(h->chunk, buf.size() - off);
      if (detail::crc32(buf.data() + off, n) != h->crcs[c]) {
        return Error(Errc::corrupt_data,
                     "artifact file " + p.string() + " is corrupt: checksum mismatch in chunk " +
                         std::to_string(c) + " (bytes " + std::to_string(c * h->chunk) + ".." +
                         std::to_string(c * h->chunk + n) + ")");
      }
    }
    return buf.substr(static_cast<std::size_t>(offset - first * h->chunk),
                      static_cast<std::size_t>(length));
  }
};

ArtifactStore::ArtifactStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ArtifactStore::~ArtifactStore() = default;

Result<std::unique_ptr<ArtifactStore>> ArtifactStore::open(ArtifactStoreConfig config) {
  auto impl = std::make_unique<Impl>();
  impl->config = std::move(config);
  if (!impl->config.dir.empty()) {
    std::error_code ec;
    fs::create_directories(impl->config.dir, ec);
    if (ec) {
      return Error(Errc::io_error, "cannot create the artifact directory " +
                                       impl->config.dir.string() + ": " + ec.message());
    }
    for (auto it = fs::recursive_directory_iterator(impl->config.dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_regular_file()) continue;
      std::string name = it->path().filename().string();
      if (name.rfind(".tmp-", 0) == 0) {  // a write that never finished
        fs::remove(it->path(), ec);
        ec.clear();
        continue;
      }
      if (!is_hex_id(name)) continue;
      Impl::Blob b;
      b.on_disk = true;
      b.owners[""] = 1;  // found on disk: retained until released
      int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
      auto size = it->file_size();
      auto h =
          fd >= 0 ? read_header(fd, it->path(), size)
                  : Result<FileHeader>(Error(Errc::io_error, "cannot open " + it->path().string()));
      if (fd >= 0) ::close(fd);
      if (h) {
        b.bytes = h->length;
        b.media_type = h->media_type;
        b.preview = h->preview;
        b.file_bytes = size;
        impl->stats.disk_bytes += size;
        ++impl->stats.disk_blobs;
      } else {
        b.on_disk = false;
        b.corrupt = h.error().message;
      }
      impl->by_owner[""].insert(name);
      impl->blobs.emplace(name, std::move(b));
    }
    if (ec)
      return Error(Errc::io_error, "cannot read the artifact directory " +
                                       impl->config.dir.string() + ": " + ec.message());
  }
  return std::unique_ptr<ArtifactStore>(new ArtifactStore(std::move(impl)));
}

const ArtifactStoreConfig& ArtifactStore::config() const noexcept {
  return impl_->config;
}

Result<ArtifactRef> ArtifactStore::put(std::string_view bytes, std::string_view media_type,
                                       std::string_view summary, std::string_view owner) {
  std::string id = sha256_hex(bytes);  // outside the lock: the expensive part
  auto& s = *impl_;
  std::lock_guard lock(s.mu);
  ++s.stats.puts;
  if (auto it = s.blobs.find(id); it != s.blobs.end() && !it->second.corrupt) {
    ++s.stats.dedup_hits;
    it->second.owners[std::string(owner)]++;
    s.by_owner[std::string(owner)].insert(id);
    if (it->second.data) s.lru.splice(s.lru.begin(), s.lru, it->second.lru);
    return s.ref_of(id, it->second);
  } else if (it != s.blobs.end()) {
    s.erase(id);  // replace a corrupt file with good bytes
  }
  Impl::Blob b;
  b.bytes = bytes.size();
  b.media_type = media_type;
  b.preview = summary.empty() ? make_preview(bytes, s.config.preview_bytes) : std::string(summary);
  auto data = std::make_shared<const std::string>(bytes);
  if (!s.to_memory(id, b, data)) {
    if (s.config.dir.empty()) {
      return Error(
          Errc::memory_budget_exceeded,
          "an artifact of " + format_bytes(bytes.size()) +
              " does not fit the memory tier (memory_limit=" + format_bytes(s.config.memory_limit) +
              ", " + format_bytes(s.stats.memory_bytes) +
              " in use) and the store has no disk directory; set artifacts.dir or raise the limit");
    }
    if (auto st = s.write_file(id, b, bytes); !st) return std::move(st).error();
  }
  b.owners[std::string(owner)] = 1;
  s.by_owner[std::string(owner)].insert(id);
  auto [pos, _] = s.blobs.emplace(id, std::move(b));
  return s.ref_of(id, pos->second);
}

// Disk reads are verified chunk by chunk (CRC-32), so a whole read needs no second hash pass.
Result<std::string> ArtifactStore::get(std::string_view id) const {
  return get_range(id, 0, UINT64_MAX);
}

Result<std::string> ArtifactStore::get_range(std::string_view id, std::uint64_t offset,
                                             std::uint64_t length) const {
  auto& s = *impl_;
  std::string key(id);
  {
    std::lock_guard lock(s.mu);
    auto it = s.blobs.find(key);
    if (it == s.blobs.end())
      return Error(Errc::not_found,
                   "artifact " + key + " is not in the store (released, or never stored)");
    const auto& b = it->second;
    if (b.corrupt) return Error(Errc::corrupt_data, *b.corrupt);
    if (b.data) {
      s.lru.splice(s.lru.begin(), s.lru, b.lru);
      offset = std::min<std::uint64_t>(offset, b.data->size());
      length = std::min<std::uint64_t>(length, b.data->size() - offset);
      return b.data->substr(static_cast<std::size_t>(offset), static_cast<std::size_t>(length));
    }
    ++s.disk_reads;
  }
  return s.read_disk(key, offset, length);  // outside the lock
}

Result<ArtifactRef> ArtifactStore::stat(std::string_view id) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->blobs.find(std::string(id));
  if (it == impl_->blobs.end())
    return Error(Errc::not_found, "artifact " + std::string(id) + " is not in the store");
  if (it->second.corrupt) return Error(Errc::corrupt_data, *it->second.corrupt);
  return impl_->ref_of(it->first, it->second);
}

bool ArtifactStore::contains(std::string_view id) const {
  std::lock_guard lock(impl_->mu);
  return impl_->blobs.count(std::string(id)) != 0;
}

Status ArtifactStore::retain(std::string_view id, std::string_view owner) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->blobs.find(std::string(id));
  if (it == impl_->blobs.end())
    return Error(Errc::not_found, "artifact " + std::string(id) + " is not in the store");
  it->second.owners[std::string(owner)]++;
  impl_->by_owner[std::string(owner)].insert(it->first);
  return {};
}

Status ArtifactStore::release(std::string_view id, std::string_view owner) {
  auto& s = *impl_;
  std::lock_guard lock(s.mu);
  std::string key(id), who(owner);
  auto it = s.blobs.find(key);
  if (it == s.blobs.end() || !it->second.owners.erase(who)) {
    return Error(Errc::not_found, "artifact " + key + " is not held by owner '" + who + "'");
  }
  if (auto o = s.by_owner.find(who); o != s.by_owner.end()) {
    o->second.erase(key);
    if (o->second.empty()) s.by_owner.erase(o);
  }
  if (it->second.owners.empty()) s.erase(key);
  return {};
}

std::size_t ArtifactStore::release_owner(std::string_view owner) {
  auto& s = *impl_;
  std::lock_guard lock(s.mu);
  auto o = s.by_owner.find(std::string(owner));
  if (o == s.by_owner.end()) return 0;
  std::size_t deleted = 0;
  for (const auto& id : o->second) {
    auto it = s.blobs.find(id);
    if (it == s.blobs.end()) continue;
    it->second.owners.erase(o->first);
    if (it->second.owners.empty()) {
      s.erase(id);
      ++deleted;
    }
  }
  s.by_owner.erase(o);
  return deleted;
}

ArtifactStats ArtifactStore::stats() const {
  std::lock_guard lock(impl_->mu);
  ArtifactStats st = impl_->stats;
  st.disk_reads = impl_->disk_reads;
  return st;
}

}  // namespace weir
