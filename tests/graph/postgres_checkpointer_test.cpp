// The PostgreSQL checkpointer against a throwaway server (pg_server.hpp): the conformance suite,
// then what only a server backend has (reconnecting, several connections, the error texts).
#include <libpq-fe.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "checkpointer_conformance.hpp"
#include "checkpointer_conformance_claims.hpp"
#include "pg_server.hpp"
#include "postgres_proxy.hpp"
#include "weir/graph/checkpointer.hpp"

namespace weir::graph {
namespace {

using namespace conformance;
using weir::testing::PgServer;

// A fresh database on the process's server; a failure to get one fails the test.
std::string fresh_conninfo() {
  const std::string db = weir::testing::fresh_database();
  return db.empty() ? "" : PgServer::get().conninfo(db);
}

struct PostgresBackend {
  static constexpr const char* kName = "Postgres";
  static Result<std::unique_ptr<Checkpointer>> open(const fs::path&, Retention retention) {
    const std::string conninfo = fresh_conninfo();
    if (conninfo.empty()) return Error(Errc::io_error, "no PostgreSQL test server");
    return open_postgres_checkpointer(conninfo, retention);
  }
};
using ServerBackends = ::testing::Types<PostgresBackend>;
INSTANTIATE_TYPED_TEST_SUITE_P(Server, CheckpointerTest, ServerBackends, BackendName);
INSTANTIATE_TYPED_TEST_SUITE_P(Server, CheckpointerClaimsTest, ServerBackends, BackendName);

// The database name of a key=value conninfo made by fresh_conninfo.
std::string dbname_of(const std::string& conninfo) {
  auto p = conninfo.find("dbname=");
  return conninfo.substr(p + 7, conninfo.find(' ', p) - p - 7);
}

Result<std::unique_ptr<Checkpointer>> open_ok(const std::string& conninfo, Retention r = {}) {
  auto c = open_postgres_checkpointer(conninfo, r);
  EXPECT_TRUE(c) << c.error().to_string();
  return c;
}

TEST(PostgresCheckpointer, PersistsAcrossConnectionsAndAcceptsAUri) {
  const std::string conninfo = fresh_conninfo();
  ASSERT_NE(conninfo, "");
  {
    auto c = open_ok(conninfo);
    ASSERT_TRUE(c);
    ASSERT_TRUE((*c)->put(make_cp("t", "s1", "", 1, R"({"a":1})")));
    ASSERT_TRUE((*c)->put(make_cp("t", "s2", "s1", 2, R"({"b":2})")));
    ASSERT_TRUE((*c)->put(make_cp("u", "x", "", 0)));
  }
  const std::string uri = "postgresql://weir@127.0.0.1:" + std::to_string(PgServer::get().port()) +
                          "/" + dbname_of(conninfo);
  auto c = open_ok(uri);
  ASSERT_TRUE(c);
  auto state = (*c)->state_at("t", "s2");
  ASSERT_TRUE(state) << state.error().to_string();
  EXPECT_EQ(*state, obj(R"({"a":1,"b":2})"));
  auto threads = (*c)->threads();
  ASSERT_TRUE(threads);
  EXPECT_THAT(*threads, ::testing::ElementsAre("u", "t"));
  ASSERT_TRUE((*c)->put(make_cp("t", "s3", "s2", 3)));
  auto t2 = (*c)->threads();
  ASSERT_TRUE(t2);
  EXPECT_THAT(*t2, ::testing::ElementsAre("t", "u"));
  auto version = PgServer::get().exec_admin(
      "DO $$ BEGIN IF (SELECT max(version) FROM weir_schema_version) <> " +
          std::to_string(kPostgresSchemaVersion) + " THEN RAISE 'bad version'; END IF; END $$",
      dbname_of(conninfo));
  EXPECT_EQ(version, "");
}

// Two processes' worth of connections writing one thread: each put is serialised on the
// thread's row, so list() order is commit order and no put is lost.
TEST(PostgresCheckpointer, TwoConnectionsWritingOneThreadLoseNothing) {
  const std::string conninfo = fresh_conninfo();
  ASSERT_NE(conninfo, "");
  auto a = open_ok(conninfo);
  auto b = open_ok(conninfo);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE((*a)->put(make_cp("t", "root", "", 0, R"({"x":0})")));
  std::vector<std::thread> writers;
  std::vector<std::string> failures(2);
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      Checkpointer& c = w == 0 ? **a : **b;
      for (int i = 0; i < 50; ++i) {
        Checkpoint cp = make_cp("t", new_checkpoint_id(i), "root", i);
        cp.writes["w" + std::to_string(w)] = i;
        if (auto s = c.put(cp); !s) failures[w] = s.error().to_string();
      }
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(failures[0], "");
  EXPECT_EQ(failures[1], "");
  auto all = (*b)->list("t", 1000);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 101u);
  auto latest = (*a)->latest("t");
  ASSERT_TRUE(latest && latest->has_value());
  EXPECT_EQ((*latest)->checkpoint_id, all->front().checkpoint_id);
}

// The server ended the session (an administrator, a failover, a restart): the call that finds
// out re-establishes the connection and runs again, so the caller never sees the loss.
TEST(PostgresCheckpointer, CallsRideOutTerminatedSessions) {
  const std::string conninfo = fresh_conninfo();
  ASSERT_NE(conninfo, "");
  auto c = open_ok(conninfo);
  ASSERT_TRUE(c);
  ASSERT_TRUE((*c)->put(make_cp("t", "c1", "", 0, R"({"a":1})")));
  std::string why;
  ASSERT_EQ(PgServer::get().terminate_sessions(dbname_of(conninfo), &why), 1) << why;
  auto first = (*c)->latest("t");
  ASSERT_TRUE(first) << first.error().to_string();
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->checkpoint_id, "c1");
  // A put (a transaction) and a claim find the session gone too, and go through.
  ASSERT_EQ(PgServer::get().terminate_sessions(dbname_of(conninfo), &why), 1) << why;
  auto put = (*c)->put(make_cp("t", "c2", "c1", 1));
  EXPECT_TRUE(put) << put.error().to_string();
  ASSERT_EQ(PgServer::get().terminate_sessions(dbname_of(conninfo), &why), 1) << why;
  auto claimed = (*c)->claim_thread("t", remote_holder("h", 10000));
  EXPECT_TRUE(claimed) << claimed.error().to_string();
  auto all = (*c)->list("t");
  ASSERT_TRUE(all) << all.error().to_string();
  EXPECT_THAT(ids(*all), ::testing::ElementsAre("c2", "c1"));
}

