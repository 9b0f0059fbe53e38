#include "weir/runtime/json_parse.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <unordered_set>
#include <vector>

#include <simdjson.h>
#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/stream_parser.hpp>
#include <boost/json/value_stack.hpp>

#include "weir/runtime/text.hpp"

namespace weir {

namespace json = boost::json;
namespace od = simdjson::ondemand;

JsonLocation locate_offset(std::string_view text, std::size_t offset) {
  JsonLocation loc;
  loc.offset = std::min(offset, text.size());
  std::string_view before = text.substr(0, loc.offset);
  loc.line = 1 + static_cast<int>(std::count(before.begin(), before.end(), '\n'));
  std::size_t nl = before.rfind('\n');
  std::string_view last = nl == std::string_view::npos ? before : before.substr(nl + 1);
  loc.column += static_cast<int>(utf8_length(last));  // code points, not bytes
  return loc;
}

std::string json_pointer_append(std::string_view base, std::string_view token) {
  std::string p(base);
  p += '/';
  for (char c : token) {
    if (c == '~')
      p += "~0";
    else if (c == '/')
      p += "~1";
    else
      p += c;
  }
  return p;
}

std::string json_pointer_append(std::string_view base, std::size_t index) {
  std::string p(base);
  p += '/';
  p += std::to_string(index);
  return p;
}

namespace {

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

// The parsed value's allocations, refused past a byte limit. The limit is shared with the
// parser, which lifts it once the document is parsed: the values live on, and copies of them
// must not fail on the parse's limit. (make_shared_resource wraps the resource, so the parser
// cannot reach it through the storage_ptr.)
//
// With `slabs`, pieces up to kMaxPiece bytes are cut from 64 KiB slabs one after the other,
// without malloc's header and rounding (a document of many small values spends more on those
// than on its values); a slab counts its live pieces and is freed when the last goes. A
// document freed in about the order it was parsed (a workflow file read into a spec) returns
// its memory as it goes.
class CappedResource final : public json::memory_resource {
 public:
  CappedResource(std::shared_ptr<std::size_t> limit, std::string what, bool slabs)
      : limit_(std::move(limit)), what_(std::move(what)), slabs_(slabs) {}
  ~CappedResource() override {
    while (head_) release(head_);
  }
  CappedResource(const CappedResource&) = delete;
  CappedResource& operator=(const CappedResource&) = delete;

 private:
  static constexpr std::size_t kSlab = std::size_t{64} << 10, kMaxPiece = 4096;
  struct alignas(std::max_align_t) Slab {
    std::size_t live = 0;
    Slab *prev = nullptr, *next = nullptr;
  };

  // Boost.JSON may free a piece with another size or alignment than it asked for (keys on the
  // stream parser's error path), so neither decides how a piece is freed: alignments up to the
  // default go through plain new and delete, and a slab's pieces are known by their address.
  static constexpr std::size_t kPlainAlign = __STDCPP_DEFAULT_NEW_ALIGNMENT__;
  static void* plain_new(std::size_t n, std::size_t align) {
    return align <= kPlainAlign ? ::operator new(n) : ::operator new(n, std::align_val_t(align));
  }

  void* do_allocate(std::size_t n, std::size_t align) override {
    if (n > *limit_ - bytes_) throw Exception(Errc::invalid_argument, what_);
    if (!slabs_ || n > kMaxPiece || align > alignof(Slab)) {
      void* p = plain_new(n, align);
      bytes_ += n;
      return p;
    }
    std::size_t at = (used_ + align - 1) & ~(align - 1);
    if (!current_ || at + n > kSlab) {
      if (current_ && current_->live == 0) release(current_);
      current_ = new (map_slab()) Slab;
      current_->next = head_;
      if (head_) head_->prev = current_;
      head_ = current_;
      slab_set_.insert(reinterpret_cast<std::uintptr_t>(current_));
      at = sizeof(Slab);
    }
    used_ = at + n;
    ++current_->live;
    bytes_ += n;
    return reinterpret_cast<char*>(current_) + at;
  }
  void do_deallocate(void* p, std::size_t n, std::size_t align) override {
    bytes_ -= std::min(n, bytes_);
    const auto base = reinterpret_cast<std::uintptr_t>(p) & ~(kSlab - 1);
    if (!slabs_ || !slab_set_.count(base)) {
      if (align <= kPlainAlign)
        ::operator delete(p);
      else
        ::operator delete(p, std::align_val_t(align));
      return;
    }
    auto* slab = reinterpret_cast<Slab*>(base);
    if (--slab->live == 0) {
      if (slab != current_)
        release(slab);
      else
        used_ = sizeof(Slab);  // empty: cut it again from the start
    }
  }
  bool do_is_equal(const json::memory_resource& o) const noexcept override { return this == &o; }

