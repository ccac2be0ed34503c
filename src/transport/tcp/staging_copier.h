// The TCP transport's staging copiers: the interface and the CUDA copier
// are the GPU layer's (gpu/staging_copier.h); here are the host-memory
// stand-in that runs the whole staging pipeline on machines without a GPU,
// and the hooks through which tests put it in the CUDA copier's place.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "ferry/status.h"
#include "gpu/staging_copier.h"

namespace ferry::tcp {

// The interface, and the CUDA copier, live with the GPU code
// (gpu/staging_copier.h); the transport knows them by these names.
using Copier = platform::StagingCopier;
using platform::make_cuda_copier;

using CopierFactory = std::function<std::unique_ptr<Copier>()>;

// A stand-in that moves host memory with memcpy on its own thread, each copy
// after `delay`, so copies finish later than they were queued, as DMA does.
// Allocates ordinary host memory. `watch`, if set, sees each copy as it runs
// (tests: which memory a late copy touches).
using CopyWatch = std::function<void(const void* dst, const void* src, size_t n)>;
std::unique_ptr<Copier> make_host_copier(std::chrono::microseconds delay = std::chrono::microseconds(0),
                                         CopyWatch watch = {});

// How connections stage: `make` builds their copiers, and `stage_host` makes
// them stage host memory too (tests: the pipeline with host memory standing
// in for device memory). Read once by each connection when it is created.
struct StagingHooks {
  CopierFactory make;  // empty: make_cuda_copier with the connection's kernels
  bool stage_host = false;
};

// The hooks in force for new connections.
StagingHooks staging_hooks();
// Replaces them for connections created afterwards; `{}` restores the default.
void set_staging_hooks_for_tests(StagingHooks hooks);

}  // namespace ferry::tcp