// Through a proxy that loses connections on purpose (postgres_proxy.hpp): a fresh database and
// its conninfo through the proxy.
struct Proxied {
  std::unique_ptr<weir::testing::PgProxy> proxy;
  std::string db, conninfo;
};
Proxied proxied() {
  Proxied p;
  p.db = weir::testing::fresh_database();
  if (p.db.empty()) return p;
  p.proxy = std::make_unique<weir::testing::PgProxy>(PgServer::get().port());
  EXPECT_GT(p.proxy->port(), 0);
  p.conninfo = p.proxy->conninfo(p.db);
  return p;
}

// The server committed a put but its answer never arrived: the put re-establishes the
// connection, finds its checkpoint stored (its id is unique) and succeeds; it is stored once,
// and the claim it renewed still holds. Both ways a put commits: a put with an artifact is a
// transaction (its COMMIT's answer is lost), one without is one statement, weir_put_checkpoint,
// committed by itself (that statement's answer is lost).
TEST(PostgresCheckpointer, APutWhoseCommitAnswerWasLostIsStoredOnce) {
  auto p = proxied();
  ASSERT_NE(p.conninfo, "");
  auto c = open_ok(p.conninfo);
  ASSERT_TRUE(c);
  for (const bool one_statement : {false, true}) {
    SCOPED_TRACE(one_statement ? "one statement" : "a transaction");
    const std::string t = one_statement ? "t1" : "t2";
    const ThreadHolder me = remote_holder("h", 10000);
    ASSERT_TRUE((*c)->claim_thread(t, me));
    Checkpoint first = make_cp(t, "c1", "", 0, R"({"a":1})");
    first.claim_token = me.token;
    ASSERT_TRUE((*c)->put(first));
    Checkpoint second = make_cp(t, "c2", "c1", 1, R"({"b":2})");
    second.claim_token = me.token;
    if (!one_statement) second.artifacts = {artifact("blob", "bytes of c2")};
    p.proxy->cut_on_reply(one_statement ? "SELECT 1" : "COMMIT");
    auto put = (*c)->put(second);
    EXPECT_EQ(p.proxy->fired(), 1) << "the answer was not dropped";
    ASSERT_TRUE(put) << put.error().to_string();
    auto all = (*c)->list(t);
    ASSERT_TRUE(all) << all.error().to_string();
    EXPECT_THAT(ids(*all), ::testing::ElementsAre("c2", "c1"));
    if (!one_statement) {
      auto blob = (*c)->get_artifact(t, "blob");
      ASSERT_TRUE(blob && blob->has_value());
      EXPECT_EQ((*blob)->bytes, "bytes of c2");
    }
    Checkpoint third = make_cp(t, "c3", "c2", 2);
    third.claim_token = me.token;
    EXPECT_TRUE((*c)->put(third));
  }
}

