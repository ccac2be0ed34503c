// The processes of a soak, one function each. `ferry_soak run` (the
// supervisor, supervisor.h) starts the others; they can also be started by
// hand for debugging.
//
//   survivor  the engine that must survive: serves lanes, holds and floods
//   peer      lanes against the survivor (also: probe, hold, memflood)
//   garbage   hostile bytes and half handshakes at the listening port
//   selfcheck the plans' and the pattern's own invariants
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "ferry/options.h"

namespace ferry::soak {

// What every ferry engine of one soak shares.
struct EngineArgs {
  std::string transport = "tcp";  // tcp or local
  std::chrono::milliseconds peer_timeout{2000};
  std::chrono::milliseconds handshake_timeout{2000};
  int max_connections_per_peer = 12;
  size_t connection_memory_bytes = 96u << 20;
  int gpu = -1;  // GPU ordinal for every buffer, -1 for host memory
};

Options engine_options(const EngineArgs& a, const std::string& listen);

struct SurvivorArgs {
  EngineArgs engine;
  std::string listen = "127.0.0.1:0";
  uint64_t max_op_bytes = 64u << 20;
  int slots = 6;
  bool corrupt_one = false;
  bool hang_one = false;
  std::chrono::milliseconds margin{5000};
};

struct PeerArgs {
  EngineArgs engine;
  std::string connect;
  std::string mode = "lane";  // lane, probe, hold, memflood
  int lanes = 2;
  uint64_t max_op_bytes = 64u << 20;
  uint64_t seed = 1;
  uint64_t probe_ops = 40;
  int hold_count = 16;
  bool corrupt_one = false;
  std::chrono::milliseconds margin{12000};
};

struct GarbageArgs {
  std::string connect;
  uint64_t seed = 1;
  std::chrono::milliseconds handshake_timeout{2000};
};

int survivor_main(const SurvivorArgs& a);
int peer_main(const PeerArgs& a);
int garbage_main(const GarbageArgs& a);
// The plans' and the pattern's invariants, without an engine (selfcheck.cc).
int selfcheck_main(uint64_t plans);

}  // namespace ferry::soak
