// DeadlineMutex: a mutex whose lock gives up at a deadline, made of a plain
// mutex and a condition variable. std::timed_mutex would do, but its
// clock-based lock is invisible to ThreadSanitizer, which then reports every
// unlock of it as an error and misses the races behind it.
//
// Annotated as a lock (platform/mutex.h): members it guards say
// GUARDED_BY(mu), and a holder takes it as
//   if (!mu.try_lock_until(deadline)) return ...;  ...;  mu.unlock();
#pragma once

#include <chrono>
#include <condition_variable>

#include "platform/mutex.h"

namespace ferry::platform {

class CAPABILITY("mutex") DeadlineMutex {
 public:
  // The analysis sees the lock taken and released by these, not that `held_`
  // is the lock: their bodies are the private functions below, checked.
  void lock() ACQUIRE() NO_THREAD_SAFETY_ANALYSIS { wait_and_take(); }
  bool try_lock() TRY_ACQUIRE(true) NO_THREAD_SAFETY_ANALYSIS { return take_if_free(); }
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline)
      TRY_ACQUIRE(true) NO_THREAD_SAFETY_ANALYSIS {
    return wait_and_take_until(deadline);
  }
  void unlock() RELEASE() NO_THREAD_SAFETY_ANALYSIS { give(); }

 private:
  void wait_and_take() {
    UniqueLock l(mu_);
    while (held_) free_.wait(l.native());
    held_ = true;
  }
  bool take_if_free() {
    MutexLock l(mu_);
    if (held_) return false;
    held_ = true;
    return true;
  }
  template <class Clock, class Duration>
  bool wait_and_take_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    UniqueLock l(mu_);
    if (!free_.wait_until(l.native(), deadline, [&]() REQUIRES(mu_) { return !held_; })) return false;
    held_ = true;
    return true;
  }
  void give() {
    {
      MutexLock l(mu_);
      held_ = false;
    }
    free_.notify_one();
  }

  Mutex mu_;
  std::condition_variable free_;
  bool held_ GUARDED_BY(mu_) = false;
};

}  // namespace ferry::platform
