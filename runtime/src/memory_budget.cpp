#include "weir/runtime/memory_budget.hpp"

#include <cstdio>
#include <new>

#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/memory_resource.hpp>

#include "wait_queue.hpp"

namespace weir {

namespace asio = boost::asio;
using detail::WaitQueue;

namespace {

constexpr const char* kCategoryNames[kBudgetCategoryCount] = {"run_state", "artifacts", "history",
                                                              "kv_cache", "activations"};

}  // namespace

std::string format_bytes(std::size_t n) {
  if (n == kUnlimited) return "unlimited";
  char buf[32];
  if (n >= (std::size_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(n) / (1u << 30));
  } else if (n >= (1u << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(n) / (1u << 20));
  } else if (n >= (1u << 10)) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(n) / (1u << 10));
  } else {
    std::snprintf(buf, sizeof buf, "%zu B", n);
  }
  return buf;
}

namespace {

int idx(BudgetCategory c) {
  return static_cast<int>(c);
}

}  // namespace

const char* budget_category_name(BudgetCategory c) noexcept {
  int i = idx(c);
  return i >= 0 && i < kBudgetCategoryCount ? kCategoryNames[i] : "unknown";
}

struct MemoryBudget::Waiters : WaitQueue {};

MemoryBudget::MemoryBudget(BudgetLimits limits)
    : limits_(limits), waiters_(std::make_unique<Waiters>()) {}

MemoryBudget::~MemoryBudget() {
  assert(used_total_ == 0 && "a Reservation or AccountingResource outlived its MemoryBudget");
  assert(waiters_->empty_locked());
}

// --- Reservation ----------------------------------------------------------------------------

MemoryBudget::Reservation::Reservation(Reservation&& o) noexcept
    : budget_(std::exchange(o.budget_, nullptr)),
      category_(o.category_),
      bytes_(std::exchange(o.bytes_, 0)) {}

