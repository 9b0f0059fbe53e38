// What weir's SQLite backends (checkpointer_sqlite.cpp, store_sqlite.cpp) share: the handles,
// one use of a prepared statement, and how an SQLite result code becomes an Error.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "weir/runtime/error.hpp"

namespace weir::graph::sqlite {

// A connection waits this long for another's lock before SQLITE_BUSY.
inline constexpr int kBusyTimeoutMs = 5000;

struct DbClose {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalize {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using DbPtr = std::unique_ptr<sqlite3, DbClose>;
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalize>;

// One use of a prepared statement: reset and unbound on scope exit.
class StmtUse {
 public:
  explicit StmtUse(const StmtPtr& s) : s_(s.get()) {}
  ~StmtUse() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  StmtUse(const StmtUse&) = delete;
  StmtUse& operator=(const StmtUse&) = delete;

  // Binds are SQLITE_STATIC: the caller keeps `v` alive for the use's lifetime.
  StmtUse& bind(int i, std::string_view v) {
    // An empty string_view may have data() == nullptr, which SQLite would bind as NULL.
    sqlite3_bind_text64(s_, i, v.empty() ? "" : v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8);
    return *this;
  }
  StmtUse& bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  StmtUse& bind_blob(int i, std::string_view v) {
    sqlite3_bind_blob64(s_, i, v.empty() ? "" : v.data(), v.size(), SQLITE_STATIC);
    return *this;
  }
  int step() { return sqlite3_step(s_); }

  std::string_view blob(int col) const {
    const auto* p = static_cast<const char*>(sqlite3_column_blob(s_, col));
    return p == nullptr ? std::string_view() : std::string_view(p, sqlite3_column_bytes(s_, col));
  }
  std::string_view text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, col));
    return p == nullptr ? std::string_view() : std::string_view(p, sqlite3_column_bytes(s_, col));
  }
  int64_t int64(int col) const { return sqlite3_column_int64(s_, col); }
  bool is_null(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }

 private:
  sqlite3_stmt* s_;
};

// `subject` names the file ("sqlite checkpointer '/x.db'"); `what` the operation. The code
// decides the Errc: corrupt_data (not a database), invalid_argument (a row over SQLite's size
// limit), io_error otherwise, with a hint for each.
inline Error error(std::string_view subject, sqlite3* db, int rc, std::string_view what) {
  std::string text = std::string(subject) + ": " + std::string(what) + ": " +
                     (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return Error(Errc::corrupt_data,
                   text + "; the file is not an SQLite database or is damaged (use a new path)");
    case SQLITE_CANTOPEN:
      return Error(Errc::io_error, text +
                                       "; check that the parent directory exists and is "
                                       "writable and that the path is not a directory");
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Error(Errc::io_error, text + " (another connection held the lock longer than the " +
                                       std::to_string(kBusyTimeoutMs) + " ms busy_timeout)");
    case SQLITE_TOOBIG:
      return Error(Errc::invalid_argument,
                   text + "; move large values to the artifact store instead of the state");
    default:
      return Error(Errc::io_error, std::move(text));
  }
}

}  // namespace weir::graph::sqlite
