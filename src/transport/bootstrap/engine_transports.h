// What an engine sets up once for its transports, so that the engine itself
// names no transport.
#pragma once

#include <cstdint>

#include "core/engine_context.h"

namespace ferry::bootstrap {

// Fills the context's per-engine transport state (the local transport's
// tables of GPU memory shared with peers) and starts the TCP transport's
// workers. Once, before listening. kResourceExhausted when a worker thread
// cannot start (the engine is not created).
Status prepare_transports(core::EngineContext& ctx);

// A region was deregistered and every connection told (region_retired):
// drops what the transports made of it for peers.
void region_retired(core::EngineContext& ctx, uint64_t region_id);

}  // namespace ferry::bootstrap
