// HTTP request bytes -> Beast's request parser (with the server's limits) -> the OpenAI
// chat-completions and completions body parsers. Neither may crash, hang or read out of bounds,
// whatever the bytes; the parsers' answers are either a request or an ApiError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <boost/beast/http.hpp>

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
  if (!ec && parser.is_done()) body = parser.get().body();
  weir::http::openai::ChatRequest chat;
  if (auto e = weir::http::openai::parse_chat_request(body, chat)) (void)e->body();
  weir::http::openai::CompletionRequest completion;
  (void)weir::http::openai::parse_completion_request(body, completion);
  return 0;
}
