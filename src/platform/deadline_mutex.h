// DeadlineMutex: a mutex whose lock gives up at a deadline, made of a plain
// mutex and a condition variable. std::timed_mutex would do, but its
// clock-based lock is invisible to ThreadSanitizer, which then reports every
// unlock of it as an error and misses the races behind it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace ferry::platform {

class DeadlineMutex {
 public:
  void lock() {
    std::unique_lock l(mu_);
    free_.wait(l, [&] { return !held_; });
    held_ = true;
  }
  bool try_lock() {
    std::lock_guard l(mu_);
    if (held_) return false;
    held_ = true;
    return true;
  }
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    std::unique_lock l(mu_);
    if (!free_.wait_until(l, deadline, [&] { return !held_; })) return false;
    held_ = true;
    return true;
  }
  void unlock() {
    {
      std::lock_guard l(mu_);
      held_ = false;
    }
    free_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable free_;
  bool held_ = false;  // guarded by mu_
};

}  // namespace ferry::platform
