// The runs API of weir serve (/v1/runs, /v1/threads) over real HTTP on loopback, one suite for
// both backends: serve_test instantiates it in-process ("memory"), cluster_scaleout_test on a
// throwaway PostgreSQL ("postgres"). Each file defines runs_db(param): the --db to use.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "http_client.hpp"
#include "weir/runtime/trace.hpp"
#include "weir/serve/service.hpp"

namespace weir::serve::runs_suite {

namespace fs = std::filesystem;
namespace json = boost::json;
using testing_http::call;
using testing_http::frames_of;
using testing_http::Reply;

// "" (in-process) or a fresh PostgreSQL database for this test.
std::string runs_db(const std::string& backend);

inline json::object object_of(const std::string& text) {
  boost::system::error_code ec;
  auto v = json::parse(text, ec);
  EXPECT_FALSE(ec) << text;
  return !ec && v.is_object() ? v.as_object() : json::object{};
}

inline std::string error_of(const Reply& r) {
  auto o = object_of(r.body);
  const auto* e = o.if_contains("error");
  return e && e->is_object() && e->as_object().contains("message")
             ? std::string(e->at("message").as_string())
             : "(no error) " + r.body;
}

class RunsApi : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name)
      if (c == '/') c = '_';  // "Test/0" for a parameterised test
    dir_ = fs::temp_directory_path() / ("weir-runs-api-" + std::to_string(::getpid()) + "-" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // `left` times (at least once): sleep `ms`, then count; three supersteps a loop (nap, tick,
    // check).
    write("slow", R"({"name": "slow",
 "state": {"n": {"reducer": "sum", "default": 0}, "left": {"reducer": "sum", "default": 0},
           "ms": {"default": 20}, "slept": {}},
 "input": ["left", "ms"], "output": ["n"],
 "tools": {"wait": {"builtin": "sleep"}},
 "limits": {"recursion_limit": 1000},
 "nodes": {"nap": {"kind": "tool", "tool": "wait", "args": {"ms": "{{state.ms}}"}, "output": "slept"},
           "tick": {"kind": "set", "values": {"n": 1, "left": -1}},
           "check": {"kind": "router"}},
 "edges": [{"from": "START", "to": "nap"}, {"from": "nap", "to": "tick"},
           {"from": "tick", "to": "check"},
           {"from": "check", "route": {"when": {"channel": "left", "op": "<=", "value": 0},
                                       "then": "END", "else": "nap"}}]})");
    write("review", R"({"name": "review",
 "state": {"draft": {}, "verdict": {}, "published": {"default": false}},
 "nodes": {"write": {"kind": "set", "values": {"draft": "a draft"}},
           "ask": {"kind": "interrupt", "payload": {"draft": "{{state.draft}}"}, "output": "verdict"},
           "publish": {"kind": "set", "values": {"published": true}}},
 "edges": [{"from": "START", "to": "write"}, {"from": "write", "to": "ask"},
           {"from": "ask", "to": "publish"}, {"from": "publish", "to": "END"}]})");
  }
  void TearDown() override {
    svc_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / (name + ".json")) << text;
  }

  // Starts weir serve with the runs API on a free port.
  void start(std::size_t max_runs = 8, std::size_t max_queued = 256) {
    ServeConfig c;
    c.port = 0;
    c.workflows = dir_;
    c.runs_db = db_ = runs_db(GetParam());
    c.max_runs = max_runs;
    c.max_queued_runs = max_queued;
    c.webhook_hosts = webhook_hosts_;
    c.graphs = graphs_;
    auto s = Service::start(std::move(c));
    ASSERT_TRUE(s) << s.error().message;
    svc_ = std::move(*s);
    // Ready before the first request: a path no runs route takes goes to the model routes,
    // which say "still loading" (503) until the loader has finished, even with no model.
    auto ready = svc_->wait_ready();
    ASSERT_TRUE(ready) << ready.error().message;
    port_ = svc_->port();
  }

  std::vector<std::string> webhook_hosts_;  // ServeConfig::webhook_hosts of start()
  std::vector<cluster::CppGraph> graphs_;   // ServeConfig::graphs of start()

  // Another server on the same folder and database, ready (null, with the test failed, when it
  // does not start): on PostgreSQL every server shares the runs and the thread list.
  std::unique_ptr<Service> another_server() {
    ServeConfig c;
    c.port = 0;
    c.workflows = dir_;
    c.runs_db = db_;
    auto s = Service::start(std::move(c));
    if (!s) {
      ADD_FAILURE() << s.error().message;
      return nullptr;
    }
    if (auto ready = (*s)->wait_ready(); !ready) {
      ADD_FAILURE() << ready.error().message;
      return nullptr;
    }
    return std::move(*s);
  }

  Reply post(const std::string& path, const std::string& body) {
    return call(port_, "POST", path, body);
  }
  Reply get(const std::string& path, const std::string& extra = {}) {
    return call(port_, "GET", path, {}, extra);
  }

  // POST /v1/runs; the run's id (202 expected).
  std::string submit(const std::string& body) {
    auto r = post("/v1/runs", body);
    EXPECT_EQ(r.status, 202) << r.body;
    auto o = object_of(r.body);
    EXPECT_EQ(r.header("location"), "/v1/runs/" + std::string(o["id"].as_string()));
    return o.contains("id") ? std::string(o["id"].as_string()) : "";
  }

  // Polls `done` every 20 ms for at most 30 s; whether it became true.
  template <class F>
  bool eventually(F done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < until) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return done();
  }

  // Polls GET /v1/runs/{id} until its state is one of `states` (at most 30 s).
  json::object wait_for(const std::string& id, std::set<std::string> states) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    json::object o;
    while (std::chrono::steady_clock::now() < until) {
      auto r = get("/v1/runs/" + id);
      EXPECT_EQ(r.status, 200) << r.body;
      o = object_of(r.body);
      if (o.contains("state") && states.count(std::string(o["state"].as_string()))) return o;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "run " << id << " did not reach the expected state: " << json::serialize(o);
    return o;
  }

  fs::path dir_;
  std::string db_;  // the server's --db ("" in-process)
  std::unique_ptr<Service> svc_;
  std::uint16_t port_ = 0;
};

