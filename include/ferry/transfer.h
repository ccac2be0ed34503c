// Transfer: the handle every asynchronous ferry operation returns.
//
// A Transfer is finished when its data is in place on both ends (see the
// completion rules in engine.h) or when it failed. It never finishes silently
// with a partial result: either status() is OK and bytes() tells how many bytes
// moved, or status() says what went wrong.
//
// Example:
//   ferry::Transfer t = conn->send_async(buf, len);
//   ferry::Status s = t.wait(ferry::after(std::chrono::seconds(5)));
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "ferry/status.h"

namespace ferry {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// A deadline that never passes.
inline constexpr Deadline kNoDeadline = Deadline::max();

// Now plus `d`.
inline Deadline after(Clock::duration d) { return Clock::now() + d; }

class TransferState;  // internal

// What a blocking wait does with an operation still running at its deadline
// (Transfer::wait_or_cancel; Connection's blocking calls, engine.h).
enum class PastDeadline {
  // For a receive, write or read. One that has not started moving data is
  // cancelled. One that has is stopped (cancel(): a write, and over TCP a
  // read or receive, whose sender is told) and the wait returns
  // kDeadlineExceeded once none of its bytes lands any more, at most
  // Options::peer_timeout past the deadline (a chunk the peer stalls mid-way
  // is cut off); a receive first gets half of peer_timeout to finish, so a
  // message already landing is returned rather than dropped. One that cannot
  // be stopped (on the local transport the bytes move without the peer's
  // help) runs to its end and the wait returns its own result. So the wait
  // never returns while the engine still uses the caller's memory, and a
  // peer cannot stretch the deadline by more than peer_timeout (a receive:
  // one and a half times that).
  kCancelOrFinish,
  // For a send or a notification, which may wait on the peer application
  // (posting a receive). The wait returns kDeadlineExceeded and the operation
  // goes on: a message once posted is never withdrawn, since the peer may be
  // receiving it (wait() on the handle follows it).
  kLeave,
};

// A shared handle: copies refer to the same operation. Thread-safe.
class Transfer {
 public:
  // An empty handle: test() is true and status() is kInvalidArgument.
  Transfer() = default;
  explicit Transfer(std::shared_ptr<TransferState> state) : state_(std::move(state)) {}

  // Non-blocking: true once the operation has finished, successfully or not.
  bool test() const;

  // Blocks until the operation finishes or `deadline` passes. Returns the final
  // status, or kDeadlineExceeded when the deadline came first (the operation
  // keeps running; wait again or cancel()).
  Status wait(Deadline deadline = kNoDeadline) const;

  // Blocks until the operation finishes or `deadline` passes, then deals with
  // one still running as `rule` says: the one policy of every blocking call.
  // Returns the final status; kDeadlineExceeded when the deadline came first
  // and the operation was cancelled or, under kLeave, left running;
  // kCancelled when `block` stopped the wait; kInvalidArgument for an empty
  // handle.
  //
  // `block(until)` is how to wait (empty: wait(until)); a binding passes one
  // that can be interrupted. It must return true once the operation has
  // finished or `until` has passed (`until` may be kNoDeadline), or false to
  // stop waiting (a Ctrl-C). It runs on the calling thread, at most twice:
  // until the deadline, then until the end. Once stopped, the operation is
  // cancelled under kCancelOrFinish if it can still stop; otherwise it goes
  // on, its memory in use until test() is true.
  //
  // Example:
  //   ferry::Transfer t = conn->recv_async(buf, cap);
  //   ferry::Status s = t.wait_or_cancel(ferry::after(std::chrono::seconds(1)),
  //                                      ferry::PastDeadline::kCancelOrFinish);
  //   // kDeadlineExceeded: no byte of the message lands in buf any more.
  Status wait_or_cancel(Deadline deadline, PastDeadline rule,
                        const std::function<bool(Deadline until)>& block = {}) const;

  // The final status once finished; before that, kDeadlineExceeded with a
  // message saying the transfer is still running.
  Status status() const;

  // Bytes moved. For a receive, the size of the message that arrived.
  // Meaningful once finished with OK.
  size_t bytes() const;

  // Asks to stop the operation. Operations that have not started moving
  // data stop (an unmatched receive, a send not yet accepted by the peer), and
  // so do writes (write, writev, write_blocks) while they move data: cancel
  // then blocks until no byte of the write will land in the peer's memory any
  // more (up to Options::peer_timeout; past it the connection fails), and the
  // peer's application learns the write's notification as not delivered
  // (Connection::wait_note), so both sides may reuse the blocks. Over TCP a
  // receive or read whose data is landing stops too: cancel blocks until no
  // byte of it lands in this side's memory any more (a chunk the peer stalls
  // mid-way is cut off within Options::peer_timeout), later chunks are
  // dropped, and a receive's sender sees its send fail. What landed before
  // is unspecified. A stopped operation finishes with kCancelled and
  // true is returned. Otherwise returns false and the operation runs to its
  // end (or had ended); a write's cancel returns once it ended either way.
  bool cancel() const;

  // Runs `fn(final status)` once the operation finishes: on the ferry thread
  // that finishes it, or at once on this one if it has (an empty handle: at
  // once, with its kInvalidArgument). `fn` must not block: it is meant to
  // wake an event loop. Several may be added; they run in order.
  void on_finish(std::function<void(const Status&)> fn) const;

  // Id of the operation, unique within its connection (0 for an empty handle).
  uint64_t id() const;

  const std::shared_ptr<TransferState>& state() const { return state_; }

 private:
  std::shared_ptr<TransferState> state_;
};

}  // namespace ferry
