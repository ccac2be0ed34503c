// StagingKernels: staging copies run by the GPU's own cores instead of its
// copy engines.
//
// Why: on the two-H200 host, 16 streams each copying 512 KiB chunks between
// a GPU and pinned host memory moved 34.5 GB/s on the copy engines and 42
// (device->host) and 47-50 (host->device) GB/s as a kernel of 4-16 blocks, and
// the engines served streams so unevenly that with 64 chunks queued on each
// of 16 streams a stream's first chunk ended 12 ms into a 16 ms run (under
// 0.3 ms as kernels). A path waits for its own chunk, so the kernel's
// fairness is worth as much as its bandwidth. The cost is a few SMs while a
// transfer's copies run; Options::staging_copy "engine" keeps the SMs free.
//
// The kernel is PTX (staging_kernel_ptx.inc, made from staging_kernel.cu by
// scripts/make_ptx.sh: no CUDA toolchain is needed to build ferry), loaded
// once per device for the whole engine, on first use (or by
// load_where_used()).
//
// Thread-safe.
#pragma once

#include <cstddef>

#include "ferry/status.h"
#include "gpu/cuda_driver.h"
#include "gpu/ptx_kernels.h"

namespace ferry::platform {

class StagingKernels {
 public:
  StagingKernels();

  // Whether the kernel can copy these bytes: both addresses and the length
  // multiples of 16 (other copies use the copy engines).
  static bool fits(const void* dst, const void* src, size_t n);

  // Queues a copy of `n` bytes on `stream` of `device`, whose context the
  // caller made current. REQUIRES: fits(dst, src, n). kUnimplemented if the
  // kernel cannot be loaded on this device (the caller then uses the copy
  // engines; the reason is logged once).
  Status copy(int device, cu::Stream stream, void* dst, const void* src, size_t n);
  // Loads the kernel now on every device this process uses (PtxKernels::load_where_used).
  void load_where_used() { kernels_.load_where_used(); }

 private:
  PtxKernels kernels_;
};

}  // namespace ferry::platform
