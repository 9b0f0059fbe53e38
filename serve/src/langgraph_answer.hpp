// The LangGraph Server API's answers, shared by its routes (langgraph_api.cpp,
// langgraph_store.cpp): a JSON body, and errors as {"detail": text} with the status an Error's
// code maps to (docs/langgraph-api.md "Errors"). Private to serve/.
#pragma once

#include <string>

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "weir/http/server.hpp"
#include "weir/runtime/error.hpp"

namespace weir::serve {

inline http::Response answer(int status, const boost::json::value& v) {
  return {status, "application/json", {}, boost::json::serialize(v)};
}

inline http::Response detail(int status, std::string text) {
  http::Response r = answer(status, boost::json::object{{"detail", std::move(text)}});
  if (status == 429 || status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

inline http::Response from_error(const Error& e) {
  if (e.is(Errc::not_found)) return detail(404, e.message);
  if (e.is(Errc::overloaded)) return detail(429, e.message);
  if (e.is(Errc::thread_busy)) return detail(409, e.message);
  if (e.is(Errc::invalid_argument)) return detail(422, e.message);
  if (e.is(Errc::corrupt_data)) return detail(400, e.message);
  if (e.is(Errc::unsupported)) return detail(501, e.message);
  if (e.is(Errc::memory_budget_exceeded)) return detail(413, e.message);
  if (e.is(Errc::cancelled) || e.is(Errc::io_error) || e.is(Errc::unavailable))
    return detail(503, e.message);
  return detail(500, e.message);
}

}  // namespace weir::serve
