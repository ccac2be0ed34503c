// `ferry bench --local --peers N`: N initiator engines of this process, each
// with one connection to one target process, run the same session at once.
// Measures what issue 61 asks of a data plane shared by many peers: the
// aggregate rate, each peer's rate and latency (and the slowest peer's share
// of the mean), the time to connect all N, and the target's threads, open
// descriptors and resident memory with 1 peer, with N idle and under load.
// The target is the --local child (bench_local_target.h), so /proc shows
// its numbers alone; the sessions are bench_session.h's, unchanged.
#pragma once

#include <sys/types.h>

#include <string>

#include "ferry/bench_session.h"
#include "ferry/ferry.h"

namespace ferry::cli {

// Peers one run may have: a target serves at most kMaxGroup sessions of one group.
inline constexpr int kMaxPeers = kMaxGroup;

// What the target must be told so that it admits `peers` at once: the
// environment (FERRY_MAX_CONNECTIONS, FERRY_MAX_CONNECTIONS_PER_PEER: all
// peers come from one address) is raised to `peers` where it is unset or its
// default would refuse some, so call this before starting the target; the
// flags returned ("--max-sessions N") go to the target's command line.
std::vector<std::string> prepare_fleet_target(int peers);

struct FleetRun {
  int peers = 1;
  std::string target;    // the target's address
  pid_t target_pid = 0;  // its process, sampled from /proc
  std::string json_out;  // "" none, "-" stdout (then no table), else a file
};

// Connects `run.peers` engines made from `o` to the target one after another
// (each session starts as soon as its connection is up: a target gives a
// connection 5 s to send its configuration), runs `cfg` on all of them with
// the timed phase of each size started and ended together, and prints the
// table on stdout and/or the JSON. Blocks until done. Returns the exit code:
// 0, or 3 when a verified operation failed; any other failure exits 1 with a
// message, as run_initiator does.
int run_fleet(const FleetRun& run, const Options& o, const RunConfig& cfg);

}  // namespace ferry::cli
