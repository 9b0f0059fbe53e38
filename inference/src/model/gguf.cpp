#include "weir/inference/gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <functional>

namespace weir::inference {

const char* ggml_type_name(GgmlType t) {
  switch (t) {
    case GgmlType::f32:
      return "F32";
    case GgmlType::f16:
      return "F16";
    case GgmlType::q4_0:
      return "Q4_0";
    case GgmlType::q4_1:
      return "Q4_1";
    case GgmlType::q5_0:
      return "Q5_0";
    case GgmlType::q5_1:
      return "Q5_1";
    case GgmlType::q8_0:
      return "Q8_0";
    case GgmlType::q8_1:
      return "Q8_1";
    case GgmlType::q2_k:
      return "Q2_K";
    case GgmlType::q3_k:
      return "Q3_K";
    case GgmlType::q4_k:
      return "Q4_K";
    case GgmlType::q5_k:
      return "Q5_K";
    case GgmlType::q6_k:
      return "Q6_K";
    case GgmlType::q8_k:
      return "Q8_K";
    case GgmlType::bf16:
      return "BF16";
  }
  return "unknown";
}

std::optional<std::pair<std::uint64_t, std::uint64_t>> ggml_type_block(GgmlType t) {
  switch (t) {
    case GgmlType::f32:
      return std::pair<std::uint64_t, std::uint64_t>{1, 4};
    case GgmlType::f16:
    case GgmlType::bf16:
      return std::pair<std::uint64_t, std::uint64_t>{1, 2};
    case GgmlType::q4_0:
      return std::pair<std::uint64_t, std::uint64_t>{32, 18};
    case GgmlType::q4_1:
      return std::pair<std::uint64_t, std::uint64_t>{32, 20};
    case GgmlType::q5_0:
      return std::pair<std::uint64_t, std::uint64_t>{32, 22};
    case GgmlType::q5_1:
      return std::pair<std::uint64_t, std::uint64_t>{32, 24};
    case GgmlType::q8_0:
      return std::pair<std::uint64_t, std::uint64_t>{32, 34};
    case GgmlType::q8_1:
      return std::pair<std::uint64_t, std::uint64_t>{32, 36};
    case GgmlType::q2_k:
      return std::pair<std::uint64_t, std::uint64_t>{256, 84};
    case GgmlType::q3_k:
      return std::pair<std::uint64_t, std::uint64_t>{256, 110};
    case GgmlType::q4_k:
      return std::pair<std::uint64_t, std::uint64_t>{256, 144};
    case GgmlType::q5_k:
      return std::pair<std::uint64_t, std::uint64_t>{256, 176};
    case GgmlType::q6_k:
      return std::pair<std::uint64_t, std::uint64_t>{256, 210};
    case GgmlType::q8_k:
      return std::pair<std::uint64_t, std::uint64_t>{256, 292};
  }
  return std::nullopt;
}

namespace {

const char* value_type_name(GgufValueType t) {
  constexpr const char* names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                   "bool", "string", "array", "u64", "i64", "f64"};
  auto i = static_cast<std::uint32_t>(t);
  return i < 13 ? names[i] : "unknown";
}

std::uint64_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::boolean:
      return 1;
    case GgufValueType::u16:
    case GgufValueType::i16:
      return 2;
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::f32:
      return 4;
    case GgufValueType::u64:
    case GgufValueType::i64:
    case GgufValueType::f64:
      return 8;
    default:
      return 0;
  }
}

