// GGUF (v2, v3) files over a read-only memory map.
//
// open() maps the file and parses its header, metadata and tensor table. Every length, count,
// offset and tensor extent is checked against the file size before it is used, so a truncated
// or corrupt file is a clear error (naming the key or tensor and the byte offset), never an
// out-of-bounds read and never an allocation sized by a corrupt count. Tensor data stays in
// the mapping: TensorInfo::data points into it while the GgufFile lives. Only the model loader
// moves it (to_memory) and rearranges it (writable_data, seal), before it shares the file.
//
// Thread safety: a GgufFile is immutable after open() (or after the loader's seal()); any
// thread may read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weir/runtime/error.hpp"

namespace weir::inference {

enum class GgufValueType : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

enum class GgmlType : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  bf16 = 30,
};
const char* ggml_type_name(GgmlType t);
// (elements per block, bytes per block); nullopt for types weir cannot size.
std::optional<std::pair<std::uint64_t, std::uint64_t>> ggml_type_block(GgmlType t);

struct TensorInfo {
  std::string name;
  std::vector<std::uint64_t> dims;  // ne0 first (ne0 = innermost = row length)
  GgmlType type = GgmlType::f32;
  std::uint64_t offset = 0;  // relative to the data section
  std::uint64_t n_elements = 0, n_bytes = 0;
  const std::byte* data = nullptr;  // into the mapping
};

class GgufFile {
 public:
  // Errors: io_error (cannot open or map), corrupt_data (truncated or inconsistent file:
  // the message names the field, key or tensor and the offset), unsupported (version).
  static Result<std::unique_ptr<GgufFile>> open(const std::filesystem::path& path);
  // Parses bytes the caller keeps alive (tests, fuzzing). No copy.
  static Result<std::unique_ptr<GgufFile>> from_memory(std::span<const std::byte> bytes,
                                                       std::string name = "<memory>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  std::uint32_t version() const { return version_; }
  const std::string& name() const { return name_; }
  std::uint64_t file_bytes() const { return size_; }
  // The file's modification time (open() files; 0 for from_memory()), in ns since the epoch.
  std::int64_t mtime_ns() const { return mtime_ns_; }
  // Its inode number and status change time (ctime, ns), which no tool sets: a file renamed
  // over it, or rewritten in place, has other ones even when its size and mtime are the same.
  std::uint64_t inode() const { return inode_; }
  std::int64_t ctime_ns() const { return ctime_ns_; }
  // The bytes before the tensor data: header, metadata, tensor table and padding.
  std::span<const std::byte> header_bytes() const { return {base_, data_offset_}; }
  std::uint64_t alignment() const { return alignment_; }

  bool has(std::string_view key) const { return index_.count(std::string(key)) != 0; }
  // REQUIRES: has(key).
  GgufValueType type_of(std::string_view key) const;
  std::vector<std::string_view> keys() const;  // in file order

  // Typed getters: nullopt when the key is missing; an error when it has another type.
  // Integer getters accept any integer type; float getters accept floats and integers.
  Result<std::optional<std::string>> get_string(std::string_view key) const;
  Result<std::optional<std::int64_t>> get_int(std::string_view key) const;
  Result<std::optional<double>> get_float(std::string_view key) const;
  Result<std::optional<bool>> get_bool(std::string_view key) const;
  Result<std::optional<std::vector<std::string>>> get_string_array(std::string_view key) const;
  Result<std::optional<std::vector<float>>> get_float_array(std::string_view key) const;
  Result<std::optional<std::vector<std::int32_t>>> get_int_array(std::string_view key) const;
  // A short rendering for `weir inspect`: arrays as "[n items of T]".
  std::string value_to_string(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* tensor(std::string_view name) const;

  // For the model loader, which rearranges some weights for the CPU kernels: a writable pointer
  // to tensor t's data, or nullptr for a from_memory() file (the bytes are the caller's). The
  // mapping is private, so writes never reach the file; seal() makes it read-only again.
  std::byte* writable_data(const TensorInfo& t);
  void seal();

  // For the model loader: moves the bytes into anonymous memory madvised for 2 MiB pages,
  // which `fill` writes (dst: file_bytes() bytes; from the file or from a rearranged copy of
  // it), points every tensor there and unmaps the file. Decode streams every weight once per
  // token, and with 4 KiB file pages the TLB misses cost a third of F32 decode speed on the
  // development machine. The memory stays writable until seal(). On failure (fill's error, no
  // memory) nothing changed: the file stays mapped. REQUIRES: an open() file, not yet moved.
  Status to_memory(const std::function<Status(std::byte* dst)>& fill);
  bool in_memory() const { return in_memory_; }
  // For the model loader, instead of to_memory() where the kernel allows it: maps `fd`, which
  // holds these same bytes from `offset` on (this file, or its rearranged copy), madvised for
  // 2 MiB pages and populated, and keeps that mapping in place of the current one if the kernel
  // maps at least 90% of it with 2 MiB page-cache pages (large folios: ext4 and XFS on recent
  // kernels). No copy, and the pages are shared with every process that maps the file. Else
  // (false) nothing changed. Read-only: writable_data() gives private copies of pages.
  // REQUIRES: an open() file, neither moved nor made writable.
  bool map_huge(int fd, std::uint64_t offset);
  bool huge_mapped() const { return huge_mapped_; }
  // Whether the bytes are this object's (an open() file), not the caller's (from_memory()).
  bool owns_bytes() const { return mapping_ != nullptr; }

 private:
  struct Value {
    GgufValueType type;
    GgufValueType elem_type = GgufValueType::u8;  // arrays
    std::uint64_t count = 0;                      // arrays: elements
    std::uint64_t offset = 0;                     // where the payload starts in the file
  };
  GgufFile() = default;
  Status parse();
  Result<const Value*> find(std::string_view key, std::string_view want) const;
  // Unmaps the current bytes and keeps the mapping `m` (`bytes` long) whose file bytes start at
  // `base`: to_memory() and map_huge() move here.
  void move_to_mapping(void* m, std::uint64_t bytes, std::byte* base);

  std::string name_;
  const std::byte* base_ = nullptr;
  std::uint64_t size_ = 0;
  void* mapping_ = nullptr;  // munmap on destruction when set
  std::uint64_t mapped_bytes_ = 0;
  bool in_memory_ = false;    // to_memory() moved the bytes into anonymous memory
  bool huge_mapped_ = false;  // map_huge() mapped them
  bool writable_ = false;     // writable_data() or to_memory() was called, seal() not since
  std::int64_t mtime_ns_ = 0, ctime_ns_ = 0;
  std::uint64_t inode_ = 0;
  std::uint64_t data_offset_ = 0;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, Value>> kv_;
  std::unordered_map<std::string, std::size_t> index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, std::size_t> tensor_index_;
};

}  // namespace weir::inference
