// The engine options every process of a soak uses: short timeouts, so that
// faults are noticed (and checked) within seconds, and limits low enough for
// the exhaustion faults to reach them.
#include "soak/roles.h"

namespace ferry::soak {

Options engine_options(const EngineArgs& a, const std::string& listen) {
  Options o;
  o.listen = listen;
  o.transport = parse_transport(a.transport).value();  // the CLI takes only tcp or local
  o.peer_timeout = a.peer_timeout;
  o.heartbeat_interval = a.peer_timeout / 4;
  o.handshake_timeout = a.handshake_timeout;
  o.max_connections_per_peer = a.max_connections_per_peer;
  o.connection_memory_bytes = a.connection_memory_bytes;
  o.log_level = LogLevel::kWarn;
  return o;
}

}  // namespace ferry::soak
