// The rearranged copy of a model file kept on disk, so that a later load reads the x16 layouts
// (repack.hpp) instead of computing them. Private to inference/.
//
// Why: on a 2-core machine rearranging a 1B Q8_0 model took most of a 2.6 s load, against
// llama.cpp's 0.16 s (it maps the file). Reading a copy that is already rearranged costs what
// reading the file costs.
//
// Where (cache_location): WEIR_MODEL_CACHE unset or empty: beside the model, "<model>.weir-x16";
// "on", "1", "true", "yes": the same; "off" (or "0", "false", "no"; these words in any case,
// spaces around ignored): no copy; any other value: a directory, the copy named
// "<file name>-<16 hex digits of a hash of the model's path>.weir-x16". The model's path is
// resolved first (canonical: symbolic links, "..", relative), so a file has one copy however its
// path is spelt. begin_cache leaves the writing to a process whose temporary file is there and
// locked (flock), and removes one a killed process left.
// ModelOptions::cache_dir, when set, takes the place of the variable.
//
// Format: a 4096-byte header, then the model file's bytes with every matrix the loader
// rearranges in its x16 layout (which ones follows from the file and kX16LayoutVersion alone).
// Header: "WEIRX16\n", u32 kCacheFormat, u32 kX16LayoutVersion, u64 the model's size, i64 its
// mtime in ns, u64 the header bytes (the GGUF up to its tensor data), u64 its inode, i64 its
// ctime in ns, zeros to 4096. The inode and ctime (format 2) tell a model replaced by another
// of the same size, mtime and header (a fine-tune copied with `cp -p`, `rsync -a`, a build with
// fixed times) from the file the copy was made of: size, mtime and header alone served the old
// weights for the new file.
// A copy is used only when all of these match the model, the copy is exactly 4096 + the model's
// size, and its GGUF header bytes equal the model's; otherwise it is rebuilt (and said so).
//
// Thread safety: free functions over files; callers load one model per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>

#include "weir/runtime/error.hpp"

namespace weir::inference {

constexpr std::uint32_t kCacheFormat = 2;
constexpr std::uint64_t kCacheHeaderBytes = 4096;

// What identifies the model file a copy was made from.
struct CacheSource {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::span<const std::byte> gguf_header;  // the model's bytes before its tensor data
  std::uint64_t inode = 0;
  std::int64_t ctime_ns = 0;
};

// Where the copy of `model` lives: nullopt when caching is off. `dir`: ModelOptions::cache_dir
// (empty: WEIR_MODEL_CACHE decides).
std::optional<std::filesystem::path> cache_location(const std::filesystem::path& model,
                                                    const std::filesystem::path& dir);

// Opens the copy at `path` for reading if it is valid for `src`: an open file descriptor
// (the caller closes it). Errors: not_found when there is no copy (nothing to say), corrupt_data
// with the reason when there is one that does not fit (stale, truncated, another version).
Result<int> open_cache(const std::filesystem::path& path, const CacheSource& src);

// A copy being written: a temporary file beside `path`, renamed over it by finish_cache().
struct CacheWriter {
  int fd = -1;
  std::filesystem::path path, tmp;
};

// Creates the temporary file for the copy at `path`, locked (flock) until finish_cache closes
// it, first removing temporary files of it that processes now gone left: unlocked, and named by
// no live process, by this one, or not written to for 10 s (the id is another process's now).
// Errors: io_error when the directory cannot be written (read-only, missing), saying which file
// could not be created, or when another process is writing the copy ("process N is writing
// PATH").
Result<CacheWriter> begin_cache(const std::filesystem::path& path);

// Writes `image` (the rearranged model, src.size bytes) into w's temporary file, flushes it
// (fdatasync) and renames it over w.path, so a reader sees a whole copy or none; closes w.fd.
// On failure (full disk) the temporary file is removed and the error says why.
Status finish_cache(CacheWriter& w, const CacheSource& src, std::span<const std::byte> image);

// Reads `size` bytes of `fd` at `offset` into `dst` with `threads` threads, each its own slice
// (the copy and the first touch of each page, which the kernel zeroes, run in parallel).
Status read_in_parallel(int fd, std::uint64_t offset, std::byte* dst, std::uint64_t size,
                        int threads, const std::string& name);

}  // namespace weir::inference
