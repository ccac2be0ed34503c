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

void NotificationQueue::push_locked(Entry entry) {
  std::function<void()> listener;
  {
    platform::MutexLock lock(mu_);
    notes_.push_back(std::move(entry));
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

NotificationQueue::Entry NotificationQueue::pop_locked() {
  Entry e = std::move(notes_.front());
  notes_.pop_front();
  budget_->give(kNoteOverhead + e.text.size());
  return e;
}

void NotificationQueue::drop_undelivered_locked() {
  while (!notes_.empty() && !notes_.front().delivered) (void)pop_locked();
}

Status NotificationQueue::push_numbered(uint64_t seq, bool skip, std::string note,
                                        const std::function<void()>& accepted) {
  if (note.size() > Connection::kMaxNotification) {
    return Status(Code::kDataLoss, "notification of " + std::to_string(note.size()) + " bytes, past the limit of " +
                                       std::to_string(Connection::kMaxNotification) + " that every sender keeps");
  }
  platform::MutexLock lock(order_mu_);
  if (refusing_) return Status(Code::kCancelled, "the connection failed: no notification is taken from its peer");
  if (seq != 0 && seq < next_due_) {  // already delivered or skipped
    if (accepted) accepted();
    return Status();
  }
  auto held = seq == 0 ? held_.end() : held_.find(seq);
  if (held != held_.end() && skip) {  // a skip never replaces what arrived, nor a skip
    if (accepted) accepted();
    return Status();
  }
  // A skip with a tag is queued like a note. One without holds nothing if its
  // number is due, and its entry while it waits.
  const bool queued = !skip || !note.empty();
  size_t cost = queued ? kNoteOverhead + note.size() : (seq == 0 || seq == next_due_) ? 0 : kNoteOverhead;
  if (!budget_->take(cost)) {
    return Status(Code::kResourceExhausted, "notifications not yet taken by the application (or waiting for number " +
                                                std::to_string(next_due_) + ") would hold more than " +
                                                std::to_string(budget_->limit()) + " bytes (connection_memory_bytes)");
  }
  if (accepted) accepted();
  if (seq == 0) {
    if (queued) push_locked(Entry{std::move(note), !skip});
    return Status();
  }
  if (held != held_.end()) {  // a second copy of a number: the latest wins
    budget_->give(kNoteOverhead + (held->second ? held->second->text.size() : 0));
  }
  held_[seq] = queued ? std::optional<Entry>(Entry{std::move(note), !skip}) : std::nullopt;
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

void NotificationQueue::refuse_new() {
  platform::MutexLock lock(order_mu_);
  refusing_ = true;
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

NotificationQueue::Wait NotificationQueue::wait(Deadline deadline, const std::atomic<bool>& stopped, Entry& out,
                                                bool delivered_only) {
  platform::UniqueLock lock(mu_);
  auto ready = [&]() REQUIRES(mu_) {
    if (delivered_only) drop_undelivered_locked();
    return !notes_.empty() || stopped.load(std::memory_order_acquire);
  };
  if (deadline == kNoDeadline) {
    cv_.wait(lock.native(), ready);
  } else if (!cv_.wait_until(lock.native(), deadline, ready)) {
    return Wait::kDeadline;
  }
  if (notes_.empty()) return Wait::kStopped;
  out = pop_locked();
  return Wait::kNote;
}

std::optional<NotificationQueue::Entry> NotificationQueue::poll(bool delivered_only) {
  platform::MutexLock lock(mu_);
  if (delivered_only) drop_undelivered_locked();
  if (notes_.empty()) return std::nullopt;
  return pop_locked();
}

}  // namespace ferry::core
