// HostCpuLoad: how busy this host's CPUs were between two readings, from
// /proc/stat, and how much of that was this process (getrusage). The path
// governor asks it whether a connection's workers have cores to spare (more
// paths cannot cost then) or compete for them.
//
// Reading /proc/stat costs ~11 us (the kernel formats every CPU's and IRQ's
// counters); asked at every landing report, a 2-core host read it ~2000
// times a second while waiting for enough ticks, a few percent of a core
// taken from the transfer it measures. `min_interval_ns` paces the reads.
//
// Thread-compatible: one owner calls since_last().
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ferry::platform {

struct CpuReading {
  double host_busy = 0;  // all CPUs' time spent busy (neither idle nor waiting for I/O), in [0, 1]
  double self = 0;       // this process's CPU time as a fraction of all CPUs' time, in [0, 1]
};

class HostCpuLoad {
 public:
  // `stat_path`: /proc/stat, or a fixture in tests. `min_interval_ns`: calls
  // sooner than this after the previous read of the file do not read it.
  explicit HostCpuLoad(std::string stat_path = "/proc/stat", int64_t min_interval_ns = 0);

  // The wall time in which this host's CPUs together count `ticks` ticks of
  // /proc/stat: a reading that needs that many cannot come sooner.
  static int64_t interval_for_ticks(uint64_t ticks);

  // Whether the file could be read at construction.
  bool available() const { return have_; }

  // The load since the previous reading. /proc/stat counts in clock ticks
  // (10 ms per CPU), so a reading needs at least `min_ticks` of them: before
  // that, within `min_interval_ns` of the last read, or when the file cannot
  // be read, it is nullopt and the window keeps growing.
  std::optional<CpuReading> since_last(uint64_t min_ticks = 4);

 private:
  bool read(uint64_t& busy, uint64_t& total) const;
  static uint64_t self_us();

  const std::string path_;
  const int64_t min_interval_ns_;
  const double us_per_tick_;
  int64_t last_read_ns_ = 0;
  uint64_t busy_ = 0, total_ = 0, self_us_ = 0;
  bool have_ = false;
};

}  // namespace ferry::platform
