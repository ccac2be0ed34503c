// PathGovernor: the measured climb over path counts.
#include "transport/tcp/path_governor.h"

#include <algorithm>

namespace ferry::tcp {

PathGovernor::PathGovernor(bool adaptive, int paths, int64_t sample_ns)
    : adaptive_(adaptive),
      paths_(std::max(1, paths)),
      sample_ns_(sample_ns),
      current_(paths_),
      kept_(paths_),
      average_(static_cast<size_t>(paths_) + 1, 0.0) {}

void PathGovernor::record(int n, double rate) {
  double& a = average_[static_cast<size_t>(n)];
  a = a == 0 ? rate : 0.5 * a + 0.5 * rate;
}

int PathGovernor::active(int live) const { return std::clamp(current_, 1, std::max(1, live)); }

int PathGovernor::step_up(int n) const {
  int up = 1;
  while (up <= n) up *= 2;
  return std::min(up, paths_);
}

int PathGovernor::step_down(int n) const {
  if (n <= 1) return 1;
  int down = 1;
  while (down * 2 < n) down *= 2;
  return down;
}

void PathGovernor::on_landed(uint64_t bytes, int64_t busy_ns, bool flushed) {
  if (!adaptive_ || paths_ == 1) return;
  if (!flushed) {
    sample_bytes_ = 0;
    sample_ns_so_far_ = 0;
    sample_reports_ = 0;
    return;
  }
  sample_bytes_ += bytes;
  sample_ns_so_far_ += std::max<int64_t>(0, busy_ns);
  ++sample_reports_;
  if (sample_ns_so_far_ < sample_ns_ || sample_reports_ < kMinReports) return;
  double rate = static_cast<double>(sample_bytes_) / static_cast<double>(sample_ns_so_far_);
  sample_bytes_ = 0;
  sample_ns_so_far_ = 0;
  sample_reports_ = 0;
  finish_sample(rate);
}

void PathGovernor::finish_sample(double rate) {
  switch (phase_) {
    case Phase::kBase: {
      base_rate_ = rate;
      record(kept_, rate);
      bool can_up = kept_ < paths_, can_down = kept_ > 1;
      if (can_down && --wait_down_ <= 0) {
        probing_up_ = false;
        current_ = step_down(kept_);
      } else if (can_up && --wait_up_ <= 0) {
        probing_up_ = true;
        current_ = step_up(kept_);
      } else {
        return;
      }
      phase_ = Phase::kProbe;
      return;
    }
    case Phase::kProbe:
      record(current_, rate);
      if (average(current_) > average(kept_) * (1 + kGain)) {
        // The step paid: keep it, keep going the same way at once, and look
        // back the other way only rarely (that step was just measured).
        kept_ = current_;
        base_rate_ = rate;
        backoff_up_ = backoff_down_ = kFirstWait;
        wait_up_ = probing_up_ ? 0 : kMaxWait / 2;
        wait_down_ = probing_up_ ? kMaxWait / 2 : 0;
        phase_ = Phase::kBase;
        return;
      }
      current_ = kept_;
      int& backoff = probing_up_ ? backoff_up_ : backoff_down_;
      (probing_up_ ? wait_up_ : wait_down_) = backoff;
      backoff = std::min(backoff * 2, kMaxWait);
      phase_ = Phase::kBase;
      return;
  }
}

}  // namespace ferry::tcp
