// The notifications' text (text_notify.hpp): its own file, so that the fuzz target of the
// parser links no libpq.
#include <algorithm>
#include <climits>
#include <optional>

#include <boost/json.hpp>

#include "text_notify.hpp"
#include "weir/runtime/text.hpp"

namespace weir::cluster {

namespace json = boost::json;

std::vector<std::string> text_payloads(std::string_view run_id, const graph::MessageText& t) {
  std::vector<std::string> out;
  std::string_view rest = t.text;
  std::uint64_t offset = t.offset;
  while (!rest.empty()) {
    std::size_t n = utf8_cut(rest, kTextChunk);
    if (n == 0) n = std::min(rest.size(), kTextChunk);  // not UTF-8: cut anywhere
    out.push_back(json::serialize(json::object{{"r", run_id},
                                               {"n", t.node},
                                               {"s", t.step},
                                               {"m", t.message_id},
                                               {"o", offset},
                                               {"t", rest.substr(0, n)}}));
    rest.remove_prefix(n);
    offset += n;
  }
  return out;
}

Result<std::pair<std::string, graph::MessageText>> parse_text_payload(std::string_view payload) {
  boost::system::error_code ec;
  const json::value v = json::parse(payload, ec);
  const json::object* o = ec ? nullptr : v.if_object();
  if (!o) return Error(Errc::invalid_argument, "a weir_text notification is not a JSON object");
  auto str = [&](const char* k) -> const json::string* {
    const json::value* x = o->if_contains(k);
    return x ? x->if_string() : nullptr;
  };
  auto num = [&](const char* k) -> std::optional<std::int64_t> {
    const json::value* x = o->if_contains(k);
    if (x && x->is_int64()) return x->as_int64();
    if (x && x->is_uint64() && x->as_uint64() <= INT64_MAX)
      return static_cast<std::int64_t>(x->as_uint64());
    return std::nullopt;
  };
  const auto *run = str("r"), *node = str("n"), *id = str("m"), *text = str("t");
  const auto step = num("s"), offset = num("o");
  if (!run || !node || !id || !text || !step || !offset || *offset < 0)
    return Error(Errc::invalid_argument,
                 "a weir_text notification needs \"r\", \"n\", \"m\", \"t\" (strings), \"s\" and "
                 "\"o\" (integers, \"o\" at least 0)");
  graph::MessageText t;
  t.run_id = std::string(*run);
  t.node = std::string(*node);
  t.step = *step;
  t.message_id = std::string(*id);
  t.offset = static_cast<std::uint64_t>(*offset);
  t.text = std::string(*text);
  return std::pair{std::string(*run), std::move(t)};
}

}  // namespace weir::cluster
