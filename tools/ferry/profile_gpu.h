// What `ferry profile` asks of CUDA outside the backends, declared without
// CUDA types so that the CLI builds without the toolkit. profile_gpu.cu
// implements it; without CUDA, profile_gpu_stub.cc answers kUnimplemented.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ferry/status.h"
#include "profile/drift.h"
#include "profile/run_files.h"

namespace ferry::cli::profile_gpu {

// Whether this build has the CUDA parts.
bool built_with_cuda();

// GPUs the CUDA runtime sees. kUnavailable saying what is missing when none
// (no driver, a driver older than the CUDA runtime, no GPU);
// kUnimplemented in a build without CUDA.
Result<int> device_count();

struct DeviceInfo {
  std::string name;
  std::string pci_bus_id;  // "0000:18:00.0"
  int cc_major = 0;
  int cc_minor = 0;
  uint64_t memory_bytes = 0;
  int multiprocessors = 0;
  int runtime_version = 0;  // e.g. 13000
  int driver_version = 0;   // CUDA version the driver supports
};

Result<DeviceInfo> device_info(int gpu);
// Whether `a` can address `b`'s memory directly (peer access).
Result<bool> can_access_peer(int a, int b);

// Reads each GPU's timer against CLOCK_MONOTONIC for `seconds` (all GPUs at
// once, one host thread each) and fits a line per GPU. seconds == 0 takes 64
// quick readings (offset only). Blocks for about `seconds`.
Result<std::vector<ferry::profile::ClockFit>> measure_clocks(const std::vector<int>& gpus, double seconds);

// Keeps every GPU busy with arithmetic until `temperature(gpu)` reports at
// least target_c for all of them or limit_s passes. Returns the seconds spent.
Result<double> thermal_warmup(const std::vector<int>& gpus, int target_c, double limit_s,
                              const std::function<int(int)>& temperature);

// nvbandwidth's method: on src's stream, a spin kernel holds the stream while
// `copies` cudaMemcpyPeerAsync(dst <- src) of `size` bytes are queued; events
// around the copies time them once the spin is released. One warm-up sample,
// then `samples` samples. Allocates its own buffers.
Result<std::vector<ferry::profile::ReferenceRow>> reference_loop(int src, int dst, uint64_t size, int copies,
                                                                 int samples);

}  // namespace ferry::cli::profile_gpu