TEST_P(RunsApi, ARunsStepsStreamThenItsEndAndLastEventIdResumes) {
  start();
  auto wf = get("/v1/workflows");
  EXPECT_EQ(wf.status, 200);
  EXPECT_EQ(json::serialize(object_of(wf.body)["data"]), R"(["review","slow"])");

  const std::string id = submit(R"({"workflow": "slow", "input": {"left": 3, "ms": 10}})");
  auto ev = get("/v1/runs/" + id + "/events");  // streams until the run ends
  ASSERT_EQ(ev.status, 200) << ev.body;
  EXPECT_EQ(ev.header("content-type"), "text/event-stream");
  auto frames = frames_of(ev.body);
  ASSERT_GE(frames.size(), 11u) << ev.body;  // the input, 3 x (nap, tick, check), then end
  std::set<std::string> ids;
  for (std::size_t i = 0; i + 1 < frames.size(); ++i) {
    EXPECT_EQ(frames[i].event, "step");
    EXPECT_TRUE(ids.insert(frames[i].id).second) << "event id " << frames[i].id << " repeats";
    EXPECT_EQ(object_of(frames[i].data)["run_id"], json::value(id));
  }
  EXPECT_EQ(object_of(frames.front().data)["writes"].at("left"), json::value(3));
  EXPECT_EQ(object_of(frames[frames.size() - 2].data)["status"], json::value("done"));
  const auto& end = frames.back();
  EXPECT_EQ(end.event, "end");
  EXPECT_EQ(end.id, "end");
  auto run = object_of(end.data);
  EXPECT_EQ(run["state"], json::value("succeeded"));
  EXPECT_EQ(json::serialize(run["result"]), R"({"n":3})");

  auto got = object_of(get("/v1/runs/" + id).body);
  EXPECT_EQ(got["state"], json::value("succeeded"));
  EXPECT_EQ(got["workflow"], json::value("slow"));
  EXPECT_EQ(got["thread_id"], json::value(id));

  // Reconnecting after the third event gives the rest, the same events, once.
  auto again = get("/v1/runs/" + id + "/events", "Last-Event-ID: " + frames[2].id + "\r\n");
  auto rest = frames_of(again.body);
  ASSERT_EQ(rest.size(), frames.size() - 3) << again.body;
  for (std::size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i].id, frames[i + 3].id);
  // After the end there is nothing more: 204 stops an EventSource from reconnecting.
  EXPECT_EQ(get("/v1/runs/" + id + "/events", "Last-Event-ID: end\r\n").status, 204);
  auto bogus = get("/v1/runs/" + id + "/events", "Last-Event-ID: 42\r\n");
  EXPECT_EQ(bogus.status, 400);
  EXPECT_EQ(error_of(bogus), "Last-Event-ID '42' is not an event of run '" + id +
                                 "' (an id is a step's checkpoint id, or end)");

  // The thread's state is the last step's.
  auto st = object_of(get("/v1/threads/" + id + "/state").body);
  EXPECT_EQ(st["status"], json::value("done"));
  EXPECT_EQ(st["values"].at("n"), json::value(3));
  EXPECT_EQ(st["checkpoint_id"], json::value(frames[frames.size() - 2].id));
}

