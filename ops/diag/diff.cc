// Differences between two diagnostic snapshots.
#include "diag/diff.h"

#include <algorithm>
#include <cstdio>

namespace ferry::diag {
namespace {

using platform::format_cpu_list;

std::string pct(double v) {
  if (v < 0) return "?";
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

// b - a per CPU; an error names the counter when it went backwards.
Result<PerCpu> subtract(const PerCpu& a, const PerCpu& b, const std::string& what) {
  PerCpu out;
  for (const auto& [cpu, nb] : b) {
    auto it = a.find(cpu);
    uint64_t na = it == a.end() ? 0 : it->second;
    if (nb < na) {
      return Status(Code::kInvalidArgument, what + " on CPU " + std::to_string(cpu) + " went from " +
                                                std::to_string(na) + " to " + std::to_string(nb) +
                                                ": B is not a later snapshot of the same boot than A");
    }
    if (nb > na) out[cpu] = nb - na;
  }
  for (const auto& [cpu, na] : a) {
    if (na != 0 && b.count(cpu) == 0) {
      return Status(Code::kInvalidArgument, what + " on CPU " + std::to_string(cpu) + " went from " +
                                                std::to_string(na) +
                                                " to 0: B is not a later snapshot of the same "
                                                "boot than A");
    }
  }
  return out;
}

}  // namespace

Result<DiffReport> diff_snapshots(const Snapshot& a, const Snapshot& b) {
  DiffReport r;
  if (!a.hostname.empty() && !b.hostname.empty() && a.hostname != b.hostname) {
    r.notes.push_back("the snapshots come from different hosts (" + a.hostname + ", " + b.hostname + ")");
  }
  if (a.uptime_s >= 0 && b.uptime_s >= 0) {
    if (b.uptime_s < a.uptime_s) {
      return Status(Code::kInvalidArgument, "B's uptime (" + pct(b.uptime_s) + " s) is below A's (" + pct(a.uptime_s) +
                                                " s): B was taken before A, or the host rebooted in between");
    }
    r.seconds = b.uptime_s - a.uptime_s;
  }
  const platform::Topology& topo = b.topology;
  if (a.topology.all_cpus() != topo.all_cpus()) {
    r.notes.push_back("online CPUs changed: " + format_cpu_list(a.topology.all_cpus()) + " in A, " +
                      format_cpu_list(topo.all_cpus()) + " in B");
  }

  std::map<int, CpuDelta> cpus;
  for (const platform::CpuInfo& c : topo.cpus) cpus[c.id] = CpuDelta{c.id, c.numa_node, {}, 0, 0, -1};
  auto cpu_row = [&](int id) -> CpuDelta& {
    auto it = cpus.find(id);
    if (it == cpus.end()) it = cpus.emplace(id, CpuDelta{id, -1, {}, 0, 0, -1}).first;
    return it->second;
  };

  std::map<std::string, NicDelta> nics;
  for (const platform::NicInfo& n : topo.nics) nics[n.name] = NicDelta{n.name, topo.nic_node(n), 0, 0, {}, {}};
  for (const IrqSample& ib : b.irqs) {
    const IrqSample* ia = nullptr;
    for (const IrqSample& x : a.irqs) {
      if (x.irq == ib.irq && x.nic == ib.nic) ia = &x;
    }
    if (ia == nullptr) {
      r.notes.push_back("IRQ " + std::to_string(ib.irq) + " (" + ib.nic + ") is not in A; counted from zero");
    } else if (ia->affinity != ib.affinity) {
      r.notes.push_back("IRQ " + std::to_string(ib.irq) + " (" + ib.nic + ") affinity changed from " +
                        format_cpu_list(ia->affinity) + " to " + format_cpu_list(ib.affinity));
    }
    static const PerCpu kNone;
    FERRY_ASSIGN_OR_RETURN(PerCpu d, subtract(ia != nullptr ? ia->counts : kNone, ib.counts,
                                              "IRQ " + std::to_string(ib.irq) + " (" + ib.nic + ") count"));
    auto it = nics.find(ib.nic);
    if (it == nics.end()) it = nics.emplace(ib.nic, NicDelta{ib.nic, -1, 0, 0, {}, {}}).first;
    NicDelta& nd = it->second;
    for (const auto& [cpu, n] : d) {
      nd.total += n;
      nd.per_cpu[cpu] += n;
      nd.per_kind[std::string(platform::irq_kind_name(ib.kind))] += n;
      CpuDelta& row = cpu_row(cpu);
      row.nic_irqs[ib.nic] += n;
      if (nd.node >= 0 && row.node >= 0 && row.node != nd.node) nd.off_node += n;
    }
  }
  for (const IrqSample& ia : a.irqs) {
    bool in_b = std::any_of(b.irqs.begin(), b.irqs.end(),
                            [&](const IrqSample& x) { return x.irq == ia.irq && x.nic == ia.nic; });
    if (!in_b) r.notes.push_back("IRQ " + std::to_string(ia.irq) + " (" + ia.nic + ") is gone in B");
  }
  for (auto& [name, nd] : nics) r.nics.push_back(std::move(nd));

  FERRY_ASSIGN_OR_RETURN(PerCpu rx, subtract(a.net_rx, b.net_rx, "NET_RX softirq count"));
  FERRY_ASSIGN_OR_RETURN(PerCpu tx, subtract(a.net_tx, b.net_tx, "NET_TX softirq count"));
  for (const auto& [cpu, n] : rx) {
    cpu_row(cpu).net_rx = n;
    r.net_rx += n;
  }
  for (const auto& [cpu, n] : tx) {
    cpu_row(cpu).net_tx = n;
    r.net_tx += n;
  }

  uint64_t all_busy = 0, all_total = 0;
  for (const auto& [cpu, tb] : b.cpu_times) {
    auto it = a.cpu_times.find(cpu);
    if (it == a.cpu_times.end()) continue;
    const CpuTimes& ta = it->second;
    if (tb.total() < ta.total() || tb.busy() < ta.busy()) {
      return Status(Code::kInvalidArgument,
                    "CPU " + std::to_string(cpu) + " time went backwards: B is not a later snapshot of the same boot");
    }
    uint64_t total = tb.total() - ta.total(), busy = tb.busy() - ta.busy();
    all_busy += busy;
    all_total += total;
    cpu_row(cpu).busy_pct = total == 0 ? 0.0 : 100.0 * static_cast<double>(busy) / static_cast<double>(total);
  }
  if (all_total > 0) r.busy_pct = 100.0 * static_cast<double>(all_busy) / static_cast<double>(all_total);
  if (b.cpu_times.empty() || a.cpu_times.empty()) r.notes.push_back("no /proc/stat in a snapshot: busy unknown");
  for (auto& [cpu, row] : cpus) r.cpus.push_back(std::move(row));
  return r;
}

std::string render_diff_markdown(const DiffReport& r) {
  std::string o = "# ferry diag diff\n\n";
  o += "Interval: " + (r.seconds < 0 ? std::string("unknown") : pct(r.seconds) + " s") + "; all CPUs busy " +
       pct(r.busy_pct) + "%; NET_RX softirqs " + std::to_string(r.net_rx) + ", NET_TX " + std::to_string(r.net_tx) +
       "\n\n";
  o += "## Interrupts per NIC\n\n| NIC | node | interrupts | on other nodes | by kind | busiest CPUs |\n";
  o += "|---|---|---|---|---|---|\n";
  for (const NicDelta& n : r.nics) {
    std::vector<std::pair<uint64_t, int>> top;
    for (const auto& [cpu, c] : n.per_cpu) top.emplace_back(c, cpu);
    std::sort(top.begin(), top.end(),
              [](auto& x, auto& y) { return x.first != y.first ? x.first > y.first : x.second < y.second; });
    std::string tops, kinds;
    for (size_t k = 0; k < top.size() && k < 6; ++k) {
      tops += (tops.empty() ? "" : ", ") + std::string("cpu") + std::to_string(top[k].second) + ": " +
              std::to_string(top[k].first);
    }
    for (const auto& [kind, c] : n.per_kind) kinds += (kinds.empty() ? "" : ", ") + kind + " " + std::to_string(c);
    o += "| " + n.nic + " | " + (n.node < 0 ? "?" : std::to_string(n.node)) + " | " + std::to_string(n.total) + " | " +
         std::to_string(n.off_node) + " | " + (kinds.empty() ? "-" : kinds) + " | " + (tops.empty() ? "-" : tops) +
         " |\n";
  }
  o += "\n## CPUs that took NIC interrupts or network softirqs, or were over half busy\n\n";
  o += "| CPU | node | NIC interrupts | NET_RX | NET_TX | busy % |\n|---|---|---|---|---|---|\n";
  for (const CpuDelta& c : r.cpus) {
    if (c.nic_irqs.empty() && c.net_rx == 0 && c.net_tx == 0 && c.busy_pct <= 50.0) continue;
    std::string irqs;
    for (const auto& [nic, n] : c.nic_irqs) irqs += (irqs.empty() ? "" : ", ") + nic + " " + std::to_string(n);
    o += "| " + std::to_string(c.cpu) + " | " + (c.node < 0 ? "?" : std::to_string(c.node)) + " | " +
         (irqs.empty() ? "-" : irqs) + " | " + std::to_string(c.net_rx) + " | " + std::to_string(c.net_tx) + " | " +
         pct(c.busy_pct) + " |\n";
  }
  if (!r.notes.empty()) {
    o += "\n## Notes\n\n";
    for (const std::string& n : r.notes) o += "- " + n + "\n";
  }
  return o;
}

}  // namespace ferry::diag
