// HostCpuLoad: the aggregate "cpu" line of /proc/stat, differenced.
#include "platform/cpu_load.h"

#include <cstdio>

namespace ferry::platform {

HostCpuLoad::HostCpuLoad(std::string stat_path) : path_(std::move(stat_path)) { have_ = read(busy_, total_); }

bool HostCpuLoad::read(uint64_t& busy, uint64_t& total) const {
  FILE* f = std::fopen(path_.c_str(), "r");
  if (f == nullptr) return false;
  // cpu  user nice system idle iowait irq softirq steal ...
  unsigned long long v[8] = {};
  int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                      &v[7]);
  std::fclose(f);
  if (n < 5) return false;
  total = 0;
  for (int i = 0; i < n; ++i) total += v[i];
  busy = total - v[3] - v[4];
  return true;
}

std::optional<double> HostCpuLoad::busy_since_last(uint64_t min_ticks) {
  uint64_t busy = 0, total = 0;
  if (!read(busy, total)) return std::nullopt;
  if (!have_ || total < total_ || busy < busy_) {  // first reading, or the counters went back
    have_ = true;
    busy_ = busy;
    total_ = total;
    return std::nullopt;
  }
  if (total - total_ < min_ticks) return std::nullopt;
  double f = static_cast<double>(busy - busy_) / static_cast<double>(total - total_);
  busy_ = busy;
  total_ = total;
  return f > 1 ? 1.0 : f;
}

}  // namespace ferry::platform