// Bounds-checked reading of the header. Every read says what it was reading, for errors.
class Cursor {
 public:
  Cursor(const std::byte* base, std::uint64_t size, const std::string& name)
      : base_(base), size_(size), name_(name) {}
  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return size_ - pos_; }
  void seek(std::uint64_t p) { pos_ = p; }

  Error corrupt(const std::string& what) const {
    return Error(Errc::corrupt_data, name_ + ": " + what + " at offset " + std::to_string(pos_) +
                                         " (file is " + std::to_string(size_) +
                                         " bytes; truncated or corrupt GGUF)");
  }
  Status need(std::uint64_t n, const std::string& what) const {
    if (n > remaining()) return corrupt(what + " runs past the end of the file");
    return {};
  }
  template <class T>
  Status read(T& v, const std::string& what) {
    if (auto st = need(sizeof(T), what); !st) return st;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return {};
  }
  Status string(std::string_view& s, const std::string& what) {
    std::uint64_t len = 0;
    if (auto st = read(len, what + " length"); !st) return st;
    if (auto st = need(len, what + " (" + std::to_string(len) + " bytes)"); !st) return st;
    s = std::string_view(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return {};
  }
  // Skips one value of `type`, checking every length. Arrays may nest (bounded depth).
  Status skip(GgufValueType type, const std::string& what, int depth = 0) {
    if (type == GgufValueType::string) {
      std::string_view s;
      return string(s, what);
    }
    if (type == GgufValueType::array) {
      if (depth > 4) return corrupt(what + ": arrays nested too deeply");
      std::uint32_t elem = 0;
      std::uint64_t count = 0;
      if (auto st = read(elem, what + " element type"); !st) return st;
      if (auto st = read(count, what + " element count"); !st) return st;
      auto et = static_cast<GgufValueType>(elem);
      if (std::uint64_t sz = scalar_size(et)) {
        if (count > remaining() / sz)
          return corrupt(what + ": " + std::to_string(count) + " elements of " +
                         value_type_name(et) + " do not fit");
        pos_ += count * sz;
        return {};
      }
      if (et != GgufValueType::string && et != GgufValueType::array)
        return corrupt(what + ": unknown element type " + std::to_string(elem));
      if (count > remaining() / 8)
        return corrupt(what + ": " + std::to_string(count) + " elements do not fit");
      for (std::uint64_t i = 0; i < count; ++i) {
        if (auto st = skip(et, what + "[" + std::to_string(i) + "]", depth + 1); !st) return st;
      }
      return {};
    }
    std::uint64_t sz = scalar_size(type);
    if (sz == 0)
      return corrupt(what + ": unknown value type " +
                     std::to_string(static_cast<std::uint32_t>(type)));
    if (auto st = need(sz, what); !st) return st;
    pos_ += sz;
    return {};
  }

 private:
  const std::byte* base_;
  std::uint64_t size_;
  const std::string& name_;
  std::uint64_t pos_ = 0;
};

}  // namespace

GgufFile::~GgufFile() {
  if (mapping_) ::munmap(mapping_, mapped_bytes_);
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::filesystem::path& path) {
  // O_NONBLOCK: a FIFO's open would wait for a writer before fstat could refuse it (a regular
  // file's reads and mapping ignore the flag).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return Error(Errc::io_error,
                 "cannot open model file " + path.string() + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error(Errc::io_error, path.string() + " is not a regular file");
  }
  auto f = std::unique_ptr<GgufFile>(new GgufFile());
  f->name_ = path.string();
  f->size_ = static_cast<std::uint64_t>(st.st_size);
  auto ns = [](const timespec& t) { return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; };
  f->mtime_ns_ = ns(st.st_mtim);
  f->ctime_ns_ = ns(st.st_ctim);
  f->inode_ = static_cast<std::uint64_t>(st.st_ino);
  if (f->size_ == 0) {
    ::close(fd);
    return Error(Errc::corrupt_data, path.string() + ": the file is empty (not a GGUF file)");
  }
  // Mapped, not read: opening a model for its tokenizer or `weir inspect` touches only the
  // header's pages. The model loader moves the weights into memory (to_memory).
  void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED)
    return Error(Errc::io_error, "cannot map " + path.string() + ": " + std::strerror(errno));
  f->mapping_ = m;
  f->mapped_bytes_ = f->size_;
  f->base_ = static_cast<const std::byte*>(m);
  if (auto s = f->parse(); !s) return std::move(s).error();
  return f;
}

