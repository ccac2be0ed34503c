// Rendering a diagnostic snapshot as Markdown.
#include "diag/snapshot_markdown.h"

#include <algorithm>
#include <cstdio>

namespace ferry::diag {
namespace {

using platform::format_cpu_list;

std::string top_cpus(const PerCpu& counts, size_t n) {
  std::vector<std::pair<uint64_t, int>> v;
  for (const auto& [cpu, c] : counts) v.emplace_back(c, cpu);
  std::sort(v.begin(), v.end(),
            [](auto& a, auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  std::string out;
  for (size_t k = 0; k < v.size() && k < n; ++k) {
    out += (out.empty() ? "" : ", ") + std::string("cpu") + std::to_string(v[k].second) + ": " +
           std::to_string(v[k].first);
  }
  if (v.size() > n) out += ", +" + std::to_string(v.size() - n) + " more";
  return out.empty() ? "-" : out;
}

std::string node_text(int node) { return node < 0 ? "?" : std::to_string(node); }

}  // namespace

std::string snapshot_to_markdown(const Snapshot& s) {
  const platform::Topology& t = s.topology;
  std::string o = "# ferry diag snapshot\n\n";
  o += "Taken " + s.taken_at + (s.hostname.empty() ? "" : " on " + s.hostname) + "; " + std::to_string(t.cpus.size()) +
       " CPUs, " + std::to_string(t.nodes.size()) + " NUMA node(s), " + std::to_string(t.nics.size()) + " NIC(s), " +
       std::to_string(t.gpus.size()) + " NVIDIA GPU(s)\n\n";

  o += "## NUMA nodes\n\n| node | CPUs | SMT |\n|---|---|---|\n";
  for (const platform::NumaNode& n : t.nodes) {
    size_t smt = 1;
    for (int c : n.cpus) {
      if (const platform::CpuInfo* ci = t.find_cpu(c)) smt = std::max(smt, ci->siblings.size());
    }
    o += "| " + std::to_string(n.id) + " | " + format_cpu_list(n.cpus) + " | " + std::to_string(smt) +
         " thread(s) per core |\n";
  }

  o +=
      "\n## NICs\n\n| NIC | driver | PCI | NUMA | speed (Mb/s) | MTU | queues rx/tx |\n|---|---|---|---|---|---|---|\n";
  for (const platform::NicInfo& n : t.nics) {
    o += "| " + n.name + " | " + (n.driver.empty() ? "-" : n.driver) + " | " +
         (n.pci_address.empty() ? "-" : n.pci_address) + " | " + node_text(n.numa_node) + " | " +
         (n.speed_mbps < 0 ? "?" : std::to_string(n.speed_mbps)) + " | " + std::to_string(n.mtu) + " | " +
         std::to_string(n.rx_queues) + "/" + std::to_string(n.tx_queues) + " |\n";
  }

  o += "\n## GPUs\n\n";
  if (t.gpus.empty())
    o += "None found.\n";
  else
    o += "| PCI | class | NUMA |\n|---|---|---|\n";
  for (const platform::GpuInfo& g : t.gpus) {
    char cls[16];
    std::snprintf(cls, sizeof(cls), "0x%06x", g.pci_class);
    o += "| " + g.pci_address + " | " + cls + " | " + node_text(g.numa_node) + " |\n";
  }

  o += "\n## NIC interrupts\n\n| IRQ | NIC | kind | queue | affinity | total | CPUs that took it |\n";
  o += "|---|---|---|---|---|---|---|\n";
  for (const IrqSample& i : s.irqs) {
    o += "| " + std::to_string(i.irq) + " | " + i.nic + " | " + std::string(platform::irq_kind_name(i.kind)) + " | " +
         (i.queue < 0 ? "-" : std::to_string(i.queue)) + " | " +
         (i.affinity.empty() ? "?" : format_cpu_list(i.affinity)) + " | " + std::to_string(i.total) + " | " +
         top_cpus(i.counts, 4) + " |\n";
  }
  if (s.irqs.empty()) o += "\nNo NIC interrupts found.\n";

  o += "\n## Network softirqs since boot (CPUs with none left out)\n\n| CPU | node | NET_RX | NET_TX "
       "|\n|---|---|---|---|\n";
  std::map<int, std::pair<uint64_t, uint64_t>> soft;
  for (const auto& [cpu, n] : s.net_rx) soft[cpu].first = n;
  for (const auto& [cpu, n] : s.net_tx) soft[cpu].second = n;
  for (const auto& [cpu, v] : soft) {
    const platform::CpuInfo* ci = t.find_cpu(cpu);
    o += "| " + std::to_string(cpu) + " | " + (ci == nullptr ? "?" : std::to_string(ci->numa_node)) + " | " +
         std::to_string(v.first) + " | " + std::to_string(v.second) + " |\n";
  }

  o += "\n## Sysctls\n\n| name | value |\n|---|---|\n";
  for (const auto& [name, value] : s.sysctls) o += "| " + name + " | " + (value.empty() ? "(absent)" : value) + " |\n";
  if (!s.notes.empty()) {
    o += "\n## Notes\n\n";
    for (const std::string& n : s.notes) o += "- " + n + "\n";
  }
  return o;
}

}  // namespace ferry::diag
