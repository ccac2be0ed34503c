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
#include <vector>

#include "ferry/bench_session.h"
#include "ferry/ferry.h"

namespace ferry::cli {

// --peers: sessions beside the peers' own, each on a connection of one more
// engine: a 4 KiB round trip timed with every peer connected and idle, then
// again while the peers move data (issue 61: under load within 2 x its idle
// p99).
inline constexpr int kProbeSessions = 2;
inline constexpr size_t kProbeBytes = 4096;

// Peers one run may have: a target serves at most kMaxGroup sessions of one
// group, the probes included.
inline constexpr int kMaxPeers = kMaxGroup - kProbeSessions;

// What the engines must be told so that `peers` connections are admitted:
// the environment (FERRY_MAX_CONNECTIONS, FERRY_MAX_CONNECTIONS_PER_PEER:
// all connections are between 127.0.0.1 and itself) is raised to `peers`
// where it is unset and its default would refuse some, for this process's
// engines and the target's, so call this before starting the target. The
// flags returned go to the target's command line: "--max-sessions N" (one
// engine serving N peers) or, `fan_out`, "--engines N" (N engines, one
// session each).
std::vector<std::string> prepare_fleet_target(int peers, bool fan_out);

struct FleetRun {
  int peers = 1;                     // connections in all
  bool fan_out = false;              // false: `peers` engines -> 1 target engine; true: 1 engine -> `peers` targets
  std::vector<std::string> targets;  // the target engines' addresses (1, or `peers` with fan_out)
  pid_t target_pid = 0;              // the target process
  std::string json_out;              // "" none, "-" stdout (then no table), else a file
};

// --fan-out N is the other way: one engine of this process connects to each
// of N target engines (one target process holds them all), and the numbers
// sampled are this process's, the initiator's.
//
// With --peers, a probe engine also connects twice and times a 4 KiB
// pingpong alone (every peer connected, none moving) and then during the
// first size's timed phase; the table says how much of the loaded probe the
// phase covered. The "loaded" sample of the target counts the probe's
// connection too; "idle" (taken before the probes) and the idle CPU share
// count the peers' alone.
//
// Connects `run.peers` engines made from `o` to the target one after another
// (each session starts as soon as its connection is up: a target gives a
// connection 5 s to send its configuration), runs `cfg` on all of them with
// the timed phase of each size started and ended together, and prints the
// table on stdout and/or the JSON. Blocks until done. Returns the exit code:
// 0, or 3 when a verified operation failed; any other failure exits 1 with a
// message, as run_initiator does.
int run_fleet(const FleetRun& run, const Options& o, const RunConfig& cfg);

}  // namespace ferry::cli
