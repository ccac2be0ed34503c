// Host settings that limit transfer throughput, each with its current value,
// the value ferry recommends and why: socket buffer maxima, TCP autotuning
// limits, optmem_max for MSG_ZEROCOPY, busy polling, the CPU frequency
// governor, automatic NUMA balancing and the IRQ balancing daemon.
//
// `ferry tune plan` lists them; `ferry tune apply --sysctl` writes the files
// of those not yet at the recommendation (with the same backup and read-back
// as IRQ affinities); `ferry diag snapshot` records the sysctls.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "platform/topology.h"
#include "tune/file_change.h"

namespace ferry::tune {

enum class SettingState : uint8_t {
  kOk,           // at or beyond the recommendation
  kChange,       // below it; `changes` reach it
  kManual,       // needs a step ferry does not take (stopping a daemon)
  kUnavailable,  // this host has no such knob (no cpufreq in a VM)
};

// "ok", "change", "manual", "unavailable".
std::string_view setting_state_name(SettingState state);

struct HostSetting {
  std::string name;         // "net.core.rmem_max", "cpu frequency governor"
  std::string current;      // "212992", "powersave (208 CPUs)", "not available"
  std::string recommended;  // "268435456 or more"
  std::string why;          // one sentence
  SettingState state = SettingState::kUnavailable;
  std::vector<FileChange> changes;  // what apply --sysctl writes; empty unless kChange
};

// The sysctls `ferry diag` records, as (name, path inside the root).
struct SysctlFile {
  std::string_view name;
  std::string_view path;
};
const std::vector<SysctlFile>& recorded_sysctls();

// Reads every setting under `root`. Never fails: a file that cannot be read
// makes its setting kUnavailable with the reason in `current`.
std::vector<HostSetting> read_host_settings(std::string_view root, const platform::Topology& topo);

}  // namespace ferry::tune
