// PathGovernor: how many of a connection's live paths take new chunks.
//
// More paths are not always faster. On links that each carry less than one
// path can push (rate-limited NICs), every extra path adds bandwidth; on links
// faster than the CPU, every extra path adds a sender and a receiver thread
// that compete for the same cores, and throughput falls (measured in the netns
// lab on a 2-core host: 64 MiB writes over two unlimited veth links ran at
// 0.75-0.93x of one). The governor tells the two apart by the host's CPU load:
//
// - It starts on as many paths as the host's cores run without the paths'
//   workers outnumbering them (governor_start: one on a 2-core host, 16 on a
//   32-core one) and doubles the count (1, 2, 4, ... all) at every
//   CPU reading that finds the host's CPUs less than kHeadroom busy: with
//   cores to spare more paths cannot cost, and on links of 1 Gbit/s one path
//   keeps 5-10% of a 2-core host busy, four 11-30% (the sending process
//   3-13%). On unlimited links one path keeps it 70-94% busy, the sending
//   process alone 53%, and the count stays at one. It also doubles when the
//   CPUs are busy but this process uses less than kOwnShare of them (other
//   work is the load, and paths that mostly wait on their links cost it
//   little), once that has held for kShareReadings readings in a row, none of
//   them in the connection's first kWarmupNs of busy time: a first transfer
//   runs slowly for reasons no path count changes (TCP's slow start, the
//   receiver's first touch of its buffer), and in the netns lab, where the
//   receiver shares the host, the sender's share then reads 11-24% at 50-75%
//   busy (against ~50% and 100% once under way). Taken at face value, those
//   readings climbed unlimited links of the 2-core lab to two paths.
// - While the CPUs are saturated (kSaturated busy, at least kOwnShare of it
//   this process's) it tries stepping down (all, ..., 4, 2, 1), keeping a
//   step unless it moves more than kTolerance less: fewer paths that move as
//   much leave the CPUs to the transfer (when a step had to be 5% faster,
//   two paths that a transient had climbed to stayed for whole runs on a
//   host where one moved as much). A step that moves less is undone and
//   tried again after exponentially longer waits, and a count it stepped
//   down from is not climbed back to before such a wait either. The count
//   in use is judged by its running average over all its samples (one 10 ms
//   sample on a busy 2-core host varies by ±20%, more than the 10% a path
//   count can be worth there); a probed count by the probe's own sample,
//   since its older samples may come from a slow start or another load.
// Without a CPU reading (no /proc/stat) it climbs to every path and stays.
// No throughput sample is judged in the warm-up either. A CPU reading whose
// span was more than kMaxIdleShare idle (nothing to send) is dropped: it says
// how busy the host was without this traffic.
//
// Throughput is counted only while the connection has chunks queued or in
// flight (idle gaps between transfers do not count), in samples of at least
// `sample_ns` of busy time and of at least kMinReports landing reports (the
// peer confirms landing every few chunks, so on a slow link a short sample
// holds one confirmation or two and its rate is off by 2x). After every change
// no throughput counts until every chunk sent before it has landed: on links
// of 1 Gbit/s a path's window takes ~70 ms to drain, and a probe judged
// meanwhile sees the old paths' rate. CPU load is read every `sample_ns` of
// busy time (or later, once /proc/stat's 10 ms ticks allow), and less often
// while nothing changes: each reading that leaves the count as it was and
// falls in the same class as the one before (idle cores, between, saturated;
// this process's share under kOwnShare or not) doubles the busy time to the
// next, up to kMaxReadingSamples samples; any change of count or class goes
// back to one sample. Reading /proc/stat is not free to the transfer it
// measures: in the netns lab (2 cores, 64 MiB writes over two links of
// which the governor used one, alternating with one link) a reading every
// 5 ms cost 3-5% of throughput, one every 20 ms 1-3%, one every 200 ms
// nothing measurable; where the cost comes from is not known.
//
// Pure logic, no clock or locking of its own: the ChunkQueue feeds it under
// its lock, and the CPU reading comes through a function, which lets the tests
// drive it with modelled links and hosts. The queue reads that function
// outside its lock (reading_due(), then the reading passed to on_landed), so
// its transmit workers never wait on /proc/stat.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "platform/cpu_load.h"

namespace ferry::tcp {

// Whether a connection of `paths` paths in a process that may run on `cpus`
// CPUs lets the governor judge at all ("adaptive"): fewer paths can only pay
// when the paths' workers, a sender and a receiver thread each, outnumber the
// cores. Elsewhere every path stays on; measured on a 32-core host, GPU
// memory over 16 loopback paths under the governor ran 1 GiB at 14-20 GB/s,
// with every path at 37.6 GB/s.
inline bool governor_engages(int paths, int cpus) { return paths > 1 && 2 * paths > cpus; }

// The count an engaged governor starts at: the most paths whose workers do
// not outnumber `cpus` (cpus / 2), as a power of two, at least one. Fewer
// cannot pay (see governor_engages), and climbing to them takes CPU readings
// a short transfer does not last: measured on a 32-core host, 24 paths
// starting on one moved 16 MiB at 7.8-8.6 GB/s GPU to GPU and 17.7-18.8 host
// to host (two in flight), against 21.5-22.8 and 37.4-42.0 with every path.
inline int governor_start(int paths, int cpus) {
  int start = 1;
  while (start * 2 <= cpus / 2 && start * 2 <= paths) start *= 2;
  return start;
}

class PathGovernor {
 public:
  // The CPU load since the previous call; nullopt while unknown.
  using CpuMeter = std::function<std::optional<platform::CpuReading>()>;

