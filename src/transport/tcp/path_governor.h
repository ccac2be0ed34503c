// PathGovernor: how many of a connection's live paths take new chunks.
//
// More paths are not always faster. On links that each carry less than one
// path can push (rate-limited NICs), every extra path adds bandwidth; on links
// faster than the CPU, every extra path adds a sender and a receiver thread
// that compete for the same cores, and throughput falls (measured in the netns
// lab on a 2-core host: 64 MiB writes over two unlimited veth links ran at
// 0.75-0.93x of one). No static rule tells the two apart, so the governor
// measures: it starts on every path (a short transfer gets them all; starting
// on one and climbing made 16 MiB transfers over 16 loopback streams 3x
// slower), and tries stepping down the ladder all, ..., 4, 2, 1, keeping a
// step only when it raises throughput by more than `kGain`. A step that does
// not pay is undone and tried again after exponentially longer waits. Counts
// are compared by their running averages over all samples taken at them, not
// by one sample each: one 10 ms sample on a busy 2-core host varies by ±20%,
// more than the 10% a path count can be worth there. After
// stepping down it also tries stepping back up now and then, so that paths
// return when they pay again.
//
// Throughput is counted only while the connection has chunks queued or in
// flight (idle gaps between transfers do not count), in samples of at least
// `sample_ns` of busy time and of at least kMinReports landing reports (the
// peer confirms landing every few chunks, so on a slow link a short sample
// holds one confirmation or two and its rate is off by 2x). After every change nothing counts until every
// chunk sent before it has landed: on links of 1 Gbit/s a path's window takes
// ~70 ms to drain, and a probe judged meanwhile sees the old paths' rate.
//
// Pure logic, no clock or locking of its own: the ChunkQueue feeds it under its
// lock, which lets the tests drive it with modelled links.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry::tcp {

// Whether a connection of `paths` paths in a process that may run on `cpus`
// CPUs lets the governor judge at all ("adaptive"): fewer paths can only pay
// when the paths' workers, a sender and a receiver thread each, outnumber the
// cores. Elsewhere every path stays on; measured on a 32-core host, GPU
// memory over 16 loopback paths under the governor ran 1 GiB at 14-20 GB/s,
// with every path at 37.6 GB/s.
inline bool governor_engages(int paths, int cpus) { return paths > 1 && 2 * paths > cpus; }

class PathGovernor {
 public:
  // A step must raise throughput by this fraction to be kept.
  static constexpr double kGain = 0.05;
  // Probes that fail wait this many samples, doubling up to kMaxWait.
  static constexpr int kFirstWait = 8;
  static constexpr int kMaxWait = 128;
  // A sample spans at least this many landing reports.
  static constexpr int kMinReports = 8;

  // `adaptive` false: every live path, always.
  PathGovernor(bool adaptive, int paths, int64_t sample_ns);

  // How many of the live paths may take new chunks (the lowest-numbered ones
  // of each transfer's allowed set).
  int active(int live) const;

  // `bytes` landed after `busy_ns` of busy time since the previous report.
  // `flushed`: every chunk sent before the last change of target() has
  // landed (until then the report only restarts the sample).
  void on_landed(uint64_t bytes, int64_t busy_ns, bool flushed = true);

  // Observations for logs and tests: the count in use now (a probe's while
  // probing) and the count a probe returns to.
  int target() const { return current_; }
  int kept() const { return kept_; }
  // Running average rate at `n` paths (bytes per ns), 0 before any sample.
  double average(int n) const { return n >= 1 && n <= paths_ ? average_[static_cast<size_t>(n)] : 0; }
  double last_rate() const { return base_rate_; }

 private:
  enum class Phase { kBase, kProbe };
  void finish_sample(double rate);
  void record(int n, double rate);
  int step_up(int n) const;
  int step_down(int n) const;

  const bool adaptive_;
  const int paths_;
  const int64_t sample_ns_;
  int current_;          // the path count in force
  int kept_;             // the count a probe returns to when it fails
  Phase phase_ = Phase::kBase;
  uint64_t sample_bytes_ = 0;
  int sample_reports_ = 0;
  int64_t sample_ns_so_far_ = 0;
  double base_rate_ = 0;         // last sample at kept_, bytes per ns
  std::vector<double> average_;  // by path count: running average of its samples
  int wait_up_ = kMaxWait / 2;  // samples at kept_ before the next probe upward
  int wait_down_ = kFirstWait;   // ... downward
  int backoff_up_ = kFirstWait;
  int backoff_down_ = kFirstWait;
  bool probing_up_ = false;
};

}  // namespace ferry::tcp
