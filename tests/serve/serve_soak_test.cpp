// A soak of weir serve (issue 35, "Tests and fuzzing"): for about a minute (WEIR_SOAK_SECONDS
// overrides it), clients interleave streams that run into --request-timeout, streams cancelled
// mid-token, 400s, bursts past the admission queue (429s), good requests streamed and not, and
// whole sessions on one connection (fuzz/http_sequence.hpp: pipelining, Expect: 100-continue,
// slow headers, disconnects at any byte). Then the server must still answer, hold no KV block
// and run nothing. Real HTTP on loopback; meant for ASan (make test-asan) as much as Release.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include "../../fuzz/http_sequence.hpp"
#include "serve_fixture.hpp"

namespace weir::serve {
namespace {

using Clock = std::chrono::steady_clock;

struct Tally {
  std::atomic<int> timeouts{0}, cancels{0}, bad{0}, overloaded{0}, good{0}, sessions{0};
  std::mutex mu;
  std::vector<std::string> unexpected;  // GUARDED_BY(mu)
  void odd(const std::string& what, const Reply& r) {
    std::lock_guard lock(mu);
    if (unexpected.size() < 20)
      unexpected.push_back(what + ": " + std::to_string(r.status) + " " + r.body.substr(0, 200));
  }
};

// A streamed answer ends with [DONE]; its error event, if any, says timeout. A stream that
// waited for a running slot past --request-timeout never started: it is a plain 504.
void streamed(Tally& t, const std::string& what, const Reply& r) {
  if (r.status == 429) {
    ++t.overloaded;
  } else if (r.status == 504 && r.body.find(R"("code":"timeout")") != std::string::npos) {
    ++t.timeouts;
  } else if (r.status != 200 || r.body.find("data: [DONE]") == std::string::npos) {
    t.odd(what, r);
  } else if (r.body.find(R"("code":"timeout")") != std::string::npos) {
    ++t.timeouts;
  } else {
    ++t.good;
  }
}

TEST(ServeSoak, AMinuteOfEverythingLeavesTheServerServingWithNoBlockHeld) {
  const char* env = std::getenv("WEIR_SOAK_SECONDS");
  const double seconds = env ? std::atof(env) : 60.0;
  ServeConfig c;
  c.models.push_back({"soak", slow_model()});  // 2000 tokens take seconds: timeouts are sure
  c.kv_cache_bytes = std::size_t{128} << 20;
  c.ignore_eos = true;
  c.request_timeout = std::chrono::milliseconds(400);
  c.max_num_seqs = 4;
  c.max_queued_requests = 4;
  auto s = start(c);
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  Tally t;
  const std::string long_stream = R"({"prompt": "x", "max_tokens": 2000, "stream": true})";
  std::vector<std::thread> clients;
  clients.emplace_back([&] {  // streams into the timeout
    while (Clock::now() < until)
      streamed(t, "timeout stream", call(s.port, "POST", "/v1/completions", long_stream));
  });
  clients.emplace_back([&] {  // streams cancelled mid-token
    while (Clock::now() < until) {
      Conn conn(s.port);
      if (!conn.request("POST", "/v1/completions", long_stream)) continue;
      Reply head;
      if (!conn.read_head(head)) continue;
      if (head.status == 429) {
        ++t.overloaded;
        continue;
      }
      if (head.status == 200 && !conn.next_chunk().empty()) ++t.cancels;
    }  // closed here, mid-stream
  });
  clients.emplace_back([&] {  // 400s
    const char* bodies[] = {R"({"prompt": )", R"({"prompt": "x", "temperature": 9})",
                            R"({"prompt": [1, 99999]})", R"({"messages": []})"};
    for (int i = 0; Clock::now() < until; ++i) {
      const char* path = i % 4 == 3 ? "/v1/chat/completions" : "/v1/completions";
      auto r = call(s.port, "POST", path, bodies[i % 4]);
      if (r.status == 400)
        ++t.bad;
      else
        t.odd("bad request", r);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  clients.emplace_back([&] {  // bursts past the queue, and good requests
    while (Clock::now() < until) {
      std::vector<std::thread> burst;
      for (int i = 0; i < 12; ++i) {
        burst.emplace_back([&, i] {
          const bool stream = i % 2;
          const std::string body = R"({"prompt": "hi", "max_tokens": 4, "stream": )" +
                                   std::string(stream ? "true" : "false") + "}";
          auto r = call(s.port, "POST", "/v1/completions", body);
          if (stream) {
            streamed(t, "burst stream", r);
          } else if (r.status == 200) {
            ++t.good;
          } else if (r.status == 429) {
            ++t.overloaded;
          } else if (r.status == 504) {
            ++t.timeouts;  // it waited for a permit past its deadline
          } else {
            t.odd("burst", r);
          }
        });
      }
      for (auto& b : burst) b.join();
    }
  });
  clients.emplace_back([&] {  // whole sessions on one connection, from seeded random bytes
    std::mt19937 rng(35);
    while (Clock::now() < until) {
      std::string bytes(1 + rng() % 96, '\0');
      for (auto& b : bytes) b = static_cast<char>(rng());
      fuzzing::SessionPlayer(s.port).play(bytes);
      ++t.sessions;
    }
  });
  for (auto& th : clients) th.join();

  double used = -1, running = -1, waiting = -1;
  for (int i = 0; i < 2000 && (used != 0 || running != 0 || waiting != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    used = metric(s.port, "weir_kv_blocks_used{engine=\"soak\"}");
    running = metric(s.port, "weir_serve_requests_running{model=\"soak\"}");
    waiting = metric(s.port, "weir_serve_requests_waiting{model=\"soak\"}");
  }
  EXPECT_EQ(used, 0);
  EXPECT_EQ(running, 0);
  EXPECT_EQ(waiting, 0);
  EXPECT_EQ(metric(s.port, "weir_engine_running{engine=\"soak\"}"), 0);
  EXPECT_EQ(call(s.port, "GET", "/health").status, 200);
  auto after = call(s.port, "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
  EXPECT_EQ(after.status, 200) << after.body;
  EXPECT_GT(t.timeouts, 0);
  EXPECT_GT(t.cancels, 0);
  EXPECT_GT(t.bad, 0);
  EXPECT_GT(t.overloaded, 0);
  EXPECT_GT(t.good, 0);
  EXPECT_GT(t.sessions, 0);
  std::lock_guard lock(t.mu);
  EXPECT_TRUE(t.unexpected.empty())
      << t.unexpected.size() << " unexpected answers, first: " << t.unexpected.front();
  std::printf("soak: %d timeouts, %d cancels, %d 400s, %d 429s, %d good, %d sessions\n",
              t.timeouts.load(), t.cancels.load(), t.bad.load(), t.overloaded.load(), t.good.load(),
              t.sessions.load());
}

}  // namespace
}  // namespace weir::serve
