// StreamWaits: how ferry learns that a CUDA stream has run the work queued on
// it, without blocking the thread that asks, and how a stream is made to
// wait on the GPU for something ferry does.
//
// Applications hand ferry GPU buffers whose producer kernels are still
// queued on their stream (torch, CuPy, ...). ferry orders a transfer after
// that work (core/stream_order.h) by asking here to be told when the stream
// gets there; it never synchronises the posting thread. An interface, so the
// ordering logic is tested without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "ferry/memory.h"
#include "ferry/status.h"

namespace ferry::platform {

class StreamWaits {
 public:
  virtual ~StreamWaits() = default;
  // True when every piece of work queued on `stream` so far has finished.
  virtual Result<bool> idle(const CudaStreamRef& stream) = 0;
  // Calls `reached()` once `stream` has run everything queued on it now, on
  // a thread of the driver: it must not call CUDA and must not block. On an
  // error it is never called.
  virtual Status when_reached(const CudaStreamRef& stream, std::function<void()> reached) = 0;
};

// The CUDA driver's: cuStreamQuery and a host function queued on the stream
// (cuLaunchHostFunc), in the primary context of the stream's device for the
// context-relative handles (CudaStreamRef). A stream being captured into a graph is refused (the
// host function would become part of the graph, not run now).
// kUnimplemented without a driver.
std::unique_ptr<StreamWaits> cuda_stream_waits();

}  // namespace ferry::platform
