// NotificationQueue: the notifications a connection delivered to the
// application, in order, and the waits on them. Shared by every transport.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "ferry/transfer.h"

namespace ferry::core {

class NotificationQueue {
 public:
  enum class Wait { kNote, kStopped, kDeadline };

  // Queues `note` and wakes a waiter.
  void push(std::string note);
  // Wakes every waiter; call after setting the `stopped` flag they watch.
  void wake();
  // Blocks until a note is queued (kNote, moved into `out`), `stopped` is set
  // with nothing queued (kStopped), or `deadline` passes (kDeadline).
  Wait wait(Deadline deadline, const std::atomic<bool>& stopped, std::string& out);
  // The next note, if one is queued. Never blocks.
  std::optional<std::string> poll();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> notes_;  // guarded by mu_
};

}  // namespace ferry::core
