// Building a tuning plan from the host, and printing it for people.
#include "tune/plan.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "platform/host_files.h"
#include "tune/text_table.h"

namespace ferry::tune {
namespace {

using platform::CpuList;
using platform::format_cpu_list;
using platform::IrqKind;
using platform::NaturalLess;

// The CPUs of `set` in spreading order: the first thread of every core in the
// set, then the second threads, and so on, so that IRQs fill physical cores
// before they double up on SMT siblings.
CpuList spread_order(const platform::Topology& topo, int node, const CpuList& set) {
  std::vector<CpuList> cores;
  for (const CpuList& core : platform::node_cores(topo, node)) {
    CpuList in;
    for (int c : core) {
      if (std::binary_search(set.begin(), set.end(), c)) in.push_back(c);
    }
    if (!in.empty()) cores.push_back(std::move(in));
  }
  CpuList order;
  for (size_t k = 0;; ++k) {
    bool any = false;
    for (const CpuList& core : cores) {
      if (k < core.size()) {
        order.push_back(core[k]);
        any = true;
      }
    }
    if (!any) break;
  }
  return order;
}

std::string speed_text(int64_t mbps) {
  if (mbps < 0) return "?";
  if (mbps >= 1000 && mbps % 1000 == 0) return std::to_string(mbps / 1000) + " Gb/s";
  return std::to_string(mbps) + " Mb/s";
}

}  // namespace

std::string_view irq_mode_name(IrqMode mode) { return mode == IrqMode::kSet ? "set" : "spread"; }

Result<IrqMode> parse_irq_mode(std::string_view text) {
  if (text == "spread") return IrqMode::kSpread;
  if (text == "set") return IrqMode::kSet;
  return Status(Code::kInvalidArgument, "IRQ mode \"" + std::string(text) + "\": expected spread or set");
}

std::string TunePlan::tx_bindings() const { return platform::format_bindings(bindings.tx); }
std::string TunePlan::rx_bindings() const { return platform::format_bindings(bindings.rx); }

std::vector<IrqPlan> plan_irqs(std::string_view root, const platform::Topology& topo,
                               const platform::BindingPlan& bindings, const std::vector<platform::NicIrq>& irqs,
                               IrqMode mode, std::vector<std::string>& notes) {
  std::vector<IrqPlan> out;
  for (const platform::NicIrq& i : irqs) {
    if (bindings.nic_node.count(i.nic) == 0) continue;  // a NIC not asked for
    IrqPlan p;
    p.irq = i.irq;
    p.nic = i.nic;
    p.name = i.name;
    p.kind = i.kind;
    p.queue = i.queue;
    p.basis = i.basis;
    if (auto cur = platform::read_irq_affinity(root, i.irq); cur.ok()) {
      p.current = *cur;
    } else {
      p.current_error = cur.status().message();
    }
    out.push_back(std::move(p));
  }

  // Per node and per target set, the IRQs in queue order, NICs interleaved.
  struct Group {
    std::vector<IrqPlan*> members;
    CpuList set;
    std::string label;
  };
  std::map<std::pair<int, int>, Group> groups;  // (node, 0 = tx / 1 = rx)
  for (IrqPlan& p : out) {
    int node = bindings.nic_node.at(p.nic);
    const platform::NodeSets* sets = bindings.find_node(node);
    std::string n = "node " + std::to_string(node);
    switch (p.kind) {
      case IrqKind::kTx:
      case IrqKind::kRx:
      case IrqKind::kTxRx: {
        bool tx = p.kind == IrqKind::kTx;
        Group& g = groups[{node, tx ? 0 : 1}];
        g.set = tx ? sets->tx : sets->rx;
        g.label = std::string(tx ? "tx" : "rx") + " set of " + n;
        g.members.push_back(&p);
        break;
      }
      case IrqKind::kOther:
        if (sets->system.empty()) {
          p.reason = "management vector; " + n + " has no system cores to give it: left alone";
        } else {
          p.planned = sets->system;
          p.reason = "management vector: system cores of " + n;
        }
        break;
      case IrqKind::kUnknown:
        p.reason = "role unknown (" + p.basis + "): left alone";
        break;
    }
  }
  for (auto& [key, g] : groups) {
    std::stable_sort(g.members.begin(), g.members.end(), [](const IrqPlan* a, const IrqPlan* b) {
      // Queue-less IRQs after numbered queues; then NIC, then IRQ number.
      int qa = a->queue < 0 ? 1 << 30 : a->queue, qb = b->queue < 0 ? 1 << 30 : b->queue;
      if (qa != qb) return qa < qb;
      if (a->nic != b->nic) return NaturalLess()(a->nic, b->nic);
      return a->irq < b->irq;
    });
    CpuList order = spread_order(topo, key.first, g.set);
    for (size_t k = 0; k < g.members.size(); ++k) {
      IrqPlan& p = *g.members[k];
      std::string txrx = p.kind == IrqKind::kTxRx ? " (serves TX and RX; RX is the heavier half)" : "";
      if (mode == IrqMode::kSet || order.empty()) {
        p.planned = g.set;
        p.reason = g.label + txrx;
      } else {
        p.planned = {order[k % order.size()]};
        p.reason = g.label + ", " + std::to_string(k % order.size() + 1) + " of " + std::to_string(order.size()) +
                   " in turn" + txrx;
      }
    }
    if (mode == IrqMode::kSpread && g.members.size() > order.size() && !order.empty()) {
      notes.push_back(g.label + ": " + std::to_string(g.members.size()) + " interrupts on " +
                      std::to_string(order.size()) + " CPUs; some CPUs take two");
    }
  }
  int unknown = 0;
  for (const IrqPlan& p : out) unknown += p.kind == IrqKind::kUnknown ? 1 : 0;
  if (unknown > 0) {
    notes.push_back(std::to_string(unknown) + " NIC interrupts have names that do not say TX or RX; left alone");
  }
  return out;
}

Result<TunePlan> make_plan(std::string_view root, const TuneOptions& options) {
  TunePlan plan;
  plan.irq_mode = options.irq_mode;
  FERRY_ASSIGN_OR_RETURN(plan.topology, platform::read_topology(root));
  FERRY_ASSIGN_OR_RETURN(plan.bindings, platform::plan_bindings(plan.topology, options.nics, options.policy));
  plan.notes = plan.bindings.notes;
  std::string path = platform::under_root(root, "/proc/interrupts");
  auto text = platform::read_text_file(path);
  if (text.ok()) {
    FERRY_ASSIGN_OR_RETURN(platform::InterruptTable table, platform::parse_interrupts(*text, path));
    std::vector<platform::NicIrq> irqs = platform::find_nic_irqs(root, plan.topology, table);
    plan.irqs = plan_irqs(root, plan.topology, plan.bindings, irqs, options.irq_mode, plan.notes);
  } else {
    plan.notes.push_back("cannot read " + path + " (" + text.status().message() + "): no IRQ plan");
  }
  for (const std::string& nic : plan.bindings.nic_order) {
    bool any = std::any_of(plan.irqs.begin(), plan.irqs.end(), [&](const IrqPlan& p) { return p.nic == nic; });
    if (!any) plan.notes.push_back(nic + ": no interrupts found in /proc/interrupts or msi_irqs");
  }
  plan.settings = read_host_settings(root, plan.topology);
  return plan;
}

std::vector<FileChange> plan_changes(const TunePlan& plan, bool settings) {
  std::vector<FileChange> out;
  for (const IrqPlan& p : plan.irqs) {
    if (p.planned.empty()) continue;
    std::string what = "IRQ " + std::to_string(p.irq) + " (" + p.nic + " " + std::string(irq_kind_name(p.kind));
    if (p.queue >= 0) what += " queue " + std::to_string(p.queue);
    what += ")";
    out.push_back(
        FileChange{platform::irq_affinity_path(p.irq), format_cpu_list(p.planned), what, CompareAs::kCpuList});
  }
  if (settings) {
    for (const HostSetting& s : plan.settings) {
      if (s.state == SettingState::kChange) out.insert(out.end(), s.changes.begin(), s.changes.end());
    }
  }
  return out;
}

std::string render_plan_text(const TunePlan& plan) {
  const platform::Topology& t = plan.topology;
  std::string o;
  o += "Host: " + std::to_string(t.cpus.size()) + " CPUs, " + std::to_string(t.nodes.size()) + " NUMA node" +
       (t.nodes.size() == 1 ? "" : "s") + ", " + std::to_string(t.nics.size()) + " NIC(s), " +
       std::to_string(t.gpus.size()) + " NVIDIA GPU(s)\n\n";

  o += "CPU sets per NUMA node (each with its SMT siblings)\n";
  TextTable sets({"node", "cores", "system", "tx", "rx", "app"});
  for (const platform::NodeSets& s : plan.bindings.nodes) {
    sets.add({std::to_string(s.node), std::to_string(s.cores), format_cpu_list(s.system), format_cpu_list(s.tx),
              format_cpu_list(s.rx), format_cpu_list(s.app)});
  }
  o += sets.render();

  o += "\nNICs\n";
  TextTable nics({"nic", "node", "driver", "pci", "speed", "mtu", "queues", "tx", "rx"});
  bool assumed = false;
  for (const std::string& name : plan.bindings.nic_order) {
    const platform::NicInfo* n = t.find_nic(name);
    if (n == nullptr) continue;
    assumed = assumed || n->numa_node < 0;
    nics.add({name, std::to_string(plan.bindings.nic_node.at(name)) + (n->numa_node < 0 ? "*" : ""),
              n->driver.empty() ? "-" : n->driver, n->pci_address.empty() ? "-" : n->pci_address,
              speed_text(n->speed_mbps), std::to_string(n->mtu),
              std::to_string(n->rx_queues) + "/" + std::to_string(n->tx_queues),
              format_cpu_list(plan.bindings.tx.at(name)), format_cpu_list(plan.bindings.rx.at(name))});
  }
  o += nics.render();

  if (assumed) o += "* sysfs gives no NUMA node for this NIC; planned on the node shown\n";
  o += "\nBinding strings (for ferry, and for NCCL's GPUDirect-TCPX plugin)\n";
  o += "export FERRY_TX_BINDINGS=\"" + plan.tx_bindings() + "\"\n";
  o += "export FERRY_RX_BINDINGS=\"" + plan.rx_bindings() + "\"\n";
  o += "export NCCL_GPUDIRECTTCPX_TX_BINDINGS=\"" + plan.tx_bindings() + "\"\n";
  o += "export NCCL_GPUDIRECTTCPX_RX_BINDINGS=\"" + plan.rx_bindings() + "\"\n";

  o += "\nIRQ affinities (mode " + std::string(irq_mode_name(plan.irq_mode)) + ")\n";
  if (plan.irqs.empty()) {
    o += "(no NIC interrupts found)\n";
  } else {
    TextTable irqs({"irq", "nic", "kind", "queue", "current", "planned", "name", "why"});
    for (const IrqPlan& p : plan.irqs) {
      irqs.add({std::to_string(p.irq), p.nic, std::string(irq_kind_name(p.kind)),
                p.queue < 0 ? "-" : std::to_string(p.queue),
                p.current_error.empty() ? format_cpu_list(p.current) : "?",
                p.planned.empty() ? "(as is)" : format_cpu_list(p.planned), p.name, p.basis + "; " + p.reason});
    }
    o += irqs.render();
  }

  o += "\nHost settings (`ferry tune apply --sysctl` changes those marked change)\n";
  TextTable settings({"setting", "state", "current", "recommended", "why"});
  for (const HostSetting& s : plan.settings) {
    settings.add({s.name, std::string(setting_state_name(s.state)), s.current, s.recommended, s.why});
  }
  o += settings.render();
  if (!plan.notes.empty()) {
    o += "\nNotes\n";
    for (const std::string& n : plan.notes) o += "- " + n + "\n";
  }
  return o;
}

}  // namespace ferry::tune
