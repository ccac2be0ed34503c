// Pairing local NICs with a peer's addresses.
#include "transport/tcp/path_plan.h"

#include <algorithm>

namespace ferry::tcp {

Result<std::vector<PathEnd>> plan_paths(const std::vector<platform::Interface>& local_nics,
                                        const std::vector<std::string>& peer_addresses,
                                        const platform::HostPort& dialed, int streams_per_pair, int auto_total) {
  std::vector<platform::HostPort> remotes;
  for (const std::string& a : peer_addresses) {
    FERRY_ASSIGN_OR_RETURN(platform::HostPort hp, platform::parse_host_port(a));
    remotes.push_back(hp);
  }
  if (remotes.empty()) remotes.push_back(dialed);

  std::vector<PathEnd> pairs;
  for (const platform::Interface& nic : local_nics) {
    for (const platform::HostPort& r : remotes) {
      uint32_t ip = 0;
      if (!platform::parse_ipv4(r.host, ip)) continue;
      if ((ip & nic.netmask) == (nic.ipv4 & nic.netmask)) {
        pairs.push_back(PathEnd{nic.name, nic.address, r});
        break;
      }
    }
  }
  if (pairs.empty()) {
    for (const platform::HostPort& r : remotes) pairs.push_back(PathEnd{"", "", r});
  }
  const int pair_count = static_cast<int>(pairs.size());
  int total =
      streams_per_pair == kAutoStreams ? std::max(auto_total, pair_count) : std::max(1, streams_per_pair) * pair_count;
  total = std::min(total, kMaxPaths);
  std::vector<PathEnd> out;
  for (int i = 0; i < total; ++i) out.push_back(pairs[static_cast<size_t>(i % pair_count)]);
  return out;
}

}  // namespace ferry::tcp
