// NVML through dlopen, with the few entry points declared here by hand
// (their C signatures are stable across driver releases; the _v2/_v3 names are
// the versions current drivers export).
#include "profile/nvml.h"

#include <cctype>
#include <cstring>

#include "platform/dynamic_library.h"

namespace ferry::profile {
namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr int kTemperatureGpu = 0;
constexpr int kClockGraphics = 0, kClockSm = 1, kClockMem = 2;
constexpr int kNvlinkMax = 18;

// nvmlPciInfo_t, as nvml.h lays it out.
struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pci_device_id;
  unsigned pci_subsystem_id;
  char bus_id[32];
};

struct UtilizationRates {
  unsigned gpu;
  unsigned memory;
};

// nvmlProcessInfo_t as the _v3 call fills it.
struct ProcessInfo {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
  unsigned long long used_gpu_cc_protected_memory;
};

// Normalises "0000:18:00.0" and "00000000:18:00.0" to the 8-digit domain form
// with lower-case hex, so that ids from CUDA and NVML compare equal.
std::string canonical_pci(const std::string& id) {
  std::string s;
  for (char c : id) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t colon = s.find(':');
  if (colon != std::string::npos && colon < 8 && s.find(':', colon + 1) != std::string::npos) {
    s = std::string(8 - colon, '0') + s;
  }
  return s;
}

}  // namespace

struct Nvml::Api {
  platform::DynamicLibrary lib;  // closed when the Api goes, after nvmlShutdown
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*by_pci)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*max_clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*app_clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*event_reasons)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, UtilizationRates*) = nullptr;
  nvmlReturn_t (*processes)(nvmlDevice_t, unsigned*, ProcessInfo*) = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned) = nullptr;
  nvmlReturn_t (*common_ancestor)(nvmlDevice_t, nvmlDevice_t, int*) = nullptr;
  nvmlReturn_t (*nvlink_state)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*nvlink_remote)(nvmlDevice_t, unsigned, PciInfo*) = nullptr;

  Result<nvmlDevice_t> device(const std::string& pci) const {
    nvmlDevice_t d = nullptr;
    nvmlReturn_t r = by_pci(pci.c_str(), &d);
    if (r != kNvmlSuccess) return Status(Code::kNotFound, "NVML: no GPU at " + pci + ": " + error_string(r));
    return d;
  }
};

