// `ferry diag diff A B`: what happened between two snapshots. For each NIC,
// which CPUs took its interrupts (and how many on CPUs of another NUMA node);
// per CPU, the NET_RX/NET_TX softirqs it ran and how busy it was (from
// /proc/stat); and what changed that a reader should know (an IRQ's affinity,
// the set of CPUs, a counter that went backwards).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "diag/snapshot.h"
#include "ferry/status.h"

namespace ferry::diag {

struct NicDelta {
  std::string nic;
  int node = -1;                             // the NIC's NUMA node; -1 unknown
  uint64_t total = 0;                        // its interrupts in the interval
  uint64_t off_node = 0;                     // of which on CPUs of another node
  PerCpu per_cpu;                            // summed over its IRQs
  std::map<std::string, uint64_t> per_kind;  // "tx", "rx", ...
};

struct CpuDelta {
  int cpu = 0;
  int node = 0;
  std::map<std::string, uint64_t> nic_irqs;  // NIC -> interrupts taken
  uint64_t net_rx = 0, net_tx = 0;
  double busy_pct = -1;  // -1 when /proc/stat was missing
};

struct DiffReport {
  double seconds = -1;  // from uptime; -1 unknown
  std::vector<NicDelta> nics;
  std::vector<CpuDelta> cpus;  // every CPU of B, ascending
  uint64_t net_rx = 0, net_tx = 0;
  double busy_pct = -1;  // all CPUs together
  std::vector<std::string> notes;
};

// Diffs `b` against the earlier `a`. kInvalidArgument when B is not later
// than A on the same boot (its uptime is smaller, or a counter went
// backwards), since every delta would be wrong.
Result<DiffReport> diff_snapshots(const Snapshot& a, const Snapshot& b);

// The report as Markdown: NICs with their busiest CPUs, then a row per CPU
// that took NIC interrupts or network softirqs or was more than half busy.
std::string render_diff_markdown(const DiffReport& report);

}  // namespace ferry::diag
