#include "console.hpp"

#include <string>

#include "weir/http/openai.hpp"

namespace weir::serve {

namespace {

constexpr std::string_view kPrefix = "/console";

// The embedded file `path` names, or null.
const ConsoleFile* find_file(std::string_view path) {
  std::string_view rel = path.substr(kPrefix.size());
  if (rel.empty() || rel == "/") rel = "/index.html";
  rel.remove_prefix(1);
  for (const auto& f : console_files())
    if (f.path == rel) return &f;
  return nullptr;
}

http::Response not_found(std::string message) {
  return http::Response{404,
                        "application/json",
                        {},
                        http::openai::ApiError{404, std::move(message), "", "not_found"}.body()};
}

}  // namespace

bool is_console_path(std::string_view path) {
  return path == kPrefix || (path.starts_with(kPrefix) && path[kPrefix.size()] == '/');
}

bool is_console_file(std::string_view path) {
  return is_console_path(path) && find_file(path) != nullptr;
}

http::Response console_answer(std::string_view method, std::string_view path, bool enabled) {
  if (!enabled)
    return not_found(
        "the console is off: start weir serve with --console (and --workflows DIR "
        "for its runs), then open /console");
  if (method != "GET")
    return http::Response{
        405,
        "application/json",
        {{"Allow", "GET"}},
        http::openai::ApiError{
            405, std::string(method) + " is not allowed on " + std::string(path) + "; use GET", "",
            ""}
            .body()};
  const ConsoleFile* f = find_file(path);
  if (!f) {
    std::string names;
    for (const auto& x : console_files())
      names += (names.empty() ? "" : ", ") + std::string(x.path);
    return not_found("no console file " + std::string(path) + " (files: " + names + ")");
  }
  http::Response out;
  out.content_type = std::string(f->content_type);
  out.body = std::string(f->body);
  // The page runs only its own scripts and talks only to this server; no other site may frame
  // it (its buttons cancel and resume runs); a browser revalidates after weir is upgraded.
  out.headers = {{"Content-Security-Policy",
                  "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                  "script-src 'self'; connect-src 'self'; frame-ancestors 'none'; "
                  "base-uri 'none'; form-action 'none'"},
                 {"X-Content-Type-Options", "nosniff"},
                 {"X-Frame-Options", "DENY"},
                 {"Referrer-Policy", "no-referrer"},
                 {"Cache-Control", "no-cache"}};
  return out;
}

}  // namespace weir::serve
