// PathGovernor: climbing by CPU headroom, stepping down by measured throughput.
#include "transport/tcp/path_governor.h"

#include <algorithm>

namespace ferry::tcp {

PathGovernor::PathGovernor(bool adaptive, int paths, int64_t sample_ns, CpuMeter cpu, int start)
    : adaptive_(adaptive),
      paths_(std::max(1, paths)),
      sample_ns_(sample_ns),
      cpu_(std::move(cpu)),
      current_(adaptive_ && cpu_ ? std::clamp(start, 1, paths_) : paths_),
      kept_(current_),
      average_(static_cast<size_t>(paths_) + 1, 0.0),
      reading_every_ns_(sample_ns) {}

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

void PathGovernor::restart_sample() {
  sample_bytes_ = 0;
  sample_ns_so_far_ = 0;
  sample_reports_ = 0;
}

bool PathGovernor::reading_due(int64_t busy_ns) const {
  return judges() && cpu_ && cpu_window_ns_ + std::max<int64_t>(0, busy_ns) >= reading_every_ns_;
}

void PathGovernor::on_landed(uint64_t bytes, int64_t busy_ns, bool flushed) {
  if (!judges()) return;
  std::optional<platform::CpuReading> reading;
  if (reading_due(busy_ns)) reading = cpu_();
  on_landed(bytes, busy_ns, flushed, reading);
}

void PathGovernor::on_landed(uint64_t bytes, int64_t busy_ns, bool flushed,
                             std::optional<platform::CpuReading> reading) {
  if (!judges()) return;
  int before = current_;
  landed(bytes, busy_ns, flushed, reading);
  if (current_ != before) reading_every_ns_ = sample_ns_;  // judge the new count's load soon
}

void PathGovernor::landed(uint64_t bytes, int64_t busy_ns, bool flushed,
                          const std::optional<platform::CpuReading>& reading) {
  int64_t ns = std::max<int64_t>(0, busy_ns);
  const bool warming = warmup_left_ns_ > 0;
  if (warming) {
    warmup_left_ns_ -= ns;
    share_reading_spans_warmup_ = true;
  }
  cpu_window_ns_ += ns;
  if (cpu_ && cpu_window_ns_ >= reading_every_ns_) {
    int before = current_;
    read_cpu(reading);
    if (current_ != before) return;  // climbed: the throughput sample restarted
  }
  if (!flushed || warming) {
    restart_sample();
    return;
  }
  sample_bytes_ += bytes;
  sample_ns_so_far_ += ns;
  ++sample_reports_;
  if (sample_ns_so_far_ < sample_ns_ || sample_reports_ < kMinReports) return;
  double rate = static_cast<double>(sample_bytes_) / static_cast<double>(sample_ns_so_far_);
  restart_sample();
  finish_sample(rate);
}

void PathGovernor::on_idle(int64_t idle_ns) {
  if (judges()) cpu_idle_ns_ += std::max<int64_t>(0, idle_ns);
}

void PathGovernor::read_cpu(const std::optional<platform::CpuReading>& r) {
  if (!r) return;  // too soon for /proc/stat's ticks: the window grows
  bool diluted = static_cast<double>(cpu_idle_ns_) > kMaxIdleShare * static_cast<double>(cpu_idle_ns_ + cpu_window_ns_);
  cpu_window_ns_ = 0;
  cpu_idle_ns_ = 0;
  if (diluted) return;
  cpu_busy_ = r->host_busy;
  cpu_self_ = r->self;
  bool headroom = cpu_busy_ < kHeadroom;
  bool low_share = cpu_self_ < kOwnShare;
  // Readings that repeat the last one's class come less often; not in the
  // warm-up, nor while a climb for others' load is being counted.
  int cls = 2 * (headroom ? 0 : cpu_busy_ < kSaturated ? 1 : 2) + (low_share ? 1 : 0);
  bool steady = cls == reading_class_ && warmup_left_ns_ <= 0 && (headroom || !low_share);
  reading_every_ns_ = steady ? std::min(2 * reading_every_ns_, kMaxReadingSamples * sample_ns_) : sample_ns_;
  reading_class_ = cls;
  // Idle cores: more paths cannot cost, climb at once. Busy cores that are
  // mostly others': climb once that has held for kShareReadings readings
  // taken wholly after the warm-up.
  bool others = !headroom && low_share && !share_reading_spans_warmup_;
  share_reading_spans_warmup_ = warmup_left_ns_ > 0;
  share_readings_ = others ? share_readings_ + 1 : 0;
  if (phase_ != Phase::kBase || (!headroom && share_readings_ < kShareReadings) || kept_ >= paths_) return;
  int up = step_up(kept_);
  if (ceiling_ != 0 && up >= ceiling_) {
    // This count measured no faster than the one below it: retry only rarely.
    if (--climb_wait_ > 0) return;
    ceiling_ = 0;
  }
  kept_ = current_ = up;
  share_readings_ = 0;
  restart_sample();
}

void PathGovernor::finish_sample(double rate) {
  switch (phase_) {
    case Phase::kBase:
      base_rate_ = rate;
      record(kept_, rate);
      if (kept_ > 1 && cpu_busy_ >= kSaturated && cpu_self_ >= kOwnShare && --wait_down_ <= 0) {
        current_ = step_down(kept_);
        phase_ = Phase::kProbe;
      }
      return;
    case Phase::kProbe:
      // Judged on what it moves now: samples from when it last ran (a slow
      // start, another load) would sink or lift it.
      average_[static_cast<size_t>(current_)] = rate;
      if (rate >= average(kept_) * (1 - kTolerance)) {
        // About as fast: keep it and keep going down at once; climbing back to
        // the count it left waits, longer each time.
        ceiling_ = kept_;
        climb_wait_ = backoff_up_;
        backoff_up_ = std::min(backoff_up_ * 2, kMaxWait);
        kept_ = current_;
        base_rate_ = rate;
        backoff_down_ = kFirstWait;
        wait_down_ = 1;
        phase_ = Phase::kBase;
        return;
      }
      current_ = kept_;
      wait_down_ = backoff_down_;
      backoff_down_ = std::min(backoff_down_ * 2, kMaxWait);
      phase_ = Phase::kBase;
      return;
  }
}

}  // namespace ferry::tcp
