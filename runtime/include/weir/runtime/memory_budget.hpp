// MemoryBudget: one byte budget for the whole process, accounted by category.
//
// Every large consumer of memory in weir (run state, in-memory artifacts, chat histories, the
// KV cache, activation buffers) reserves bytes here before it allocates. A reservation that
// does not fit either fails at once (try_reserve) or waits for headroom until a deadline
// (async_reserve); it never overcommits. Reservations are RAII: destroying one returns its
// bytes and wakes waiters in FIFO order.
//
// Thread safety: all methods may be called from any thread. A Reservation must not be used
// from two threads at once, and must not outlive its MemoryBudget.
//
// Invariants:
//   1. used(c) <= limit(c) for every category c, and used_total() <= total_limit().
//   2. peak(c) >= used(c); peaks only grow (reset_peaks() sets them to the current use).
//   3. Waiters of one category are served in arrival order: a large waiter at the head is not
//      overtaken by later small ones of its category (no starvation). try_reserve() and
//      charge() do not queue: they succeed whenever the bytes fit.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/memory_resource.hpp>

#include "weir/runtime/error.hpp"

namespace weir {

enum class BudgetCategory : int {
  run_state = 0,    // graph state of in-flight runs (via AccountingResource)
  artifacts = 1,    // ArtifactStore's memory tier
  history = 2,      // message windows and archives
  kv_cache = 3,     // the engine's KV block pool
  activations = 4,  // forward-pass scratch buffers
};
inline constexpr int kBudgetCategoryCount = 5;
inline constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();

const char* budget_category_name(BudgetCategory c) noexcept;

// "512 B", "4.0 KiB", "1.5 MiB", "2.0 GiB", "unlimited" (kUnlimited): for messages.
std::string format_bytes(std::size_t n);

struct BudgetLimits {
  std::size_t total = kUnlimited;
  // Indexed by BudgetCategory; kUnlimited means "only the total applies".
  std::array<std::size_t, kBudgetCategoryCount> category{kUnlimited, kUnlimited, kUnlimited,
                                                         kUnlimited, kUnlimited};
};

class MemoryBudget {
 public:
  explicit MemoryBudget(BudgetLimits limits = {});
  ~MemoryBudget();
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Bytes held against a budget; returned on destruction or release().
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& o) noexcept;
    Reservation& operator=(Reservation&& o) noexcept;
    ~Reservation() { release(); }

    std::size_t bytes() const noexcept { return bytes_; }
    BudgetCategory category() const noexcept { return category_; }
    explicit operator bool() const noexcept { return budget_ != nullptr; }
    // Returns the bytes now. Idempotent.
    void release() noexcept;
    // Grows or shrinks in place. Growing fails (and leaves the reservation as it was) when
    // the extra bytes do not fit. REQUIRES: *this holds a reservation.
    Status resize(std::size_t new_bytes);

