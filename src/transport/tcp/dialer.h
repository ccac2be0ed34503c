// Dialing a peer: the connector's side of the TCP handshake (docs/protocol.md).
#pragma once

#include <memory>

#include "core/engine_context.h"
#include "platform/socket.h"
#include "transport/tcp/tcp_connection.h"

namespace ferry::tcp {

// A dialed connection, and its admission ticket when the connection does not
// hold its own (the local transport's): the engine gives it back when it
// lets the connection go.
struct Dialed {
  std::shared_ptr<ConnectionBase> connection;
  std::unique_ptr<core::Admission::Ticket> ticket;
};

// Opens the control stream to `to`, authenticates both ways when a secret is
// configured, opens the data streams and waits for READY, all by `deadline`.
// Returns a started connection: local (shared channel, see
// transport/local/) when the peer is on this host, `allow_local` is set and
// neither side is forced to TCP; otherwise TCP. kUnavailable,
// kUnauthenticated, kDeadlineExceeded, kUnimplemented (protocol version),
// kDataLoss; kPermissionDenied when the local channel could not be attached;
// kResourceExhausted when either side's limits (max_connections,
// max_connections_per_peer, max_streams) or threads are exhausted.
Result<Dialed> dial(const std::shared_ptr<core::EngineContext>& ctx, const platform::HostPort& to, Deadline deadline,
                    uint64_t connection_id, bool allow_local = true);

}  // namespace ferry::tcp
