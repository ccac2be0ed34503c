// Medians and per-configuration statistics.
#include "profile/stats.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace ferry::profile {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double coefficient_of_variation(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  if (mean == 0) return 0;
  double sq = 0;
  for (double x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / static_cast<double>(v.size() - 1)) / mean;
}

std::vector<ConfigStats> config_stats(const std::vector<ExecutionRow>& rows) {
  struct Acc {
    ConfigStats s;
    std::vector<double> device, host;
  };
  std::map<std::tuple<int, int, uint64_t, int>, Acc> by;
  for (const ExecutionRow& r : rows) {
    if (r.role != "recv" && r.role != "copy") continue;
    Acc& a = by[{r.src, r.dst, r.size, r.config_id}];
    a.s.config_id = r.config_id;
    a.s.src = r.src;
    a.s.dst = r.dst;
    a.s.size = r.size;
    a.device.push_back(static_cast<double>(r.device_ns));
    a.host.push_back(static_cast<double>(r.duration_ns));
  }
  std::vector<ConfigStats> out;
  for (auto& [k, a] : by) {
    a.s.repetitions = static_cast<int>(a.device.size());
    a.s.median_device_ns = median(a.device);
    a.s.median_host_ns = median(a.host);
    a.s.cv = coefficient_of_variation(a.device);
    out.push_back(a.s);
  }
  return out;
}

}  // namespace ferry::profile
