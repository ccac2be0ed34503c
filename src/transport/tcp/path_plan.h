// Which data streams a connector opens: its NICs paired with the peer's
// advertised addresses. Pure function, no I/O.
//
// A local NIC pairs with the first peer address in its subnet (NICs that can
// reach each other directly). Without named local NICs, or when no pair
// shares a subnet, every peer address gets streams and the kernel's routing
// picks the way. Each pair gets `streams_per_pair` streams, in round-robin
// order across pairs so that a capped total still covers every pair; with
// streams_per_pair = kAutoStreams the connection's total is `auto_total`
// instead (at least one a pair).
#pragma once

#include <string>
#include <vector>

#include "ferry/options.h"
#include "ferry/status.h"
#include "platform/interfaces.h"
#include "platform/socket.h"

namespace ferry::tcp {

struct PathEnd {
  std::string nic;       // local interface name ("" when not bound to one)
  std::string local_ip;  // source address to bind ("" to let the kernel choose)
  platform::HostPort remote;
};

inline constexpr int kMaxPaths = 64;

// `dialed` is the address the control stream reached; it is used when the
// peer advertises nothing. kInvalidArgument if an advertised address is malformed.
Result<std::vector<PathEnd>> plan_paths(const std::vector<platform::Interface>& local_nics,
                                        const std::vector<std::string>& peer_addresses,
                                        const platform::HostPort& dialed, int streams_per_pair, int auto_total = 2);

}  // namespace ferry::tcp
