// StreamContext: the context a CUDA stream handle is used in. The handles
// 0, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD name a default stream of
// whichever context is current; a CudaStreamRef that carries their device
// is used with that device's primary context current (what a torch tensor
// on cuda:1 means by stream 0 when the thread has cuda:0 current).
#pragma once

#include <cstdint>
#include <optional>

#include "ferry/memory.h"
#include "gpu/cuda_driver.h"

namespace ferry::platform {

// True for the handles that name a default stream of the current context.
inline bool context_relative_stream(void* stream) {
  // 0: the legacy default stream; 0x1 CU_STREAM_LEGACY; 0x2 CU_STREAM_PER_THREAD.
  return reinterpret_cast<uintptr_t>(stream) <= 2;
}

// For its lifetime, the primary context of `ref.device` is current when
// `ref` names a default stream of a device; nothing changes otherwise.
class StreamContext {
 public:
  explicit StreamContext(const CudaStreamRef& ref) {
    if (ref.device >= 0 && context_relative_stream(ref.stream)) scope_.emplace(ref.device);
  }
  Status status() const {
    return scope_ && !scope_->ok() ? scope_->status().with_context("the device of a default CUDA stream") : Status();
  }

 private:
  std::optional<DeviceScope> scope_;
};

}  // namespace ferry::platform