namespace {

// kB of the mapping at `addr` that the kernel maps with 2 MiB page-cache pages
// (FilePmdMapped in /proc/self/smaps); 0 when it cannot tell.
std::uint64_t file_pmd_mapped_kb(const void* addr) {
  std::FILE* f = std::fopen("/proc/self/smaps", "re");
  if (!f) return 0;
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  char line[512];
  bool inside = false;
  std::uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
        std::strchr(line, ':') > std::strchr(line, ' ')) {
      if (inside) break;
      inside = a >= lo && a < hi;
    } else if (inside && std::sscanf(line, "FilePmdMapped: %lu kB", &lo) == 1) {
      kb = lo;
      break;
    }
  }
  std::fclose(f);
  return kb;
}

}  // namespace

bool GgufFile::map_huge(int fd, std::uint64_t offset) {
  if (!mapping_ || in_memory_ || writable_) return false;
  const std::uint64_t bytes = offset + size_;
  void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED) return false;
  // Hugepage first, then populate: the faults then map the page cache's 2 MiB folios whole.
  if (::madvise(m, bytes, MADV_HUGEPAGE) != 0 || ::madvise(m, bytes, MADV_POPULATE_READ) != 0 ||
      file_pmd_mapped_kb(m) * 1024 < bytes / 10 * 9) {
    ::munmap(m, bytes);
    return false;
  }
  move_to_mapping(m, bytes, static_cast<std::byte*>(m) + offset);
  huge_mapped_ = true;
  return true;
}

void GgufFile::move_to_mapping(void* m, std::uint64_t bytes, std::byte* base) {
  ::munmap(mapping_, mapped_bytes_);
  for (TensorInfo& t : tensors_) t.data = base + (t.data - base_);
  mapping_ = m;
  mapped_bytes_ = bytes;
  base_ = base;
}

Status GgufFile::to_memory(const std::function<Status(std::byte* dst)>& fill) {
  if (!mapping_ || in_memory_) return Error(Errc::invalid_argument, name_ + ": not a mapped file");
  // Rounded to 2 MiB so that the last huge page is whole.
  const std::uint64_t bytes = (size_ + (2u << 20) - 1) & ~std::uint64_t{(2u << 20) - 1};
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return Error(Errc::memory_budget_exceeded, name_ + ": cannot allocate " +
                                                   std::to_string(bytes >> 20) +
                                                   " MiB for the weights: " + std::strerror(errno));
  ::madvise(m, bytes, MADV_HUGEPAGE);  // best effort: THP may be off
  auto* dst = static_cast<std::byte*>(m);
  if (auto st = fill(dst); !st) {
    ::munmap(m, bytes);
    return st;
  }
  move_to_mapping(m, bytes, dst);
  in_memory_ = true;
  writable_ = true;
  return {};
}

std::byte* GgufFile::writable_data(const TensorInfo& t) {
  if (!mapping_) return nullptr;
  if (!writable_ && ::mprotect(mapping_, mapped_bytes_, PROT_READ | PROT_WRITE) != 0)
    return nullptr;
  writable_ = true;
  return const_cast<std::byte*>(t.data);  // inside mapping_, which this file owns
}

void GgufFile::seal() {
  if (writable_) ::mprotect(mapping_, mapped_bytes_, PROT_READ);
  writable_ = false;
}

Result<std::unique_ptr<GgufFile>> GgufFile::from_memory(std::span<const std::byte> bytes,
                                                        std::string name) {
  auto f = std::unique_ptr<GgufFile>(new GgufFile());
  f->name_ = std::move(name);
  f->base_ = bytes.data();
  f->size_ = bytes.size();
  if (auto s = f->parse(); !s) return std::move(s).error();
  return f;
}

