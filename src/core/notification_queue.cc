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

Status NotificationQueue::push_numbered(uint64_t seq, bool skip, std::string note) {
  if (seq == 0) {
    if (!skip) push(std::move(note));
    return Status();
  }
  std::lock_guard lock(order_mu_);
  if (seq < next_due_) return Status();  // already delivered or skipped
  if (seq != next_due_ && held_bytes_ + note.size() + 64 > kMaxHeldBytes) {
    return Status(Code::kDataLoss, "more than " + std::to_string(kMaxHeldBytes >> 20) +
                                       " MiB of notifications wait for number " + std::to_string(next_due_));
  }
  auto held = held_.find(seq);
  if (held != held_.end()) {
    if (skip) return Status();
    held_bytes_ -= 64 + (held->second ? held->second->size() : 0);
  }
  held_bytes_ += 64 + note.size();
  held_[seq] = skip ? std::nullopt : std::optional<std::string>(std::move(note));
  for (auto it = held_.begin(); it != held_.end() && it->first == next_due_;) {
    held_bytes_ -= 64 + (it->second ? it->second->size() : 0);
    if (it->second) push(std::move(*it->second));
    it = held_.erase(it);
    ++next_due_;
  }
  return Status();
}

void NotificationQueue::wake() {
  // Taking the lock orders the caller's `stopped` store before a waiter's
  // check of it, so no waiter sleeps through this wake-up.
  { std::lock_guard lock(mu_); }
  cv_.notify_all();
}

NotificationQueue::Wait NotificationQueue::wait(Deadline deadline, const std::atomic<bool>& stopped, std::string& out) {
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
