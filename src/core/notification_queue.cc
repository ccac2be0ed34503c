// NotificationQueue.
#include "core/notification_queue.h"

namespace ferry::core {

void NotificationQueue::push(std::string note) {
  {
    std::lock_guard lock(mu_);
    notes_.push_back(std::move(note));
  }
  cv_.notify_all();
}

void NotificationQueue::wake() {
  // Taking the lock orders the caller's `stopped` store before a waiter's
  // check of it, so no waiter sleeps through this wake-up.
  { std::lock_guard lock(mu_); }
  cv_.notify_all();
}

NotificationQueue::Wait NotificationQueue::wait(Deadline deadline, const std::atomic<bool>& stopped,
                                                std::string& out) {
  std::unique_lock lock(mu_);
  auto ready = [&] { return !notes_.empty() || stopped.load(std::memory_order_acquire); };
  if (deadline == kNoDeadline) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_until(lock, deadline, ready)) {
    return Wait::kDeadline;
  }
  if (notes_.empty()) return Wait::kStopped;
  out = std::move(notes_.front());
  notes_.pop_front();
  return Wait::kNote;
}

std::optional<std::string> NotificationQueue::poll() {
  std::lock_guard lock(mu_);
  if (notes_.empty()) return std::nullopt;
  std::string n = std::move(notes_.front());
  notes_.pop_front();
  return n;
}

}  // namespace ferry::core
