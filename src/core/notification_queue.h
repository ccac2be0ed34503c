// NotificationQueue: the notifications a connection delivered to the
// application, in order, and the waits on them. Shared by every transport.
//
// A peer decides what arrives here and the application when it is taken
// out, so every byte held (queued, or waiting for an earlier number) counts
// against a ByteBudget: the connection's, shared with what else it holds on
// its peer's behalf, or the queue's own of kMaxHeldBytes.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/notification_signal.h"
#include "ferry/status.h"
#include "ferry/transfer.h"
#include "platform/mutex.h"

namespace ferry::core {

// Bytes held on a peer's behalf, against one limit. Thread-safe (lock-free).
class ByteBudget {
 public:
  // Within `parent` too when given (a connection's budget within the
  // engine's): what is taken here is taken there.
  explicit ByteBudget(size_t limit, std::shared_ptr<ByteBudget> parent = nullptr)
      : limit_(limit), parent_(std::move(parent)) {}

  // Takes `n` bytes; false, taking nothing, if that would pass the limit
  // (or the parent's).
  bool take(size_t n) {
    size_t held = held_.load(std::memory_order_relaxed);
    do {
      if (n > limit_ || held > limit_ - n) {
        parent_refused_.store(false, std::memory_order_relaxed);
        return false;
      }
    } while (!held_.compare_exchange_weak(held, held + n, std::memory_order_relaxed));
    if (parent_ && !parent_->take(n)) {
      held_.fetch_sub(n, std::memory_order_relaxed);
      parent_refused_.store(true, std::memory_order_relaxed);
      return false;
    }
    size_t peak = peak_.load(std::memory_order_relaxed);
    while (held + n > peak && !peak_.compare_exchange_weak(peak, held + n, std::memory_order_relaxed)) {
    }
    return true;
  }
  // Gives back `n` bytes taken before.
  void give(size_t n) {
    held_.fetch_sub(n, std::memory_order_relaxed);
    if (parent_) parent_->give(n);
  }
  // Whether the last refused take was refused by the parent.
  bool parent_refused() const { return parent_refused_.load(std::memory_order_relaxed); }

  size_t held() const { return held_.load(std::memory_order_relaxed); }
  // The most ever held at once.
  size_t peak() const { return peak_.load(std::memory_order_relaxed); }
  size_t limit() const { return limit_; }

 private:
  const size_t limit_;
  const std::shared_ptr<ByteBudget> parent_;
  std::atomic<size_t> held_{0};
  std::atomic<size_t> peak_{0};
  std::atomic<bool> parent_refused_{false};
};

class NotificationQueue {
 public:
  enum class Wait { kNote, kStopped, kDeadline };

  // Counts what it holds against `budget` (not owned; must outlive the
  // queue), or against a budget of its own of kMaxHeldBytes when null; tells
  // `signal` (the engine's, if given; must outlive the queue) of each note.
  explicit NotificationQueue(ByteBudget* budget = nullptr, NotificationSignal* signal = nullptr);

  // What the application takes out: a note, or with `delivered` false the
  // tag of a write that failed or was cancelled (Connection::wait_note).
  struct Entry {
    std::string text;
    bool delivered = true;
  };

  // Queues notifications numbered by their sender (from 1) in number order:
  // one that arrives early waits for those before it, and `skip` gives a
  // number up (the write that carried it failed): with a `note` (the
  // write's tag) it is queued as not delivered, without one nothing is; a
  // skip never replaces a note that arrived, a second one is ignored. 0: not numbered, queued at
  // once. `accepted`, if given, runs once the note is taken and before any
  // waiter can see it (a confirmation to the sender must not trail the
  // application's reaction to the note). Errors, nothing queued:
  //   kDataLoss          the note is longer than Connection::kMaxNotification:
  //                      no sender may send it;
  //   kResourceExhausted the budget would be passed (each note counts
  //                      kNoteOverhead bytes on top of its text);
  //   kCancelled         refuse_new() was called.
  Status push_numbered(uint64_t seq, bool skip, std::string note, const std::function<void()>& accepted = {});
  // From now on push_numbered queues nothing (the connection failed: nothing
  // more is taken from its peer); what is queued stays for the application.
  void refuse_new();
  static constexpr size_t kMaxHeldBytes = size_t{256} << 20;
  static constexpr size_t kNoteOverhead = 64;

  // kInvalidArgument when `note` is longer than Connection::kMaxNotification;
  // `op` names the operation ("notify", "write") in the message. What every
  // transport checks before it sends a notification.
  static Status check_size(std::string_view note, const char* op);

  // Wakes every waiter; call after setting the `stopped` flag they watch.
  void wake();
  // Runs `listener` (on the thread that queues, after the note is queued;
  // it must not block) for every note queued from now on and on every
  // wake(); replaces the previous one. Empty: none.
  void set_listener(std::function<void()> listener);
  // Blocks until an entry is queued (kNote, moved into `out`), `stopped` is
  // set with nothing queued (kStopped), or `deadline` passes (kDeadline).
  // With `delivered_only`, entries not delivered are dropped on the way.
  Wait wait(Deadline deadline, const std::atomic<bool>& stopped, Entry& out, bool delivered_only);
  // The next entry, if one is queued (with `delivered_only`, the next
  // delivered one, dropping the others before it). Never blocks.
  std::optional<Entry> poll(bool delivered_only);

 private:
  void push_locked(Entry entry) REQUIRES(order_mu_) EXCLUDES(mu_);
  Entry pop_locked() REQUIRES(mu_);  // notes_ is not empty
  // Drops entries not delivered from the front of notes_.
  void drop_undelivered_locked() REQUIRES(mu_);

  ByteBudget own_{kMaxHeldBytes};
  ByteBudget* const budget_;
  NotificationSignal* const signal_;

  platform::Mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> notes_ GUARDED_BY(mu_);
  std::function<void()> listener_ GUARDED_BY(mu_);

  platform::Mutex order_mu_ ACQUIRED_BEFORE(mu_);
  uint64_t next_due_ GUARDED_BY(order_mu_) = 1;
  bool refusing_ GUARDED_BY(order_mu_) = false;
  // Arrived early; nullopt: a number given up with no tag.
  std::map<uint64_t, std::optional<Entry>> held_ GUARDED_BY(order_mu_);
};

}  // namespace ferry::core
