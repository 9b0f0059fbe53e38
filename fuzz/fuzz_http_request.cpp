// HTTP request bytes -> Beast's request parser (with the server's limits) -> the OpenAI
// chat-completions and completions body parsers, and the browser rules' parsers (browser.hpp)
// on the request's Host and Origin headers (or on the bytes themselves). None may crash, hang
// or read out of bounds, whatever the bytes; the parsers' answers are either a request or an
// ApiError, and a parsed origin parses again to itself.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <boost/beast/http.hpp>

#include "weir/http/browser.hpp"
#include "weir/http/openai.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace bhttp = boost::beast::http;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(16u << 10);
  parser.body_limit(1u << 20);
  parser.eager(true);
  boost::beast::error_code ec;
  std::size_t used = parser.put(boost::asio::buffer(in.data(), in.size()), ec);
  (void)used;
  std::string_view body = in;
  std::string_view host = in, origin = in;
  if (parser.is_header_done()) {
    const auto& h = parser.get();
    if (auto it = h.find(bhttp::field::host); it != h.end()) host = it->value();
    if (auto it = h.find(bhttp::field::origin); it != h.end()) origin = it->value();
  }
  if (!ec && parser.is_done()) body = parser.get().body();
  (void)weir::http::parse_host(host);
  (void)weir::http::is_loopback_host(host);
  if (auto o = weir::http::parse_origin(origin)) {
    auto again = weir::http::parse_origin(o->text);
    if (!again || again->text != o->text) __builtin_trap();  // the serialised form is stable
  }
  weir::http::BrowserPolicy policy;
  policy.allowed_origins = {"http://localhost:3000"};
  (void)weir::http::cross_site_refusal(policy, host, origin);
  weir::http::openai::ChatRequest chat;
  if (auto e = weir::http::openai::parse_chat_request(body, chat)) (void)e->body();
  weir::http::openai::CompletionRequest completion;
  (void)weir::http::openai::parse_completion_request(body, completion);
  return 0;
}
