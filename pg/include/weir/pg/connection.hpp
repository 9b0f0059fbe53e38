// A libpq connection for the run queue: text-format parameters and results, errors that name
// the server without its password, a reconnect on the next call after the server dropped it.
// Thread safety: none; RunQueue guards its connection with a mutex.
#pragma once

#include <libpq-fe.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weir/pg/conninfo.hpp"  // the handles and conninfo checks
#include "weir/runtime/error.hpp"

namespace weir::pg {

// One statement's parameters: text values, nullopt for SQL NULL.
using Params = std::vector<std::optional<std::string>>;

class Connection {
 public:
  // invalid_argument (a string libpq cannot parse), io_error (cannot connect: "cannot connect
  // to postgres 'user@host:port/db': <libpq's reason>"). Never names the password.
  static Result<Connection> open(std::string_view conninfo);

  // Runs `sql`; io_error "<description>: <what>: <server message> (SQLSTATE x)" on failure. A
  // connection found broken is re-established first (once).
  Result<ResultPtr> exec(const char* sql, const Params& params, std::string_view what);

  const std::string& description() const { return description_; }
  PGconn* get() const { return conn_.get(); }
  // `text` with any password of the connection string replaced by "***".
  std::string scrub(std::string text) const;

 private:
  Connection(std::string conninfo, std::string description, ConnPtr conn)
      : conninfo_(std::move(conninfo)),
        description_(std::move(description)),
        conn_(std::move(conn)) {}
  std::string conninfo_, description_;
  ConnPtr conn_;
  std::unordered_map<std::string, std::string> prepared_;  // statement text -> prepared name
};

// Cells of a text-format result.
std::string cell(const PGresult* r, int row, int col);    // "" for NULL
long long cell_int(const PGresult* r, int row, int col);  // 0 for NULL
bool cell_bool(const PGresult* r, int row, int col);      // 't'

}  // namespace weir::pg