// A connection lost in the middle of a put's transaction (before its COMMIT): the server rolled
// it back, and the put runs again once, storing the checkpoint once. (A put with an artifact is
// a transaction: the checkpoint, then the artifact's INSERT, whose answer is cut.)
TEST(PostgresCheckpointer, APutCutBeforeItsCommitIsStoredOnce) {
  auto p = proxied();
  ASSERT_NE(p.conninfo, "");
  auto c = open_ok(p.conninfo);
  ASSERT_TRUE(c);
  ASSERT_TRUE((*c)->put(make_cp("t", "c1", "", 0, R"({"a":1})")));
  Checkpoint second = make_cp("t", "c2", "c1", 1, R"({"b":2})");
  second.artifacts = {artifact("blob", "bytes of c2")};
  p.proxy->cut_on_reply("INSERT");
  auto put = (*c)->put(second);
  EXPECT_EQ(p.proxy->fired(), 1);
  ASSERT_TRUE(put) << put.error().to_string();
  auto all = (*c)->list("t");
  ASSERT_TRUE(all);
  EXPECT_THAT(ids(*all), ::testing::ElementsAre("c2", "c1"));
  auto state = (*c)->state_at("t", "c2");
  ASSERT_TRUE(state);
  EXPECT_EQ(*state, obj(R"({"a":1,"b":2})"));
  auto blob = (*c)->get_artifact("t", "blob");
  ASSERT_TRUE(blob && blob->has_value());
  EXPECT_EQ((*blob)->bytes, "bytes of c2");
}

TEST(PostgresCheckpointer, UnreachableServerIsUnavailableNamingItWithoutThePassword) {
  const int port = [] {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    close(fd);  // nothing listens there now
    return static_cast<int>(ntohs(a.sin_port));
  }();
  const std::string uri =
      "postgres://alice:Sup3rSecret@127.0.0.1:" + std::to_string(port) + "/runs?connect_timeout=5";
  auto c = open_postgres_checkpointer(uri);
  ASSERT_FALSE(c);
  EXPECT_TRUE(c.error().is(Errc::unavailable)) << c.error().to_string();
  EXPECT_THAT(c.error().message, HasSubstr("postgres 'alice@127.0.0.1:" + std::to_string(port) +
                                           "/runs': connecting"));
  EXPECT_THAT(c.error().message, HasSubstr("check that the server runs"));
  EXPECT_THAT(c.error().message, ::testing::Not(HasSubstr("Sup3rSecret")));
}

TEST(PostgresCheckpointer, BadConnectionStringIsInvalidArgumentWithoutThePassword) {
  auto bad_port = open_postgres_checkpointer("postgres://bob:hunter2hunter2@localhost:notaport/db");
  ASSERT_FALSE(bad_port);
  EXPECT_TRUE(bad_port.error().is(Errc::invalid_argument)) << bad_port.error().to_string();
  EXPECT_THAT(bad_port.error().message, HasSubstr("cannot parse the connection string"));
  EXPECT_THAT(bad_port.error().message, ::testing::Not(HasSubstr("hunter2hunter2")));

  auto bad_kv = open_postgres_checkpointer("host=localhost password='hunter2hunter2' nonsense");
  ASSERT_FALSE(bad_kv);
  EXPECT_TRUE(bad_kv.error().is(Errc::invalid_argument));
  EXPECT_THAT(bad_kv.error().message, ::testing::Not(HasSubstr("hunter2hunter2")));

  auto empty = open_postgres_checkpointer("");
  ASSERT_FALSE(empty);
  EXPECT_THAT(empty.error().message, HasSubstr("the connection string is empty"));
}

