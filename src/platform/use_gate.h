// UseGate: lets threads use a resource that another thread is going to free
// while they may still be about to touch it (a local connection's channel,
// mapped from a file the peer shares, unmapped as soon as the connection
// fails although the application still holds the connection and may post on
// it from any thread).
//
// A user enters for one short use and leaves; retire() refuses every later
// entry and waits, up to a deadline, for the users inside to leave, after
// which the resource may go. The users' count and the retired mark share one
// atomic word, so entering is one atomic add that never blocks, and a user
// that comes after the mark sees it and touches nothing. Only retire() and
// the last user to leave after the mark take the lock.
//
//   platform::UseGate gate_;
//   bool post(...) {
//     platform::UseGate::Use use = gate_.enter();
//     if (!use) return false;  // retired: the mapping is gone or going
//     ...touch the mapping...
//   }
//   void unmap() {
//     if (gate_.retire(deadline)) ::munmap(...);  // else a user is still inside
//   }
//
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <utility>

#include "platform/mutex.h"

namespace ferry::platform {

class UseGate {
 public:
  // One use, held until it is destroyed; false (holding nothing) when the
  // gate was retired.
  class [[nodiscard]] Use {
   public:
    Use(Use&& o) noexcept : gate_(std::exchange(o.gate_, nullptr)) {}
    Use& operator=(Use&&) = delete;
    ~Use() {
      if (gate_ != nullptr) gate_->leave();
    }
    explicit operator bool() const { return gate_ != nullptr; }

   private:
    friend class UseGate;
    explicit Use(UseGate* gate) : gate_(gate) {}
    UseGate* gate_;
  };

  UseGate() = default;
  UseGate(const UseGate&) = delete;
  UseGate& operator=(const UseGate&) = delete;

  // Enters unless the gate was retired. Never blocks.
  Use enter() {
    // Every add and the mark are ordered in the one word: an add that comes
    // after the mark reads it.
    if ((users_.fetch_add(1, std::memory_order_acquire) & kRetired) != 0) {
      leave();
      return Use(nullptr);
    }
    return Use(this);
  }

  // Whether retire() was called.
  bool retired() const { return (users_.load(std::memory_order_acquire) & kRetired) != 0; }

  // Refuses every later enter(), then waits until no use is inside or
  // `deadline` passes. True when none is inside: the resource may go (what
  // the users did with it happened before). False past the deadline: a use
  // is still inside, and the resource must stay. Blocks up to `deadline`.
  bool retire(std::chrono::steady_clock::time_point deadline) EXCLUDES(mu_) {
    users_.fetch_or(kRetired, std::memory_order_acq_rel);
    UniqueLock lock(mu_);
    return left_.wait_until(lock.native(), deadline,
                            [this] { return users_.load(std::memory_order_acquire) == kRetired; });
  }

 private:
  static constexpr uint64_t kRetired = uint64_t{1} << 63;

  void leave() EXCLUDES(mu_) {
    // Only the last user out after the mark can have someone waiting for it.
    // The wake-up goes under the lock: retire() checks the count under it.
    if (users_.fetch_sub(1, std::memory_order_acq_rel) - 1 == kRetired) {
      MutexLock lock(mu_);
      left_.notify_all();
    }
  }

  std::atomic<uint64_t> users_{0};  // uses inside, plus kRetired once retired
  Mutex mu_;
  std::condition_variable left_;  // with mu_: the last use left after the mark
};

}  // namespace ferry::platform