Status GgufFile::parse() {
  Cursor c(base_, size_, name_);
  std::uint32_t magic = 0;
  if (size_ < 4 || std::memcmp(base_, "GGUF", 4) != 0) {
    return Error(Errc::corrupt_data, name_ + ": not a GGUF file (it does not start with \"GGUF\")");
  }
  c.seek(4);
  (void)magic;
  if (auto st = c.read(version_, "the version"); !st) return st;
  if (version_ != 2 && version_ != 3) {
    return Error(Errc::unsupported, name_ + ": GGUF version " + std::to_string(version_) +
                                        " is not supported (weir reads versions 2 and 3)");
  }
  std::uint64_t n_tensors = 0, n_kv = 0;
  if (auto st = c.read(n_tensors, "the tensor count"); !st) return st;
  if (auto st = c.read(n_kv, "the metadata count"); !st) return st;
  if (n_kv > c.remaining() / 13)
    return c.corrupt("metadata count " + std::to_string(n_kv) + " cannot fit");
  if (n_tensors > c.remaining() / 28)
    return c.corrupt("tensor count " + std::to_string(n_tensors) + " cannot fit");

  kv_.reserve(n_kv);
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    std::string_view key;
    if (auto st = c.string(key, "metadata key " + std::to_string(i)); !st) return st;
    std::uint32_t type = 0;
    const std::string what = "metadata '" + std::string(key) + "'";
    if (auto st = c.read(type, what + " type"); !st) return st;
    Value v{static_cast<GgufValueType>(type), GgufValueType::u8, 0, c.pos()};
    if (v.type == GgufValueType::array) {
      std::uint32_t et = 0;
      if (auto st = c.read(et, what + " element type"); !st) return st;
      if (auto st = c.read(v.count, what + " element count"); !st) return st;
      v.elem_type = static_cast<GgufValueType>(et);
      c.seek(v.offset);
    }
    if (auto st = c.skip(v.type, what); !st) return st;
    index_[std::string(key)] = kv_.size();
    kv_.emplace_back(std::string(key), v);
  }
  if (auto a = get_int("general.alignment"); a && *a) {
    if (**a <= 0 || (**a & (**a - 1)) != 0)
      return Error(Errc::corrupt_data,
                   name_ + ": general.alignment " + std::to_string(**a) + " is not a power of two");
    alignment_ = static_cast<std::uint64_t>(**a);
  }

  tensors_.reserve(n_tensors);
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    std::string_view tname;
    if (auto st = c.string(tname, "tensor " + std::to_string(i) + " name"); !st) return st;
    t.name = tname;
    const std::string what = "tensor '" + t.name + "'";
    std::uint32_t n_dims = 0, type = 0;
    if (auto st = c.read(n_dims, what + " dimension count"); !st) return st;
    if (n_dims == 0 || n_dims > 4)
      return c.corrupt(what + " has " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
    t.n_elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      std::uint64_t ne = 0;
      if (auto st = c.read(ne, what + " dimension " + std::to_string(d)); !st) return st;
      if (ne == 0 || t.n_elements > (std::uint64_t{1} << 50) / ne)
        return c.corrupt(what + " has an impossible shape");
      t.dims.push_back(ne);
      t.n_elements *= ne;
    }
    if (auto st = c.read(type, what + " type"); !st) return st;
    t.type = static_cast<GgmlType>(type);
    if (auto st = c.read(t.offset, what + " offset"); !st) return st;
    auto blk = ggml_type_block(t.type);
    if (!blk) return c.corrupt(what + " has unknown tensor type " + std::to_string(type));
    if (t.dims[0] % blk->first != 0) {
      return c.corrupt(what + ": row length " + std::to_string(t.dims[0]) +
                       " is not a multiple of the " + ggml_type_name(t.type) + " block size " +
                       std::to_string(blk->first));
    }
    t.n_bytes = t.n_elements / blk->first * blk->second;
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  const std::uint64_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  data_offset_ = std::min(data_start, size_);
  for (auto& t : tensors_) {
    if (t.offset % alignment_ != 0) {
      return Error(Errc::corrupt_data, name_ + ": tensor '" + t.name + "' offset " +
                                           std::to_string(t.offset) + " is not aligned to " +
                                           std::to_string(alignment_));
    }
    if (data_start > size_ || t.offset > size_ - data_start ||
        t.n_bytes > size_ - data_start - t.offset) {
      return Error(Errc::corrupt_data,
                   name_ + ": tensor '" + t.name + "' (" + std::to_string(t.n_bytes) +
                       " bytes at data offset " + std::to_string(t.offset) +
                       ") extends past the end of the file (" + std::to_string(size_) +
                       " bytes); the file is truncated");
    }
    t.data = base_ + data_start + t.offset;
  }
  return {};
}

