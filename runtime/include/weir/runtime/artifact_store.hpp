// ArtifactStore: content-addressed blobs that keep large payloads out of graph state.
//
// A value too big to live in state (a document, a tool's output) is put() here and replaced in
// state by an ArtifactRef: {"$artifact": id, "bytes": n, "preview": "..."}. The id is the
// SHA-256 of the bytes (hex), so equal payloads are stored once. Blobs live in a memory tier
// bounded by `memory_limit` (and charged to the `artifacts` category of a MemoryBudget when one
// is given); the least recently used blobs spill to a disk directory bounded by `disk_limit`.
// Disk writes are atomic (temporary file + rename) and carry a checksum, so a torn or corrupt
// file is reported as Errc::corrupt_data, never returned. A store opened on an existing
// directory finds the blobs written before a restart.
//
// Lifetimes: every put() names an owner (a run id, or "" for blobs the caller releases by id).
// release_owner() drops an owner's references; a blob with no owner and no explicit retain is
// deleted from both tiers. Nothing outlives its owners.
//
// Thread safety: all methods may be called from any thread (one internal mutex; file I/O is
// done outside it where possible).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/json/value.hpp>

#include "weir/runtime/error.hpp"

namespace weir {

class MemoryBudget;

// What state holds in place of a payload.
struct ArtifactRef {
  std::string id;  // 64 hex chars (SHA-256 of the bytes)
  std::uint64_t bytes = 0;
  std::string media_type;  // e.g. "text/plain", "application/json"
  std::string preview;     // the first bytes as valid UTF-8 (cut on a character boundary) or
                           // the caller's summary when one was given

  // {"$artifact": id, "bytes": n, "media_type": "...", "preview": "..."}
  boost::json::value to_json() const;
  // An ArtifactRef when `v` is an object with a string "$artifact" member; nullopt otherwise.
  static std::optional<ArtifactRef> from_json(const boost::json::value& v);
};

struct ArtifactStoreConfig {
  std::filesystem::path dir;                      // empty: memory only (no spill)
  std::size_t memory_limit = 64u << 20;           // bytes kept in memory before spilling
  std::size_t disk_limit = std::size_t{4} << 30;  // bytes on disk; beyond it put() fails
  std::size_t preview_bytes = 200;
  MemoryBudget* budget = nullptr;  // charged (artifacts) for the memory tier
};

struct ArtifactStats {
  std::size_t memory_bytes = 0, disk_bytes = 0;
  std::size_t memory_blobs = 0, disk_blobs = 0;
  std::uint64_t puts = 0, dedup_hits = 0, spills = 0, disk_reads = 0;
};

class ArtifactStore {
 public:
  // Opens (creating the directory when needed) and indexes blobs already on disk.
  // Errors: io_error when the directory cannot be created or read.
  static Result<std::unique_ptr<ArtifactStore>> open(ArtifactStoreConfig config);
  ~ArtifactStore();

  // Stores `bytes` for `owner`. `summary`, when not empty, becomes the preview.
  // Errors: memory_budget_exceeded / io_error when neither tier can take the blob (the
  // message names memory_limit / disk_limit). On failure nothing is stored.
  Result<ArtifactRef> put(std::string_view bytes, std::string_view media_type,
                          std::string_view summary = {}, std::string_view owner = {});

  // The whole blob, or bytes [offset, offset+length) clipped to its end.
  // Errors: not_found (unknown id), corrupt_data (checksum mismatch), io_error.
  Result<std::string> get(std::string_view id) const;
  Result<std::string> get_range(std::string_view id, std::uint64_t offset,
                                std::uint64_t length) const;
  Result<ArtifactRef> stat(std::string_view id) const;
  bool contains(std::string_view id) const;

  // Adds `owner` to an existing blob's owners. Errors: not_found.
  Status retain(std::string_view id, std::string_view owner);
  // Drops `owner`'s reference to one blob / to every blob it holds; unowned blobs are deleted.
  Status release(std::string_view id, std::string_view owner = {});
  std::size_t release_owner(std::string_view owner);

  ArtifactStats stats() const;
  const ArtifactStoreConfig& config() const noexcept;

 private:
  struct Impl;
  explicit ArtifactStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir
