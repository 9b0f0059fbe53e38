// weir's one PostgreSQL layer: a libpq session with binary parameters and results, statements
// prepared once per session, one error wording, and a lost connection re-established and the
// work retried. Internal: graph's checkpointer and cluster's run queue are its clients; these
// headers are not installed (pg/CMakeLists.txt).
//
// Errors. Every message names the server as postgres 'user@host:port/dbname' (never its
// password) and what was being done: "<server>: <what>: <server's message> (SQLSTATE xxxxx)".
// Codes:
//   unavailable       the server could not be reached, or the connection was lost (closed,
//                     ended by an administrator, a server restart: SQLSTATE classes 08 and
//                     57P0x), and run() could not re-establish it within the reconnect window.
//                     Any caller can test it: it is the one code that means "nothing is wrong
//                     with the request; try again later, or hand the work to someone else".
//   invalid_argument  a value PostgreSQL cannot hold (SQLSTATE classes 22 and 54: a NUL or
//                     invalid UTF-8 in text, a value over 1 GB)
//   io_error          anything else the server refused
//
// Retrying. run(what, work) calls work(attempt) until it succeeds or fails for a reason other
// than a lost connection. After a loss it re-establishes the session with backoff (50 ms
// doubling to 1 s) for at most Options::reconnect_window, counted from the first loss, and
// calls work again with attempt.outcome_unknown set when the lost statement may have committed
// (a COMMIT, or a statement outside a transaction, whose answer never came): work must then
// find out whether its first try took effect (by a unique id, or the fence) before doing it
// again. A statement inside a transaction that lost its connection was rolled back by the
// server, so work simply runs again.
//
// Pipeline mode (issue 34.4) fits behind exec(): a statement is its text and Params, its answer
// Rows, so a later exec_batch() can send several and read their answers in order.
//
// Thread safety: none. A client guards its Connection with a mutex (one statement at a time).
#pragma once

#include <libpq-fe.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weir/pg/conninfo.hpp"
#include "weir/runtime/error.hpp"

