// Admission's counts and tickets.
#include "core/admission.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "platform/mutex.h"

namespace ferry::core {

struct Admission::State {
  platform::Mutex mu;
  int connections GUARDED_BY(mu) = 0;
  int streams GUARDED_BY(mu) = 0;
  std::map<std::string, int> by_peer GUARDED_BY(mu);
};

Admission::Admission() : state_(std::make_shared<State>()) {}

Admission::Ticket::Ticket(std::shared_ptr<State> state, std::string peer, int streams)
    : state_(std::move(state)), peer_(std::move(peer)), streams_(streams) {}

void Admission::Ticket::release() {
  std::call_once(released_, [this] {
    platform::MutexLock lock(state_->mu);
    --state_->connections;
    state_->streams -= streams_;
    if (--state_->by_peer[peer_] <= 0) state_->by_peer.erase(peer_);
  });
}

Result<std::unique_ptr<Admission::Ticket>> Admission::admit(const Options& o, const std::string& peer_host, int streams,
                                                            bool fit) {
  State& n = *state_;
  platform::MutexLock lock(n.mu);
  auto refuse = [&](const std::string& why) { return Status(Code::kResourceExhausted, why); };
  if (n.connections >= o.max_connections) {
    return refuse("the engine holds " + std::to_string(n.connections) + " connections, its max_connections (" +
                  std::to_string(o.max_connections) + ")");
  }
  auto peer = n.by_peer.find(peer_host);
  int from_peer = peer == n.by_peer.end() ? 0 : peer->second;
  if (from_peer >= o.max_connections_per_peer) {
    return refuse("the engine holds " + std::to_string(from_peer) + " connections from " + peer_host +
                  ", its max_connections_per_peer (" + std::to_string(o.max_connections_per_peer) + ")");
  }
  if (fit && streams > 1) streams = std::max(1, std::min(streams, o.max_streams - n.streams));
  if (streams > o.max_streams - n.streams) {
    return refuse(std::to_string(streams) + " data streams asked for while the engine holds " +
                  std::to_string(n.streams) + " of its max_streams (" + std::to_string(o.max_streams) + ")");
  }
  ++n.connections;
  n.streams += streams;
  ++n.by_peer[peer_host];
  return std::make_unique<Ticket>(state_, peer_host, streams);
}

std::string host_of(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    size_t end = address.find(']');
    return end == std::string::npos ? address : address.substr(1, end - 1);
  }
  size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

std::string address_group(const std::string& host) {
  std::string bare = host.substr(0, host.find('%'));  // an IPv6 zone ("fe80::1%eth0")
  uint8_t v4[4];
  uint8_t v6[16];
  char text[INET6_ADDRSTRLEN];
  if (::inet_pton(AF_INET, bare.c_str(), v4) != 1) {
    if (::inet_pton(AF_INET6, bare.c_str(), v6) != 1) return host;
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(v6, kMapped, sizeof kMapped) != 0) {
      std::memset(v6 + 8, 0, 8);
      if (::inet_ntop(AF_INET6, v6, text, sizeof text) == nullptr) return host;
      return std::string(text) + "/64";
    }
    std::memcpy(v4, v6 + 12, 4);
  }
  v4[3] = 0;
  if (::inet_ntop(AF_INET, v4, text, sizeof text) == nullptr) return host;
  return std::string(text) + "/24";
}

}  // namespace ferry::core
