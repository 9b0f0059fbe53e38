#include "pg.hpp"

#include <cstdlib>

#include "postgres_conninfo.hpp"

namespace weir::cluster::pg {
namespace {

std::string trimmed(const char* s) {
  std::string out = s != nullptr ? s : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace

Result<Connection> Connection::open(std::string_view conninfo) {
  auto info = graph::detail::parse_pg_conninfo(conninfo);
  if (!info) return std::move(info).error();
  ConnPtr conn(PQconnectdb(info->conninfo.c_str()));
  if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
    return Error(
        Errc::io_error,
        "cannot connect to " + info->description + ": " +
            graph::detail::scrub_password(
                trimmed(conn ? PQerrorMessage(conn.get()) : "out of memory"), info->conninfo));
  }
  // The server's NOTICEs ("relation ... already exists, skipping") are not for the user.
  PQsetNoticeProcessor(
      conn.get(), [](void*, const char*) {}, nullptr);
  return Connection(info->conninfo, info->description, std::move(conn));
}

std::string Connection::scrub(std::string text) const {
  return graph::detail::scrub_password(std::move(text), conninfo_);
}

Result<ResultPtr> Connection::exec(const char* sql, const Params& params, std::string_view what) {
  if (PQstatus(conn_.get()) != CONNECTION_OK) {
    PQreset(conn_.get());
    if (PQstatus(conn_.get()) != CONNECTION_OK)
      return Error(Errc::io_error,
                   description_ + ": " + std::string(what) +
                       ": the connection was lost and could not be re-established: " +
                       scrub(trimmed(PQerrorMessage(conn_.get()))));
  }
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  ResultPtr r(PQexecParams(conn_.get(), sql, static_cast<int>(values.size()), nullptr,
                           values.data(), nullptr, nullptr, 0));
  const auto status = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return r;
  std::string msg = trimmed(r ? PQresultErrorMessage(r.get()) : PQerrorMessage(conn_.get()));
  if (msg.empty()) msg = trimmed(PQerrorMessage(conn_.get()));
  if (const char* state = r ? PQresultErrorField(r.get(), PG_DIAG_SQLSTATE) : nullptr)
    msg += std::string(" (SQLSTATE ") + state + ")";
  if (PQstatus(conn_.get()) != CONNECTION_OK) msg = "the connection was lost: " + msg;
  return Error(Errc::io_error, description_ + ": " + std::string(what) + ": " + scrub(msg));
}

std::string cell(const PGresult* r, int row, int col) {
  if (PQgetisnull(r, row, col)) return {};
  return std::string(PQgetvalue(r, row, col), PQgetlength(r, row, col));
}
long long cell_int(const PGresult* r, int row, int col) {
  if (PQgetisnull(r, row, col)) return 0;
  return std::strtoll(PQgetvalue(r, row, col), nullptr, 10);
}
bool cell_bool(const PGresult* r, int row, int col) {
  return !PQgetisnull(r, row, col) && PQgetvalue(r, row, col)[0] == 't';
}

}  // namespace weir::cluster::pg
