// StreamSignals: make a CUDA stream wait, on the GPU, until ferry says so.
//
// A receive that lands in GPU memory finishes on a ferry thread; the kernel
// that consumes the bytes is queued on the application's stream. Rather
// than a host round trip (wait for the transfer, then launch), the stream is
// told to wait for a 32-bit word in mapped pinned host memory
// (cuStreamWaitValue32) and ferry writes the word when the transfer ends.
//
// Each wait takes a slot; a slot's word only grows (the stream's comparison
// is cyclic), so a slot is reused as soon as its value was written: a
// stream still waiting on the old value sees a larger one and goes on.
// Pages are never freed: a stream behind a long kernel may read its word
// after the engine closed. A few KiB, on purpose.
//
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <optional>
#include <vector>

#include "ferry/memory.h"
#include "ferry/status.h"
#include "gpu/queue_gate.h"
#include "platform/mutex.h"

namespace ferry::platform {

// OK unless the process runs with CUDA_DEVICE_MAX_CONNECTIONS=1: then every
// stream of a context shares one hardware queue, and a stream waiting for a
// transfer holds the copies that would end it (cuda_driver.h,
// create_own_stream): kUnimplemented, saying to wait on the host.
Status stream_waits_possible();

class StreamSignals {
 public:
  // A wait armed on a stream; signal() releases the stream.
  struct Armed {
    uint32_t slot = 0;
    uint32_t value = 0;
  };

  StreamSignals() = default;
  StreamSignals(const StreamSignals&) = delete;
  StreamSignals& operator=(const StreamSignals&) = delete;

  // Queues on `stream` a wait for a later signal() (a default stream's
  // handle in the primary context of its device, when it names one).
  // kUnimplemented without a driver or where the driver has no stream memory
  // operations; kInvalidArgument for a stream the driver refuses.
  Result<Armed> arm(const CudaStreamRef& stream) EXCLUDES(mu_);
  // Releases the stream armed with `armed`, and the slot.
  void signal(const Armed& armed) EXCLUDES(mu_);
  // Whether a stream of this process waits on the GPU for any engine now (a
  // wait armed and not yet signalled, by any StreamSignals). Process-wide on
  // purpose: the hardware queues a waiting stream holds are its context's,
  // which every engine of the process shares, so a wait one engine armed can
  // hold another engine's copies and kernels. No lock (the gate's count).
  static bool any_waiting();

  // The gate every wait closes while it is armed, process-wide as
  // any_waiting is (gpu/queue_gate.h): a copier queues in the application's
  // context (GpuContext::kApplication) only under a clear Pass of it, and in
  // ferry's own context (GpuContext::kFerry) otherwise; for work already
  // queued in the application's, it asks the stream rather than queue an
  // event behind the wait.
  static QueueGate& app_queue_gate();

  // While a stream may wait (a wait armed and not yet signalled), a ferry
  // thread must not make a driver call that waits for every stream of the
  // context (freeing memory, closing an IPC mapping, loading a module:
  // bench/gpu/blocked_stream_probe.cu), or it may wait on the very stream
  // that waits on it. A Quiet taken before such a call is ok() if no wait
  // was armed, and then keeps arm() waiting until it ends, so none is armed
  // during the call either; not ok(), it holds nothing.
  class Quiet {
   public:
    explicit Quiet(StreamSignals* signals);  // null: always ok()
    ~Quiet();
    Quiet(const Quiet&) = delete;
    Quiet& operator=(const Quiet&) = delete;
    bool ok() const { return ok_; }

   private:
    StreamSignals* const signals_;
    bool ok_ = true;
  };

 private:
  static constexpr uint32_t kSlotsPerPage = 1024;
  struct Page {
    uint32_t* host = nullptr;
    uint64_t device = 0;
  };
  Result<uint32_t> take_slot() REQUIRES(mu_);

  Mutex mu_;
  std::condition_variable unquiet_;  // quiet_ fell to 0
  uint32_t armed_ GUARDED_BY(mu_) = 0;
  uint32_t quiet_ GUARDED_BY(mu_) = 0;  // Quiets held
  std::vector<Page> pages_ GUARDED_BY(mu_);
  std::vector<uint32_t> free_ GUARDED_BY(mu_);
  std::vector<uint32_t> values_ GUARDED_BY(mu_);  // last value armed, per slot
};

}  // namespace ferry::platform