TEST(PostgresCheckpointer, CorruptRowIsCorruptDataNamingThreadAndCheckpoint) {
  const std::string conninfo = fresh_conninfo();
  ASSERT_NE(conninfo, "");
  auto c = open_ok(conninfo);
  ASSERT_TRUE(c);
  ASSERT_TRUE((*c)->put(make_cp("t", "good", "", 0, R"({"a":1})")));
  ASSERT_TRUE((*c)->put(make_cp("t", "bad", "good", 1, R"({"b":2})")));
  ASSERT_EQ(PgServer::get().exec_admin("UPDATE weir_checkpoints SET writes = "
                                       "convert_to('{\"b\": tru', 'UTF8') "
                                       "WHERE checkpoint_id = 'bad'",
                                       dbname_of(conninfo)),
            "");
  auto state = (*c)->state_at("t", "bad");
  ASSERT_FALSE(state);
  EXPECT_TRUE(state.error().is(Errc::corrupt_data)) << state.error().to_string();
  EXPECT_THAT(state.error().message, HasSubstr("checkpoint 'bad' of thread 't'"));
  EXPECT_THAT(state.error().message, HasSubstr("column writes is not valid JSON"));
  EXPECT_THAT(state.error().message, HasSubstr("postgres 'weir@127.0.0.1:"));
  auto good = (*c)->state_at("t", "good");
  ASSERT_TRUE(good);
}

TEST(PostgresCheckpointer, NewerSchemaVersionIsRefused) {
  const std::string conninfo = fresh_conninfo();
  ASSERT_NE(conninfo, "");
  { ASSERT_TRUE(open_ok(conninfo)); }
  ASSERT_EQ(PgServer::get().exec_admin("UPDATE weir_schema_version SET version = 99",
                                       dbname_of(conninfo)),
            "");
  auto c = open_postgres_checkpointer(conninfo);
  ASSERT_FALSE(c);
  EXPECT_TRUE(c.error().is(Errc::unsupported)) << c.error().to_string();
  EXPECT_THAT(c.error().message, HasSubstr("schema version 99, newer than this weir build reads"));
}

// Text columns cannot hold a NUL: an id with one is refused as invalid_argument, storing nothing.
TEST(PostgresCheckpointer, IdThatTextCannotHoldIsInvalidArgument) {
  const std::string conninfo = fresh_conninfo();
  ASSERT_NE(conninfo, "");
  auto c = open_ok(conninfo);
  ASSERT_TRUE(c);
  auto s = (*c)->put(make_cp(std::string("t\0x", 3), "c1", "", 0));
  ASSERT_FALSE(s);
  EXPECT_TRUE(s.error().is(Errc::invalid_argument)) << s.error().to_string();
  auto threads = (*c)->threads();
  ASSERT_TRUE(threads) << threads.error().to_string();
  EXPECT_TRUE(threads->empty());
}

