// QueueGate: keeps "queue work in a context" and "make a stream of that
// context wait" from crossing.
//
// A stream waiting on the GPU (Connection::stream_wait) holds a hardware
// queue of its context, and work queued after the wait where it sits runs
// only after the wait. Work ferry needs to end the waited transfer must so
// either be queued before the wait, or elsewhere (ferry's own context). A
// copier holds a Pass across the driver calls that queue its work in the
// application's context; the thread that queues a wait closes the gate
// first, which waits for every Pass to be let go, and opens it once the wait
// is released. A Pass taken while the gate is closed is not clear and holds
// nothing: its holder queues elsewhere.
//
// Lock-free (a copier takes a Pass on every copy): a holder counts itself,
// then looks for a closer; a closer counts itself, then waits for holders to
// leave, both in sequentially consistent order, so either the holder sees
// the closer or the closer sees the holder.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace ferry::platform {

class QueueGate {
 public:
  class Pass {
   public:
    explicit Pass(QueueGate& gate) : gate_(gate) {
      gate_.holders_.fetch_add(1, std::memory_order_seq_cst);
      clear_ = gate_.closers_.load(std::memory_order_seq_cst) == 0;
      if (!clear_) gate_.holders_.fetch_sub(1, std::memory_order_seq_cst);
    }
    ~Pass() {
      if (clear_) gate_.holders_.fetch_sub(1, std::memory_order_seq_cst);
    }
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    // No closer was counted when it was taken, and none returns from close()
    // until it is let go.
    bool clear() const { return clear_; }

   private:
    QueueGate& gate_;
    bool clear_ = false;
  };

  // Counts one closer; returns once no clear Pass is held. A holder makes a
  // few asynchronous driver calls and lets go: microseconds, or as long as
  // the copies it waits for when its copies change context, which end
  // (nothing it waits for can wait for a stream wait: none is queued while
  // it holds a clear Pass). It has nothing to wake this thread with, so
  // this thread yields until it left.
  void close() {
    closers_.fetch_add(1, std::memory_order_seq_cst);
    while (holders_.load(std::memory_order_seq_cst) > 0) std::this_thread::yield();
  }
  // Uncounts one closer (close() returned for it).
  void open() { closers_.fetch_sub(1, std::memory_order_seq_cst); }
  // Whether a closer is counted now.
  bool closed() const { return closers_.load(std::memory_order_acquire) > 0; }

 private:
  std::atomic<uint32_t> holders_{0};  // clear Passes held
  std::atomic<uint32_t> closers_{0};
};

}  // namespace ferry::platform
