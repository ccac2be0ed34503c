// Resource samples of one process (resident memory, threads, open
// descriptors) from /proc, and the drift check over a run's samples.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::soak {

struct Sample {
  double t = 0;  // seconds since the run began
  uint64_t rss_kib = 0;
  int threads = 0;
  int fds = 0;
};

// False if the process is gone.
bool sample_process(pid_t pid, Sample* out);

// The run's verdict on growth: the median of the last quarter of the samples
// after warm-up against the median of the first quarter.
struct Drift {
  bool checked = false;  // enough samples to judge
  bool ok = true;
  Sample early, late;  // medians of each window
  std::string detail;
};

// Tolerances: resident memory +64 MiB, threads +12, descriptors +12 (the
// survivor's connections come and go with the faults; a leak grows
// without bound and crosses these within minutes). Warm-up: the first 10 %
// of the samples, at least 10 s.
Drift judge_drift(const std::vector<Sample>& samples);

}  // namespace ferry::soak
