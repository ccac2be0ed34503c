// EngineContext: what an engine shares with its transports and connections
// (options, identity, registry). Held by shared_ptr so a connection that
// outlives its Engine object still finds valid state.
#pragma once

#include <cstdint>
#include <string>

#include "core/registry.h"
#include "ferry/options.h"

namespace ferry::core {

struct EngineContext {
  Options options;
  uint64_t engine_id = 0;
  std::string host_id;
  Registry registry;
};

}  // namespace ferry::core
