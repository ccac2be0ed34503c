// The connector's side of the handshake, spoken by hand for the tests that
// play a peer no engine would be (the hostile-peer unit tests, the fuzz
// harnesses that feed a real engine, the seed recorder): written once here so
// that a protocol change is made in one place. The peer presents the
// hand-made identity (../hand_made_identity.h) and no secret.
//
// Example (a peer with two data streams, then frames of its own):
//   platform::Socket ctl = platform::connect_tcp(hp, d).value();
//   std::vector<platform::Socket> data;
//   Status s = testing::hand_made_tcp_handshake(ctl.fd(), hp, "hostile-peer", 2, d, data);
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ferry/ferry.h"
#include "platform/socket.h"
#include "transport/handshake_io.h"
#include "wire/handshake.h"

namespace ferry::testing {

// A REJECTED frame as its code and the engine's message; OK for any other frame.
Status rejected_status(const bootstrap::RawFrame& frame);

// The handshake's first half on `control`, a socket connected to an engine's
// listen address: HELLO (the hand-made identity, `host_id`), the engine's
// WELCOME, AUTH asking for `streams` data streams (0: the local transport),
// the engine's ACCEPTED. Blocks, up to `deadline` for each frame.
// Returns the ACCEPTED frame; a REJECTED answer as its code and message;
// kDataLoss for another frame; the socket's codes (kDeadlineExceeded,
// kUnavailable) as they come. `versions`: what the HELLO offers.
Result<wire::Accepted> hand_made_hello(int control, std::string_view host_id, uint32_t streams, Deadline deadline,
                                       wire::VersionRange versions = wire::kSpokenVersions);

// The whole handshake of the TCP transport: hand_made_hello() on `control`,
// then `streams` data streams connected to `to` (from `source_ip` when
// given), each appended to `data` once connected and sent its HELLO, then
// the engine's READY on `control`. Blocks, up to `deadline` for each step.
// OK once READY came; otherwise as hand_made_hello(), with kDataLoss for a
// frame other than READY. `control` stays the caller's; on an error `data`
// holds the streams connected so far.
Status hand_made_tcp_handshake(int control, const platform::HostPort& to, std::string_view host_id, int streams,
                               Deadline deadline, std::vector<platform::Socket>& data, std::string_view source_ip = {},
                               wire::VersionRange versions = wire::kSpokenVersions);

}  // namespace ferry::testing
