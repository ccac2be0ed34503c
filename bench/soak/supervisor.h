// The supervisor (`ferry_soak run`): starts the survivor and its peers,
// injects faults at random times, samples the survivor every second, runs a
// probe connection now and then, and at the end judges the run and prints
// one table (and, with --json, a file).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "soak/roles.h"

namespace ferry::soak {

struct RunArgs {
  EngineArgs engine;
  double seconds = 60;
  int peers = 2;
  int lanes = 2;
  uint64_t max_op_bytes = 64u << 20;
  bool gpu = false;                             // survivor on GPU 0, peers on GPU 1 (GPU 0 with one GPU)
  std::string faults = "all";                   // comma list of kill,stop,link,garbage,dereg,exhaust; "none"
  double fault_gap_min = 2, fault_gap_max = 5;  // seconds between faults
  double probe_every = 15;                      // seconds
  // TCP in a network-namespace lab: the survivor runs in `netns_server` and
  // listens on `server_host`; everything else runs in `netns_client`; the
  // link fault sets `link_dev` (in netns_server) down and up.
  std::string netns_server, netns_client, server_host, link_dev;
  std::string json;
  std::string out_dir;  // logs; empty: a fresh directory under the system's temporary directory
  uint64_t seed = 0;    // 0: random
  bool corrupt_one = false;
  bool hang_one = false;
};

// Returns 0 when the run passed, 1 when it failed, 2 on bad arguments.
int run_main(const RunArgs& a);

}  // namespace ferry::soak
