// The web console (docs/console.md): one page, its CSS and its JavaScript, from serve/console/,
// embedded in the binary at build time (cmake/WeirEmbed.cmake writes console_files.cpp) and
// served by `weir serve --console` at /console. The page speaks only the public APIs (the
// LangGraph Server API and /metrics), so it holds no data and no secret of its own.
//
// Thread safety: everything here is immutable after static initialisation; call from any thread.
#pragma once

#include <span>
#include <string_view>

#include "weir/http/server.hpp"

namespace weir::serve {

struct ConsoleFile {
  std::string_view path;          // relative to serve/console/: "index.html", "app.js"
  std::string_view content_type;  // from the file's extension
  std::string_view body;          // the bytes, static storage
};

// Every embedded file, sorted by path (generated: console_files.cpp).
std::span<const ConsoleFile> console_files();

// True for /console and the paths under it (/console/, /console/app.js).
bool is_console_path(std::string_view path);

// True for a path of an embedded file: /console, /console/ (the page) and /console/<file>.
bool is_console_file(std::string_view path);

// The answer to a request for `path` (REQUIRES: is_console_path(path)). With the console off,
// a 404 that says how to turn it on; else the file, with headers that keep it to itself (a CSP
// allowing only this origin, nosniff, no framing, no caching past a restart), 405 for a method
// other than GET, 404 naming the files for an unknown one.
http::Response console_answer(std::string_view method, std::string_view path, bool enabled);

}  // namespace weir::serve