MemoryBudget::Reservation& MemoryBudget::Reservation::operator=(Reservation&& o) noexcept {
  if (this != &o) {
    release();
    budget_ = std::exchange(o.budget_, nullptr);
    category_ = o.category_;
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void MemoryBudget::Reservation::release() noexcept {
  if (auto* b = std::exchange(budget_, nullptr)) b->credit(category_, std::exchange(bytes_, 0));
}

Status MemoryBudget::Reservation::resize(std::size_t new_bytes) {
  assert(budget_ != nullptr);
  if (new_bytes > bytes_) {
    if (!budget_->charge(category_, new_bytes - bytes_)) {
      return Error(Errc::memory_budget_exceeded,
                   budget_->exceeded_message(category_, new_bytes - bytes_));
    }
  } else if (new_bytes < bytes_) {
    budget_->credit(category_, bytes_ - new_bytes);
  }
  bytes_ = new_bytes;
  return {};
}

// --- accounting -------------------------------------------------------------------------------

bool MemoryBudget::fits_locked(BudgetCategory c, std::size_t bytes) const noexcept {
  std::size_t lim = limits_.category[idx(c)];
  return bytes <= lim - used_[idx(c)] && bytes <= limits_.total - used_total_;
}

void MemoryBudget::add_locked(BudgetCategory c, std::size_t bytes) noexcept {
  used_[idx(c)] += bytes;
  used_total_ += bytes;
  if (used_[idx(c)] > peak_[idx(c)]) peak_[idx(c)] = used_[idx(c)];
  if (used_total_ > peak_total_) peak_total_ = used_total_;
}

bool MemoryBudget::charge(BudgetCategory c, std::size_t bytes) noexcept {
  std::lock_guard lock(mu_);
  if (!fits_locked(c, bytes)) return false;
  add_locked(c, bytes);
  return true;
}

void MemoryBudget::credit(BudgetCategory c, std::size_t bytes) noexcept {
  if (bytes == 0) return;
  std::lock_guard lock(mu_);
  assert(used_[idx(c)] >= bytes && used_total_ >= bytes);
  used_[idx(c)] -= bytes;
  used_total_ -= bytes;
  wake_locked();
}

// Serves waiters in arrival order within each category: once a category's oldest waiter does
// not fit, later waiters of that category wait behind it; other categories are still served.
void MemoryBudget::wake_locked() {
  auto& q = waiters_->waiters_locked();
  bool blocked[kBudgetCategoryCount] = {};
  for (auto it = q.begin(); it != q.end();) {
    auto w = *it++;  // grant_locked() erases w from the list
    auto c = static_cast<BudgetCategory>(w->tag);
    if (blocked[w->tag]) continue;
    if (!fits_locked(c, w->amount)) {
      blocked[w->tag] = true;
      continue;
    }
    add_locked(c, w->amount);
    if (!waiters_->grant_locked(w)) {
      // It timed out or was cancelled just now: take the bytes back.
      used_[w->tag] -= w->amount;
      used_total_ -= w->amount;
    }
  }
}

std::string MemoryBudget::exceeded_message(BudgetCategory c, std::size_t bytes) const {
  // REQUIRES: mu_ not held.
  std::lock_guard lock(mu_);
  const char* name = budget_category_name(c);
  std::size_t lim = limits_.category[idx(c)];
  if (bytes > lim - used_[idx(c)]) {
    return std::string(name) + " needs " + format_bytes(bytes) + " more but " +
           format_bytes(used_[idx(c)]) + " of its " + format_bytes(lim) +
           " limit is in use; raise limits." + name + " or lower the load";
  }
  return std::string(name) + " needs " + format_bytes(bytes) + " more but " +
         format_bytes(used_total_) + " of the " + format_bytes(limits_.total) +
         " total budget is in use; raise limits.memory_total or lower the load";
}

Result<MemoryBudget::Reservation> MemoryBudget::try_reserve(BudgetCategory c, std::size_t bytes) {
  if (charge(c, bytes)) return Reservation(this, c, bytes);
  return Error(Errc::memory_budget_exceeded, exceeded_message(c, bytes));
}

asio::awaitable<Result<MemoryBudget::Reservation>> MemoryBudget::async_reserve(
    BudgetCategory c, std::size_t bytes, std::chrono::milliseconds timeout) {
  WaitQueue::WaiterPtr w;
  {
    std::lock_guard lock(mu_);
    std::size_t lim = std::min(limits_.category[idx(c)], limits_.total);
    if (bytes > lim) {
      co_return Error(Errc::memory_budget_exceeded,
                      std::string(budget_category_name(c)) + " request of " + format_bytes(bytes) +
                          " can never fit: its limit is " + format_bytes(lim) + "; raise limits." +
                          budget_category_name(c) + " or send smaller requests");
    }
    bool queued_ahead = false;
    for (auto& other : waiters_->waiters_locked()) queued_ahead |= other->tag == idx(c);
    if (!queued_ahead && fits_locked(c, bytes)) {
      add_locked(c, bytes);
      co_return Reservation(this, c, bytes);
    }
    w = waiters_->push_locked(co_await asio::this_coro::executor, bytes, idx(c));
  }
  // Awaited into a local: GCC 12 corrupts the frame of a co_await inside a switch condition.
  const auto outcome = co_await waiters_->wait(mu_, w, timeout);
  switch (outcome) {
    case WaitQueue::Outcome::granted:
      co_return Reservation(this, c, bytes);
    case WaitQueue::Outcome::granted_cancelled:
      credit(c, bytes);
      break;
    case WaitQueue::Outcome::timed_out:
      co_return Error(Errc::deadline_exceeded,
                      std::string("waited ") + std::to_string(timeout.count()) + " ms for " +
                          format_bytes(bytes) + " of " + budget_category_name(c) +
                          " memory; the budget stayed full. " + exceeded_message(c, bytes));
    case WaitQueue::Outcome::cancelled:
      break;
  }
  co_return Error(Errc::cancelled, std::string("the wait for ") + format_bytes(bytes) + " of " +
                                       budget_category_name(c) + " memory was cancelled");
}

std::size_t MemoryBudget::used(BudgetCategory c) const noexcept {
  std::lock_guard lock(mu_);
  return used_[idx(c)];
}
std::size_t MemoryBudget::peak(BudgetCategory c) const noexcept {
  std::lock_guard lock(mu_);
  return peak_[idx(c)];
}
std::size_t MemoryBudget::limit(BudgetCategory c) const noexcept {
  return limits_.category[idx(c)];
}
std::size_t MemoryBudget::used_total() const noexcept {
  std::lock_guard lock(mu_);
  return used_total_;
}
std::size_t MemoryBudget::peak_total() const noexcept {
  std::lock_guard lock(mu_);
  return peak_total_;
}
std::size_t MemoryBudget::headroom(BudgetCategory c) const noexcept {
  std::lock_guard lock(mu_);
  // An unlimited limit stays unlimited (kUnlimited - used would read as a finite number).
  auto left = [](std::size_t limit, std::size_t used) {
    return limit == kUnlimited ? kUnlimited : limit - used;
  };
  return std::min(left(limits_.category[idx(c)], used_[idx(c)]), left(limits_.total, used_total_));
}
std::size_t MemoryBudget::waiting() const noexcept {
  std::lock_guard lock(mu_);
  return waiters_->size_locked();
}
void MemoryBudget::reset_peaks() noexcept {
  std::lock_guard lock(mu_);
  peak_ = used_;
  peak_total_ = used_total_;
}

// --- AccountingResource -------------------------------------------------------------------

AccountingResource::AccountingResource(MemoryBudget* budget, BudgetCategory category,
                                       std::size_t local_limit, const char* what)
    : AccountingResource(
          budget, category, local_limit,
          [](const void* w) { return std::string(static_cast<const char*>(w)); }, what) {}

AccountingResource::AccountingResource(MemoryBudget* budget, BudgetCategory category,
                                       std::size_t local_limit, Describe describe,
                                       const void* owner)
    : budget_(budget),
      category_(category),
      local_limit_(local_limit),
      describe_(describe),
      owner_(owner) {
  assert(describe_);
}

AccountingResource::~AccountingResource() {
  assert(bytes_ == 0 && "memory allocated from an AccountingResource outlived it");
  if (budget_ && bytes_) budget_->credit(category_, bytes_);
}

void* AccountingResource::do_allocate(std::size_t n, std::size_t align) {
  if (n > local_limit_ - bytes_) {
    throw Exception(Errc::memory_budget_exceeded,
                    describe_(owner_) + " would grow to " + format_bytes(bytes_ + n) +
                        ", over its limit of " + format_bytes(local_limit_) +
                        "; raise the per-run state limit (limits.max_state_bytes) or move large "
                        "values to artifacts (limits.inline_limit)");
  }
  if (budget_ && !budget_->charge(category_, n)) {
    throw Exception(Errc::memory_budget_exceeded,
                    describe_(owner_) + ": " + budget_->exceeded_message(category_, n));
  }
  void* p = ::operator new(n, std::align_val_t(align));
  bytes_ += n;
  if (bytes_ > peak_) peak_ = bytes_;
  return p;
}

void AccountingResource::do_deallocate(void* p, std::size_t n, std::size_t align) {
  ::operator delete(p, n, std::align_val_t(align));
  bytes_ -= n;
  if (budget_) budget_->credit(category_, n);
}

}  // namespace weir
