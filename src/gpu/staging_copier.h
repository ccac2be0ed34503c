// StagingCopier: the copies that stage GPU memory through pinned host
// memory, behind a seam. The TCP transport uses CUDA (device<->host copies
// on its own streams, fenced by events: make_cuda_copier); its tests put a
// host-memory copier in its place (transport/tcp/staging_copier.h) so that
// the whole staging pipeline runs, and is checked, on machines without a GPU.
//
// Copies queued on one copier for one device run in the order queued. A
// fence() returns a ticket covering every copy queued before it; tickets
// increase, and a ticket is done only when every earlier one is.
//
// Threading: a copier is used by one thread at a time (a path's transmit or
// receive worker owns its own; the connection's control copier is guarded by
// a lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "ferry/status.h"

namespace ferry::platform {

class GatherKernels;
class GpuKit;
class StagingKernels;

class StagingCopier {
 public:
  virtual ~StagingCopier() = default;

  // Page-locked host memory for staging slots, usable with every device.
  // kResourceExhausted when none can be had.
  virtual Result<void*> alloc_host(int device, size_t bytes) = 0;
  virtual void free_host(void* p, size_t bytes) = 0;
  // The same, for slots whose pages a sender lends to its socket: memory of
  // platform::map_lendable, which the kernel keeps alive while a socket
  // holds its pages, even once freed. By default alloc_host's.
  virtual Result<void*> alloc_lendable(int device, size_t bytes) { return alloc_host(device, bytes); }
  virtual void free_lendable(void* p, size_t bytes) { free_host(p, bytes); }

  // Queues a copy of `n` bytes from `src` to `dst` (either may be device
  // memory of `device`, addressed by unified addressing). Non-blocking.
  virtual Status copy(int device, void* dst, const void* src, size_t n) = 0;
  // Queues every copy of `many` on `device`, in order: as copy() one by one,
  // unless a copier can queue them at once (a chunk of many small blocks).
  // On failure, some of them may have been queued. Non-blocking.
  struct Op {
    void* dst;
    const void* src;
    size_t n;
  };
  virtual Status copy_many(int device, std::span<const Op> many) {
    for (const Op& op : many) FERRY_RETURN_IF_ERROR(copy(device, op.dst, op.src, op.n));
    return Status();
  }
  // A ticket for every copy queued so far. Non-blocking. A failed fence
  // covers nothing: the caller sync()s before it lets the copies' memory go.
  virtual Result<uint64_t> fence() = 0;
  // Non-blocking: whether the copies of `ticket` finished.
  virtual Result<bool> done(uint64_t ticket) = 0;
  // Blocks until the copies of `ticket` finished (device copies always end).
  virtual Status wait(uint64_t ticket) = 0;

  // Copies queued by a kernel so far (a run of copy_many counts once); the
  // rest went to the copy engines. For tests and diagnostics.
  virtual uint64_t kernel_copies() const { return 0; }

  // Blocks until every copy queued so far has ended, without a fence (what
  // is left when fence() failed). An error means the copies can never run
  // (a broken device context).
  virtual Status sync() = 0;

  // Blocks until every copy queued so far has ended (before a caller that
  // gives up lets go of the memory they use).
  void wait_all() {
    auto t = fence();
    if (!t.ok() || !wait(t.value()).ok()) (void)sync();
  }
};

// The CUDA copier: non-blocking streams per device it is asked to copy on
// (taken on first use: in the device's primary context, and in ferry's own
// while an application stream of the process waits on the GPU, see
// cuda_copier.cc), events as fences. Copies go through `kernels` where they
// fit (staging_kernel.h), the copy engines otherwise, without them, or
// while a stream waits; copy_many's runs of small blocks through `gather`
// (one launch a run), which may touch only device memory and pinned host
// memory (never pageable memory: the kernel would fault).
// Its streams, events and page-locked memory come from `kit` (gpu/gpu_kit.h;
// null: a kit of its own). Without a driver every call returns kUnimplemented.
std::unique_ptr<StagingCopier> make_cuda_copier(std::shared_ptr<platform::StagingKernels> kernels = nullptr,
                                                std::shared_ptr<platform::GatherKernels> gather = nullptr,
                                                std::shared_ptr<platform::GpuKit> kit = nullptr);

}  // namespace ferry::platform