// A run queued with a W3C traceparent keeps it in its record (every attempt's spans continue
// it, on any worker); one queued without gets a trace of its own; a malformed one is ignored.
TEST_P(RunsApi, ARunKeepsTheTraceItsRequestCarried) {
  start();
  const std::string caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  auto r = call(port_, "POST", "/v1/runs", R"({"workflow": "slow", "input": {"left": 1}})",
                "traceparent: " + caller + "\r\n");
  ASSERT_EQ(r.status, 202) << r.body;
  auto o = object_of(r.body);
  EXPECT_EQ(o["traceparent"], json::value(caller)) << r.body;
  auto done = wait_for(std::string(o["id"].as_string()), {"succeeded", "failed"});
  EXPECT_EQ(done["state"], json::value("succeeded")) << json::serialize(done);
  EXPECT_EQ(done["traceparent"], json::value(caller));

  const std::string own = submit(R"({"workflow": "slow", "input": {"left": 1}})");
  auto o2 = object_of(get("/v1/runs/" + own).body);
  ASSERT_TRUE(o2["traceparent"].is_string()) << json::serialize(o2);
  const std::string tp(o2["traceparent"].as_string());
  EXPECT_TRUE(trace::parse_traceparent(tp).has_value()) << tp;
  EXPECT_EQ(tp.find("4bf92f3577b34da6a3ce929d0e0e4736"), std::string::npos) << tp;

  r = call(port_, "POST", "/v1/runs", R"({"workflow": "slow", "input": {"left": 1}})",
           "traceparent: not-a-traceparent\r\n");
  ASSERT_EQ(r.status, 202) << r.body;
  auto o3 = object_of(r.body);
  ASSERT_TRUE(o3["traceparent"].is_string()) << r.body;
  EXPECT_TRUE(trace::parse_traceparent(o3["traceparent"].as_string()).has_value()) << r.body;
}

TEST_P(RunsApi, AnInterruptedThreadIsResumedWithAValue) {
  start();
  const std::string thread = "t-" + std::to_string(::getpid()) + "-" + GetParam();
  const std::string first = submit(R"({"workflow": "review", "thread_id": ")" + thread + R"("})");
  auto r1 = wait_for(first, {"interrupted", "failed"});
  ASSERT_EQ(r1["state"], json::value("interrupted")) << json::serialize(r1);
  EXPECT_EQ(r1["result"].at("interrupted"), json::value("ask"));

  auto st = object_of(get("/v1/threads/" + thread + "/state").body);
  EXPECT_EQ(st["status"], json::value("interrupted"));
  EXPECT_EQ(json::serialize(st["interrupt"].at("payload")), R"({"draft":"a draft"})");
  EXPECT_EQ(st["run_id"], json::value(first));

  auto res = post("/v1/threads/" + thread + "/resume", R"({"value": "approve"})");
  ASSERT_EQ(res.status, 202) << res.body;
  auto second = object_of(res.body);
  EXPECT_EQ(second["thread_id"], json::value(thread));
  EXPECT_EQ(second["resume"], json::value("approve"));
  auto r2 = wait_for(std::string(second["id"].as_string()), {"succeeded", "failed"});
  ASSERT_EQ(r2["state"], json::value("succeeded")) << json::serialize(r2);
  EXPECT_EQ(r2["result"].at("verdict"), json::value("approve"));
  EXPECT_EQ(r2["result"].at("published"), json::value(true));

  auto twice = post("/v1/threads/" + thread + "/resume", R"({"value": "approve"})");
  EXPECT_EQ(twice.status, 409);
  EXPECT_EQ(error_of(twice), "thread '" + thread +
                                 "' is not interrupted (its last step is done): only an "
                                 "interrupted thread can be resumed");
  auto none = post("/v1/threads/no-such-thread/resume", R"({"value": 1})");
  EXPECT_EQ(none.status, 404);
  EXPECT_EQ(error_of(none), "no thread 'no-such-thread'");
}

