// Least-squares clock fits and the GPU-to-host clock map.
#include "profile/drift.h"

#include <algorithm>
#include <cmath>

namespace ferry::profile {

Result<ClockFit> fit_clock(const std::vector<ClockSample>& samples) {
  if (samples.size() < 2) {
    return Status(Code::kInvalidArgument, "clock fit: needs at least 2 samples, got " + std::to_string(samples.size()));
  }
  // Keep the readings whose round trip is at most the median one (all of
  // them when round trips tie), in time order.
  std::vector<int64_t> trips;
  for (const ClockSample& s : samples) trips.push_back(s.round_trip_ns);
  std::nth_element(trips.begin(), trips.begin() + static_cast<std::ptrdiff_t>((trips.size() - 1) / 2), trips.end());
  const int64_t limit = trips[(trips.size() - 1) / 2];
  std::vector<ClockSample> kept;
  for (const ClockSample& s : samples) {
    if (s.round_trip_ns <= limit) kept.push_back(s);
  }
  if (kept.size() < 2) kept = samples;
  std::sort(kept.begin(), kept.end(), [](const ClockSample& a, const ClockSample& b) { return a.host_ns < b.host_ns; });

  // Work relative to the first sample so that doubles hold nanoseconds exactly.
  const int64_t h0 = kept.front().host_ns;
  const int64_t g0 = kept.front().gpu_ns;
  const double n = static_cast<double>(kept.size());
  double mx = 0, my = 0;
  for (const ClockSample& s : kept) {
    mx += static_cast<double>(s.host_ns - h0);
    my += static_cast<double>(s.gpu_ns - g0);
  }
  mx /= n;
  my /= n;
  double sxx = 0, sxy = 0;
  for (const ClockSample& s : kept) {
    double dx = static_cast<double>(s.host_ns - h0) - mx;
    double dy = static_cast<double>(s.gpu_ns - g0) - my;
    sxx += dx * dx;
    sxy += dx * dy;
  }
  double slope = sxx > 0 ? sxy / sxx : 1.0;
  ClockFit fit;
  fit.host_ref_ns = h0 + static_cast<int64_t>(std::llround(mx));
  // The line passes through (mx, my); move it to the rounded host_ref.
  double at_ref = my + slope * (static_cast<double>(fit.host_ref_ns - h0) - mx);
  fit.gpu_ref_ns = g0 + static_cast<int64_t>(std::llround(at_ref));
  fit.ppm = (slope - 1.0) * 1e6;
  double sq = 0;
  for (const ClockSample& s : kept) {
    double predicted = my + slope * (static_cast<double>(s.host_ns - h0) - mx);
    double d = static_cast<double>(s.gpu_ns - g0) - predicted;
    sq += d * d;
  }
  fit.residual_ns = std::sqrt(sq / n);
  fit.samples = static_cast<int>(kept.size());
  fit.span_s = static_cast<double>(kept.back().host_ns - kept.front().host_ns) * 1e-9;
  return fit;
}

ClockMap::ClockMap(const ClockFit& start, const std::optional<ClockFit>& end)
    : host_ref_(start.host_ref_ns), gpu_ref_(start.gpu_ref_ns), rate_(1.0 + start.ppm * 1e-6) {
  if (end && end->host_ref_ns != start.host_ref_ns) {
    rate_ = static_cast<double>(end->gpu_ref_ns - start.gpu_ref_ns) /
            static_cast<double>(end->host_ref_ns - start.host_ref_ns);
  }
}

int64_t ClockMap::to_host(int64_t gpu_ns) const {
  return host_ref_ + static_cast<int64_t>(std::llround(static_cast<double>(gpu_ns - gpu_ref_) / rate_));
}

int64_t ClockMap::to_gpu(int64_t host_ns) const {
  return gpu_ref_ + static_cast<int64_t>(std::llround(static_cast<double>(host_ns - host_ref_) * rate_));
}

}  // namespace ferry::profile
