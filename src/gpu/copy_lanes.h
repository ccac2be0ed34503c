// GpuCopyLanes: one user's GPU copies (a local connection's copier), on
// every device it copies on: a non-blocking stream a device and context
// (GpuContext: the application's, and ferry's own while a stream of the
// process waits on the GPU), taken from its connection's kit on first use
// (gpu/gpu_kit.h), and events that mark what was queued there, recycled,
// and all given back to the kit at the end. Beside it, the copies themselves
// and the questions asked of streams and events, so that the local
// transport reaches the CUDA driver only through here.
//
// Which context a copy is queued in is chosen under a Pass of the waits'
// gate (StreamSignals::app_queue_gate), held across the queuing: the
// application's when the pass is clear (kernels may run there), ferry's
// otherwise (copy engines only). A device's copies stay in the order queued:
// when they move to the other context, the stream they leave is waited for.
//
// Not thread-safe: its owner's lock guards it. Handles (cu::Stream,
// cu::Event) taken out of it may be used without that lock by the calls
// below that take them.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "ferry/status.h"
#include "gpu/cuda_driver.h"
#include "gpu/gpu_kit.h"
#include "gpu/stream_signals.h"

namespace ferry::platform {

// A device and one of its contexts: where a copy was queued.
using GpuLane = std::pair<int, GpuContext>;

// The context copies about to be queued go to: the application's while no
// stream of the process waits on the GPU, else ferry's own. Held while
// they are queued, and let go before anything waits for them or runs a
// completion (it holds the waits' gate meanwhile: no wait is queued).
class LaneChoice {
 public:
  LaneChoice() : pass_(StreamSignals::app_queue_gate()) {}
  GpuContext context() const { return pass_.clear() ? GpuContext::kApplication : GpuContext::kFerry; }

 private:
  QueueGate::Pass pass_;
};

class GpuCopyLanes {
 public:
  // `kit` null: a kit of its own.
  explicit GpuCopyLanes(std::shared_ptr<GpuKit> kit = nullptr);
  // Gives the streams and events back to the kit (the owner waited for its
  // copies).
  ~GpuCopyLanes();
  GpuCopyLanes(const GpuCopyLanes&) = delete;
  GpuCopyLanes& operator=(const GpuCopyLanes&) = delete;

  // The stream of `device` in `ctx`, taken on first use; `device`'s copies
  // go there from now on (the stream they leave is waited for first). The
  // caller holds `ctx`'s scope and, for the application's, a clear Pass.
  Result<cu::Stream> stream(int device, GpuContext ctx);
  // The stream of `lane` if one was made, else null.
  cu::Stream stream_if_made(GpuLane lane) const;
  // What a copy's completion waits for on one device: an event recorded
  // after what is queued now, or (event null) the stream having run all it
  // holds, where an event would queue behind a stream wait.
  struct Mark {
    GpuLane lane;
    cu::Stream stream = nullptr;
    cu::Event event = nullptr;
  };
  // A mark on `lane`'s stream (a spare event, or a new one). The stream's
  // context is made current here.
  Result<Mark> mark(GpuLane lane);
  // Whether the copies before `m` ran; an error for a failed copy. Asked in
  // the mark's context.
  static Result<bool> reached(const Mark& m);
  // A mark that was reached: its event goes back for reuse.
  void recycle(const Mark& m);
  // Blocks until every stream has run what is queued on it.
  void synchronize_all();
  GpuKit& kit() const { return *kit_; }

 private:
  std::shared_ptr<GpuKit> kit_;
  std::map<GpuLane, cu::Stream> streams_;
  std::map<GpuLane, std::vector<cu::Event>> spare_;  // events belong to a context
  std::map<int, GpuContext> in_use_;                 // by device: where its copies go now
};

// Whether a CUDA driver was loaded.
bool gpu_driver_available();

enum class CopyDirection { kHostToDevice, kDeviceToHost, kDeviceToDevice };
// Queues one copy on `stream` (kInternal with the driver's reason).
Status queue_copy(cu::Stream stream, void* dst, const void* src, size_t n, CopyDirection direction);
// Whether the driver queues many copies in one call (cuMemcpyBatchAsync).
bool can_queue_batch();
// Queues `dsts.size()` device copies in one call.
Status queue_batch(cu::Stream stream, std::span<const cu::DevicePtr> dsts, std::span<const cu::DevicePtr> srcs,
                   std::span<const size_t> sizes);
// Whether `stream` ran everything queued on it; an error for a failed copy.
Result<bool> stream_idle(cu::Stream stream);
// Whether the work before `event` ran; an error for a failed copy.
Result<bool> event_reached(cu::Event event);
// Blocks until `stream` (of context `ctx` of `device`) ran what is queued
// on it; an error for a failed copy.
Status wait_stream(int device, GpuContext ctx, cu::Stream stream);
// `preferred` if this process has a context on it, else the first device it
// has one on, else `preferred` (a context will be made there).
int first_active_device(int preferred);

}  // namespace ferry::platform
