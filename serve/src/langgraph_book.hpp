// The LangGraph API's thread list ("the book"): what LangGraph keeps with a thread that weir's
// checkpoints do not (created_at, updated_at, metadata, the runs started on it), kept in a
// graph::Store under one namespace, one item per thread. `weir serve` gives it a memory store of
// its own (bounded by bytes, and by --max-threads: this process is its only writer, so it counts
// them), or with --db a PostgreSQL store in the table weir_langgraph_threads, which every server
// on that database shares (then the database bounds it; --max-threads does not apply).
//
// Thread safety: every method may be called from any thread; calls may block (PostgreSQL):
// call them off an I/O thread. A create, touch or erase is one atomic read-modify-write of the
// thread's item (graph::Store::update): concurrent ones, on this server or on several servers
// sharing the database, each see the others' writes (no run's record, no metadata key is lost).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "weir/graph/store.hpp"
#include "weir/runtime/error.hpp"

namespace weir::serve {

class LangGraphThreads {
 public:
  struct Thread {
    std::string id;
    std::int64_t created_ms = 0, updated_ms = 0;
    boost::json::object metadata;
    std::deque<std::string> runs;  // newest first, at most kRunsKept
  };
  static constexpr std::size_t kRunsKept = 100;
  // A thread's metadata as JSON text, at most (put() refuses more, naming 'metadata').
  static constexpr std::size_t kMaxMetadataBytes = std::size_t{256} << 10;
  // The in-process book's memory store (its max_bytes): beyond it a put is `overloaded`.
  static constexpr std::size_t kMemoryBookBytes = std::size_t{256} << 20;

  // `counted`: the store is this book's alone (memory), so size() is exact and max_threads
  // bounds it; else size() is 0 and the store bounds the book.
  LangGraphThreads(std::shared_ptr<graph::Store> store, bool counted);

  Result<std::optional<Thread>> get(const std::string& id) const;
  // Adds `t` unless its id is taken (`existing` then holds that thread) or, counted, the book
  // holds `max` threads already.
  enum class Put { created, exists, full };
  Result<Put> create(const Thread& t, std::size_t max, Thread& existing);
  // Merges `metadata` into the thread's and records run `run` ("": none) on it; the thread is
  // added when the book did not have it (the caller checked room_for).
  Status touch(const std::string& id, const boost::json::object& metadata, const std::string& run,
               std::int64_t now_ms);
  Status erase(const std::string& id);
  // Whether the book may take one more thread within `max` (always, when not counted).
  bool room_for_one(std::size_t max) const;
  // The ids of the threads whose metadata contains `metadata` and (when given) that are among
  // `ids`, ordered by `sort_by` (thread_id, created_at or updated_at). Reads the whole book (a
  // page of kMaxStorePage at a time, each item's sort key only): its cost follows the number of
  // threads.
  Result<std::vector<std::string>> select(const boost::json::object* metadata,
                                          const std::vector<std::string>* ids,
                                          const std::string& sort_by, bool ascending) const;

 private:
  static Result<boost::json::value> value_of(const Thread& t);
  static Error full_error();
  // store_->update, the memory store's memory_budget_exceeded answered as full_error().
  Status update(const std::string& id, const graph::StoreChange& change);
  std::shared_ptr<graph::Store> store_;
  const bool counted_;
  std::atomic<std::size_t> count_{0};
};

}  // namespace weir::serve