namespace weir::pg {

struct ConnFinish {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct ResultClear {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ConnPtr = std::unique_ptr<PGconn, ConnFinish>;
using ResultPtr = std::unique_ptr<PGresult, ResultClear>;

// How long a lost connection is tried again before a call fails with unavailable; weir's
// default lease (a worker passes its own lease).
inline constexpr std::chrono::milliseconds kDefaultReconnectWindow{10000};

// How long PostgreSQL lets one of weir's sessions sit idle inside a transaction before it ends
// that session (idle_in_transaction_session_timeout), so that a paused or hung process cannot
// hold row locks that other workers wait on. weir's transactions run their statements back to
// back: only a stopped process comes near this.
inline constexpr std::chrono::milliseconds kIdleInTransactionTimeout{10'000};

struct Options {
  // How long run() keeps re-establishing a lost connection (from the first loss) before the
  // call fails with unavailable. 0: one immediate try.
  std::chrono::milliseconds reconnect_window = kDefaultReconnectWindow;
};

// One statement's parameters, all sent in binary format, so a value arrives byte for byte (a
// text value holding a NUL is refused by the server, never cut short at it). Strings are
// borrowed: the caller keeps them alive until the statement ran.
class Params {
 public:
  Params& text(std::string_view v) { return add(v, kText); }
  Params& bytea(std::string_view v) { return add(v, kBytea); }
  Params& int8(int64_t v);
  Params& boolean(bool v);
  // SQL NULL when `v` is nullopt.
  Params& text_or_null(std::optional<std::string_view> v);
  Params& bytea_or_null(std::optional<std::string_view> v);

  int size() const { return static_cast<int>(values_.size()); }
  const Oid* types() const { return types_.data(); }
  const char* const* values() const { return values_.data(); }
  const int* lengths() const { return lengths_.data(); }
  const int* formats() const { return formats_.data(); }

  // Type OIDs (pg_type.h).
  static constexpr Oid kBool = 16, kBytea = 17, kInt8 = 20, kText = 25;

 private:
  Params& add(std::string_view v, Oid type);
  Params& null(Oid type);
  std::deque<std::array<char, 8>> owned_;  // numbers' bytes; a deque never moves its elements
  std::vector<const char*> values_;
  std::vector<int> lengths_, formats_;
  std::vector<Oid> types_;
};

// A statement's answer, in binary format. Columns are read by the type the SQL gives them:
// text() for text and bytea (the raw bytes), int8() for bigint (cast counts and int4 with
// ::int8), boolean() for boolean. A NULL reads as "" / 0 / false; null() tells.
class Rows {
 public:
  explicit Rows(ResultPtr r) : r_(std::move(r)) {}
  int size() const { return PQntuples(r_.get()); }
  bool null(int row, int col) const { return PQgetisnull(r_.get(), row, col) != 0; }
  std::string_view text(int row, int col) const;
  int64_t int8(int row, int col) const;
  bool boolean(int row, int col) const;
  // Rows the statement changed (UPDATE, DELETE, INSERT); 0 for others.
  int64_t affected() const;

 private:
  ResultPtr r_;
};

// What run() tells the work it calls.
struct Attempt {
  int number = 1;  // 1 for the first try
  // The previous try lost its connection while a statement that may have committed was in
  // flight (a COMMIT, or a statement outside a transaction): it may have taken effect.
  bool outcome_unknown = false;
};

class Connection {
 public:
  // Connects. invalid_argument (a string libpq cannot parse), unavailable ("postgres
  // 'u@h:p/db': connecting: <libpq's reason>; check that the server runs, the address and the
  // credentials"). Server notices ("... already exists, skipping") are not printed.
  static Result<Connection> open(std::string_view conninfo, Options options = {});

  Connection(Connection&&) noexcept;
  Connection& operator=(Connection&&) noexcept;
  ~Connection();

  // "postgres 'user@host:port/dbname'"
  const std::string& description() const;
  // `text` with any password of the connection string replaced by "***".
  std::string scrub(std::string text) const;

  // Runs one statement (prepared once per session, up to 64 texts). Errors as above; a lost
  // connection is unavailable here (run() retries it).
  Result<Rows> exec(std::string_view sql, const Params& params, std::string_view what);
  // Several statements without parameters, in one round trip (a schema script).
  Status exec_script(std::string_view sql, std::string_view what);

  // See "Retrying" above. `work` is callable as work(const Attempt&) and returns a Result<T> (or
  // Status); its errors pass through, except a lost connection that outlasts the window, which
  // becomes unavailable naming `what`, the tries and libpq's last reason.
  template <class Work>
  auto run(std::string_view what, Work&& work) -> decltype(work(std::declval<const Attempt&>()));

  // The SQLSTATE of the last statement that failed ("" after one that succeeded).
  const std::string& sqlstate() const { return sqlstate_; }
  // Inside a transaction block (open, or aborted by a failed statement until its ROLLBACK).
  bool in_transaction() const {
    return conn_ && PQtransactionStatus(conn_.get()) != PQTRANS_IDLE &&
           PQtransactionStatus(conn_.get()) != PQTRANS_UNKNOWN;
  }

  // The raw session, for what this class does not wrap (LISTEN: PQsocket, PQconsumeInput,
  // PQnotifies). Valid until the next call that reconnects.
  PGconn* native() const { return conn_.get(); }

 private:
  Connection(Conninfo info, ConnPtr conn, Options options);
  Error error(const PGresult* r, std::string_view what);
  // After a loss: re-establishes the session (at least one try), with backoff, until
  // `deadline`; counts its tries in *tries. false when the deadline passed first.
  bool reconnect(std::chrono::steady_clock::time_point deadline, int* tries);
  // unavailable: the connection stayed lost for the whole window.
  Error gave_up(std::string_view what, int tries) const;

  Conninfo info_;
  ConnPtr conn_;
  Options options_;
  std::unordered_map<std::string, std::string> prepared_;  // text + types -> prepared name
  bool lost_ = false;                // the last statement failed because the connection was lost
  bool may_have_committed_ = false;  // ... while a statement that may commit was in flight
  std::string last_reason_;          // libpq's or the server's words for the last loss
  std::string sqlstate_;             // of the last failed statement
};

// BEGIN on construction (begin() reports its error); ROLLBACK when it goes out of scope
// uncommitted. After a failed statement PostgreSQL keeps the transaction aborted until then.
class Transaction {
 public:
  explicit Transaction(Connection& c) : c_(c) {}
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  // `sql`: "BEGIN", or "BEGIN ISOLATION LEVEL ..." for another isolation.
  Status begin(std::string_view what, const char* sql = "BEGIN");
  Status commit(std::string_view what);

 private:
  Connection& c_;
  bool open_ = false;
};

template <class Work>
auto Connection::run(std::string_view what, Work&& work)
    -> decltype(work(std::declval<const Attempt&>())) {
  Attempt attempt;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  int tries = 0;
  for (;;) {
    auto r = work(static_cast<const Attempt&>(attempt));
    if (r || !lost_) return r;
    const auto now = std::chrono::steady_clock::now();
    if (!deadline) deadline = now + options_.reconnect_window;
    if ((tries > 0 && now >= *deadline) || !reconnect(*deadline, &tries))
      return gave_up(what, tries);  // a Status or a Result<T>
    attempt.outcome_unknown = may_have_committed_;
    ++attempt.number;
  }
}

}  // namespace weir::pg
