#include "weir/tools/jsonrpc.hpp"

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace weir::tools::jsonrpc {

namespace json = boost::json;

namespace {

Error bad(std::string why) {
  return Error(Errc::corrupt_data, "not a JSON-RPC 2.0 message: " + std::move(why));
}

bool valid_id(const json::value& id) {
  return id.is_string() || id.is_int64() || id.is_uint64();
}

}  // namespace

Result<Message> parse(std::string_view line, std::size_t max_depth) {
  json::parse_options opt;
  opt.max_depth = max_depth;
  boost::system::error_code ec;
  json::value v = json::parse(line, ec, {}, opt);
  if (ec) return Error(Errc::corrupt_data, "not JSON: " + ec.message());
  if (v.is_array()) return bad("a batch (array) is not supported by MCP");
  auto* o = v.if_object();
  if (!o)
    return bad(std::string("expected an object, got ") + (v.is_string() ? "a string" : "a scalar"));
  const auto* ver = o->if_contains("jsonrpc");
  if (!ver || !ver->is_string() || ver->get_string() != "2.0")
    return bad("\"jsonrpc\": \"2.0\" is missing");
  Message m;
  const auto* id = o->if_contains("id");
  const auto* method = o->if_contains("method");
  if (method) {
    if (!method->is_string()) return bad("\"method\" must be a string");
    m.method = method->get_string();
    if (const auto* p = o->if_contains("params")) {
      if (!p->is_object() && !p->is_array()) return bad("\"params\" must be an object or an array");
      m.params = *p;
    }
    if (id) {
      if (!valid_id(*id)) return bad("a request's \"id\" must be a string or an integer");
      m.kind = Kind::request;
      m.id = *id;
    } else {
      m.kind = Kind::notification;
    }
    return m;
  }
  const auto* result = o->if_contains("result");
  const auto* error = o->if_contains("error");
  if (!id) return bad("neither \"method\" nor \"id\"");
  if (result && error) return bad("both \"result\" and \"error\"");
  if (result) {
    if (!valid_id(*id)) return bad("a response's \"id\" must be a string or an integer");
    m.kind = Kind::response;
    m.id = *id;
    m.result = *result;
    return m;
  }
  if (!error) return bad("a response needs \"result\" or \"error\"");
  if (!valid_id(*id) && !id->is_null())
    return bad("an error's \"id\" must be a string, an integer or null");
  const auto* eo = error->if_object();
  if (!eo) return bad("\"error\" must be an object");
  const auto* code = eo->if_contains("code");
  const auto* msg = eo->if_contains("message");
  if (!code || !(code->is_int64() || code->is_uint64()))
    return bad("\"error\" needs an integer \"code\"");
  if (!msg || !msg->is_string()) return bad("\"error\" needs a string \"message\"");
  m.kind = Kind::error;
  m.id = *id;
  m.error_code =
      code->is_int64() ? code->get_int64() : static_cast<std::int64_t>(code->get_uint64());
  m.error_message = msg->get_string();
  if (const auto* d = eo->if_contains("data")) m.error_data = *d;
  return m;
}

std::string request(const json::value& id, std::string_view method, const json::value& params) {
  json::object o{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
  if (!params.is_null()) o["params"] = params;
  return json::serialize(o);
}

std::string notification(std::string_view method, const json::value& params) {
  json::object o{{"jsonrpc", "2.0"}, {"method", method}};
  if (!params.is_null()) o["params"] = params;
  return json::serialize(o);
}

std::string response(const json::value& id, const json::value& result) {
  return json::serialize(json::object{{"jsonrpc", "2.0"}, {"id", id}, {"result", result}});
}

std::string error_response(const json::value& id, std::int64_t code, std::string_view message) {
  return json::serialize(
      json::object{{"jsonrpc", "2.0"},
                   {"id", id},
                   {"error", json::object{{"code", code}, {"message", message}}}});
}

std::string refusal(std::string_view line, const Error& why, std::size_t max_depth) {
  json::parse_options opt;
  opt.max_depth = max_depth;
  boost::system::error_code ec;
  json::value v = json::parse(line, ec, {}, opt);
  if (ec) return error_response(nullptr, kParseError, why.message);
  json::value id;
  if (const auto* o = v.if_object())
    if (const auto* i = o->if_contains("id"); i && valid_id(*i)) id = *i;
  return error_response(id, kInvalidRequest, why.message);
}

std::string id_text(const json::value& id) {
  return json::serialize(id);
}

}  // namespace weir::tools::jsonrpc