  void release(Slab* s) {
    (s->prev ? s->prev->next : head_) = s->next;
    if (s->next) s->next->prev = s->prev;
    if (s == current_) current_ = nullptr;
    slab_set_.erase(reinterpret_cast<std::uintptr_t>(s));
    s->~Slab();
    ::munmap(s, kSlab);
  }

  // A slab aligned to its size, straight from the kernel: malloc's aligned allocations leave a
  // fragment as large as the slab beside each one, and a freed slab goes back at once.
  static void* map_slab() {
    void* m =
        ::mmap(nullptr, 2 * kSlab, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    auto base = reinterpret_cast<std::uintptr_t>(m);
    auto aligned = (base + kSlab - 1) & ~(kSlab - 1);
    if (aligned > base) ::munmap(m, aligned - base);
    if (aligned + kSlab < base + 2 * kSlab)
      ::munmap(reinterpret_cast<void*>(aligned + kSlab), base + 2 * kSlab - aligned - kSlab);
    return reinterpret_cast<void*>(aligned);
  }

  std::shared_ptr<std::size_t> limit_;
  std::size_t bytes_ = 0;
  std::string what_;
  bool slabs_;
  Slab *head_ = nullptr, *current_ = nullptr;    // every slab, in a list; the one being cut
  std::unordered_set<std::uintptr_t> slab_set_;  // every slab's address
  std::size_t used_ = 0;                         // bytes of current_ handed out
};

class Walker {
 public:
  Walker(const char* base, const JsonParseOptions& opts) : base_(base), opts_(opts) {}

