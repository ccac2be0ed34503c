// The NVML sampling thread.
#include "profile/sampler.h"

#include <pthread.h>
#include <time.h>

#include <chrono>

namespace ferry::profile {
namespace {

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

}  // namespace

TemperatureSampler::TemperatureSampler(const Nvml& nvml, std::vector<Gpu> gpus, double interval_s)
    : nvml_(nvml), gpus_(std::move(gpus)), interval_s_(interval_s > 0 ? interval_s : 1.0) {}

TemperatureSampler::~TemperatureSampler() { stop(); }

void TemperatureSampler::start() {
  sample_once();
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "ferry-nvml");
    loop();
  });
}

void TemperatureSampler::stop() {
  {
    platform::MutexLock lock(mu_);
    if (stopping_ || !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  sample_once();
}

void TemperatureSampler::loop() {
  auto interval = std::chrono::duration<double>(interval_s_);
  auto next = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval);
  platform::UniqueLock lock(mu_);
  while (!cv_.wait_until(lock.native(), next, [this]() REQUIRES(mu_) { return stopping_; })) {
    lock.unlock();
    sample_once();
    lock.lock();
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval);
  }
}

void TemperatureSampler::sample_once() {
  std::vector<TemperatureRow> batch;
  for (const Gpu& g : gpus_) {
    auto s = nvml_.sample(g.pci);
    if (!s.ok()) continue;
    batch.push_back(TemperatureRow{monotonic_ns(), g.ordinal, s->temperature_c, s->power_w, s->sm_clock_mhz,
                                   s->mem_clock_mhz});
  }
  platform::MutexLock lock(mu_);
  rows_.insert(rows_.end(), batch.begin(), batch.end());
}

std::vector<TemperatureRow> TemperatureSampler::rows() const {
  platform::MutexLock lock(mu_);
  return rows_;
}

int TemperatureSampler::latest_temperature(int ordinal) const {
  platform::MutexLock lock(mu_);
  for (auto it = rows_.rbegin(); it != rows_.rend(); ++it) {
    if (it->gpu == ordinal) return it->temperature_c;
  }
  return -1;
}

}  // namespace ferry::profile
