// TransferState: the shared completion record behind a Transfer handle.
//
// Thread-safe. Written by whichever ferry thread finishes a part of the
// operation (a stream worker, the control reader, the failing connection);
// read by the application through Transfer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/metrics.h"
#include "ferry/status.h"
#include "ferry/transfer.h"
#include "platform/mutex.h"

namespace ferry {

class TransferState {
 public:
  // How long wait() polls before it sleeps unless the transport says
  // otherwise (see wait()).
  static constexpr std::chrono::microseconds kSpinBeforeSleep{50};

  // An operation made of `parts` pieces (a vector op has one per item);
  // wait() polls for `spin` before it sleeps.
  TransferState(uint64_t id, int parts, std::chrono::microseconds spin = kSpinBeforeSleep)
      : id_(id), spin_(spin), parts_left_(parts) {}

  uint64_t id() const { return id_; }

  // Records the outcome of one part; the last part finishes the transfer
  // with the first error seen (or OK). Returns true if this call finished it.
  bool finish_part(const Status& s);
  // Finishes now with `s` whatever is outstanding (peer lost, cancelled).
  // Returns false if it had already finished.
  bool finish(const Status& s);

  void set_bytes(size_t n) { bytes_.store(n, std::memory_order_relaxed); }
  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

  bool done() const { return done_.load(std::memory_order_acquire); }
  Status wait(Deadline deadline);
  Status status() const;

  // Installed by the transport while the operation can still be withdrawn;
  // returns true if it withdrew it (and finished the state).
  void set_canceller(std::function<bool()> fn);
  // Installed for a write, receive or read: stops it even while it moves
  // data, returning once none of its bytes will land any more; true if it
  // stopped it (the state finished kCancelled). Blocks.
  void set_stopper(std::function<bool()> fn);
  // The canceller's answer, and with `moving_too` the stopper's after it.
  bool cancel(bool moving_too);
  // The stopper's answer alone.
  bool stop();
  // How long a wait past its deadline still lets the operation, moving
  // data, finish on its own before it stops it (Transfer::wait_or_cancel):
  // a receive's message already landing is returned rather than dropped.
  void set_past_deadline_grace(Clock::duration d) { grace_ns_.store(d.count(), std::memory_order_relaxed); }
  Clock::duration past_deadline_grace() const { return Clock::duration(grace_ns_.load(std::memory_order_relaxed)); }
  // Set by a stopper: copies of the operation not begun yet must not begin.
  void request_stop() { stop_requested_.store(true, std::memory_order_release); }
  bool stop_requested() const { return stop_requested_.load(std::memory_order_acquire); }

  // Counts the transfer in `sink` (the engine's, which outlives it) and in
  // `peer` (its connection's) when it finishes: `op` on `transport`, timed
  // from now. Before it is posted.
  void meter(core::TransferMetrics* sink, core::MeteredOp op, int transport, std::shared_ptr<core::PeerMeter> peer) {
    meter_ = sink;
    peer_meter_ = std::move(peer);
    op_ = op;
    transport_ = static_cast<int8_t>(transport);
    posted_ = Clock::now();
  }

  // Runs `fn(final status)` once, on the thread that finishes the transfer,
  // outside any lock (at once if already finished). It must not block. Hooks
  // run in the order they were added.
  void on_finish(std::function<void(const Status&)> fn);

 private:
  void run_finish_hooks();
  void count() REQUIRES(mu_);

  const uint64_t id_;
  const std::chrono::microseconds spin_;
  std::atomic<size_t> bytes_{0};
  std::atomic<bool> done_{false};
  mutable platform::Mutex mu_;
  std::condition_variable cv_;
  int parts_left_ GUARDED_BY(mu_);
  Status status_ GUARDED_BY(mu_);  // first error
  std::function<bool()> canceller_ GUARDED_BY(mu_);
  std::function<bool()> stopper_ GUARDED_BY(mu_);
  std::atomic<bool> stop_requested_{false};
  std::atomic<Clock::rep> grace_ns_{0};
  std::vector<std::function<void(const Status&)>> finish_hooks_ GUARDED_BY(mu_);
  // Set once before the transfer is posted, read once when it finishes.
  core::TransferMetrics* meter_ = nullptr;
  std::shared_ptr<core::PeerMeter> peer_meter_;
  core::MeteredOp op_ = core::MeteredOp::kSend;
  int8_t transport_ = -1;
  Clock::time_point posted_;
};

}  // namespace ferry