  // On failure: `error_` holds simdjson's code, `offset_` the last value reached and pointer()
  // its JSON pointer. The path is kept as borrowed keys and indexes, so a pointer string is
  // built only for the error message.
  bool walk(od::value v, json::value& dst, std::size_t depth) {
    if (auto loc = v.current_location(); !loc.error())
      offset_ = static_cast<std::size_t>(loc.value_unsafe() - base_);
    if (depth > opts_.max_depth) {
      depth_exceeded_ = true;
      return false;
    }
    od::json_type type;
    if ((error_ = v.type().get(type))) return false;
    switch (type) {
      case od::json_type::object: {
        od::object obj;
        if ((error_ = v.get_object().get(obj))) return false;
        json::object& o = dst.emplace_object();
        for (auto field : obj) {
          const char* key_at = nullptr;  // just past the key's opening quote
          if ((error_ = field.key().raw().get(key_at))) return false;
          std::string_view key;
          if ((error_ = field.unescaped_key().get(key))) return false;
          // The key lives in simdjson's string buffer until the parser is reused.
          path_.push_back({key, 0, true});
          auto [slot, fresh] = o.emplace(key, nullptr);  // else the last value is kept
          if (!fresh && opts_.reject_duplicate_keys) {
            offset_ = static_cast<std::size_t>(key_at - 1 - base_);
            duplicate_ = key;
            error_ = simdjson::INCORRECT_TYPE;  // duplicate_ says what
            return false;
          }
          od::value child;
          if ((error_ = field.value().get(child))) return false;
          if (!walk(child, slot->value(), depth + 1)) return false;
          path_.pop_back();
        }
        return true;
      }
      case od::json_type::array: {
        od::array arr;
        if ((error_ = v.get_array().get(arr))) return false;
        json::array& a = dst.emplace_array();
        std::size_t i = 0;
        for (auto elem : arr) {
          od::value child;
          if ((error_ = elem.get(child))) return false;
          path_.push_back({{}, i++, false});
          a.emplace_back(nullptr);
          if (!walk(child, a.back(), depth + 1)) return false;
          path_.pop_back();
        }
        return true;
      }
      case od::json_type::string: {
        std::string_view s;
        if ((error_ = v.get_string().get(s))) return false;
        dst = json::string(s, dst.storage());
        return true;
      }
      case od::json_type::number: {
        // simdjson holds integers of 64 bits and finite doubles. A longer integer is read as
        // the nearest double, as Boost.JSON and JavaScript read it; a number past a double's
        // range (1e999) has no value here and is refused as such, not as malformed.
        std::string_view raw = v.raw_json_token();
        od::number num;
        if (auto e = v.get_number().get(num); e) {
          while (!raw.empty() && std::isspace(static_cast<unsigned char>(raw.back())))
            raw.remove_suffix(1);
          const std::string text(raw);
          char* end = nullptr;
          const double d = std::strtod(text.c_str(), &end);
          if (end != text.c_str() + text.size() || text.empty()) {
            error_ = e;
            return false;
          }
          if (!std::isfinite(d)) {
            error_ = e;
            out_of_range_ = text.size() > 40 ? text.substr(0, 37) + "..." : text;
            return false;
          }
          dst = d;
          return true;
        }
        switch (num.get_number_type()) {
          case od::number_type::signed_integer:
            dst = num.get_int64();
            break;
          case od::number_type::unsigned_integer:
            dst = num.get_uint64();
            break;
          default:
            dst = num.get_double();
            break;
        }
        return true;
      }
      case od::json_type::boolean: {
        bool b;
        if ((error_ = v.get_bool().get(b))) return false;
        dst = b;
        return true;
      }
      case od::json_type::null: {
        bool is_null = false;
        if ((error_ = v.is_null().get(is_null))) return false;
        if (!is_null) {
          error_ = simdjson::N_ATOM_ERROR;
          return false;
        }
        dst = nullptr;
        return true;
      }
    }
    error_ = simdjson::INCORRECT_TYPE;
    return false;
  }

  std::string pointer() const {
    std::string p;
    for (const auto& seg : path_)
      p = seg.is_key ? json_pointer_append(p, seg.key) : json_pointer_append(p, seg.index);
    return p;
  }

  struct Segment {
    std::string_view key;
    std::size_t index;
    bool is_key;
  };
  const char* base_;
  const JsonParseOptions& opts_;
  std::vector<Segment> path_;
  simdjson::error_code error_ = simdjson::SUCCESS;
  bool depth_exceeded_ = false;
  std::string out_of_range_;  // a number past a double's range, as written
  std::string duplicate_;     // a key given twice in one object (reject_duplicate_keys)
  std::size_t offset_ = 0;
  std::string pointer_;  // of the failure, built once it happened
};

// Boost.JSON's incremental parser finds the byte where the text stops being JSON.
std::pair<std::size_t, std::string> find_syntax_error(std::string_view text) {
  json::stream_parser p;
  boost::system::error_code ec;
  std::size_t n = p.write_some(text.data(), text.size(), ec);
  if (ec) return {n, ec.message()};
  if (n < text.size()) {  // a complete value, then more: anything but whitespace is an error
    while (n < text.size() && std::isspace(static_cast<unsigned char>(text[n]))) ++n;
    if (n < text.size()) return {n, "unexpected content after the JSON value"};
  }
  p.finish(ec);
  if (ec) return {text.size(), ec.message()};
  return {text.size(), {}};
}

// The first byte that cannot be in JSON text whatever the grammar says: a NUL, or a byte that
// breaks UTF-8. Returns the text's size and "" when there is none.
std::pair<std::size_t, std::string> find_bad_byte(std::string_view text) {
  auto hex = [](unsigned char c) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "0x%02X", c);
    return std::string(buf);
  };
  const auto* u = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  if (n >= 2 && ((u[0] == 0xFF && u[1] == 0xFE) || (u[0] == 0xFE && u[1] == 0xFF)))
    return {0, "a UTF-16 byte order mark: JSON files must be UTF-8; save the file as UTF-8"};
  const std::size_t nul = text.find('\0');
  const std::size_t bad = find_invalid_utf8(text.substr(0, nul)).value_or(n);
  if (bad < n) return {bad, "invalid UTF-8 (byte " + hex(u[bad]) + "); JSON files must be UTF-8"};
  if (nul != std::string_view::npos)
    return {nul, "a NUL byte (0x00), which JSON text cannot contain"};
  return {n, {}};
}

Error located_error(std::string_view text, std::string_view source, std::size_t offset,
                    std::string_view what, std::string_view pointer) {
  JsonLocation loc = locate_offset(text, offset);
  std::string msg = std::string(source) + ":" + std::to_string(loc.line) + ":" +
                    std::to_string(loc.column) + ": " + std::string(what);
  if (!pointer.empty()) msg += " (at " + std::string(pointer) + ")";
  return Error(Errc::corrupt_data, std::move(msg));
}

}  // namespace

