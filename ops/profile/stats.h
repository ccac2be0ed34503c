// Small statistics for profile summaries: medians, coefficient of variation,
// and per-configuration reduction of an execution log.
#pragma once

#include <cstdint>
#include <vector>

#include "profile/run_files.h"

namespace ferry::profile {

double median(std::vector<double> v);  // 0 for an empty vector
// Sample standard deviation over mean; 0 for fewer than two values.
double coefficient_of_variation(const std::vector<double>& v);

// One configuration's repetitions. An operation's time is its receiver's
// (role "recv", or "copy" when one process drives both GPUs): an operation is
// done when the data is in place.
struct ConfigStats {
  int config_id = 0;
  int src = 0;
  int dst = 0;
  uint64_t size = 0;
  int repetitions = 0;
  double median_device_ns = 0;
  double median_host_ns = 0;
  double cv = 0;  // of device times
  double gbps() const { return median_device_ns > 0 ? static_cast<double>(size) / median_device_ns : 0; }
};

// Per configuration, ordered by (src, dst, size).
std::vector<ConfigStats> config_stats(const std::vector<ExecutionRow>& rows);

}  // namespace ferry::profile
