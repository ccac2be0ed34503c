// WaitSafeLane: one owner's stream on one device, for GPU work that must
// never queue behind an application stream waiting on the GPU for ferry.
//
// A stream that waits (StreamSignals::arm: cuStreamWaitValue32) stops its
// hardware queue, and CUDA deals a context's streams over a few such queues
// (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default). On an H200, copies on every
// 8th stream of ferry's kit were held behind a stream made just before the
// kit and waiting on the host, whatever the streams' priority
// (tests/gpu/gpu_kit_streams_test.cc). A copy held so, when it ends the very
// transfer the stream waits for, never ends.
//
// So after a wait was queued, a lane records a marker on its stream before
// it queues anything more there, and looks for the marker to pass. A stream
// whose marker has not passed within kClearWithin is set aside (it goes
// back to the kit once the marker passed) and another is taken from the
// kit. The check and the work are each queued inside a
// StreamSignals::Queuing, so no wait is queued between a stream's clearing
// and the work. While no stream waits, work is queued at once, as before.
//
// Every piece of work is followed by an event on its stream (take_marks):
// a fence recorded later could itself queue behind a wait.
//
// Not thread-safe: one owner.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ferry/status.h"
#include "gpu/cuda_driver.h"
#include "gpu/gpu_kit.h"

namespace ferry::platform {

class WaitSafeLane {
 public:
  // A marker that has not passed in this long sets its stream aside: it
  // passes in microseconds unless its hardware queue waits (or copies of
  // this lane queued before the wait are still running; then the lane only
  // moves to another stream sooner than it had to).
  static constexpr auto kClearWithin = std::chrono::milliseconds(5);
  // Streams a lane sets aside before queue() gives up (kUnavailable).
  static constexpr size_t kMostAside = 8;

  WaitSafeLane(std::shared_ptr<GpuKit> kit, int device);
  // Streams and events back to the kit (the owner waited for its marks).
  ~WaitSafeLane();
  WaitSafeLane(const WaitSafeLane&) = delete;
  WaitSafeLane& operator=(const WaitSafeLane&) = delete;

  // Queues work(stream) on a stream no queued wait holds, then an event
  // after it. The device's context is current (the caller's DeviceScope).
  // A failed work() or event leaves nothing marked for it.
  Status queue(const std::function<Status(cu::Stream)>& work);
  // Appends the events that mark everything queued since the last call.
  void take_marks(std::vector<cu::Event>* marks);
  // An event from take_marks whose work is done, for reuse.
  void recycle(cu::Event e) { idle_.push_back(e); }
  bool dirty() const { return tail_ != nullptr || !left_.empty(); }
  // Streams set aside now (tests).
  size_t aside() const { return aside_.size(); }

 private:
  struct Aside {
    cu::Stream stream = nullptr;
    cu::Event marker = nullptr;
  };
  static constexpr uint64_t kNever = ~uint64_t{0};

  Result<cu::Event> take_event();
  // Streams set aside whose marker passed go back to the kit.
  Status return_passed();

  const std::shared_ptr<GpuKit> kit_;
  const int device_;
  cu::Stream stream_ = nullptr;
  uint64_t cleared_ = kNever;      // the waits' generation stream_ was cleared against
  cu::Event tail_ = nullptr;       // recorded after the last work on stream_, unmarked yet
  std::vector<cu::Event> left_;    // tails of streams set aside, unmarked yet
  std::vector<Aside> aside_;
  std::vector<cu::Event> idle_;
};

}  // namespace ferry::platform