// An index of the text, made on the first locate() and reused: simdjson's stage 1 over the
// text, then at_pointer() per question.
class JsonLocator {
 public:
  JsonLocator(std::string_view text, bool padded) {
    bom_ = text.starts_with(kUtf8Bom) ? kUtf8Bom.size() : 0;
    text.remove_prefix(bom_);
    if (!padded) {
      copy_ = simdjson::padded_string(text);
      text = copy_;
    }
    ok_ = !parser_.iterate(text.data(), text.size(), text.size() + simdjson::SIMDJSON_PADDING)
               .get(doc_);
    base_ = text.data();
  }

  // Byte offset (in the original text) of the value at `pointer`, if it exists.
  std::optional<std::size_t> find(std::string_view pointer) {
    if (!ok_) return std::nullopt;
    if (doc_.rewind(), pointer.empty()) {
      const char* p = nullptr;
      if (doc_.current_location().get(p)) return std::nullopt;
      return bom_ + static_cast<std::size_t>(p - base_);
    }
    od::value v;
    if (doc_.at_pointer(pointer).get(v)) return std::nullopt;
    const char* p = nullptr;
    if (v.current_location().get(p)) return std::nullopt;
    return bom_ + static_cast<std::size_t>(p - base_);
  }

 private:
  simdjson::padded_string copy_;
  od::parser parser_;
  od::document doc_;
  const char* base_ = nullptr;
  std::size_t bom_ = 0;
  bool ok_ = false;
};

JsonLocation ParsedJson::locate(std::string_view text, std::string_view pointer) const {
  if (!locator_) locator_ = std::make_shared<JsonLocator>(text, text_is_padded);
  std::string_view p = pointer;
  while (true) {
    if (auto off = locator_->find(p)) return locate_offset(text, *off);
    if (p.empty()) {
      std::size_t i = 0;
      while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
      return locate_offset(text, i);
    }
    p = p.substr(0, p.rfind('/'));
  }
}

namespace {

// Large documents go to Boost.JSON's parser. simdjson's on-demand parser first indexes the whole
// text (4 bytes of structural index and 5/3 of string buffer a byte: 5.7 times the text before
// a value is built), and building a Boost.JSON value from its output is slower than Boost.JSON's
// own parser (bench/README.md, "Input fences"). Below this size simdjson's index is small.
constexpr std::size_t kLargeJsonBytes = std::size_t{1} << 20;

Error out_of_memory(std::string_view source, std::size_t bytes) {
  return Error(Errc::memory_budget_exceeded, std::string(source) +
                                                 ": out of memory while parsing " +
                                                 std::to_string(bytes) + " bytes of JSON");
}

// Boost.JSON's parser of large documents builds the value as json::stream_parser does (this is
// its handler, a value_stack) and, with reject_duplicate_keys, keeps a hash of each key of the
// objects still open, compared when an object closes: a repeated hash only suspects a duplicate
// key (two keys may share one), and the caller then parses the text with the Walker, which
// compares the keys themselves and says where (or builds the value, if they only shared a
// hash). The hashes cost 8 bytes a key of the open objects.
struct LargeDocument {
  static constexpr std::size_t max_object_size = json::object::max_size();
  static constexpr std::size_t max_array_size = json::array::max_size();
  static constexpr std::size_t max_key_size = json::string::max_size();
  static constexpr std::size_t max_string_size = json::string::max_size();
  static constexpr std::uint64_t kFnvBasis = 1469598103934665603ull;

