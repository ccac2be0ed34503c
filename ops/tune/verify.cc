// Comparing the live host with a plan or with binding strings.
#include "tune/verify.h"

#include <algorithm>
#include <set>

#include "platform/binding_plan.h"
#include "platform/host_files.h"
#include "platform/irq.h"

namespace ferry::tune {
namespace {

using platform::CpuList;
using platform::format_cpu_list;

std::string irq_what(int irq, const std::string& nic, platform::IrqKind kind, int queue) {
  std::string s = "IRQ " + std::to_string(irq) + " (" + nic + " " + std::string(platform::irq_kind_name(kind));
  if (queue >= 0) s += " queue " + std::to_string(queue);
  return s + ")";
}

bool subset(const CpuList& a, const CpuList& b) { return std::includes(b.begin(), b.end(), a.begin(), a.end()); }

}  // namespace

int VerifyReport::failures() const {
  return static_cast<int>(std::count_if(checks.begin(), checks.end(), [](const Check& c) { return !c.ok; }));
}

VerifyReport verify_plan(std::string_view root, const TunePlan& plan, bool settings) {
  VerifyReport r;
  for (const IrqPlan& p : plan.irqs) {
    if (p.planned.empty()) continue;
    Check c;
    c.what = irq_what(p.irq, p.nic, p.kind, p.queue);
    c.expected = format_cpu_list(p.planned);
    auto cur = platform::read_irq_affinity(root, p.irq);
    if (cur.ok()) {
      c.actual = format_cpu_list(*cur);
      c.ok = *cur == p.planned;
    } else {
      c.actual = cur.status().message();
    }
    r.checks.push_back(std::move(c));
  }
  if (settings) {
    platform::Topology empty;
    auto topo = platform::read_topology(root);
    for (const HostSetting& s : read_host_settings(root, topo.ok() ? *topo : empty)) {
      if (s.state == SettingState::kUnavailable) continue;
      r.checks.push_back(Check{s.name, s.recommended, s.current, s.state == SettingState::kOk});
    }
  }
  return r;
}

Result<VerifyReport> verify_bindings(std::string_view root, const platform::NicBindings& tx,
                                     const platform::NicBindings& rx) {
  FERRY_ASSIGN_OR_RETURN(platform::Topology topo, platform::read_topology(root));
  FERRY_RETURN_IF_ERROR(platform::check_bindings(tx, topo, "TX bindings"));
  FERRY_RETURN_IF_ERROR(platform::check_bindings(rx, topo, "RX bindings"));
  VerifyReport r;
  std::set<std::string, platform::NaturalLess> nics;
  for (const auto& [nic, cpus] : tx) nics.insert(nic);
  for (const auto& [nic, cpus] : rx) nics.insert(nic);

  for (const std::string& nic : nics) {
    const platform::NicInfo* info = topo.find_nic(nic);
    int node = topo.nic_node(*info);
    for (const auto* side : {&tx, &rx}) {
      auto it = side->find(nic);
      if (it == side->end()) continue;
      std::string label = nic + (side == &tx ? " tx set" : " rx set") + " on the NIC's NUMA node";
      if (node < 0) {
        r.checks.push_back(Check{label, "node unknown", format_cpu_list(it->second), true});
        continue;
      }
      CpuList off;
      for (int c : it->second) {
        if (topo.find_cpu(c)->numa_node != node) off.push_back(c);
      }
      r.checks.push_back(Check{label, "node " + std::to_string(node),
                               off.empty() ? "all local" : "off-node: " + format_cpu_list(off), off.empty()});
    }
    auto t = tx.find(nic), x = rx.find(nic);
    if (t != tx.end() && x != rx.end()) {
      CpuList both;
      std::set_intersection(t->second.begin(), t->second.end(), x->second.begin(), x->second.end(),
                            std::back_inserter(both));
      r.checks.push_back(Check{nic + " tx and rx sets disjoint", "no shared CPU",
                               both.empty() ? "disjoint" : "shared: " + format_cpu_list(both), both.empty()});
    }
  }

  std::string path = platform::under_root(root, "/proc/interrupts");
  FERRY_ASSIGN_OR_RETURN(std::string text, platform::read_text_file(path));
  FERRY_ASSIGN_OR_RETURN(platform::InterruptTable table, platform::parse_interrupts(text, path));
  for (const platform::NicIrq& i : platform::find_nic_irqs(root, topo, table)) {
    const platform::NicBindings* side = nullptr;
    if (i.kind == platform::IrqKind::kTx) side = &tx;
    if (i.kind == platform::IrqKind::kRx || i.kind == platform::IrqKind::kTxRx) side = &rx;
    if (side == nullptr) continue;
    auto it = side->find(i.nic);
    if (it == side->end()) continue;
    Check c;
    c.what = irq_what(i.irq, i.nic, i.kind, i.queue) + " within the " + (side == &tx ? "tx" : "rx") + " set";
    c.expected = format_cpu_list(it->second);
    auto cur = platform::read_irq_affinity(root, i.irq);
    if (cur.ok()) {
      c.actual = format_cpu_list(*cur);
      c.ok = !cur->empty() && subset(*cur, it->second);
    } else {
      c.actual = cur.status().message();
    }
    r.checks.push_back(std::move(c));
  }
  return r;
}

std::string render_verify_text(const VerifyReport& report) {
  std::string o;
  for (const Check& c : report.checks) {
    o += std::string(c.ok ? "ok       " : "MISMATCH ") + c.what + ": expected " + c.expected + ", found " + c.actual +
         "\n";
  }
  int bad = report.failures();
  o += std::to_string(report.checks.size()) + " checks, " + std::to_string(bad) + " failed\n";
  return o;
}

}  // namespace ferry::tune
