// Clock drift between a GPU's timer and the host's CLOCK_MONOTONIC, and the
// mapping from one to the other that puts every rank's GPU events on the host
// timeline (seed 003's timestamp alignment).
//
// A measurement window pairs host and GPU readings taken close together over
// some seconds; a least-squares line through them gives the GPU clock's rate
// against the host's (drift, in ppm) and a reference point on that line. A run
// measures a window at its start and one at its end; ClockMap joins their
// reference points, so events between them are placed with the average rate
// of the run, and the change of drift between windows says how stable it was.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ferry/status.h"

namespace ferry::profile {

// One reading: the host time halfway through a round trip to the GPU, the GPU
// timer read during it, and the round trip's length (the reading's error bar).
struct ClockSample {
  int64_t host_ns = 0;
  int64_t gpu_ns = 0;
  int64_t round_trip_ns = 0;
};

// The fitted line gpu = gpu_ref + (1 + ppm * 1e-6) * (host - host_ref).
struct ClockFit {
  int64_t host_ref_ns = 0;  // mean host time of the samples kept
  int64_t gpu_ref_ns = 0;   // the line's GPU time at host_ref_ns
  double ppm = 0;           // GPU rate minus host rate, parts per million
  double residual_ns = 0;   // RMS distance of the kept samples from the line
  int samples = 0;          // samples kept (round trip at most the median)
  double span_s = 0;        // host seconds from first to last kept sample
};

// Fits a line through `samples`, keeping those whose round trip is at most
// the median (slow round trips carry a scheduling delay, not clock
// information).
// kInvalidArgument for fewer than 2 samples; with all samples at one host
// time, ppm is 0 and only the offset is known.
Result<ClockFit> fit_clock(const std::vector<ClockSample>& samples);

// GPU time -> host time for one GPU over one run.
class ClockMap {
 public:
  // From the start window alone (rate from its fit), or from start and end
  // (rate from the line joining their reference points).
  explicit ClockMap(const ClockFit& start, const std::optional<ClockFit>& end = std::nullopt);

  int64_t to_host(int64_t gpu_ns) const;
  int64_t to_gpu(int64_t host_ns) const;
  // GPU ticks per host tick, minus one, in ppm.
  double ppm() const { return (rate_ - 1.0) * 1e6; }

 private:
  int64_t host_ref_;
  int64_t gpu_ref_;
  double rate_;  // d(gpu) / d(host)
};

}  // namespace ferry::profile