  explicit LargeDocument(bool check) : check_keys(check) {}

  static std::uint64_t fnv1a(std::uint64_t h, json::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
  }

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code&) {
    if (check_keys) starts.push_back(hashes.size());
    return true;
  }
  bool on_object_end(std::size_t n, json::error_code& ec) {
    st.push_object(n);
    if (!check_keys) return true;
    const auto first = hashes.begin() + static_cast<std::ptrdiff_t>(starts.back());
    std::sort(first, hashes.end());
    if (std::adjacent_find(first, hashes.end()) != hashes.end()) {
      suspect = true;
      ec = json::error::syntax;  // stops the parse; `suspect` says why
      return false;
    }
    hashes.erase(first, hashes.end());
    starts.pop_back();
    return true;
  }
  bool on_array_begin(json::error_code&) { return true; }
  bool on_array_end(std::size_t n, json::error_code&) {
    st.push_array(n);
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    st.push_chars(s);
    if (check_keys) key_hash = fnv1a(key_hash, s);
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code&) {
    st.push_key(s);
    if (check_keys) {
      hashes.push_back(fnv1a(key_hash, s));
      key_hash = kFnvBasis;
    }
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_string(json::string_view s, std::size_t, json::error_code&) {
    st.push_string(s);
    return true;
  }
  bool on_number_part(json::string_view, json::error_code&) { return true; }
  bool on_int64(std::int64_t i, json::string_view, json::error_code&) {
    st.push_int64(i);
    return true;
  }
  bool on_uint64(std::uint64_t u, json::string_view, json::error_code&) {
    st.push_uint64(u);
    return true;
  }
  bool on_double(double d, json::string_view, json::error_code&) {
    st.push_double(d);
    return true;
  }
  bool on_bool(bool b, json::error_code&) {
    st.push_bool(b);
    return true;
  }
  bool on_null(json::error_code&) {
    st.push_null();
    return true;
  }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }

  json::value_stack st;
  const bool check_keys;
  bool suspect = false;                // a key may be in its object twice
  std::vector<std::uint64_t> hashes;   // the keys of the open objects, innermost last
  std::vector<std::size_t> starts;     // where each open object's keys begin in `hashes`
  std::uint64_t key_hash = kFnvBasis;  // of the key being read, over its parts
};

// json::stream_parser with LargeDocument for its handler: the value's pieces from `storage`.
class LargeParser {
 public:
  LargeParser(const JsonParseOptions& options, const json::storage_ptr& storage)
      : p_(parse_options(options), options.reject_duplicate_keys) {
    p_.reset();
    p_.handler().st.reset(storage);
  }
  // As stream_parser::write_some, write (complete: more after the value is an error) and finish.
  std::size_t write_some(std::string_view s, json::error_code& ec) {
    return p_.write_some(true, s.data(), s.size(), ec);
  }
  void write(std::string_view s, json::error_code& ec) {
    if (const std::size_t n = write_some(s, ec); !ec && n < s.size()) ec = json::error::extra_data;
  }
  void finish(json::error_code& ec) { p_.write_some(false, nullptr, 0, ec); }
  // REQUIRES: finish() succeeded.
  json::value release() { return p_.handler().st.release(); }
  bool suspect_duplicate() const { return p_.handler().suspect; }

 private:
  static json::parse_options parse_options(const JsonParseOptions& options) {
    json::parse_options po;
    po.max_depth = options.max_depth;
    return po;
  }
  json::basic_parser<LargeDocument> p_;
};

