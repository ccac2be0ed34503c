// EngineContext: what an engine shares with its transports and connections
// (options, identity, registry, what its connections hold). Held by
// shared_ptr so a connection that outlives its Engine object still finds
// valid state.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/registry.h"
#include "core/worker_cpus.h"
#include "ferry/options.h"
#include "platform/interfaces.h"

namespace ferry::local {
class GpuExports;
class GpuImports;
}  // namespace ferry::local

namespace ferry::core {

// Admission: the connections an engine holds (accepted, dialed or waiting in
// the accept queue), per peer address, and their data streams (two threads
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

   private:
    const std::shared_ptr<State> state_;
    const std::string peer_;
    const int streams_;
    std::once_flag released_;
  };

  Admission();

  // Admits one more connection from `peer_host` (an IP address) with
  // `streams` data streams (0: the local transport). kResourceExhausted
  // names the limit it would pass and its value. Never blocks.
  Result<std::unique_ptr<Ticket>> admit(const Options& options, const std::string& peer_host, int streams);

 private:
  const std::shared_ptr<State> state_;
};

// The host part of "ip:port" or "[v6]:port".
std::string host_of(const std::string& address);

struct EngineContext {
  Options options;
  uint64_t engine_id = 0;
  std::string host_id;
  // The NICs named by Options::nics (empty: none named).
  std::vector<platform::Interface> nics;
  // "ip:port" peers may reach this engine at, preferred first. Written once
  // by Engine::create before the listener accepts anyone.
  std::vector<std::string> addresses;
  // NUMA node of each named NIC (-1 unknown).
  std::map<std::string, int> nic_nodes;
  // The host's shape as read at start (empty where sysfs says nothing).
  platform::Topology topology;
  // CPUs of each NIC's transmit and receive workers.
  WorkerCpus worker_cpus;
  Registry registry;
  Admission admission;
  // GPU memory shared with and opened from same-host peers (local transport).
  std::shared_ptr<local::GpuExports> gpu_exports;
  std::shared_ptr<local::GpuImports> gpu_imports;
};

}  // namespace ferry::core