   private:
    friend class MemoryBudget;
    Reservation(MemoryBudget* b, BudgetCategory c, std::size_t n)
        : budget_(b), category_(c), bytes_(n) {}
    MemoryBudget* budget_ = nullptr;
    BudgetCategory category_ = BudgetCategory::run_state;
    std::size_t bytes_ = 0;
  };

  // Reserves at once or fails with memory_budget_exceeded, naming the category, the request,
  // what is in use, and the limit to raise.
  Result<Reservation> try_reserve(BudgetCategory c, std::size_t bytes);

  // Waits (without holding a thread) until the bytes fit, then reserves them. Fails with
  // memory_budget_exceeded at once when the request can never fit (bigger than a limit),
  // with deadline_exceeded when `timeout` passes, and with cancelled when the awaiting
  // operation is cancelled. On failure nothing is reserved.
  boost::asio::awaitable<Result<Reservation>> async_reserve(BudgetCategory c, std::size_t bytes,
                                                            std::chrono::milliseconds timeout);

  // Low-level accounting for allocators (AccountingResource): charge() is try_reserve without
  // the RAII object; credit() gives bytes back. REQUIRES: credits match earlier charges.
  bool charge(BudgetCategory c, std::size_t bytes) noexcept;
  void credit(BudgetCategory c, std::size_t bytes) noexcept;

  std::size_t used(BudgetCategory c) const noexcept;
  std::size_t peak(BudgetCategory c) const noexcept;
  std::size_t limit(BudgetCategory c) const noexcept;
  std::size_t used_total() const noexcept;
  std::size_t peak_total() const noexcept;
  std::size_t total_limit() const noexcept { return limits_.total; }
  // Bytes that could be reserved in `c` right now; kUnlimited when neither `c` nor the total
  // has a limit.
  std::size_t headroom(BudgetCategory c) const noexcept;
  // Coroutines waiting in async_reserve.
  std::size_t waiting() const noexcept;
  void reset_peaks() noexcept;

  // Why `bytes` more do not fit in `c` right now, and which setting to raise
  // ("run_state needs 2.0 MiB more but 63.0 MiB of its 64.0 MiB limit is in use; ...").
  std::string exceeded_message(BudgetCategory c, std::size_t bytes) const;

 private:
  struct Waiters;
  bool fits_locked(BudgetCategory c, std::size_t bytes) const noexcept;
  void add_locked(BudgetCategory c, std::size_t bytes) noexcept;
  void wake_locked();

  BudgetLimits limits_;
  mutable std::mutex mu_;
  std::array<std::size_t, kBudgetCategoryCount> used_{};  // GUARDED_BY(mu_)
  std::array<std::size_t, kBudgetCategoryCount> peak_{};  // GUARDED_BY(mu_)
  std::size_t used_total_ = 0;                            // GUARDED_BY(mu_)
  std::size_t peak_total_ = 0;                            // GUARDED_BY(mu_)
  std::unique_ptr<Waiters> waiters_;                      // GUARDED_BY(mu_)
};

// A Boost.JSON memory resource that charges every allocation to a MemoryBudget category and
// to its own optional local limit (e.g. one run's state cap). An allocation that does not fit
// throws weir::Exception(memory_budget_exceeded); the graph executor catches it at the run
// boundary and fails that run only. Deallocation credits the bytes back.
//
// Thread safety: like the containers that use it, one resource serves one run (one strand);
// the budget it charges is thread-safe.
class AccountingResource final : public boost::json::memory_resource {
 public:
  // Names the resource's owner in its error messages ("run 42 state"), from `owner`. Called
  // only when a message is made, so that a resource per run keeps no string of its own.
  using Describe = std::string (*)(const void* owner);

  // `budget` may be null (only the local limit applies). `what` names the owner in messages
  // ("--input"). REQUIRES: `what` outlives the resource (a string literal does).
  AccountingResource(MemoryBudget* budget, BudgetCategory category, std::size_t local_limit,
                     const char* what);
  // The owner's name in messages is describe(owner). REQUIRES: describe is not null; owner
  // outlives the resource.
  AccountingResource(MemoryBudget* budget, BudgetCategory category, std::size_t local_limit,
                     Describe describe, const void* owner);
  ~AccountingResource() override;

  std::size_t bytes() const noexcept { return bytes_; }
  std::size_t peak_bytes() const noexcept { return peak_; }
  std::size_t local_limit() const noexcept { return local_limit_; }

 private:
  void* do_allocate(std::size_t n, std::size_t align) override;
  void do_deallocate(void* p, std::size_t n, std::size_t align) override;
  bool do_is_equal(const boost::json::memory_resource& other) const noexcept override {
    return this == &other;
  }

  MemoryBudget* budget_;
  BudgetCategory category_;
  std::size_t local_limit_;
  Describe describe_;
  const void* owner_;
  std::size_t bytes_ = 0;
  std::size_t peak_ = 0;
};

}  // namespace weir
