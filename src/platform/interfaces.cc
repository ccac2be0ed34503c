// Interface discovery.
#include "platform/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <charconv>

#include "platform/host_files.h"
#include "platform/system_error.h"

namespace ferry::platform {

bool parse_ipv4(std::string_view text, uint32_t& out) {
  struct in_addr a {};
  std::string s(text);
  if (::inet_pton(AF_INET, s.c_str(), &a) != 1) return false;
  out = ntohl(a.s_addr);
  return true;
}

Result<std::vector<Interface>> list_interfaces() {
  struct ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return errno_status(Code::kUnavailable, "getifaddrs");
  std::vector<Interface> out;
  for (struct ifaddrs* i = all; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    Interface n;
    n.name = i->ifa_name;
    auto* in = reinterpret_cast<struct sockaddr_in*>(i->ifa_addr);
    n.ipv4 = ntohl(in->sin_addr.s_addr);
    char text[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    n.address = text;
    if (i->ifa_netmask != nullptr)
      n.netmask = ntohl(reinterpret_cast<struct sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr);
    n.up = (i->ifa_flags & IFF_UP) != 0 && (i->ifa_flags & IFF_RUNNING) != 0;
    n.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    // Parsed without iostreams: a process that loaded a C++ library of
    // another ABI first (torch's wheels) crashed in the stream's number
    // parsing here.
    n.speed_mbps = 0;
    if (auto speed = read_trimmed("/sys/class/net/" + n.name + "/speed"); speed.ok()) {
      const std::string& t = speed.value();
      int v = 0;
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (ec == std::errc() && end == t.data() + t.size() && v > 0) n.speed_mbps = v;
    }
    out.push_back(std::move(n));
  }
  ::freeifaddrs(all);
  return out;
}

Result<std::vector<Interface>> select_interfaces(std::string_view names) {
  std::vector<Interface> picked;
  if (names.empty()) return picked;
  FERRY_ASSIGN_OR_RETURN(std::vector<Interface> all, list_interfaces());
  size_t start = 0;
  while (start <= names.size()) {
    size_t comma = names.find(',', start);
    std::string_view name =
        names.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    start = comma == std::string_view::npos ? names.size() + 1 : comma + 1;
    if (name.empty()) continue;
    const Interface* found = nullptr;
    for (const auto& i : all) {
      if (i.name == name) {
        found = &i;
        break;
      }
    }
    if (found == nullptr) {
      return Status(Code::kNotFound, "NIC \"" + std::string(name) + "\" does not exist or has no IPv4 address");
    }
    if (!found->up) return Status(Code::kUnavailable, "NIC \"" + std::string(name) + "\" is down");
    picked.push_back(*found);
  }
  return picked;
}

}  // namespace ferry::platform
