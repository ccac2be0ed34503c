// LocalWorkers: the threads an engine's local connections share, made once
// per engine (EngineContext::local_workers): the progress workers that read
// every channel and run the handlers (progress_pool.h) and the helpers that
// share large host copies (copy_pool.h). Neither grows with connections.
// The workers start with the engine's first local connection and stay until
// the engine and its last connection are gone; the helpers start with the
// first large copy and end after kIdle without one.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>

#include "transport/local/copy_pool.h"
#include "transport/local/progress_pool.h"

namespace ferry::local {

struct LocalWorkers {
  explicit LocalWorkers(uint64_t engine_id)
      : progress(ProgressPool::default_size(), "ferry-local", {}, engine_id),
        copies(std::make_shared<CopyPool>(CopyPool::default_size(), CopyHelpers{"ferry-lcopy", {}, engine_id})) {}

  ProgressPool progress;
  std::shared_ptr<CopyPool> copies;  // held by each connection's copier too
};

}  // namespace ferry::local
