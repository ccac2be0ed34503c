// NVML, loaded at run time from libnvidia-ml.so.1 (no nvml.h needed to
// build), for what `ferry profile` records: names, UUIDs, temperatures, power,
// clocks, processes and the link between two GPUs. Read-only: ferry never sets
// clocks, power limits or any other GPU setting.
//
// GPUs are named by PCI bus id ("00000000:18:00.0", as CUDA reports it), so
// that CUDA ordinals and NVML's own order can differ.
//
// Thread-safety: NVML is thread-safe; one Nvml may be shared by threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ferry/status.h"

namespace ferry::profile {

struct NvmlSample {
  int temperature_c = -1;
  double power_w = -1;
  int sm_clock_mhz = -1;
  int mem_clock_mhz = -1;
};

struct NvmlFacts {
  std::string name;
  std::string uuid;
  int sm_clock_max_mhz = -1;
  int mem_clock_max_mhz = -1;
  int sm_app_clock_mhz = -1;
  int mem_app_clock_mhz = -1;
  double power_limit_w = -1;
  unsigned long long clock_event_reasons = 0;  // NVML's clocks-event (throttle) reason bits
  int utilization_pct = -1;
  int compute_processes = -1;                  // -1: unknown
  std::vector<unsigned> process_ids;
};

class Nvml {
 public:
  // Loads the library and calls nvmlInit. kUnavailable (with dlerror's text
  // or NVML's error string) when there is no driver.
  static Result<std::unique_ptr<Nvml>> load();
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  std::string driver_version() const;
  Result<NvmlSample> sample(const std::string& pci_bus_id) const;
  Result<NvmlFacts> facts(const std::string& pci_bus_id) const;
  // nvidia-smi topo -m's word for the link from a to b: "X" (itself), "NV18"
  // (18 NVLinks), "PIX", "PXB", "PHB", "NODE" or "SYS"; "?" if unknown.
  std::string link(const std::string& a, const std::string& b) const;

  struct Api;

 private:
  explicit Nvml(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace ferry::profile
