// GpuCopyLanes: one user's GPU copies (a local connection's copier), on
// every device it copies on: a non-blocking stream a device, taken from its
// connection's kit on first use (gpu/gpu_kit.h), and events that mark what
// was queued there, recycled, and all given back to the kit at the end. Beside
// it, the copies themselves and the questions asked of streams and events,
// so that the local transport reaches the CUDA driver only through here.
//
// Not thread-safe: its owner's lock guards it. Handles (cu::Stream,
// cu::Event) taken out of it may be used without that lock by the calls
// below that take them.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "ferry/status.h"
#include "gpu/cuda_driver.h"
#include "gpu/gpu_kit.h"

namespace ferry::platform {

class GpuCopyLanes {
 public:
  // `kit` null: a kit of its own.
  explicit GpuCopyLanes(std::shared_ptr<GpuKit> kit = nullptr);
  // Gives the streams and events back to the kit (the owner waited for its
  // copies).
  ~GpuCopyLanes();
  GpuCopyLanes(const GpuCopyLanes&) = delete;
  GpuCopyLanes& operator=(const GpuCopyLanes&) = delete;

  // The stream of `device`, taken on first use.
  Result<cu::Stream> stream(int device);
  // The stream of `device` if one was made, else null.
  cu::Stream stream_if_made(int device) const;
  // An event recorded on `device`'s stream after what is queued there now
  // (a spare one, or a new one). The device's context is made current here.
  Result<cu::Event> mark(int device);
  // An event whose mark was reached goes back for reuse.
  void recycle(int device, cu::Event e);
  // Blocks until every stream has run what is queued on it.
  void synchronize_all();
  GpuKit& kit() const { return *kit_; }

 private:
  std::shared_ptr<GpuKit> kit_;
  std::map<int, cu::Stream> streams_;            // by device
  std::map<int, std::vector<cu::Event>> spare_;  // events belong to a context
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
// Copies host bytes to device memory on `device`'s stream and waits.
Status copy_to_device_and_wait(cu::Stream stream, void* dst, const void* src, size_t n);
// Whether `stream` ran everything queued on it; an error for a failed copy.
Result<bool> stream_idle(cu::Stream stream);
// Whether the work before `event` ran; an error for a failed copy.
Result<bool> event_reached(cu::Event event);
// Blocks until `stream` (of `device`) ran what is queued on it.
void wait_stream(int device, cu::Stream stream);
// `preferred` if this process has a context on it, else the first device it
// has one on, else `preferred` (a context will be made there).
int first_active_device(int preferred);

}  // namespace ferry::platform
