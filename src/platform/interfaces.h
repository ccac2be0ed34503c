// Network interfaces and their IPv4 addresses, as the kernel reports them
// (getifaddrs) plus link speed from sysfs. The engine uses this to listen on
// and advertise every selected NIC and to pair its NICs with a peer's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"

namespace ferry::platform {

struct Interface {
  std::string name;      // "eth1"
  std::string address;   // IPv4, dotted
  uint32_t ipv4 = 0;     // host byte order
  uint32_t netmask = 0;  // host byte order
  bool up = false;
  bool loopback = false;
  int speed_mbps = 0;  // 0 when unknown (virtual NICs may not say)
};

// Every interface that has an IPv4 address.
Result<std::vector<Interface>> list_interfaces();

// Picks the interfaces named in `names` (comma-separated; order kept). Empty
// `names` picks nothing. kNotFound names an interface that does not exist or
// has no IPv4 address; kUnavailable one that is down.
Result<std::vector<Interface>> select_interfaces(std::string_view names);

// Parses a dotted IPv4 address; false if it is not one.
bool parse_ipv4(std::string_view text, uint32_t& out);

}  // namespace ferry::platform