GgufValueType GgufFile::type_of(std::string_view key) const {
  return kv_[index_.at(std::string(key))].second.type;
}

std::vector<std::string_view> GgufFile::keys() const {
  std::vector<std::string_view> k;
  for (const auto& [name, v] : kv_) k.push_back(name);
  return k;
}

const TensorInfo* GgufFile::tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<const GgufFile::Value*> GgufFile::find(std::string_view key, std::string_view want) const {
  auto it = index_.find(std::string(key));
  if (it == index_.end()) return static_cast<const Value*>(nullptr);
  return &kv_[it->second].second;
}

namespace {
template <class T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::optional<double> scalar_number(GgufValueType t, const std::byte* p) {
  switch (t) {
    case GgufValueType::u8:
      return load<std::uint8_t>(p);
    case GgufValueType::i8:
      return load<std::int8_t>(p);
    case GgufValueType::u16:
      return load<std::uint16_t>(p);
    case GgufValueType::i16:
      return load<std::int16_t>(p);
    case GgufValueType::u32:
      return load<std::uint32_t>(p);
    case GgufValueType::i32:
      return load<std::int32_t>(p);
    case GgufValueType::u64:
      return static_cast<double>(load<std::uint64_t>(p));
    case GgufValueType::i64:
      return static_cast<double>(load<std::int64_t>(p));
    case GgufValueType::f32:
      return load<float>(p);
    case GgufValueType::f64:
      return load<double>(p);
    default:
      return std::nullopt;
  }
}

bool is_integer(GgufValueType t) {
  return t == GgufValueType::u8 || t == GgufValueType::i8 || t == GgufValueType::u16 ||
         t == GgufValueType::i16 || t == GgufValueType::u32 || t == GgufValueType::i32 ||
         t == GgufValueType::u64 || t == GgufValueType::i64;
}
}  // namespace

#define WEIR_GGUF_WRONG_TYPE(expected)                                           \
  Error(Errc::model_error, name_ + ": metadata '" + std::string(key) + "' is " + \
                               value_type_name(v->type) + ", expected " + expected)

Result<std::optional<std::string>> GgufFile::get_string(std::string_view key) const {
  const Value* v = *find(key, "string");
  if (!v) return std::optional<std::string>();
  if (v->type != GgufValueType::string) return WEIR_GGUF_WRONG_TYPE("a string");
  std::uint64_t len = load<std::uint64_t>(base_ + v->offset);
  return std::optional<std::string>(
      std::string(reinterpret_cast<const char*>(base_ + v->offset + 8), len));
}

Result<std::optional<std::int64_t>> GgufFile::get_int(std::string_view key) const {
  const Value* v = *find(key, "integer");
  if (!v) return std::optional<std::int64_t>();
  if (v->type == GgufValueType::u64)
    return std::optional<std::int64_t>(
        static_cast<std::int64_t>(load<std::uint64_t>(base_ + v->offset)));
  if (v->type == GgufValueType::i64)
    return std::optional<std::int64_t>(load<std::int64_t>(base_ + v->offset));
  if (!is_integer(v->type)) return WEIR_GGUF_WRONG_TYPE("an integer");
  return std::optional<std::int64_t>(
      static_cast<std::int64_t>(*scalar_number(v->type, base_ + v->offset)));
}

