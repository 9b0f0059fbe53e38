#include "weir/pg/connection.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace weir::pg {
namespace {

std::string trimmed(const char* s) {
  std::string out = s != nullptr ? s : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// SQLSTATEs that mean the session is gone (class 08: connection exception; 57P01 admin
// shutdown, 57P02 crash shutdown, 57P03 cannot connect now, 57P05 idle session timeout,
// 25P03 idle-in-transaction session timeout).
bool connection_state(std::string_view sqlstate) {
  return sqlstate.starts_with("08") || sqlstate == "57P01" || sqlstate == "57P02" ||
         sqlstate == "57P03" || sqlstate == "57P05" || sqlstate == "25P03";
}

// Connects with libpq's own connect_timeout defaulting to 10 s (libpq waits forever without
// one), and with idle_in_transaction_session_timeout set (kIdleInTransactionTimeout): a
// process paused (SIGSTOP) or hung inside a transaction would otherwise hold its row locks
// forever, and every worker that ends or claims that run would wait on them. PostgreSQL ends
// such a session; the process, when it goes on, finds its connection lost and its transaction
// rolled back. A connect_timeout or options in the string win (expand_dbname: later keywords
// override earlier). PQreset keeps these settings.
ConnPtr connect(const std::string& conninfo) {
  static const std::string options =
      "-c idle_in_transaction_session_timeout=" + std::to_string(kIdleInTransactionTimeout.count());
  const char* keys[] = {"connect_timeout", "options", "dbname", nullptr};
  const char* values[] = {"10", options.c_str(), conninfo.c_str(), nullptr};
  ConnPtr c(PQconnectdbParams(keys, values, 1));
  if (c)
    PQsetNoticeProcessor(
        c.get(), [](void*, const char*) {}, nullptr);
  return c;
}

}  // namespace

// --- Params ----------------------------------------------------------------------------------

Params& Params::add(std::string_view v, Oid type) {
  values_.push_back(v.empty() ? "" : v.data());  // NULL would mean SQL NULL
  lengths_.push_back(static_cast<int>(v.size()));
  formats_.push_back(1);
  types_.push_back(type);
  return *this;
}

Params& Params::null(Oid type) {
  values_.push_back(nullptr);
  lengths_.push_back(0);
  formats_.push_back(1);
  types_.push_back(type);
  return *this;
}

Params& Params::int8(int64_t v) {
  auto& buf = owned_.emplace_back();
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>(u >> (56 - 8 * i));
  return add(std::string_view(buf.data(), 8), kInt8);
}

Params& Params::boolean(bool v) {
  auto& buf = owned_.emplace_back();
  buf[0] = v ? 1 : 0;
  return add(std::string_view(buf.data(), 1), kBool);
}

Params& Params::text_or_null(std::optional<std::string_view> v) {
  return v ? text(*v) : null(kText);
}

Params& Params::bytea_or_null(std::optional<std::string_view> v) {
  return v ? bytea(*v) : null(kBytea);
}

// --- Rows ------------------------------------------------------------------------------------

std::string_view Rows::text(int row, int col) const {
  return std::string_view(PQgetvalue(r_.get(), row, col), PQgetlength(r_.get(), row, col));
}

int64_t Rows::int8(int row, int col) const {
  if (PQgetlength(r_.get(), row, col) != 8) return 0;  // NULL
  const auto* p = reinterpret_cast<const unsigned char*>(PQgetvalue(r_.get(), row, col));
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u = (u << 8) | p[i];
  return static_cast<int64_t>(u);
}

bool Rows::boolean(int row, int col) const {
  return PQgetlength(r_.get(), row, col) == 1 && PQgetvalue(r_.get(), row, col)[0] != 0;
}

int64_t Rows::affected() const {
  return std::strtoll(PQcmdTuples(r_.get()), nullptr, 10);
}

// --- Connection ------------------------------------------------------------------------------

Connection::Connection(Conninfo info, ConnPtr conn, Options options)
    : info_(std::move(info)), conn_(std::move(conn)), options_(options) {}
Connection::Connection(Connection&&) noexcept = default;
Connection& Connection::operator=(Connection&&) noexcept = default;
Connection::~Connection() = default;

Result<Connection> Connection::open(std::string_view conninfo, Options options) {
  auto info = parse_conninfo(conninfo);
  if (!info) return std::move(info).error();
  ConnPtr conn = connect(info->conninfo);
  if (!conn || PQstatus(conn.get()) != CONNECTION_OK)
    return Error(Errc::unavailable,
                 info->description + ": connecting: " +
                     scrub_password(trimmed(conn ? PQerrorMessage(conn.get()) : "out of memory"),
                                    info->conninfo) +
                     "; check that the server runs, the address and the credentials");
  return Connection(std::move(*info), std::move(conn), options);
}

const std::string& Connection::description() const {
  return info_.description;
}

std::string Connection::scrub(std::string text) const {
  return scrub_password(std::move(text), info_.conninfo);
}

Result<Rows> Connection::exec(std::string_view sql_view, const Params& p, std::string_view what) {
  lost_ = false;
  sqlstate_.clear();
  if (PQstatus(conn_.get()) != CONNECTION_OK) {
    lost_ = true;
    may_have_committed_ = false;  // nothing was sent
    last_reason_ = "the connection is closed";
    return Error(Errc::unavailable,
                 description() + ": " + std::string(what) + ": the connection was lost");
  }
  // What is lost with the connection may have committed when it is a COMMIT or a statement
  // outside a transaction (other than BEGIN and reads, which a retry may simply repeat).
  may_have_committed_ = sql_view == "COMMIT" || (PQtransactionStatus(conn_.get()) == PQTRANS_IDLE &&
                                                 !sql_view.starts_with("BEGIN"));
  constexpr std::size_t kMaxPrepared = 64;
  std::string key(sql_view);  // the same text with other parameter types is another statement
  key.append(reinterpret_cast<const char*>(p.types()), p.size() * sizeof(Oid));
  auto it = prepared_.find(key);
  if (it == prepared_.end() && prepared_.size() < kMaxPrepared) {
    std::string name = "weir_s" + std::to_string(prepared_.size());
    const std::string sql(sql_view);
    ResultPtr pr(PQprepare(conn_.get(), name.c_str(), sql.c_str(), p.size(), p.types()));
    if (!pr || PQresultStatus(pr.get()) != PGRES_COMMAND_OK) return error(pr.get(), what);
    it = prepared_.emplace(std::move(key), std::move(name)).first;
  }
  ResultPtr r;
  if (it != prepared_.end()) {
    r.reset(PQexecPrepared(conn_.get(), it->second.c_str(), p.size(), p.values(), p.lengths(),
                           p.formats(), 1));
  } else {
    const std::string sql(sql_view);
    r.reset(PQexecParams(conn_.get(), sql.c_str(), p.size(), p.types(), p.values(), p.lengths(),
                         p.formats(), 1));
  }
  const ExecStatusType st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return Rows(std::move(r));
  return error(r.get(), what);
}

Status Connection::exec_script(std::string_view sql_view, std::string_view what) {
  lost_ = false;
  sqlstate_.clear();
  may_have_committed_ = PQtransactionStatus(conn_.get()) == PQTRANS_IDLE;
  const std::string sql(sql_view);
  ResultPtr r(PQexec(conn_.get(), sql.c_str()));
  if (r && PQresultStatus(r.get()) == PGRES_COMMAND_OK) return {};
  return error(r.get(), what);
}

Error Connection::error(const PGresult* r, std::string_view what) {
  const char* state = r != nullptr ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  sqlstate_ = state != nullptr ? state : "";
  const std::string& sqlstate = sqlstate_;
  std::string msg;
  if (const char* primary = r != nullptr ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : nullptr)
    msg = primary;
  else
    msg = trimmed(PQerrorMessage(conn_.get()));
  if (msg.empty()) msg = "no answer from the server";
  msg = scrub(std::move(msg));
  std::string text = description() + ": " + std::string(what) + ": " + msg;
  if (!sqlstate.empty()) text += " (SQLSTATE " + sqlstate + ")";
  lost_ = PQstatus(conn_.get()) != CONNECTION_OK || connection_state(sqlstate);
  if (lost_) {
    prepared_.clear();  // a new session has none of them
    last_reason_ = sqlstate.empty() ? msg : msg + " (SQLSTATE " + sqlstate + ")";
    return Error(Errc::unavailable, text + "; the connection was lost");
  }
  // Class 22 (data exception) and 54 (program limit): the value cannot be stored; anything
  // else is the server refusing.
  if (sqlstate.starts_with("22") || sqlstate.starts_with("54"))
    return Error(Errc::invalid_argument,
                 text +
                     "; PostgreSQL text cannot hold a NUL byte or invalid UTF-8, and a value "
                     "is limited to 1 GB (keep large values in the artifact store)");
  return Error(Errc::io_error, std::move(text));
}

bool Connection::reconnect(std::chrono::steady_clock::time_point deadline, int* tries) {
  auto backoff = std::chrono::milliseconds(50);
  for (;;) {
    ++*tries;
    prepared_.clear();
    PQreset(conn_.get());
    if (PQstatus(conn_.get()) == CONNECTION_OK) {
      PQsetNoticeProcessor(
          conn_.get(), [](void*, const char*) {}, nullptr);
      return true;
    }
    last_reason_ = scrub(trimmed(PQerrorMessage(conn_.get())));
    if (std::chrono::steady_clock::now() + backoff > deadline) return false;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

Error Connection::gave_up(std::string_view what, int tries) const {
  return Error(Errc::unavailable,
               description() + ": " + std::string(what) +
                   ": the connection was lost and could not be re-established within " +
                   std::to_string(options_.reconnect_window.count()) + " ms (" +
                   std::to_string(tries) + (tries == 1 ? " try" : " tries") + "): " + last_reason_);
}

// --- Transaction -----------------------------------------------------------------------------

Transaction::~Transaction() {
  if (open_ && PQstatus(c_.native()) == CONNECTION_OK &&
      PQtransactionStatus(c_.native()) != PQTRANS_IDLE)
    PQclear(PQexec(c_.native(), "ROLLBACK"));
}

Status Transaction::begin(std::string_view what, const char* sql) {
  auto r = c_.exec(sql, Params(), std::string(what) + ": beginning a transaction");
  if (!r) return std::move(r).error();
  open_ = true;
  return {};
}

Status Transaction::commit(std::string_view what) {
  auto r = c_.exec("COMMIT", Params(), std::string(what) + ": committing");
  if (!r) return std::move(r).error();
  open_ = false;
  return {};
}

}  // namespace weir::pg