// Parses `original` past its first `bom` bytes into `result` (allocated from `storage`) with
// Boost.JSON. Returns the error, worded as parse_json words it, or nothing; `duplicate` is set
// (and `result` left) when a key may be in an object twice.
std::optional<Error> parse_large(std::string_view original, std::size_t bom,
                                 std::string_view source, const JsonParseOptions& options,
                                 const json::storage_ptr& storage, json::value& result,
                                 bool& duplicate) {
  const std::string_view text = original.substr(bom);
  LargeParser p(options, storage);
  boost::system::error_code ec;
  std::size_t n = p.write_some(text, ec);
  std::string what;
  if (!ec && n < text.size()) {  // a complete value, then more: anything but whitespace is an error
    while (n < text.size() && std::isspace(static_cast<unsigned char>(text[n]))) ++n;
    if (n < text.size()) what = "unexpected content after the JSON value";
  }
  if (!ec && what.empty()) {
    p.finish(ec);
    if (!ec) {
      result = p.release();  // the same memory resource: moved, not copied
      return std::nullopt;
    }
    n = text.size();
  }
  if (p.suspect_duplicate()) {
    duplicate = true;
    return std::nullopt;
  }
  if (ec == json::error::too_deep) {
    return Error(
        Errc::invalid_argument,
        located_error(original, source, bom + n,
                      "nesting deeper than " + std::to_string(options.max_depth) + " levels", "")
            .message);
  }
  if (auto [bad, why] = find_bad_byte(original); !why.empty() && bad <= bom + n)
    return located_error(original, source, bad, why, "");
  return located_error(original, source, bom + n, what.empty() ? ec.message() : what, "");
}

// Where a parsed value is allocated: options.storage, or a CappedResource whose limit (3 times
// the text and 1 MiB, or max_value_bytes) the caller lifts, through the returned cell, once the
// document is parsed.
std::pair<json::storage_ptr, std::shared_ptr<std::size_t>> value_storage(
    const JsonParseOptions& options, std::string_view source, std::size_t text_bytes) {
  if (options.storage) return {*options.storage, nullptr};
  std::size_t cap =
      options.max_value_bytes ? options.max_value_bytes : 3 * text_bytes + (std::size_t{1} << 20);
  auto limit = std::make_shared<std::size_t>(cap);
  auto storage = json::make_shared_resource<CappedResource>(
      limit,
      std::string(source) + ": the parsed document needs more than " + std::to_string(cap) +
          " bytes of memory (" +
          (options.max_value_bytes ? "its limit" : "3 times the size of its text, plus 1 MiB") +
          ")",
      options.slabs);
  return {std::move(storage), std::move(limit)};
}

// A regular file of `size` bytes parsed as it is read, a chunk at a time, so its text is never
// whole in memory. Returns nothing when the file is not JSON: the caller reads it whole and
// parses it again for the message, with line, column and the offending byte.
std::optional<Result<ParsedJson>> parse_streamed(const std::filesystem::path& path,
                                                 std::size_t size,
                                                 const JsonParseOptions& options) {
  const std::string name = path.string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;  // read_json_file words it
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  auto [storage, limit] = value_storage(options, name, size);
  try {
    LargeParser p(options, storage);
    std::vector<char> chunk(std::size_t{1} << 20);
    boost::system::error_code ec;
    std::size_t total = 0;
    bool first = true;
    while (true) {
      ssize_t got = ::read(fd, chunk.data(), chunk.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return std::nullopt;
      if (got == 0) break;
      total += static_cast<std::size_t>(got);
      if (total > options.max_bytes) return std::nullopt;  // it grew: read_json_file refuses it
      std::string_view data(chunk.data(), static_cast<std::size_t>(got));
      if (first && data.starts_with(kUtf8Bom)) data.remove_prefix(kUtf8Bom.size());
      first = false;
      p.write(data, ec);
      if (ec) return std::nullopt;  // a duplicate key among them: parse_json says which
    }
    p.finish(ec);
    if (ec) return std::nullopt;
    json::value v = p.release();
    *limit = std::numeric_limits<std::size_t>::max();
    return Result<ParsedJson>(ParsedJson{std::move(v), false, nullptr});
  } catch (const Exception& e) {
    return Result<ParsedJson>(e.error());
  } catch (const std::bad_alloc&) {
    return Result<ParsedJson>(out_of_memory(name, size));
  }
}

}  // namespace