// Claims across connections (as across processes and machines): eight connections race for one
// thread and one wins; the winner's puts commit, and after its lease lapses a takeover on
// another connection fences it: its next put and renewal are refused and store nothing.
TEST(PostgresCheckpointer, ClaimsHoldAcrossConnections) {
  const std::string conninfo = fresh_conninfo();
  ASSERT_NE(conninfo, "");
  std::vector<std::unique_ptr<Checkpointer>> conns;
  for (int i = 0; i < 8; ++i) {
    auto c = open_ok(conninfo);
    ASSERT_TRUE(c);
    conns.push_back(std::move(*c));
  }
  std::vector<ThreadHolder> holders;
  for (int i = 0; i < 8; ++i) holders.push_back(remote_holder("m" + std::to_string(i), 300));
  std::vector<int> won(8, 0);
  std::vector<std::string> other(8);
  {
    std::vector<std::thread> ts;
    for (int i = 0; i < 8; ++i)
      ts.emplace_back([&, i] {
        auto r = conns[i]->claim_thread("t", holders[i]);
        if (r)
          won[i] = 1;
        else if (!r.error().is(Errc::thread_busy))
          other[i] = r.error().to_string();
      });
    for (auto& t : ts) t.join();
  }
  for (const auto& o : other) EXPECT_EQ(o, "");
  ASSERT_EQ(std::count(won.begin(), won.end(), 1), 1);
  const int w = static_cast<int>(std::find(won.begin(), won.end(), 1) - won.begin());
  const int l = (w + 1) % 8;
  Checkpoint cp = make_cp("t", "c1", "", 0);
  cp.claim_token = holders[w].token;
  cp.artifacts = {artifact("a", "first")};
  ASSERT_TRUE(conns[w]->put(cp));
  auto seen = conns[l]->thread_holder("t");
  ASSERT_TRUE(seen && seen->has_value());
  EXPECT_EQ((*seen)->host, "m" + std::to_string(w));

  // The winner goes silent past its lease: another machine takes over.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto taken = conns[l]->claim_thread("t", holders[l]);
  ASSERT_TRUE(taken) << taken.error().to_string();
  Checkpoint late = make_cp("t", "c2", "c1", 1);
  late.claim_token = holders[w].token;
  late.artifacts = {artifact("b", "late")};
  auto put = conns[w]->put(late);
  ASSERT_FALSE(put);
  EXPECT_TRUE(put.error().is(Errc::thread_busy));
  EXPECT_THAT(put.error().message, HasSubstr("it was taken over by pid "));
  EXPECT_THAT(put.error().message, HasSubstr(" on host m" + std::to_string(l) + " at "));
  EXPECT_FALSE(conns[w]->renew_thread("t", holders[w].token));
  auto all = conns[l]->list("t");
  ASSERT_TRUE(all);
  EXPECT_THAT(ids(*all), ::testing::ElementsAre("c1"));
  auto blob = conns[l]->get_artifact("t", "b");
  ASSERT_TRUE(blob);
  EXPECT_FALSE(blob->has_value());
  auto first = conns[l]->get_artifact("t", "a");
  ASSERT_TRUE(first && first->has_value());
  EXPECT_EQ((*first)->bytes, "first");
}

// Claim times are stamped by the server (one machine cannot tell its clock from the client's,
// so this checks what it can): the stored row is what claim_thread returned, not in the server's
// future, and a takeover is judged on the stored heartbeat against the server's now.
TEST(PostgresCheckpointer, ClaimTimesComeFromTheServersClock) {
  const std::string conninfo = fresh_conninfo();
  ASSERT_NE(conninfo, "");
  auto c = open_ok(conninfo);
  ASSERT_TRUE(c);
  auto claimed = (*c)->claim_thread("t", remote_holder("h", 1000));
  ASSERT_TRUE(claimed) << claimed.error().to_string();
  // The row holds what claim_thread returned, and the server agrees it is not in its future.
  auto check = PgServer::get().exec_admin(
      "DO $$ BEGIN IF (SELECT count(*) FROM weir_thread_holders WHERE thread_id = 't' AND since "
      "= " +
          std::to_string(claimed->since_ms) +
          " AND heartbeat = " + std::to_string(claimed->heartbeat_ms) +
          " AND heartbeat <= (extract(epoch FROM clock_timestamp()) * 1000)::int8) <> 1 "
          "THEN RAISE 'claim row differs'; END IF; END $$",
      dbname_of(conninfo));
  EXPECT_EQ(check, "");
  // A heartbeat a minute old by the server's clock: lapsed.
  ASSERT_EQ(
      PgServer::get().exec_admin("UPDATE weir_thread_holders SET heartbeat = heartbeat - 60000",
                                 dbname_of(conninfo)),
      "");
  auto taken = (*c)->claim_thread("t", remote_holder("other", 1000));
  ASSERT_TRUE(taken) << taken.error().to_string();
}

}  // namespace
}  // namespace weir::graph
