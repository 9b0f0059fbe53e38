#include "text_notify.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <boost/json.hpp>

#include "weir/pg/connection.hpp"
#include "weir/runtime/text.hpp"

namespace weir::cluster {

namespace json = boost::json;

// --- TextPublisher ----------------------------------------------------------------------------

struct TextPublisher::Impl {
  std::string db;
  std::function<void(const std::string&)> log;

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;                      // GUARDED_BY(mu)
  std::vector<graph::MessageText> held;   // GUARDED_BY(mu): run_id is publish()'s
  std::map<std::string, std::size_t> at;  // GUARDED_BY(mu): message id -> its index in held
  std::size_t held_bytes = 0;             // GUARDED_BY(mu)
  std::set<std::string> dropped;          // GUARDED_BY(mu): messages that send no more
  std::thread thread;                     // started by the first piece

  void publish(const std::string& run_id, const graph::MessageText& t) {
    std::lock_guard lock(mu);
    if (stop || dropped.count(t.message_id)) return;
    if (held_bytes + t.text.size() > kMaxHeldText) {
      if (dropped.size() >= 4096) dropped.clear();  // bounded; readers see the gap anyway
      dropped.insert(t.message_id);
      return;
    }
    held_bytes += t.text.size();
    if (auto it = at.find(t.message_id); it != at.end()) {
      graph::MessageText& h = held[it->second];
      if (h.offset + h.text.size() == t.offset) {  // the next piece: one notification
        h.text += t.text;
        return;
      }
    }
    at[t.message_id] = held.size();
    graph::MessageText& h = held.emplace_back(t);
    h.run_id = run_id;
    if (!thread.joinable()) thread = std::thread([this] { loop(); });
    cv.notify_all();
  }

  void loop() {
    std::optional<pg::Connection> conn;
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !held.empty(); });
      const bool last = stop;
      if (!last) {  // gather a flush interval's pieces into one notification a message
        cv.wait_for(lock, kFlushInterval, [&] { return stop; });
      }
      std::vector<graph::MessageText> batch = std::move(held);
      held.clear();
      at.clear();
      held_bytes = 0;
      lock.unlock();
      send(conn, batch);
      lock.lock();
      if (last || (stop && held.empty())) return;
    }
  }

  void send(std::optional<pg::Connection>& conn, const std::vector<graph::MessageText>& batch) {
    if (batch.empty()) return;
    if (!conn) {
      auto c = pg::Connection::open(db);
      if (!c) {
        say("sending message text: " + c.error().message);
        return drop(batch);
      }
      conn.emplace(std::move(*c));
    }
    for (const auto& t : batch) {
      for (const auto& p : text_payloads(t.run_id, t)) {
        auto r = conn->exec("SELECT pg_notify($1, $2)", pg::Params().text(kTextChannel).text(p),
                            "sending message text");
        if (r) continue;
        // A text PostgreSQL refuses (not UTF-8): this message sends no more; a lost
        // connection: opened again for the next batch.
        std::lock_guard lock(mu);
        dropped.insert(t.message_id);
        if (r.error().is(Errc::unavailable)) {
          conn.reset();
          return;
        }
        break;
      }
    }
  }

  void drop(const std::vector<graph::MessageText>& batch) {
    std::lock_guard lock(mu);
    for (const auto& t : batch) dropped.insert(t.message_id);
  }

  void say(const std::string& line) const {
    if (log) log(line);
  }
};

TextPublisher::TextPublisher(std::string db, std::function<void(const std::string&)> log)
    : impl_(std::make_unique<Impl>()) {
  impl_->db = std::move(db);
  impl_->log = std::move(log);
}

TextPublisher::~TextPublisher() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void TextPublisher::publish(const std::string& run_id, const graph::MessageText& t) {
  impl_->publish(run_id, t);
}

// --- TextListener -----------------------------------------------------------------------------

struct TextListener::Impl {
  std::string db;
  std::function<void(const std::string&, const graph::MessageText&)> deliver;
  std::function<void(const std::string&)> log;
  int wake_fd = -1;
  std::atomic<bool> stop{false};
  std::once_flag started;
  std::thread thread;

  void say(const std::string& line) const {
    if (log) log(line);
  }

  // Waits up to `ms` for stop(); true when stopping.
  bool pause(long long ms) const {
    pollfd p{wake_fd, POLLIN, 0};
    (void)::poll(&p, 1, static_cast<int>(ms));
    return stop.load();
  }

  void loop() {
    auto backoff = std::chrono::milliseconds(250);
    while (!stop) {
      auto c = pg::Connection::open(db);
      std::string failed;
      if (!c) {
        failed = c.error().message;
      } else if (auto r = c->exec(std::string("LISTEN ") + kTextChannel, pg::Params(),
                                  "listening for message text");
                 !r) {
        failed = r.error().message;
      }
      if (!failed.empty()) {
        say(failed + " (message text streams again once it is back; trying in " +
            std::to_string(backoff.count()) + " ms)");
        if (pause(backoff.count())) return;
        backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
        continue;
      }
      backoff = std::chrono::milliseconds(250);
      PGconn* native = c->native();
      while (!stop && PQstatus(native) == CONNECTION_OK) {
        pollfd fds[2] = {{wake_fd, POLLIN, 0}, {PQsocket(native), POLLIN, 0}};
        (void)::poll(fds, 2, 1000);
        if (stop) return;
        if (PQconsumeInput(native) != 1) break;  // lost: connect again
        while (PGnotify* note = PQnotifies(native)) {
          if (auto p = parse_text_payload(note->extra ? note->extra : "")) {
            deliver(p->first, p->second);
          }
          PQfreemem(note);
        }
      }
    }
  }
};

TextListener::TextListener(
    std::string db, std::function<void(const std::string&, const graph::MessageText&)> deliver,
    std::function<void(const std::string&)> log)
    : impl_(std::make_unique<Impl>()) {
  impl_->db = std::move(db);
  impl_->deliver = std::move(deliver);
  impl_->log = std::move(log);
  impl_->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

TextListener::~TextListener() {
  impl_->stop = true;
  const std::uint64_t one = 1;
  if (impl_->wake_fd >= 0) [[maybe_unused]]
    auto n = ::write(impl_->wake_fd, &one, sizeof one);
  if (impl_->thread.joinable()) impl_->thread.join();
  if (impl_->wake_fd >= 0) ::close(impl_->wake_fd);
}

void TextListener::start() {
  std::call_once(impl_->started,
                 [this] { impl_->thread = std::thread([this] { impl_->loop(); }); });
}

}  // namespace weir::cluster