  // Climb while the host's CPUs are less busy than this; try fewer paths
  // only while they are at least kSaturated busy. (A reading spans as few as
  // 4 ticks of /proc/stat, so it moves in steps of 25% on a 2-core host.)
  static constexpr double kHeadroom = 0.5;
  static constexpr double kSaturated = 0.75;
  // ... or while this process uses less than this share of all CPUs.
  static constexpr double kOwnShare = 0.25;
  // Probes that fail wait this many samples, doubling up to kMaxWait.
  static constexpr int kFirstWait = 8;
  static constexpr int kMaxWait = 128;
  // A sample spans at least this many landing reports.
  static constexpr int kMinReports = 8;
  // CPU readings that span more idle time than this share are dropped.
  static constexpr double kMaxIdleShare = 0.2;
  // A step down is kept unless it moves more than this fraction less.
  static constexpr double kTolerance = 0.03;
  // A climb because others load the CPUs needs this many readings in a row.
  static constexpr int kShareReadings = 2;
  // Steady CPU readings come at most this many samples of busy time apart.
  static constexpr int kMaxReadingSamples = 16;
  // Busy time at the start of a connection in which no throughput sample
  // and no reading of this process's share counts.
  static constexpr int64_t kWarmupNs = 100'000'000;

  // `adaptive` false: every live path, always. `cpu` empty: no CPU reading.
  // An adaptive governor starts on `start` paths.
  PathGovernor(bool adaptive, int paths, int64_t sample_ns, CpuMeter cpu = {}, int start = 1);

  // How many of the live paths may take new chunks (the lowest-numbered ones
  // of each transfer's allowed set).
  int active(int live) const;
  // Whether it ever changes the count (adaptive, and more than one path):
  // otherwise landing reports need not reach it.
  bool judges() const { return adaptive_ && paths_ > 1; }

  // `bytes` landed after `busy_ns` of busy time since the previous report.
  // `flushed`: every chunk sent before the last change of target() has
  // landed (until then the report only restarts the throughput sample).
  // Reads the meter when a CPU reading is due.
  void on_landed(uint64_t bytes, int64_t busy_ns, bool flushed = true);
  // The same with the reading taken by the caller, who asked reading_due()
  // first and called meter() if so: a report that takes a reading uses
  // `reading` (nullopt: none yet, as when the meter has none), one that takes
  // none ignores it.
  void on_landed(uint64_t bytes, int64_t busy_ns, bool flushed, std::optional<platform::CpuReading> reading);
  // Whether a report of `busy_ns` more busy time would take a CPU reading.
  bool reading_due(int64_t busy_ns) const;
  // The CPU meter (empty: none).
  const CpuMeter& meter() const { return cpu_; }
  // The connection had nothing queued or in flight for `idle_ns`.
  void on_idle(int64_t idle_ns);

  // Busy time from one CPU reading to the next (see above).
  int64_t reading_interval() const { return reading_every_ns_; }

  // Observations for logs and tests: the count in use now (a probe's while
  // probing) and the count a probe returns to.
  int target() const { return current_; }
  int kept() const { return kept_; }
  // Running average rate at `n` paths (bytes per ns), 0 before any sample.
  double average(int n) const { return n >= 1 && n <= paths_ ? average_[static_cast<size_t>(n)] : 0; }
  double last_rate() const { return base_rate_; }
  // The last CPU reading: the host's busy fraction (negative before the
  // first) and this process's share.
  double last_cpu() const { return cpu_busy_; }
  double last_own_cpu() const { return cpu_self_; }

 private:
  enum class Phase { kBase, kProbe };
  void landed(uint64_t bytes, int64_t busy_ns, bool flushed, const std::optional<platform::CpuReading>& reading);
  void read_cpu(const std::optional<platform::CpuReading>& r);
  void finish_sample(double rate);
  void record(int n, double rate);
  void restart_sample();
  int step_up(int n) const;
  int step_down(int n) const;

  const bool adaptive_;
  const int paths_;
  const int64_t sample_ns_;
  CpuMeter cpu_;
  int current_;  // the path count in force
  int kept_;     // the count a probe returns to when it fails
  Phase phase_ = Phase::kBase;
  uint64_t sample_bytes_ = 0;
  int sample_reports_ = 0;
  int64_t sample_ns_so_far_ = 0;
  int64_t cpu_window_ns_ = 0;  // busy time since the last CPU reading
  int64_t cpu_idle_ns_ = 0;    // idle time since the last CPU reading
  int share_readings_ = 0;     // readings in a row with the load mostly others'
  int64_t warmup_left_ns_ = kWarmupNs;
  bool share_reading_spans_warmup_ = false;  // the next CPU reading began in the warm-up
  double cpu_busy_ = -1;                     // the last reading; -1: none yet
  double cpu_self_ = 0;
  double base_rate_ = 0;         // last sample at kept_, bytes per ns
  std::vector<double> average_;  // by path count: running average of its samples (a probed count: the probe's)
  int wait_down_ = 1;            // samples at kept_ before the next probe downward
  int backoff_down_ = kFirstWait;
  int ceiling_ = 0;     // a count measured no faster than one below it (0: none)
  int climb_wait_ = 0;  // CPU readings before climbing to ceiling_ again
  int backoff_up_ = kFirstWait;
  int64_t reading_every_ns_;  // busy time between CPU readings: sample_ns_, doubling while steady
  int reading_class_ = -1;    // the last reading's class; -1 before the first
};

}  // namespace ferry::tcp
