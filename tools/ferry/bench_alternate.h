// `ferry bench --alternate-nics A/B/...`: one engine and connection per NIC
// set, bursts of writes taking turns (see bench_pairs.h for why).
#pragma once

#include <string>
#include <vector>

#include "ferry/bench_session.h"
#include "ferry/ferry.h"

namespace ferry::cli {

// Runs `rounds` rounds after one warm-up round; in each, every set moves
// cfg.iters operations of cfg.sizes[0] while the others wait. Prints one line
// per round (GB/s per set) and, per set, its median and its paired ratio
// against the first set. Returns the process exit code.
int run_alternating(const std::vector<std::string>& nic_sets, const Options& base, RunConfig cfg, int rounds,
                    const std::string& peer);

}  // namespace ferry::cli
