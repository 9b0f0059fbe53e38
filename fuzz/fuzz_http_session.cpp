// Whole client sessions on one connection against weir's http::Server (http_sequence.hpp:
// pipelining, keep-alive, Expect: 100-continue, slow headers, disconnects at every byte), with
// the server's invariants checked after each session: every handler has ended, every resource a
// handler held is back (a streaming handler holds one "block" while it runs, as weir serve's
// requests hold KV blocks), and a new connection's GET /health is answered 200. The real serve
// with its engine plays the same sessions in tests/serve/serve_soak_test.cpp.
//
// The server runs on its own io thread, once per process, on 127.0.0.1 with small limits.
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "http_sequence.hpp"
#include "weir/http/server.hpp"

namespace {

namespace asio = boost::asio;
using weir::http::Exchange;
using weir::http::Response;

int blocks_in_use = 0;                  // io thread
std::multiset<std::string> in_handler;  // io thread: the requests whose handler runs

// The routes of the sessions' requests: /health, small JSON answers, and streams that hold a
// block until they end (their client gone, or 24 events written).
asio::awaitable<void> handle(Exchange& ex) {
  const auto& rq = ex.request();
  struct Running {
    std::multiset<std::string>::iterator at;
    ~Running() { in_handler.erase(at); }
  } running{in_handler.insert(rq.method + " " + rq.target)};
  const bool stream = rq.body.find("\"stream\": true") != std::string::npos;
  if (rq.path == "/health" || !stream) {
    Response r{200, "application/json", {}, R"({"status":"ok"})"};
    (void)co_await ex.async_respond(std::move(r));
    co_return;
  }
  ++blocks_in_use;
  struct Hold {
    ~Hold() { --blocks_in_use; }
  } hold;
  auto st = co_await ex.async_start_stream(200, "text/event-stream");
  asio::steady_timer t(co_await asio::this_coro::executor);
  for (int i = 0; st && i < 24 && !ex.disconnected(); ++i) {
    t.expires_after(std::chrono::microseconds(200));
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    std::string event = "data: {\"i\": " + std::to_string(i) + "}\n\n";
    st = co_await ex.async_write(std::move(event));
  }
  if (st) {
    std::string done = "data: [DONE]\n\n";
    st = co_await ex.async_write(std::move(done));
  }
  if (st) (void)co_await ex.async_finish();
}

struct Fixture {
  asio::io_context io{1};
  std::unique_ptr<weir::http::Server> server;
  std::thread thread;

  Fixture() {
    weir::http::ServerConfig c;
    c.port = 0;
    c.max_connections = 8;
    c.max_body_bytes = 4096;
    c.max_header_bytes = 2048;
    c.idle_timeout = std::chrono::milliseconds(300);
    c.write_timeout = std::chrono::milliseconds(300);
    auto s = weir::http::Server::create(io, c, [](Exchange& ex) { return handle(ex); });
    if (!s) {
      std::fprintf(stderr, "fuzz_http_session: %s\n", s.error().message.c_str());
      std::abort();
    }
    server = std::move(*s);
    server->start();
    thread = std::thread([this] {
      auto guard = asio::make_work_guard(io);
      io.run();
    });
  }

  // Reads the server's counters on its io thread.
  template <class F>
  auto on_io(F f) {
    std::promise<decltype(f())> p;
    asio::post(io, [&] { p.set_value(f()); });
    return p.get_future().get();
  }

  // Waits (up to 5 s) until the server holds no connection, runs no handler and no block is
  // held, all at once (a connection the client closed may still hold pipelined requests that
  // start after an idle moment); then a new connection's /health must answer 200.
  void check_invariants() {
    struct State {
      std::size_t connections, active;
      int blocks;
      std::string running;
    };
    auto state = [this] {
      return on_io([this] {
        State st{server->connections(), server->active_requests(), blocks_in_use, {}};
        for (const auto& r : in_handler) st.running += " [" + r + "]";
        return st;
      });
    };
    auto quiesce = [&](const char* after) {
      State st = state();
      for (int i = 0; i < 5000 && (st.connections || st.active || st.blocks); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        st = state();
      }
      if (st.connections || st.active || st.blocks) {
        std::fprintf(stderr,
                     "fuzz_http_session: 5 s after %s: %zu connections, %zu handlers, %d "
                     "blocks held; running:%s\n",
                     after, st.connections, st.active, st.blocks, st.running.c_str());
        std::abort();
      }
    };
    quiesce("a session");
    for (int attempt = 0;; ++attempt) {  // the session's connections may still be closing
      weir::fuzzing::SessionPlayer probe(server->port());
      const int status = probe.health_status();
      if (status == 200) break;
      if (attempt == 300) {
        std::fprintf(stderr, "fuzz_http_session: GET /health answered %d\n", status);
        std::abort();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // The probe reads the status line and closes: its handler may still be finishing its write.
    // It must end too (and must not run on while the process exits).
    quiesce("the /health probe");
  }

  // At exit the io thread stops before the statics its handlers use are destroyed (the fixture
  // itself lives on: libFuzzer may exit from any thread).
  void stop() {
    io.stop();
    if (thread.joinable()) thread.join();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Fixture* f = [] {  // lives for the process; its io thread stops at exit
    auto* fx = new Fixture();
    std::atexit([] { f->stop(); });
    return fx;
  }();
  if (size > 4096) return 0;
  {
    weir::fuzzing::SessionPlayer player(f->server->port());
    player.play(std::string_view(reinterpret_cast<const char*>(data), size));
  }
  f->check_invariants();
  return 0;
}