Result<std::unique_ptr<Nvml>> Nvml::load() {
  auto lib = platform::DynamicLibrary::open({"libnvidia-ml.so.1"});
  if (!lib.ok()) return Status(Code::kUnavailable, "NVML: " + lib.status().message());
  auto api = std::make_unique<Api>();
  api->lib = std::move(lib).value();
  Status missing;  // the first required entry point the library lacks
  auto sym = [&](auto& fn, const char* name, bool required = true) {
    if (!required) {
      api->lib.lookup_optional(name, fn);
      return;
    }
    Status s = api->lib.lookup(name, fn);
    if (missing.ok()) missing = s;
  };
  sym(api->init, "nvmlInit_v2");
  sym(api->shutdown, "nvmlShutdown");
  sym(api->error_string, "nvmlErrorString");
  sym(api->by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
  sym(api->name, "nvmlDeviceGetName");
  sym(api->uuid, "nvmlDeviceGetUUID");
  sym(api->temperature, "nvmlDeviceGetTemperature");
  sym(api->power, "nvmlDeviceGetPowerUsage");
  sym(api->power_limit, "nvmlDeviceGetEnforcedPowerLimit", false);
  sym(api->clock, "nvmlDeviceGetClockInfo");
  sym(api->max_clock, "nvmlDeviceGetMaxClockInfo");
  sym(api->app_clock, "nvmlDeviceGetApplicationsClock", false);
  sym(api->event_reasons, "nvmlDeviceGetCurrentClocksEventReasons", false);
  if (api->event_reasons == nullptr) sym(api->event_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons", false);
  sym(api->utilization, "nvmlDeviceGetUtilizationRates", false);
  sym(api->processes, "nvmlDeviceGetComputeRunningProcesses_v3", false);
  sym(api->driver_version, "nvmlSystemGetDriverVersion");
  sym(api->common_ancestor, "nvmlDeviceGetTopologyCommonAncestor", false);
  sym(api->nvlink_state, "nvmlDeviceGetNvLinkState", false);
  sym(api->nvlink_remote, "nvmlDeviceGetNvLinkRemotePciInfo_v2", false);
  // Returning an error drops `api`, which closes the library.
  if (!missing.ok()) return Status(Code::kUnavailable, "NVML: " + missing.message());
  nvmlReturn_t r = api->init();
  if (r != kNvmlSuccess) {
    return Status(Code::kUnavailable, std::string("NVML: nvmlInit failed: ") + api->error_string(r));
  }
  return std::unique_ptr<Nvml>(new Nvml(std::move(api)));
}

Nvml::Nvml(std::unique_ptr<Api> api) : api_(std::move(api)) {}

Nvml::~Nvml() {
  api_->shutdown();  // then api_'s destruction closes the library
}

std::string Nvml::driver_version() const {
  char buf[96] = {};
  if (api_->driver_version(buf, sizeof(buf)) != kNvmlSuccess) return "unknown";
  return buf;
}

Result<NvmlSample> Nvml::sample(const std::string& pci) const {
  FERRY_ASSIGN_OR_RETURN(nvmlDevice_t d, api_->device(pci));
  NvmlSample s;
  unsigned v = 0;
  if (api_->temperature(d, kTemperatureGpu, &v) == kNvmlSuccess) s.temperature_c = static_cast<int>(v);
  if (api_->power(d, &v) == kNvmlSuccess) s.power_w = v / 1000.0;
  if (api_->clock(d, kClockSm, &v) == kNvmlSuccess) s.sm_clock_mhz = static_cast<int>(v);
  if (api_->clock(d, kClockMem, &v) == kNvmlSuccess) s.mem_clock_mhz = static_cast<int>(v);
  return s;
}

Result<NvmlFacts> Nvml::facts(const std::string& pci) const {
  FERRY_ASSIGN_OR_RETURN(nvmlDevice_t d, api_->device(pci));
  NvmlFacts f;
  char buf[96] = {};
  if (api_->name(d, buf, sizeof(buf)) == kNvmlSuccess) f.name = buf;
  std::memset(buf, 0, sizeof(buf));
  if (api_->uuid(d, buf, sizeof(buf)) == kNvmlSuccess) f.uuid = buf;
  unsigned v = 0;
  if (api_->max_clock(d, kClockSm, &v) == kNvmlSuccess) f.sm_clock_max_mhz = static_cast<int>(v);
  if (api_->max_clock(d, kClockMem, &v) == kNvmlSuccess) f.mem_clock_max_mhz = static_cast<int>(v);
  if (api_->app_clock && api_->app_clock(d, kClockGraphics, &v) == kNvmlSuccess) f.sm_app_clock_mhz = static_cast<int>(v);
  if (api_->app_clock && api_->app_clock(d, kClockMem, &v) == kNvmlSuccess) f.mem_app_clock_mhz = static_cast<int>(v);
  if (api_->power_limit && api_->power_limit(d, &v) == kNvmlSuccess) f.power_limit_w = v / 1000.0;
  unsigned long long reasons = 0;
  if (api_->event_reasons && api_->event_reasons(d, &reasons) == kNvmlSuccess) f.clock_event_reasons = reasons;
  UtilizationRates u{};
  if (api_->utilization && api_->utilization(d, &u) == kNvmlSuccess) f.utilization_pct = static_cast<int>(u.gpu);
  if (api_->processes) {
    ProcessInfo infos[64];
    unsigned n = 64;
    if (api_->processes(d, &n, infos) == kNvmlSuccess) {
      f.compute_processes = static_cast<int>(n);
      for (unsigned i = 0; i < n; ++i) f.process_ids.push_back(infos[i].pid);
    }
  }
  return f;
}

std::string Nvml::link(const std::string& a, const std::string& b) const {
  if (canonical_pci(a) == canonical_pci(b)) return "X";
  auto da = api_->device(a);
  auto db = api_->device(b);
  if (!da.ok() || !db.ok()) return "?";
  // NVLinks from a whose far end is b.
  if (api_->nvlink_state && api_->nvlink_remote) {
    int links = 0;
    for (unsigned l = 0; l < kNvlinkMax; ++l) {
      int active = 0;
      if (api_->nvlink_state(da.value(), l, &active) != kNvmlSuccess || !active) continue;
      PciInfo remote{};
      if (api_->nvlink_remote(da.value(), l, &remote) != kNvmlSuccess) continue;
      if (canonical_pci(remote.bus_id) == canonical_pci(b)) ++links;
    }
    if (links > 0) return "NV" + std::to_string(links);
  }
  int level = -1;
  if (api_->common_ancestor == nullptr || api_->common_ancestor(da.value(), db.value(), &level) != kNvmlSuccess) {
    return "?";
  }
  switch (level) {
    case 0: return "X";
    case 10: return "PIX";
    case 20: return "PXB";
    case 30: return "PHB";
    case 40: return "NODE";
    case 50: return "SYS";
    default: return "?";
  }
}

}  // namespace ferry::profile
