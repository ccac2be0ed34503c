// A background thread that samples every GPU's temperature, power and clocks
// through NVML at a fixed interval, for temperatures.csv.
//
// Thread-safety: start() and stop() from one thread; rows() and
// latest_temperature() from any.
#pragma once

#include <atomic>
#include <condition_variable>
#include <string>
#include <thread>
#include <vector>

#include "platform/mutex.h"
#include "profile/nvml.h"
#include "profile/run_files.h"

namespace ferry::profile {

class TemperatureSampler {
 public:
  struct Gpu {
    int ordinal;      // the GPU's number in the plan (CUDA ordinal)
    std::string pci;  // its PCI bus id, for NVML
  };

  // `nvml` must outlive the sampler. interval_s > 0.
  TemperatureSampler(const Nvml& nvml, std::vector<Gpu> gpus, double interval_s);
  ~TemperatureSampler();

  // Takes one sample at once, then one per interval on thread "ferry-nvml".
  void start();
  // Takes a last sample and joins the thread. Idempotent.
  void stop();
  // The samples so far (all of them, after stop()).
  std::vector<TemperatureRow> rows() const;
  // The latest temperature of `ordinal`, or -1.
  int latest_temperature(int ordinal) const;

 private:
  void sample_once() EXCLUDES(mu_);
  void loop() EXCLUDES(mu_);

  const Nvml& nvml_;
  std::vector<Gpu> gpus_;
  double interval_s_;
  std::thread thread_;
  mutable platform::Mutex mu_;
  std::condition_variable cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<TemperatureRow> rows_ GUARDED_BY(mu_);
};

}  // namespace ferry::profile
