// Message text across processes on PostgreSQL (RunService::watch_text on a queue whose runs
// execute on workers elsewhere). A worker's runs' message text (graph::MessageText: an llm
// node's reply as it is generated) goes out as NOTIFY weir_text, batched: TextPublisher holds
// the pieces a message gets and sends what it holds every kFlushInterval, one notification per
// message (a long one in chunks: a notification holds at most 8000 bytes). A run service's text
// watches hear them through TextListener, which LISTENs on its own connection.
//
// Nothing depends on a notification arriving: a message's text always arrives whole with its
// step (its checkpoint). A piece that does not arrive (the publisher's buffer was full, a
// connection was lost) leaves a gap in offsets, and a reader stops taking that message's pieces
// there (serve/src/langgraph_stream.cpp); its rest goes with its step.
//
// Thread safety: publish() from any thread; each class's thread is its own.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weir/graph/events.hpp"
#include "weir/runtime/error.hpp"

namespace weir::cluster {

inline constexpr const char* kTextChannel = "weir_text";
inline constexpr std::chrono::milliseconds kFlushInterval{50};
// A notification's text bytes at most (its JSON around them and escapes stay under 8000).
inline constexpr std::size_t kTextChunk = 1800;
// The text a publisher holds unsent, at most; a message whose piece does not fit sends no more.
inline constexpr std::size_t kMaxHeldText = std::size_t{4} << 20;

// The notifications of one piece of run `run_id`'s text: JSON {"r": run, "n": node, "s": step,
// "m": message id, "o": offset, "t": text}, the text cut into chunks of at most kTextChunk bytes
// on UTF-8 characters.
std::vector<std::string> text_payloads(std::string_view run_id, const graph::MessageText& t);
// The run id and the piece of a payload. Errors: invalid_argument (not one: says what is wrong).
Result<std::pair<std::string, graph::MessageText>> parse_text_payload(std::string_view payload);

class TextPublisher {
 public:
  // Connects on the first piece, and again after a loss (what it held then is dropped).
  // `log` (may be null) gets a line when a connection fails.
  TextPublisher(std::string db, std::function<void(const std::string&)> log);
  ~TextPublisher();  // sends what it holds (one try), then stops
  TextPublisher(const TextPublisher&) = delete;
  TextPublisher& operator=(const TextPublisher&) = delete;

  // Holds a piece of run `run_id`'s text; quick (a lock and a copy).
  void publish(const std::string& run_id, const graph::MessageText& t);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class TextListener {
 public:
  // `deliver` is called on the listener's thread with each piece heard; it must be quick.
  TextListener(std::string db,
               std::function<void(const std::string& run_id, const graph::MessageText&)> deliver,
               std::function<void(const std::string&)> log);
  ~TextListener();
  TextListener(const TextListener&) = delete;
  TextListener& operator=(const TextListener&) = delete;

  // Starts listening (its thread, its connection, reconnecting with backoff). Idempotent.
  void start();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::cluster
