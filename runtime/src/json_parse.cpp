#include "weir/runtime/json_parse.hpp"

#include <cctype>

#include <simdjson.h>
#include <boost/json/parse.hpp>
#include <boost/json/stream_parser.hpp>

namespace weir {

namespace json = boost::json;
namespace od = simdjson::ondemand;

JsonLocation locate_offset(std::string_view text, std::size_t offset) {
  JsonLocation loc;
  loc.offset = std::min(offset, text.size());
  for (std::size_t i = 0; i < loc.offset; ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      ++loc.line;
      loc.column = 1;
    } else if ((c & 0xC0) != 0x80) {  // count code points, not continuation bytes
      ++loc.column;
    }
  }
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

JsonLocation ParsedJson::locate(std::string_view text, std::string_view pointer) const {
  std::string p(pointer);
  while (true) {
    if (auto it = offsets.find(p); it != offsets.end()) return locate_offset(text, it->second);
    if (p.empty()) return locate_offset(text, 0);
    p.resize(p.rfind('/'));
  }
}

namespace {

class Walker {
 public:
  Walker(const char* base, const JsonParseOptions& opts, ParsedJson& out)
      : base_(base), opts_(opts), out_(out) {}

  // On failure: `error_` holds simdjson's code, `pointer_`/`offset_` the last value reached.
  bool walk(od::value v, json::value& dst, std::string& pointer, std::size_t depth) {
    pointer_ = pointer;
    if (auto loc = v.current_location(); !loc.error()) {
      offset_ = static_cast<std::size_t>(loc.value_unsafe() - base_);
      if (opts_.record_locations) out_.offsets.emplace(pointer, offset_);
    }
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
          std::string_view key;
          if ((error_ = field.unescaped_key().get(key))) return false;
          std::size_t len = pointer.size();
          pointer = json_pointer_append(pointer, key);
          od::value child;
          if ((error_ = field.value().get(child))) return false;
          json::value& slot = o[key];
          if (!walk(child, slot, pointer, depth + 1)) return false;
          pointer.resize(len);
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
          std::size_t len = pointer.size();
          pointer = json_pointer_append(pointer, i++);
          a.emplace_back(nullptr);
          if (!walk(child, a.back(), pointer, depth + 1)) return false;
          pointer.resize(len);
        }
        return true;
      }
      case od::json_type::string: {
        std::string_view s;
        if ((error_ = v.get_string().get(s))) return false;
        dst = json::string(s);
        return true;
      }
      case od::json_type::number: {
        od::number num;
        if ((error_ = v.get_number().get(num))) return false;
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

  const char* base_;
  const JsonParseOptions& opts_;
  ParsedJson& out_;
  simdjson::error_code error_ = simdjson::SUCCESS;
  bool depth_exceeded_ = false;
  std::string pointer_;
  std::size_t offset_ = 0;
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

Error located_error(std::string_view text, std::string_view source, std::size_t offset,
                    std::string_view what, std::string_view pointer) {
  JsonLocation loc = locate_offset(text, offset);
  std::string msg = std::string(source) + ":" + std::to_string(loc.line) + ":" +
                    std::to_string(loc.column) + ": " + std::string(what);
  if (!pointer.empty()) msg += " (at " + std::string(pointer) + ")";
  return Error(Errc::corrupt_data, std::move(msg));
}

}  // namespace

Result<ParsedJson> parse_json(std::string_view text, std::string_view source,
                              const JsonParseOptions& options) {
  if (text.size() > options.max_bytes) {
    return Error(Errc::invalid_argument, std::string(source) + ": " + std::to_string(text.size()) +
                                             " bytes of JSON, more than the limit of " +
                                             std::to_string(options.max_bytes));
  }
  ParsedJson out;
  std::string_view trimmed = text;
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.front())))
    trimmed.remove_prefix(1);
  if (trimmed.empty()) {
    return located_error(text, source, text.size(), "the document is empty: expected a JSON value",
                         "");
  }

  simdjson::padded_string padded(text);
  od::parser parser(std::max<std::size_t>(text.size(), 64));
  od::document doc;
  Walker walker(padded.data(), options, out);
  std::string pointer;
  bool ok = false;
  auto err = parser.iterate(padded).get(doc);
  if (!err) {
    bool scalar = false;
    if (auto s = doc.is_scalar(); !s.error()) scalar = s.value_unsafe();
    if (scalar) {
      // Scalar documents are rare here (small); Boost.JSON parses them exactly.
      boost::system::error_code ec;
      out.value = json::parse(text, ec);
      if (!ec) {
        if (options.record_locations) out.offsets.emplace("", text.size() - trimmed.size());
        return out;
      }
    } else {
      od::value root;
      err = doc.get_value().get(root);
      if (!err) {
        ok = walker.walk(root, out.value, pointer, 1);
        err = walker.error_;
        // current_location() fails with OUT_OF_BOUNDS exactly when nothing follows the root.
        if (ok && !doc.current_location().error()) {
          ok = false;
          err = simdjson::TRAILING_CONTENT;
          walker.pointer_.clear();
        }
      }
    }
  }
  if (ok) return out;
  if (walker.depth_exceeded_) {
    return Error(
        Errc::invalid_argument,
        located_error(text, source, walker.offset_,
                      "nesting deeper than " + std::to_string(options.max_depth) + " levels",
                      walker.pointer_)
            .message);
  }
  auto [offset, what] = find_syntax_error(text);
  if (what.empty()) {  // Boost.JSON accepts what simdjson refused: report simdjson's reason
    offset = walker.offset_;
    what = simdjson::error_message(err);
  }
  return located_error(text, source, offset, what, walker.pointer_);
}

}  // namespace weir