Result<ParsedJson> parse_json(std::string_view text, std::string_view source,
                              const JsonParseOptions& options) {
  if (text.size() > options.max_bytes) {
    return Error(Errc::invalid_argument, std::string(source) + ": " + std::to_string(text.size()) +
                                             " bytes of JSON, more than the limit of " +
                                             std::to_string(options.max_bytes));
  }
  const std::string_view original = text;
  std::size_t bom = 0;
  if (text.starts_with(kUtf8Bom)) {  // allowed by RFC 8259 §8.1 for parsers: skip it
    bom = kUtf8Bom.size();
    text.remove_prefix(bom);
  }
  std::string_view trimmed = text;
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.front())))
    trimmed.remove_prefix(1);
  if (trimmed.empty()) {
    return located_error(original, source, original.size(),
                         "the document is empty: expected a JSON value", "");
  }

  // Named, not a structured binding: the lambda below captures them.
  auto [storage_cell, limit_cell] = value_storage(options, source, text.size());
  json::storage_ptr storage = std::move(storage_cell);
  std::shared_ptr<std::size_t> limit = std::move(limit_cell);
  json::value result(storage);  // moved into the ParsedJson, storage and all
  auto done = [&] {
    if (limit) *limit = std::numeric_limits<std::size_t>::max();
    return ParsedJson{std::move(result), options.text_is_padded, nullptr};
  };

  if (text.size() >= kLargeJsonBytes) {
    bool duplicate = false;
    try {
      if (auto e = parse_large(original, bom, source, options, storage, result, duplicate))
        return *e;
      if (!duplicate) return done();
    } catch (const Exception& e) {
      return e.error();
    } catch (const std::bad_alloc&) {
      return out_of_memory(source, text.size());
    }
    // A key may be in an object twice: the Walker below finds it (or builds the value, if two
    // keys only shared a hash).
  }

  simdjson::padded_string copy;
  if (!options.text_is_padded || bom) {  // the padding must follow the text we hand simdjson
    copy = simdjson::padded_string(text);
  }
  const char* base = copy.size() ? copy.data() : text.data();
  Walker walker(base, options);
  bool ok = false;
  simdjson::error_code err = simdjson::SUCCESS;
  try {
    od::parser parser(std::max<std::size_t>(text.size(), 64));
    od::document doc;
    err = parser.iterate(base, text.size(), text.size() + simdjson::SIMDJSON_PADDING).get(doc);
    if (!err) {
      bool scalar = false;
      if (auto s = doc.is_scalar(); !s.error()) scalar = s.value_unsafe();
      if (scalar) {
        // Scalar documents are rare here (small); Boost.JSON parses them exactly.
        boost::system::error_code ec;
        result = json::parse(text, ec, storage);
        if (!ec) return done();
      } else {
        od::value root;
        err = doc.get_value().get(root);
        if (!err) {
          ok = walker.walk(root, result, 1);
          err = walker.error_;
          // current_location() fails with OUT_OF_BOUNDS exactly when nothing follows the root.
          if (ok && !doc.current_location().error()) {
            ok = false;
            err = simdjson::TRAILING_CONTENT;
            walker.path_.clear();
          }
        }
      }
      if (!ok) walker.pointer_ = walker.pointer();  // before the parser's keys go
    }
  } catch (const Exception& e) {
    return e.error();
  } catch (const std::bad_alloc&) {
    return out_of_memory(source, text.size());
  }
  if (ok) return done();
  const std::string pointer = walker.pointer_;
  if (walker.depth_exceeded_) {
    return Error(
        Errc::invalid_argument,
        located_error(original, source, bom + walker.offset_,
                      "nesting deeper than " + std::to_string(options.max_depth) + " levels",
                      pointer)
            .message);
  }
  if (!walker.out_of_range_.empty()) {
    return located_error(original, source, bom + walker.offset_,
                         "the number " + walker.out_of_range_ +
                             " is out of range (a JSON number here must fit a double: at most "
                             "about 1.8e308)",
                         pointer);
  }
  if (!walker.duplicate_.empty()) {
    return located_error(original, source, bom + walker.offset_,
                         "duplicate key \"" + utf8_abbreviate(walker.duplicate_, 60) + "\"",
                         pointer);
  }
  auto [offset, what] = find_syntax_error(text);
  if (auto [bad, why] = find_bad_byte(original); !why.empty() && bad <= bom + offset) {
    return located_error(original, source, bad, why, "");
  }
  if (what.empty()) {  // Boost.JSON accepts what simdjson refused: report simdjson's reason
    offset = walker.offset_;
    what = simdjson::error_message(err);
  }
  return located_error(original, source, bom + offset, what, pointer);
}

