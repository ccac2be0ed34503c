// The verdict of a soak run: what happened, whether it passed, and the table
// (and JSON) that says so.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "soak/sampler.h"

namespace ferry::soak {

struct Report {
  std::string transport, memory, dir;
  double seconds = 0;
  int peers = 0, lanes = 0;
  uint64_t max_op_bytes = 0;
  // Summed TICK counters: the survivor's, and every other process's.
  std::map<std::string, uint64_t> survivor, others;
  std::map<std::string, uint64_t> faults;
  std::map<std::string, std::string> skipped;
  std::vector<std::string> never_injected;
  uint64_t corruptions = 0, hangs = 0, violations = 0, crashes = 0, restarts = 0;
  uint64_t probes_ok = 0, probes_failed = 0;
  bool final_probe_ok = false;
  Sample baseline, final_sample;
  int leaked_fds = 0, leaked_threads = 0;
  Drift drift;
  bool strict = false;  // no faults: any failed operation fails the run
  std::vector<std::string> problems, garbage;

  uint64_t failed_ops() const;
  // Operations that failed with deadline_exceeded: every fault the soak
  // injects must surface as its cause (peer_lost, not_found, ...) well
  // within an operation's deadline (20 s and more; peer_timeout is 2 s).
  uint64_t late_failures() const;
  bool passed() const;
  std::string table() const;
  std::string json() const;
};

}  // namespace ferry::soak
