// One process's part of a `ferry profile` run: warm-up, timing loop, drift
// windows, verification, and the rank's files. The same code serves the
// one-process backends (rank 0 of 1) and each child of a process-per-GPU run.
#pragma once

#include <string>
#include <vector>

#include "ferry/profile_backend.h"
#include "ferry/status.h"
#include "profile/nvml.h"
#include "profile/plan.h"

namespace ferry::cli::profile {

struct RankOptions {
  std::string backend;                       // its name, for the files
  int rank = 0;
  int world = 1;
  std::vector<int> gpus;                     // every GPU of the plan
  std::vector<uint64_t> sizes;
  std::vector<ferry::profile::Config> plan;  // execution order
  uint64_t seed = 42;
  int warmup = 5;
  int repetitions = 10;
  double drift_seconds = 30;
  int warm_to_c = 0;                         // 0: no thermal warm-up
  double warm_limit_s = 60;
  std::string run_dir;
  std::string command_line;
  std::vector<std::string> warnings;         // pre-flight findings to record
  bool progress = true;                      // progress and ETA on stderr
};

struct RankResult {
  uint64_t bad_bytes = 0;
  int operations = 0;
};

// Runs the rank and writes rank_N.trace.json, metadata_rank_N.yml and the
// part files execution_log.rank_N.csv and clock_drift.rank_N.csv into
// opts.run_dir. `nvml` may be null (no facts recorded then). Blocks for the
// whole run. A verification failure is not an error here: the files are
// written and bad_bytes says it.
Result<RankResult> run_rank(Backend& backend, const RankOptions& opts, const ferry::profile::Nvml* nvml);

// CLOCK_MONOTONIC in nanoseconds.
int64_t monotonic_ns();

}  // namespace ferry::cli::profile