Result<std::optional<double>> GgufFile::get_float(std::string_view key) const {
  const Value* v = *find(key, "number");
  if (!v) return std::optional<double>();
  auto n = scalar_number(v->type, base_ + v->offset);
  if (!n) return WEIR_GGUF_WRONG_TYPE("a number");
  return std::optional<double>(*n);
}

Result<std::optional<bool>> GgufFile::get_bool(std::string_view key) const {
  const Value* v = *find(key, "bool");
  if (!v) return std::optional<bool>();
  if (v->type != GgufValueType::boolean) return WEIR_GGUF_WRONG_TYPE("a bool");
  return std::optional<bool>(load<std::uint8_t>(base_ + v->offset) != 0);
}

Result<std::optional<std::vector<std::string>>> GgufFile::get_string_array(
    std::string_view key) const {
  const Value* v = *find(key, "string array");
  if (!v) return std::optional<std::vector<std::string>>();
  if (v->type != GgufValueType::array || v->elem_type != GgufValueType::string)
    return WEIR_GGUF_WRONG_TYPE("an array of strings");
  std::vector<std::string> out;
  out.reserve(v->count);
  std::uint64_t p = v->offset + 12;  // past element type and count; lengths were checked by parse()
  for (std::uint64_t i = 0; i < v->count; ++i) {
    std::uint64_t len = load<std::uint64_t>(base_ + p);
    out.emplace_back(reinterpret_cast<const char*>(base_ + p + 8), len);
    p += 8 + len;
  }
  return std::optional<std::vector<std::string>>(std::move(out));
}

Result<std::optional<std::vector<float>>> GgufFile::get_float_array(std::string_view key) const {
  const Value* v = *find(key, "float array");
  if (!v) return std::optional<std::vector<float>>();
  if (v->type != GgufValueType::array || !scalar_size(v->elem_type) ||
      v->elem_type == GgufValueType::boolean) {
    return WEIR_GGUF_WRONG_TYPE("an array of numbers");
  }
  std::vector<float> out(v->count);
  const std::uint64_t sz = scalar_size(v->elem_type);
  for (std::uint64_t i = 0; i < v->count; ++i)
    out[i] = static_cast<float>(*scalar_number(v->elem_type, base_ + v->offset + 12 + i * sz));
  return std::optional<std::vector<float>>(std::move(out));
}

Result<std::optional<std::vector<std::int32_t>>> GgufFile::get_int_array(
    std::string_view key) const {
  const Value* v = *find(key, "int array");
  if (!v) return std::optional<std::vector<std::int32_t>>();
  if (v->type != GgufValueType::array || !is_integer(v->elem_type))
    return WEIR_GGUF_WRONG_TYPE("an array of integers");
  std::vector<std::int32_t> out(v->count);
  const std::uint64_t sz = scalar_size(v->elem_type);
  for (std::uint64_t i = 0; i < v->count; ++i)
    out[i] =
        static_cast<std::int32_t>(*scalar_number(v->elem_type, base_ + v->offset + 12 + i * sz));
  return std::optional<std::vector<std::int32_t>>(std::move(out));
}

#undef WEIR_GGUF_WRONG_TYPE

std::string GgufFile::value_to_string(std::string_view key) const {
  auto it = index_.find(std::string(key));
  if (it == index_.end()) return "";
  const Value& v = kv_[it->second].second;
  if (v.type == GgufValueType::array) {
    return "[" + std::to_string(v.count) + " items of " + value_type_name(v.elem_type) + "]";
  }
  if (v.type == GgufValueType::string) {
    std::string s = **get_string(key);
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    for (auto& ch : s)
      if (ch == '\n') ch = ' ';
    return "\"" + s + "\"";
  }
  if (v.type == GgufValueType::boolean) return **get_bool(key) ? "true" : "false";
  if (is_integer(v.type)) return std::to_string(**get_int(key));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", **get_float(key));
  return buf;
}

}  // namespace weir::inference