Result<std::string> read_json_file(const std::filesystem::path& path, std::size_t max_bytes) {
  const std::string name = path.string();
  const bool is_stdin = name == "-";
  int fd = is_stdin ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return Error(e == ENOENT ? Errc::not_found : Errc::io_error,
                 name + ": cannot read: " + std::strerror(e));
  }
  struct Closer {
    int fd;
    bool own;
    ~Closer() {
      if (own) ::close(fd);
    }
  } closer{fd, !is_stdin};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Error(Errc::io_error, name + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    return Error(Errc::invalid_argument, name + ": is a directory, not a JSON file");
  const std::size_t padding = simdjson::SIMDJSON_PADDING;
  auto too_big = [&](std::size_t n, bool at_least) {
    return Error(Errc::invalid_argument,
                 name + ": " + (at_least ? "more than " : "") + std::to_string(n) +
                     " bytes of JSON, more than the limit of " + std::to_string(max_bytes));
  };
  std::string text;
  if (S_ISREG(st.st_mode)) {
    auto size = static_cast<std::size_t>(st.st_size);
    if (size > max_bytes) return too_big(size, false);
    // Room for the read that finds the end, so a file that did not grow is never copied.
    text.reserve(size + padding + 4096);
  } else {
    text.reserve(std::size_t{64} << 10);
  }
  // Read to the end (a regular file may grow while we read; a pipe has no size): the cap holds.
  while (true) {
    if (text.capacity() - text.size() < padding + 4096)
      text.reserve(std::min(2 * text.capacity(), max_bytes + 1 + padding) + padding);
    std::size_t room = text.capacity() - text.size() - padding;
    std::size_t old = text.size();
    text.resize(old + room);
    ssize_t got = ::read(fd, text.data() + old, room);
    if (got < 0) {
      if (errno == EINTR) {
        text.resize(old);
        continue;
      }
      int e = errno;
      return Error(e == EISDIR ? Errc::invalid_argument : Errc::io_error,
                   name + (e == EISDIR ? ": is a directory, not a JSON file"
                                       : ": cannot read: " + std::string(std::strerror(e))));
    }
    text.resize(old + static_cast<std::size_t>(got));
    if (text.size() > max_bytes) return too_big(max_bytes, true);
    if (got == 0) break;
  }
  if (text.capacity() - text.size() < padding) text.reserve(text.size() + padding);
  return text;
}

Result<ParsedJsonFile> parse_json_file(const std::filesystem::path& path,
                                       JsonParseOptions options) {
  const std::string name = path.string();
  std::error_code ec;
  if (name != "-" && std::filesystem::is_regular_file(path, ec)) {
    auto size = std::filesystem::file_size(path, ec);
    if (!ec && size >= kLargeJsonBytes && size <= options.max_bytes) {
      if (auto r = parse_streamed(path, size, options)) {
        if (!*r) return std::move(*r).error();
        return ParsedJsonFile{std::move(**r), {}};
      }
    }
  }
  auto text = read_json_file(path, options.max_bytes);
  if (!text) return std::move(text).error();
  options.text_is_padded = true;
  auto parsed = parse_json(*text, name, options);
  if (!parsed) return std::move(parsed).error();
  return ParsedJsonFile{std::move(*parsed), std::move(*text)};
}

}  // namespace weir
