// NotificationQueue: the notifications a connection delivered to the
// application, in order, and the waits on them. Shared by every transport.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "ferry/status.h"
#include "ferry/transfer.h"

namespace ferry::core {

class NotificationQueue {
 public:
  enum class Wait { kNote, kStopped, kDeadline };

  // Queues `note` and wakes a waiter.
  void push(std::string note);
  // Queues notifications numbered by their sender (from 1) in number order:
  // one that arrives early waits for those before it, and `skip` gives a
  // number up (the write that carried it failed); a skip never replaces a
  // note that arrived, a second one is ignored. 0: not numbered, queued at
  // once. kDataLoss if more than kMaxHeldBytes (64 bytes each on top of the
  // text) would wait for an earlier number: a sender numbering them wrongly.
  Status push_numbered(uint64_t seq, bool skip, std::string note);
  static constexpr size_t kMaxHeldBytes = size_t{256} << 20;
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

  std::mutex order_mu_;                                  // taken before mu_
  uint64_t next_due_ = 1;                                // guarded by order_mu_
  std::map<uint64_t, std::optional<std::string>> held_;  // guarded by order_mu_: arrived early
  size_t held_bytes_ = 0;                                // guarded by order_mu_
};

}  // namespace ferry::core
