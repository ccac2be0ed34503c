// The last steps of a handshake between two engines on one host, after
// authentication on the control stream: the connector creates the shared
// channel and names it (its pid and descriptor number); the acceptor fetches
// the descriptor with pidfd_getfd, which also proves that each process may
// reach the other's memory, and answers with its pid.
#pragma once

#include <memory>

#include "core/engine_context.h"
#include "platform/socket.h"
#include "transport/connection_base.h"

namespace ferry::local {

// Connector side. kPermissionDenied / kUnavailable when the peer cannot
// attach (another pid namespace, no permission): the caller may fall back to TCP.
Result<std::shared_ptr<ConnectionBase>> connect_local(const std::shared_ptr<core::EngineContext>& ctx, uint64_t id,
                                                      uint64_t peer_engine, platform::Socket control,
                                                      Deadline deadline);

// Acceptor side, after ACCEPTED was written.
Result<std::shared_ptr<ConnectionBase>> accept_local(const std::shared_ptr<core::EngineContext>& ctx, uint64_t id,
                                                     uint64_t peer_engine, platform::Socket control,
                                                     Deadline deadline);

}  // namespace ferry::local
