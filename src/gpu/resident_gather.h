// ResidentGather: the gather kernel kept resident on a GPU between batches of
// blocks, fed through a mailbox in pinned host memory.
//
// Why: a launch costs about 4 us to post and about 2 us more on the GPU than a
// copy-engine copy before its first byte moves. For a KV cache's batch of
// scattered blocks between two local GPUs that kept one launch of the gather
// kernel at about 0.8 of one copy-engine copy of the same bytes. A kernel
// launched once and then handed each batch by three words in host memory
// skips the launch. Handing it a batch and reading its answer still costs
// what a launch and an event poll do (7-9 us on the two-H200 host); what it
// saves is the launch's posting and slower start: 0.83-0.94 of one
// copy-engine copy against 0.78-0.80 (bench/gpu/resident_gather.cu).
//
// The price: while it lingers, Options::gather_linger after its last batch,
// the kernel holds kGrid blocks of kThreads threads (one an SM) that the
// application's kernels cannot have, and its block 0 polls host memory. So it
// runs only when gather_linger is set; a batch that finds none lingering
// launches it.
//
// One batch at a time a GPU: post() answers kUnavailable while the kernel
// there has one in hand, and the caller launches the gather kernel as before.
//
// A batch posted to a kernel taken to linger still may find it gone (the
// posting thread held up between the two); finished() then launches the
// kernel again with that batch, so no batch is lost to the race.
//
// Thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "ferry/status.h"
#include "gpu/cuda_driver.h"
#include "gpu/gather_kernel.h"
#include "platform/mutex.h"

namespace ferry::platform {

class ResidentGather {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // `now` tells post() the time it judges the kernel's linger by (tests
  // stand it still); steady_clock's by default.
  ResidentGather(std::shared_ptr<GatherKernels> kernels, std::chrono::microseconds linger, Clock now = {});
  // Sends every kernel away and waits for it to leave. Blocks.
  ~ResidentGather();
  ResidentGather(const ResidentGather&) = delete;
  ResidentGather& operator=(const ResidentGather&) = delete;

  struct Ticket {
    int device = -1;
    uint64_t serial = 0;  // of the batches posted to that GPU, from 1
  };

  // Hands the kernel on `device` (whose context the caller made current)
  // `count` pieces listed at `table`: memory the GPU reads (pinned host
  // memory), pieces of at most kPieceBytes, left unchanged until finished().
  // Launches the kernel if none lingers there. kUnavailable, nothing queued,
  // while that kernel has a batch in hand; kUnimplemented if it cannot load.
  Result<Ticket> post(int device, const GatherPiece* table, unsigned count);
  // Whether the ticket's batch is in place (every byte visible to the peer
  // GPU and the host). Launches the kernel again with the batch if it left
  // without taking it. An error once the kernel failed.
  Result<bool> finished(const Ticket& ticket);
  // How many times the kernel was launched on `device` (tests: whether a
  // batch found it lingering).
  uint32_t launches(int device);

  static constexpr unsigned kGrid = 32;
  static constexpr unsigned kThreads = 256;
  // A warp copies a piece at a time; batches list pieces of at most this
  // size, so that a batch's bytes spread over the kernel's warps.
  static constexpr uint64_t kPieceBytes = 16 * 1024;

 private:
  struct Device;
  // The state of `device`, made on first use (in its current context).
  Result<Device*> device_state(int device) REQUIRES(mu_);
  // Launches a new generation of the kernel on `d`; an earlier one still
  // lingering leaves at its next look at the mailbox.
  Status launch(int device, Device& d) REQUIRES(mu_);
  // Writes the batch of `d` into its mailbox for the kernel there.
  void hand_over(Device& d, std::chrono::steady_clock::time_point now) REQUIRES(mu_);

  const std::shared_ptr<GatherKernels> kernels_;
  const std::chrono::microseconds linger_;
  const Clock now_;
  Mutex mu_;
  std::array<std::unique_ptr<Device>, kMaxDevices> devices_ GUARDED_BY(mu_);
};

}  // namespace ferry::platform
