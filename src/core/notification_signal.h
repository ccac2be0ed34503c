// NotificationSignal: how an engine-wide wait for notifications learns that
// some connection queued one. Each connection's NotificationQueue bumps it;
// Engine::wait_notification sleeps on it between looks at the connections.
//
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>

#include "ferry/transfer.h"
#include "platform/mutex.h"

namespace ferry::core {

class NotificationSignal {
 public:
  // Something was queued (or the engine closes): wakes every waiter, then
  // calls the listener.
  void notify() {
    std::function<void()> listener;
    {
      platform::MutexLock lock(mu_);
      ++seq_;
      listener = listener_;
    }
    cv_.notify_all();
    if (listener) listener();
  }
  // Engine::set_notification_listener.
  void set_listener(std::function<void()> listener) {
    platform::MutexLock lock(mu_);
    listener_ = std::move(listener);
  }
  // The count of notify() calls so far; pass it to wait_past().
  uint64_t seq() {
    platform::MutexLock lock(mu_);
    return seq_;
  }
  // Waits until notify() is called after `seen` was read; false at `deadline`.
  bool wait_past(uint64_t seen, Deadline deadline) {
    platform::UniqueLock lock(mu_);
    auto moved = [&]() REQUIRES(mu_) { return seq_ != seen; };
    if (deadline == kNoDeadline) {
      cv_.wait(lock.native(), moved);
      return true;
    }
    return cv_.wait_until(lock.native(), deadline, moved);
  }

 private:
  platform::Mutex mu_;
  std::condition_variable cv_;
  uint64_t seq_ GUARDED_BY(mu_) = 0;
  std::function<void()> listener_ GUARDED_BY(mu_);
};

}  // namespace ferry::core
