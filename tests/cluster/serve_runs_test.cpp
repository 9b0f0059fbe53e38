// The runs API of weir serve with --db: runs queued in a throwaway PostgreSQL and run by the
// server's embedded worker (runs_api_suite.hpp, shared with the in-process instance), and what
// only PostgreSQL shows: the load idle event streams put on the database.
#include <libpq-fe.h>

#include <thread>

#include "langgraph_subgraph_suite.hpp"
#include "pg_server.hpp"
#include "weir/cluster/run_service.hpp"
#include "weir/cluster/worker.hpp"

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

// The LangGraph API's thread list lives in the database: a second server on it lists, reads
// and changes the threads the first made, and a restart keeps them with their metadata.
TEST_P(RunsApi, LangGraphThreadsAreListedByEveryServerOnTheDatabase) {
  start();
  auto other = another_server();
  ASSERT_TRUE(other);
  const std::uint16_t b = other->port();
  auto made = post("/threads", R"({"metadata": {"team": "red"}})");
  ASSERT_EQ(made.status, 200) << made.body;
  const std::string t(object_of(made.body)["thread_id"].as_string());
  auto found = call(b, "POST", "/threads/search", R"({"metadata": {"team": "red"}})");
  ASSERT_EQ(found.status, 200) << found.body;
  const auto list = json::parse(found.body).as_array();
  ASSERT_EQ(list.size(), 1u) << found.body;
  EXPECT_EQ(list[0].at("thread_id"), json::value(t));
  auto patched = call(b, "PATCH", "/threads/" + t, R"({"metadata": {"round": 2}})");
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_EQ(object_of(get("/threads/" + t).body)["metadata"].at("round"), 2);
  auto ran = call(b, "POST", "/threads/" + t + "/runs/wait", R"({"assistant_id": "review"})");
  ASSERT_EQ(ran.status, 200) << ran.body;
  auto runs = json::parse(get("/threads/" + t + "/runs").body).as_array();
  EXPECT_EQ(runs.size(), 1u);  // the run B started, as A lists it
  EXPECT_EQ(object_of(get("/threads/" + t).body)["status"], "interrupted");
  // A restart of both keeps the thread and its metadata.
  other.reset();
  svc_.reset();
  svc_ = another_server();
  ASSERT_TRUE(svc_);
  port_ = svc_->port();
  auto after = object_of(get("/threads/" + t).body);
  EXPECT_EQ(after["metadata"].at("team"), "red");
  EXPECT_EQ(after["metadata"].at("graph_id"), "review");
  EXPECT_EQ(json::parse(post("/threads/count", R"({"metadata": {"team": "red"}})").body), 1);
}

// Two servers on one database change one thread's record at once: every run either started is
// listed, and every metadata key either merged stays (before: a read, then a put, from each
// server; 10 runs listed 6, 40 keys kept 32).
TEST_P(RunsApi, LangGraphTwoServersLoseNoThreadUpdates) {
  start();
  auto other = another_server();
  ASSERT_TRUE(other);
  const std::array<std::uint16_t, 2> ports{port_, other->port()};
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());

  constexpr int kRuns = 10;
  std::vector<std::string> started(kRuns);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRuns; ++i)
    clients.emplace_back([&, i] {
      auto r = call(ports[i % 2], "POST", "/threads/" + t + "/runs",
                    R"({"assistant_id": "slow", "input": {"left": 1, "ms": 10},
                        "multitask_strategy": "enqueue"})");
      EXPECT_EQ(r.status, 200) << r.body;
      if (r.status == 200) started[i] = std::string(object_of(r.body)["run_id"].as_string());
    });
  for (auto& th : clients) th.join();
  clients.clear();
  for (auto port : ports) {
    auto listed = call(port, "GET", "/threads/" + t + "/runs?limit=100", {});
    ASSERT_EQ(listed.status, 200) << listed.body;
    std::set<std::string> ids;
    const json::value rows = json::parse(listed.body);
    for (const auto& r : rows.as_array()) ids.emplace(r.at("run_id").as_string());
    for (const auto& run : started)
      EXPECT_TRUE(ids.count(run)) << run << " not listed: " << listed.body;
  }

  constexpr int kPatches = 40;
  for (int i = 0; i < kPatches; ++i)
    clients.emplace_back([&, i] {
      auto r =
          call(ports[i % 2], "PATCH", "/threads/" + t,
               R"({"metadata": {"k)" + std::to_string(i) + R"(": )" + std::to_string(i) + "}}");
      EXPECT_EQ(r.status, 200) << r.body;
    });
  for (auto& th : clients) th.join();
  for (auto port : ports) {
    auto meta = object_of(call(port, "GET", "/threads/" + t, {}).body)["metadata"].as_object();
    for (int i = 0; i < kPatches; ++i)
      EXPECT_EQ(meta["k" + std::to_string(i)], i)
          << "key k" << i << " of " << json::serialize(meta);
  }
}

}  // namespace weir::serve::runs_suite

namespace weir::serve::runs_suite {

// A run of a C++ graph claimed by a worker that was not given that graph (`weir worker`, or a
// C++ worker without it) fails at once, naming the graph and how to give it.
TEST(CppGraphRuns, AWorkerWithoutTheGraphFailsTheRunNamingIt) {
  const std::string db = weir::testing::fresh_database_uri();
  cluster::RunServiceOptions o;
  o.db = db;
  o.max_runs = 0;  // a client: no worker of its own
  o.graphs.push_back({"greeter", "", greeter_graph()});
  auto svc = cluster::RunService::open(std::move(o));
  ASSERT_TRUE(svc) << svc.error().message;
  cluster::RunRequest rq;
  rq.workflow = "greeter";
  rq.input = json::object{{"topic", "tides"}};
  auto rec = (*svc)->submit(std::move(rq));
  ASSERT_TRUE(rec) << rec.error().message;
  cluster::WorkerOptions wo;
  wo.db = db;
  wo.max_runs = 1;
  wo.once = true;
  cluster::Worker worker(std::move(wo));
  auto ran = worker.run();
  ASSERT_TRUE(ran) << ran.error().message;
  auto got = (*svc)->get(rec->id);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(got->state, cluster::RunState::failed);
  EXPECT_EQ(got->error_code, "invalid_workflow");
  EXPECT_EQ(got->error, "run " + rec->id +
                            " runs the C++ graph 'greeter', which this process does not have (its "
                            "C++ graphs: none): register it in every process that runs it "
                            "(WorkerOptions::graphs)");
}

}  // namespace weir::serve::runs_suite
