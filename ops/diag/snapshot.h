// `ferry diag snapshot`: one reading of everything that says where a host's
// network work runs. CPUs and NUMA map, NICs (speed, MTU, NUMA, queues,
// driver), each NIC interrupt with its affinity and per-CPU count, the
// NET_RX/NET_TX softirq counts per CPU, per-CPU time from /proc/stat, GPUs,
// and the sysctls that limit throughput. Two snapshots around a benchmark run
// answer seed 002's questions (diff.h): which cores took which NIC's
// interrupts, and how busy each core was.
//
// Reads under a root folder ("" = this host); needs no privilege.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/status.h"
#include "platform/cpu_binding.h"
#include "platform/irq.h"
#include "platform/topology.h"

namespace ferry::diag {

// Per-CPU counts by CPU id; CPUs with a zero count are left out.
using PerCpu = std::map<int, uint64_t>;

// One CPU's time from /proc/stat, in USER_HZ ticks since boot.
struct CpuTimes {
  uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  uint64_t total() const { return user + nice + system + idle + iowait + irq + softirq + steal; }
  // Time not idle and not waiting for I/O.
  uint64_t busy() const { return user + nice + system + irq + softirq + steal; }
};
// The fields by name, in /proc/stat's order (the JSON's labels).
inline constexpr std::array<const char*, 8> kCpuTimeFields = {"user", "nice",    "system",  "idle",
                                                              "iowait", "irq", "softirq", "steal"};
inline constexpr std::array<uint64_t CpuTimes::*, 8> kCpuTimeMembers = {
    &CpuTimes::user, &CpuTimes::nice, &CpuTimes::system,  &CpuTimes::idle,
    &CpuTimes::iowait, &CpuTimes::irq, &CpuTimes::softirq, &CpuTimes::steal};

struct IrqSample {
  int irq = 0;
  std::string nic;
  std::string name;
  platform::IrqKind kind = platform::IrqKind::kUnknown;
  int queue = -1;
  platform::CpuList affinity;  // empty when unreadable
  PerCpu counts;
  uint64_t total = 0;
};

struct Snapshot {
  std::string taken_at;  // UTC, ISO 8601 ("2026-11-22T10:00:00Z")
  double uptime_s = -1;  // /proc/uptime, to measure the interval between two; -1 unknown
  std::string hostname;  // /proc/sys/kernel/hostname; "" unknown
  platform::Topology topology;
  std::vector<IrqSample> irqs;  // NIC interrupts only
  PerCpu net_rx, net_tx;        // softirqs
  std::map<int, CpuTimes> cpu_times;
  std::vector<std::pair<std::string, std::string>> sysctls;  // name, value ("" when absent)
  std::vector<std::string> notes;                            // what could not be read
};

// Takes a snapshot of the host under `root`. kNotFound or kInvalidArgument
// when the topology or /proc/interrupts cannot be read or parsed (naming the
// file); a missing /proc/softirqs, /proc/stat or sysctl only adds a note.
// Blocks on file reads only.
Result<Snapshot> take_snapshot(std::string_view root);

// Parses /proc/stat's per-CPU lines. kInvalidArgument naming `what` and the
// line when a cpuN line is malformed.
Result<std::map<int, CpuTimes>> parse_proc_stat(std::string_view text, std::string_view what);

}  // namespace ferry::diag
