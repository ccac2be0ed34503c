// GatherKernels: a batch of small GPU copies as one kernel launch.
//
// Why: a KV cache moves as hundreds of 4-64 KiB blocks. On 2 x H100 the copy
// engines take about 1 us per call, batched (cuMemcpyBatchAsync) or not:
// 256 x 16 KiB blocks took 246 us against 21.5 us for the same 4 MiB in one
// copy, while one launch of a gather kernel over peer pointers moves them in
// about the time of the one copy. The kernel runs on the GPU that issues
// the copies and reaches whatever that GPU can address: its own memory, a
// peer GPU's memory mapped for it (the local transport: the mapping exists
// only where the two GPUs reach each other) and pinned host memory (the TCP
// transport's staging slots). Both transports use it.
//
// The kernel is PTX (gather_kernel.cu holds its source), loaded once per
// device and engine. Options::staging_copy "engine" leaves every SM to the
// application and every batch to the copy engines.
//
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "ferry/status.h"
#include "gpu/cuda_driver.h"
#include "gpu/ptx_kernels.h"

namespace ferry::platform {

struct GatherPiece {
  uint8_t* dst = nullptr;
  const uint8_t* src = nullptr;
  uint64_t n = 0;
};
// A list of pieces in pinned memory the kernel reads (copy_table): 12 KiB,
// a 1 MiB slot of 2 KiB blocks.
inline constexpr size_t kGatherTableItems = 512;
inline constexpr size_t kGatherTableBytes = kGatherTableItems * sizeof(GatherPiece);

class GatherKernels {
 public:
  GatherKernels();

  // Whether `pieces` copies of `bytes` in all go faster as one launch than
  // on the copy engines: two or more, averaging at most kMaxAveragePiece.
  static bool suits(size_t pieces, uint64_t bytes);

  // Queues the copies on `stream` of `device` (whose context the caller made
  // current), as one launch per kLargeItems pieces (pieces over kItemBytes
  // are cut, so that no block of threads holds up the rest), through the
  // entry point with the fewest parameter bytes that holds them.
  // kUnimplemented, nothing queued, if the kernel cannot load on `device`;
  // an error after a first launch leaves that launch queued.
  Status copy(int device, cu::Stream stream, std::span<const GatherPiece> pieces);

  // Queues one launch copying `count` pieces listed at `table`: memory
  // `device` reads directly (pinned host memory), none longer than
  // kItemBytes, left unchanged until the copy ended. `bytes` is their sum.
  // Posting it costs the same whatever the count, unlike copy(), whose list
  // rides in the launch's parameters. kUnimplemented, nothing queued, if the
  // kernel cannot load on `device`.
  Status copy_table(int device, cu::Stream stream, const GatherPiece* table, unsigned count,
                    uint64_t bytes);

  // Queues the resident gather kernel (ResidentGather) on `stream` of
  // `device` (context current): `grid` blocks of `threads`, reading
  // `mailbox` (mapped pinned memory), relaying through `relay` (device
  // memory, zeroed before it on the stream), serving requests of
  // `generation` until none came for linger_ns. kUnimplemented if the
  // kernel cannot load on `device`.
  Status launch_resident(int device, cu::Stream stream, void* mailbox, cu::DevicePtr relay, uint64_t generation,
                         uint64_t linger_ns, unsigned grid, unsigned threads);

  // Loads the kernels now on every device this process uses (PtxKernels::load_where_used).
  void load_where_used() { kernels_.load_where_used(); }

  static constexpr uint64_t kMaxAveragePiece = 256 * 1024;
  static constexpr uint64_t kItemBytes = 64 * 1024;
  static constexpr size_t kSmallItems = 168;   // gather_kernel.cu: 4 KiB of parameters
  static constexpr size_t kMediumItems = 340;  // 8 KiB
  static constexpr size_t kLargeItems = 1360;  // 32 KiB

 private:
  PtxKernels kernels_;
};

}  // namespace ferry::platform
