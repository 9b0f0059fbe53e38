#include "weir/pg/connection.hpp"

#include <cstdlib>

#include "weir/pg/conninfo.hpp"

namespace weir::pg {
namespace {

std::string trimmed(const char* s) {
  std::string out = s != nullptr ? s : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace

Result<Connection> Connection::open(std::string_view conninfo) {
  auto info = parse_conninfo(conninfo);
  if (!info) return std::move(info).error();
  ConnPtr conn(PQconnectdb(info->conninfo.c_str()));
  if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
    return Error(
        Errc::io_error,
        "cannot connect to " + info->description + ": " +
            scrub_password(
                trimmed(conn ? PQerrorMessage(conn.get()) : "out of memory"), info->conninfo));
  }
  // The server's NOTICEs ("relation ... already exists, skipping") are not for the user.
  PQsetNoticeProcessor(
      conn.get(), [](void*, const char*) {}, nullptr);
  return Connection(info->conninfo, info->description, std::move(conn));
}

std::string Connection::scrub(std::string text) const {
  return scrub_password(std::move(text), conninfo_);
}

Result<ResultPtr> Connection::exec(const char* sql, const Params& params, std::string_view what) {
  if (PQstatus(conn_.get()) != CONNECTION_OK) {
    prepared_.clear();  // a new session has none of them
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
  // Each statement text is prepared once per connection (parsed and planned once); past
  // kMaxPrepared texts the rest run unprepared.
  constexpr std::size_t kMaxPrepared = 32;
  auto it = prepared_.find(sql);
  ResultPtr r;
  if (it == prepared_.end() && prepared_.size() < kMaxPrepared) {
    std::string name = "weir_q" + std::to_string(prepared_.size());
    r.reset(PQprepare(conn_.get(), name.c_str(), sql, static_cast<int>(values.size()), nullptr));
    if (r && PQresultStatus(r.get()) == PGRES_COMMAND_OK)
      it = prepared_.emplace(sql, std::move(name)).first;
  }
  if (!r || PQresultStatus(r.get()) == PGRES_COMMAND_OK)  // else: the failed prepare's error
    r.reset(it != prepared_.end()
                ? PQexecPrepared(conn_.get(), it->second.c_str(), static_cast<int>(values.size()),
                                 values.data(), nullptr, nullptr, 0)
                : PQexecParams(conn_.get(), sql, static_cast<int>(values.size()), nullptr,
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

}  // namespace weir::pg
