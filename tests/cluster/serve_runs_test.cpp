// The runs API of weir serve with --db: runs queued in a throwaway PostgreSQL and run by the
// server's embedded worker (runs_api_suite.hpp, shared with the in-process instance), and what
// only PostgreSQL shows: the load idle event streams put on the database.
#include <libpq-fe.h>

#include <thread>

#include "pg_server.hpp"
#include "langgraph_suite.hpp"

namespace weir::serve::runs_suite {

std::string runs_db(const std::string&) {
  return weir::testing::fresh_database_uri();
}

INSTANTIATE_TEST_SUITE_P(Postgres, RunsApi, ::testing::Values(std::string("postgres")));

// Transactions the database has committed or rolled back (pg_stat_database; the server's
// statistics lag by up to a second, which the margins below allow for).
long long transactions(const std::string& uri) {
  PGconn* c = PQconnectdb(uri.c_str());
  long long n = -1;
  if (PQstatus(c) == CONNECTION_OK) {
    PGresult* f = PQexec(c, "SELECT pg_stat_force_next_flush()");
    PQclear(f);
    PGresult* r = PQexec(c,
                         "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname "
                         "= current_database()");
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
      n = std::atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
  }
  PQfinish(c);
  return n;
}

// Ten clients follow a run that sleeps: they cost the database one cheap query every
// watch_interval between them, not two reads per client every 250 ms (before: about 80
// statements a second for ten idle streams, each run's record and checkpoints read again).
TEST_P(RunsApi, IdleEventStreamsDoNotPollTheStore) {
  start();
  const std::string uri = db_;
  const std::string id = submit(R"({"workflow": "slow", "input": {"left": 1, "ms": 4000}})");
  wait_for(id, {"running"});
  std::vector<std::thread> clients;
  std::vector<std::string> ends(10);
  for (int i = 0; i < 10; ++i)
    clients.emplace_back([&, i] {
      auto frames = frames_of(get("/v1/runs/" + id + "/events").body);
      ends[i] = frames.empty() ? "" : frames.back().event;
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // all ten are following
  const long long before = transactions(uri);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const long long after = transactions(uri);
  for (auto& t : clients) t.join();
  ASSERT_GE(before, 0);
  RecordProperty("transactions_in_2s_with_10_idle_streams", std::to_string(after - before));
  EXPECT_LT(after - before, 40) << "transactions in 2 s with ten idle event streams";
  for (const auto& e : ends) EXPECT_EQ(e, "end");  // and each still saw the run end
}

}  // namespace weir::serve::runs_suite
