// Dialing a peer: the connector's side of the TCP handshake (docs/protocol.md).
#pragma once

#include <functional>
#include <memory>

#include "core/engine_context.h"
#include "platform/socket.h"
#include "transport/connection_core.h"

namespace ferry::bootstrap {

// A dialed connection, and its admission ticket when the connection does not
// hold its own (the local transport's): the engine gives it back when it
// lets the connection go.
struct Dialed {
  std::shared_ptr<transport::ConnectionCore> connection;
  std::unique_ptr<core::Admission::Ticket> ticket;
};

// Opens the control stream to `to`, authenticates both ways when a secret is
// configured, opens the data streams and waits for READY, all by `deadline`.
// Returns a started connection: local (shared channel, see
// transport/local/) when the peer is on this host and neither side is
// forced to TCP; otherwise TCP. The one place that chooses: with
// Options::transport "auto", a peer on this host whose local channel cannot
// be attached (another pid namespace, no permission) is dialed again over
// TCP. `next_id` numbers each connection tried. kUnavailable,
// kUnauthenticated, kDeadlineExceeded, kUnimplemented (protocol version),
// kDataLoss; kPermissionDenied when the local channel could not be attached;
// kResourceExhausted when either side's limits (max_connections,
// max_connections_per_peer, max_streams) or threads are exhausted.
Result<Dialed> dial(const std::shared_ptr<core::EngineContext>& ctx, const platform::HostPort& to, Deadline deadline,
                    const std::function<uint64_t()>& next_id);

}  // namespace ferry::bootstrap
