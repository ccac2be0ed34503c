// NotificationQueue.
#include "core/notification_queue.h"

#include "ferry/engine.h"

namespace ferry::core {

NotificationQueue::NotificationQueue(ByteBudget* budget, NotificationSignal* signal)
    : budget_(budget != nullptr ? budget : &own_), signal_(signal) {}

Status NotificationQueue::check_size(std::string_view note, const char* op) {
  if (note.size() <= Connection::kMaxNotification) return Status();
  return Status(Code::kInvalidArgument, std::string(op) + ": notification of " + std::to_string(note.size()) +
                                            " bytes exceeds the limit of " +
                                            std::to_string(Connection::kMaxNotification));
}

void NotificationQueue::push_locked(std::string note) {
  std::function<void()> listener;
  {
    platform::MutexLock lock(mu_);
    notes_.push_back(std::move(note));
    listener = listener_;
  }
  cv_.notify_all();
  if (signal_ != nullptr) signal_->notify();
  if (listener) listener();
}

void NotificationQueue::set_listener(std::function<void()> listener) {
  platform::MutexLock lock(mu_);
  listener_ = std::move(listener);
}

std::string NotificationQueue::pop_locked() {
  std::string n = std::move(notes_.front());
  notes_.pop_front();
  budget_->give(kNoteOverhead + n.size());
  return n;
}

Status NotificationQueue::push_numbered(uint64_t seq, bool skip, std::string note,
                                        const std::function<void()>& accepted) {
  if (note.size() > Connection::kMaxNotification) {
    return Status(Code::kDataLoss, "notification of " + std::to_string(note.size()) + " bytes, past the limit of " +
                                       std::to_string(Connection::kMaxNotification) + " that every sender keeps");
  }
  platform::MutexLock lock(order_mu_);
  if (seq != 0 && seq < next_due_) {  // already delivered or skipped
    if (accepted) accepted();
    return Status();
  }
  auto held = seq == 0 ? held_.end() : held_.find(seq);
  if (held != held_.end() && skip) {  // a skip never replaces what arrived, nor a skip
    if (accepted) accepted();
    return Status();
  }
  // A skip of the number due holds nothing; one that waits holds its entry.
  size_t cost = (skip && (seq == 0 || seq == next_due_)) ? 0 : kNoteOverhead + (skip ? 0 : note.size());
  if (!budget_->take(cost)) {
    return Status(Code::kResourceExhausted, "notifications not yet taken by the application (or waiting for number " +
                                                std::to_string(next_due_) + ") would hold more than " +
                                                std::to_string(budget_->limit()) + " bytes (connection_memory_bytes)");
  }
  if (accepted) accepted();
  if (seq == 0) {
    if (!skip) push_locked(std::move(note));
    return Status();
  }
  if (held != held_.end()) {  // a second copy of a number: the latest wins
    budget_->give(kNoteOverhead + (held->second ? held->second->size() : 0));
  }
  held_[seq] = skip ? std::nullopt : std::optional<std::string>(std::move(note));
  for (auto it = held_.begin(); it != held_.end() && it->first == next_due_;) {
    if (it->second) {
      push_locked(std::move(*it->second));  // its bytes stay taken until the application takes it
    } else {
      budget_->give(cost == 0 && it->first == seq ? 0 : kNoteOverhead);
    }
    it = held_.erase(it);
    ++next_due_;
  }
  return Status();
}

void NotificationQueue::wake() {
  // Taking the lock orders the caller's `stopped` store before a waiter's
  // check of it, so no waiter sleeps through this wake-up.
  std::function<void()> listener;
  {
    platform::MutexLock lock(mu_);
    listener = listener_;
  }
  cv_.notify_all();
  if (listener) listener();
}

NotificationQueue::Wait NotificationQueue::wait(Deadline deadline, const std::atomic<bool>& stopped, std::string& out) {
  platform::UniqueLock lock(mu_);
  auto ready = [&]() REQUIRES(mu_) { return !notes_.empty() || stopped.load(std::memory_order_acquire); };
  if (deadline == kNoDeadline) {
    cv_.wait(lock.native(), ready);
  } else if (!cv_.wait_until(lock.native(), deadline, ready)) {
    return Wait::kDeadline;
  }
  if (notes_.empty()) return Wait::kStopped;
  out = pop_locked();
  return Wait::kNote;
}

std::optional<std::string> NotificationQueue::poll() {
  platform::MutexLock lock(mu_);
  if (notes_.empty()) return std::nullopt;
  return pop_locked();
}

}  // namespace ferry::core