TEST_P(RunsApi, CancelStopsARunningRunBeforeItsNextStep) {
  start();
  const std::string id = submit(R"({"workflow": "slow", "input": {"left": 200, "ms": 50}})");
  wait_for(id, {"running"});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto c = post("/v1/runs/" + id + "/cancel", "");
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(object_of(c.body)["cancel_requested"], json::value(true));
  const auto t0 = std::chrono::steady_clock::now();
  auto r = wait_for(id, {"cancelled", "failed", "succeeded"});
  EXPECT_EQ(r["state"], json::value("cancelled")) << json::serialize(r);
  EXPECT_EQ(r["error"].at("code"), json::value("cancelled"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  // Its stream ends with the cancelled run.
  auto frames = frames_of(get("/v1/runs/" + id + "/events").body);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(object_of(frames.back().data)["state"], json::value("cancelled"));
}

TEST_P(RunsApi, AFullQueueAnswers429AndTheQueuedRunsStillRun) {
  start(/*max_runs=*/1, /*max_queued=*/1);
  // `a` runs for a second: long enough that it still holds the one slot when the third comes.
  const std::string a = submit(R"({"workflow": "slow", "input": {"left": 20, "ms": 50}})");
  wait_for(a, {"running"});
  const std::string b = submit(R"({"workflow": "slow", "input": {"left": 1, "ms": 1}})");
  auto full = post("/v1/runs", R"({"workflow": "slow"})");
  EXPECT_EQ(full.status, 429) << full.body;
  EXPECT_EQ(full.header("retry-after"), "1");
  EXPECT_NE(error_of(full).find("the run queue is full ("), std::string::npos) << error_of(full);
  EXPECT_NE(error_of(full).find("--max-queued-runs=1)"), std::string::npos) << error_of(full);
  EXPECT_EQ(wait_for(a, {"succeeded", "failed"})["state"], json::value("succeeded"));
  EXPECT_EQ(wait_for(b, {"succeeded", "failed"})["state"], json::value("succeeded"));
}

// The network door checks what `weir run` checks: an input channel the workflow's "input" list
// does not name is refused before anything is queued (it was accepted with 202 and applied).
TEST_P(RunsApi, AnInputTheWorkflowDoesNotTakeIsRefused) {
  start();
  auto r = post("/v1/runs", R"({"workflow": "slow", "input": {"left": 1, "n": 5}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(error_of(r),
            "'input' sets 'n', which slow does not take as input (its \"input\": left, ms)");
  EXPECT_EQ(object_of(r.body)["error"].at("param"), json::value("input"));
  auto runs = object_of(get("/v1/runs").body);
  EXPECT_EQ(runs["data"].as_array().size(), 0u) << json::serialize(runs);
}

// A run stopped part-way (here: cancelled) and given again on its thread with the same input
// continues without applying the input a second time: the result is an uninterrupted run's.
TEST_P(RunsApi, TheSameRunGivenAgainOnItsThreadContinuesIt) {
  start();
  const std::string thread = "again-" + std::to_string(::getpid()) + "-" + GetParam();
  const std::string body =
      R"({"workflow": "slow", "input": {"left": 4, "ms": 150}, "thread_id": ")" + thread + R"("})";
  const std::string first = submit(body);
  // Cancelled once it committed a step past its input.
  ASSERT_TRUE(eventually([&] {
    auto st = get("/v1/threads/" + thread + "/state");
    return st.status == 200 && object_of(st.body)["step"].as_int64() >= 2;
  }));
  ASSERT_EQ(post("/v1/runs/" + first + "/cancel", "").status, 200);
  auto c = wait_for(first, {"cancelled", "succeeded", "failed"});
  ASSERT_EQ(c["state"], json::value("cancelled")) << json::serialize(c);
  const std::string second = submit(body);
  auto r = wait_for(second, {"succeeded", "failed"});
  ASSERT_EQ(r["state"], json::value("succeeded")) << json::serialize(r);
  EXPECT_EQ(json::serialize(r["result"]), R"({"n":4})");
}

// One run at a time on a thread, on both backends: a second run given while the first is
// queued or running, and a second answer to one interrupt, are 409 thread_busy (on PostgreSQL
// both were accepted: the same input applied twice, the second answer given to the next pause).
TEST_P(RunsApi, AThreadWithARunInProgressTakesNoOther) {
  start(/*max_runs=*/1);
  const std::string thread = "busy-" + std::to_string(::getpid()) + "-" + GetParam();
  const std::string body =
      R"({"workflow": "slow", "input": {"left": 10, "ms": 100}, "thread_id": ")" + thread + R"("})";
  const std::string first = submit(body);
  auto again = post("/v1/runs", body);
  EXPECT_EQ(again.status, 409) << again.body;
  EXPECT_EQ(error_of(again),
            "thread '" + thread + "' has a run in progress (" + first + "); wait for it to end");
  EXPECT_EQ(object_of(again.body)["error"].at("code"), json::value("thread_busy"));
  auto r = wait_for(first, {"succeeded", "failed"});
  ASSERT_EQ(r["state"], json::value("succeeded")) << json::serialize(r);
  EXPECT_EQ(json::serialize(r["result"]), R"({"n":10})");  // applied once

  // One interrupt, two answers while the slot is taken: the first is queued, the second refused.
  const std::string review = "review-" + std::to_string(::getpid()) + "-" + GetParam();
  const std::string asked = submit(R"({"workflow": "review", "thread_id": ")" + review + R"("})");
  ASSERT_EQ(wait_for(asked, {"interrupted", "failed"})["state"], json::value("interrupted"));
  const std::string blocker = submit(R"({"workflow": "slow", "input": {"left": 10, "ms": 100}})");
  wait_for(blocker, {"running"});
  auto shorten = post("/v1/threads/" + review + "/resume", R"({"value": "please shorten it"})");
  ASSERT_EQ(shorten.status, 202) << shorten.body;
  const std::string answer(object_of(shorten.body)["id"].as_string());
  auto approve = post("/v1/threads/" + review + "/resume", R"({"value": "approve"})");
  EXPECT_EQ(approve.status, 409) << approve.body;
  EXPECT_EQ(error_of(approve),
            "thread '" + review + "' has a run in progress (" + answer + "); wait for it to end");
  auto done = wait_for(answer, {"succeeded", "failed"});
  EXPECT_EQ(done["result"].at("verdict"), json::value("please shorten it"));
}

// A run or thread id in the path that breaks the id rule is a 400 naming the byte, on both
// backends (PostgreSQL answered 409 with its own encoding error; in-process said 404).
TEST_P(RunsApi, MalformedIdsInThePathAre400) {
  start();
  const std::string rule = "; an id is 1 to 1024 bytes of UTF-8 text without control characters";
  for (const auto& [method, path, says] : std::vector<std::array<std::string, 3>>{
           {"GET", "/v1/runs/a%FFb",
            "run id is not valid UTF-8 (byte 0xff at offset 1, after 'a')"},
           {"GET", "/v1/runs/a%00b/events",
            "run id holds a control character (byte 0x00 at offset 1, after 'a')"},
           {"POST", "/v1/runs/a%FFb/cancel",
            "run id is not valid UTF-8 (byte 0xff at offset 1, after 'a')"},
           {"GET", "/v1/threads/%FF/state", "thread id is not valid UTF-8 (byte 0xff at offset 0)"},
           {"POST", "/v1/threads/a%01/resume",
            "thread id holds a control character (byte 0x01 at offset 1, after 'a')"}}) {
    auto r = call(port_, method, path, method == "POST" ? "{}" : "");
    EXPECT_EQ(r.status, 400) << path << ": " << r.body;
    EXPECT_EQ(error_of(r), says + rule) << path;
  }
  auto r = get("/v1/runs?after=a%FFb");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(error_of(r).find("after is not valid UTF-8 (byte 0xff at offset 1, after 'a')"),
            std::string::npos)
      << error_of(r);
}

// GET /v1/runs pages: has_more and last_id, then ?after=<last_id> for the next page.
TEST_P(RunsApi, RunsArePagedWithACursor) {
  start();
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(submit(R"({"workflow": "slow", "input": {"ms": 1}})"));
  std::vector<std::string> seen;
  std::string after;
  for (int page = 0; page < 3; ++page) {
    auto r = get("/v1/runs?limit=2" + (after.empty() ? std::string() : "&after=" + after));
    ASSERT_EQ(r.status, 200) << r.body;
    auto o = object_of(r.body);
    for (const auto& d : o["data"].as_array()) seen.emplace_back(d.at("id").as_string());
    EXPECT_EQ(o["has_more"], json::value(page < 2)) << r.body;
    after = std::string(o["last_id"].as_string());
    EXPECT_EQ(after, seen.back());
  }
  EXPECT_EQ(seen, std::vector<std::string>(ids.rbegin(), ids.rend()));  // newest first, once each
  auto bad = get("/v1/runs?after=r-0000000000000000");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(error_of(bad).rfind("after: no run 'r-0000000000000000'", 0), 0u) << error_of(bad);
}

TEST_P(RunsApi, BadRequestsSayWhatToChange) {
  start();
  auto r = post("/v1/runs", R"({"workflow": "nope"})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(error_of(r), "no workflow 'nope' (this server runs: review, slow)");
  r = post("/v1/runs", R"({"input": {}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r),
            "'workflow' is required: the name of one of this server's workflows (review, slow)");
  r = post("/v1/runs", R"({"workflow": "slow", "input": [1]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r), "'input' must be a JSON object (channel name -> value)");
  r = post("/v1/runs", R"({"workflow": "slow", "inputs": {}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r), "unknown field 'inputs' (fields: workflow, input, thread_id)");
  // Ids are refused, never cut short (a NUL ended the thread id in PostgreSQL text: "a").
  r = post("/v1/runs", R"({"workflow": "slow", "thread_id": "a\u0000b"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r),
            "thread_id holds a control character (byte 0x00 at offset 1, after 'a'); an id is 1 "
            "to 1024 bytes of UTF-8 text without control characters");
  r = post("/v1/runs", R"({"workflow": )");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r), "the request body:1:14: incomplete JSON (at /workflow)");
  r = get("/v1/runs/r-0000000000000000");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(error_of(r).rfind("no run 'r-0000000000000000'", 0), 0u) << error_of(r);
  r = get("/v1/threads/nobody/state");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(error_of(r), "no thread 'nobody'");
  r = get("/v1/runs/r-0000000000000000/cancel");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(error_of(r), "GET is not allowed on /v1/runs/r-0000000000000000/cancel; use POST");
  r = get("/v1/runs?state=queued&limit=0");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r), "limit must be a whole number from 1 to 1000, got '0'");
  r = get("/v1/runs?nolimit=5&limit=1");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(object_of(r.body)["data"].as_array().size(), 0u);  // no run yet
  r = get("/v1/runs//events");  // no run id: not a runs API route at all
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(error_of(r).rfind("no route GET /v1/runs//events (routes: ", 0), 0u) << error_of(r);
  r = get("/v1/threads/x/history");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(error_of(r).rfind("no route GET /v1/threads/x/history (runs API: ", 0), 0u)
      << error_of(r);
}

}  // namespace weir::serve::runs_suite
