// The last steps of a handshake between two engines on one host, after
// authentication on the control stream: the connector creates the shared
// channel; the two processes prove who they are through the kernel and the
// connector passes the channel's descriptor (peer_proof.h); the acceptor
// maps it and answers LOCAL_READY. Each side's LocalPeer carries the pid the
// kernel gave, never one the peer named.
#pragma once

#include <memory>

#include "core/engine_context.h"
#include "platform/socket.h"
#include "transport/connection_core.h"

namespace ferry::local {

// Connector side. kPermissionDenied / kUnavailable when the peer cannot
// attach or is refused (another uid, another network namespace, this very
// process): the caller may fall back to TCP.
Result<std::shared_ptr<transport::ConnectionCore>> connect_local(const std::shared_ptr<core::EngineContext>& ctx,
                                                                uint64_t id, uint64_t peer_engine,
                                                                platform::Socket control, Deadline deadline);

// Acceptor side, after ACCEPTED was written.
Result<std::shared_ptr<transport::ConnectionCore>> accept_local(const std::shared_ptr<core::EngineContext>& ctx,
                                                               uint64_t id, uint64_t peer_engine,
                                                               platform::Socket control, Deadline deadline);

}  // namespace ferry::local
