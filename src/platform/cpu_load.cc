// HostCpuLoad: the aggregate "cpu" line of /proc/stat and this process's
// getrusage, differenced.
#include "platform/cpu_load.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace ferry::platform {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

HostCpuLoad::HostCpuLoad(std::string stat_path, int64_t min_interval_ns)
    : path_(std::move(stat_path)),
      min_interval_ns_(min_interval_ns),
      us_per_tick_(1e6 / static_cast<double>(std::max(1L, ::sysconf(_SC_CLK_TCK)))) {
  have_ = read(busy_, total_);
  self_us_ = self_us();
  last_read_ns_ = now_ns();
}

int64_t HostCpuLoad::interval_for_ticks(uint64_t ticks) {
  auto ticks_per_s =
      static_cast<double>(std::max(1L, ::sysconf(_SC_CLK_TCK)) * std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  return static_cast<int64_t>(1e9 * static_cast<double>(ticks) / ticks_per_s);
}

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

uint64_t HostCpuLoad::self_us() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  auto us = [](const timeval& t) {
    return static_cast<uint64_t>(t.tv_sec) * 1'000'000 + static_cast<uint64_t>(t.tv_usec);
  };
  return us(u.ru_utime) + us(u.ru_stime);
}

std::optional<CpuReading> HostCpuLoad::since_last(uint64_t min_ticks) {
  int64_t now = now_ns();
  if (now - last_read_ns_ < min_interval_ns_) return std::nullopt;
  last_read_ns_ = now;
  uint64_t busy = 0, total = 0;
  if (!read(busy, total)) return std::nullopt;
  uint64_t self = self_us();
  if (!have_ || total < total_ || busy < busy_) {  // first reading, or the counters went back
    have_ = true;
    busy_ = busy;
    total_ = total;
    self_us_ = self;
    return std::nullopt;
  }
  if (total - total_ < std::max<uint64_t>(min_ticks, 1)) return std::nullopt;
  double ticks = static_cast<double>(total - total_);
  CpuReading r;
  r.host_busy = std::min(1.0, static_cast<double>(busy - busy_) / ticks);
  r.self = std::clamp(static_cast<double>(self - std::min(self, self_us_)) / (ticks * us_per_tick_), 0.0, 1.0);
  busy_ = busy;
  total_ = total;
  self_us_ = self;
  return r;
}

}  // namespace ferry::platform
