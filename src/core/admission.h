// Admission: which connections an engine lets in, so that no peer can push
// it past its limits of connections, connections per address and streams.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "ferry/options.h"
#include "ferry/status.h"

namespace ferry::core {

// Admission: the connections an engine holds (accepted, dialed or waiting in
// the accept queue), per peer address, and their data streams (a descriptor
// each), against Options::max_connections, max_connections_per_peer and
// max_streams. Thread-safe.
class Admission {
  struct State;

 public:
  // One connection's share. Given back by release() (once no thread or
  // descriptor of the connection is left) or at destruction, whichever
  // comes first. Thread-safe.
  class Ticket {
   public:
    Ticket(std::shared_ptr<State> state, std::string peer, int streams);
    ~Ticket() { release(); }
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    void release();
    // The data streams it holds.
    int streams() const { return streams_; }

   private:
    const std::shared_ptr<State> state_;
    const std::string peer_;
    const int streams_;
    std::once_flag released_;
  };

  Admission();

  // Admits one more connection from `peer_host` (an IP address) with
  // `streams` data streams (0: the local transport), or with `fit` as many
  // of them as max_streams leaves (at least one). kResourceExhausted names
  // the limit it would pass and its value. Never blocks.
  Result<std::unique_ptr<Ticket>> admit(const Options& options, const std::string& peer_host, int streams,
                                        bool fit = false);

 private:
  const std::shared_ptr<State> state_;
};

// The host part of "ip:port" or "[v6]:port".
std::string host_of(const std::string& address);

// The group whose handshakes share one peer's part of max_handshakes: an
// IPv4 address's /24 ("10.1.2.0/24"; an IPv4-mapped IPv6 address counts as
// its IPv4 address), an IPv6 address's /64 ("2001:db8::/64"); anything else
// is its own group. One attacker rarely holds addresses in many of these.
std::string address_group(const std::string& host);

}  // namespace ferry::core
