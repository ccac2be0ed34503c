// ConnectionBase: what the engine needs from every transport's connection
// beyond the public Connection API (liveness duty, region retirement).
#pragma once

#include "ferry/engine.h"

namespace ferry {

class ConnectionBase : public Connection {
 public:
  // Heartbeat duty, called periodically by the engine's heartbeat thread.
  // Must not block.
  virtual void tick(Clock::time_point now) = 0;
  // A local region was deregistered: make the peer forget anything shared
  // about it. Returns once the peer can no longer touch it (at most
  // peer_timeout). Default: nothing was shared.
  virtual void region_retired(uint64_t region_id) {}
  // Fails the connection with `why` (first call wins): every pending
  // transfer ends with it. Any thread. The directory uses it when the
  // peer's name moved on to a newer incarnation.
  virtual void fail(const Status& why) = 0;
};

}  // namespace ferry
