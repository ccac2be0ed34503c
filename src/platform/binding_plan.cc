// Deriving NUMA-local TX and RX CPU sets from the topology.
#include "platform/binding_plan.h"

#include <algorithm>
#include <map>
#include <set>

namespace ferry::platform {
namespace {

CpuList flatten(const std::vector<CpuList>& cores, size_t from, size_t to) {
  CpuList out;
  for (size_t i = from; i < to && i < cores.size(); ++i) out.insert(out.end(), cores[i].begin(), cores[i].end());
  normalize_cpu_list(out);
  return out;
}

std::string known_nics(const Topology& topo) {
  std::string s;
  for (const NicInfo& n : topo.nics) s += (s.empty() ? "" : ", ") + n.name;
  return s.empty() ? std::string("none") : s;
}

}  // namespace

const NodeSets* BindingPlan::find_node(int node) const {
  for (const NodeSets& n : nodes) {
    if (n.node == node) return &n;
  }
  return nullptr;
}

std::vector<CpuList> node_cores(const Topology& topo, int node) {
  std::set<CpuList> seen;
  std::vector<CpuList> cores;
  for (const CpuInfo& c : topo.cpus) {
    if (c.numa_node != node) continue;
    CpuList core;
    for (int s : c.siblings) {
      const CpuInfo* sc = topo.find_cpu(s);
      if (sc != nullptr && sc->numa_node == node) core.push_back(s);
    }
    if (seen.insert(core).second) cores.push_back(std::move(core));
  }
  std::sort(cores.begin(), cores.end(), [](const CpuList& a, const CpuList& b) { return a.front() < b.front(); });
  return cores;
}

Result<NodeSets> plan_node_sets(const Topology& topo, int node, const BindingPolicy& policy) {
  if (topo.find_node(node) == nullptr) {
    return Status(Code::kNotFound, "NUMA node " + std::to_string(node) + " has no online CPUs on this host");
  }
  std::vector<CpuList> cores = node_cores(topo, node);
  NodeSets s;
  s.node = node;
  s.cores = static_cast<int>(cores.size());
  const int p = s.cores;
  std::string where = "node " + std::to_string(node) + " (" + std::to_string(p) + " cores)";
  if (policy.tx_cores == 0 || policy.rx_cores == 0) {
    return Status(Code::kInvalidArgument, "TX and RX need at least one core each");
  }

  int system = policy.system_cores >= 0 ? policy.system_cores : (p >= 4 ? std::max(1, p / 6) : 0);
  if (system >= p) {
    return Status(Code::kInvalidArgument,
                  where + ": " + std::to_string(system) + " system cores leave none for TX and RX");
  }
  int rest = p - system;
  int tx = policy.tx_cores > 0 ? policy.tx_cores : rest / 3;
  int rx = policy.rx_cores > 0 ? policy.rx_cores : rest / 3;
  if (policy.tx_cores < 0 && policy.rx_cores < 0 && rest / 3 == 0) {
    if (rest >= 2) {
      tx = rx = 1;  // a core each, none left for the application
    } else {
      // One core for everything: TX and RX share it.
      s.shared = true;
      s.system = flatten(cores, 0, system);
      s.tx = s.rx = flatten(cores, system, p);
      return s;
    }
  }
  if (policy.tx_cores < 0 && policy.rx_cores > 0) tx = std::max(1, std::min(tx, rest - rx));
  if (policy.rx_cores < 0 && policy.tx_cores > 0) rx = std::max(1, std::min(rx, rest - tx));
  if (system + tx + rx > p) {
    return Status(Code::kInvalidArgument, where + ": " + std::to_string(system) + " system + " + std::to_string(tx) +
                                              " TX + " + std::to_string(rx) + " RX cores do not fit");
  }
  s.system = flatten(cores, 0, system);
  s.tx = flatten(cores, system, system + tx);
  s.rx = flatten(cores, system + tx, system + tx + rx);
  s.app = flatten(cores, system + tx + rx, p);
  return s;
}

Result<BindingPlan> plan_bindings(const Topology& topo, const std::vector<std::string>& nics,
                                  const BindingPolicy& policy) {
  BindingPlan plan;
  std::vector<const NicInfo*> chosen;
  if (nics.empty()) {
    for (const NicInfo& n : topo.nics) chosen.push_back(&n);
  } else {
    for (const std::string& name : nics) {
      const NicInfo* n = topo.find_nic(name);
      if (n == nullptr) {
        return Status(Code::kNotFound,
                      "unknown NIC " + name + " (physical NICs on this host: " + known_nics(topo) + ")");
      }
      if (std::find(chosen.begin(), chosen.end(), n) == chosen.end()) chosen.push_back(n);
    }
  }
  std::sort(chosen.begin(), chosen.end(),
            [](const NicInfo* a, const NicInfo* b) { return NaturalLess()(a->name, b->name); });
  if (chosen.empty()) plan.notes.push_back("no physical NICs found: nothing to bind");

  std::map<int, NodeSets> sets;
  for (const NicInfo* nic : chosen) {
    int node = topo.nic_node(*nic);
    if (node < 0) {
      node = topo.nodes.front().id;
      plan.notes.push_back(nic->name + ": sysfs gives no NUMA node; planned on node " + std::to_string(node));
    }
    auto it = sets.find(node);
    if (it == sets.end()) {
      FERRY_ASSIGN_OR_RETURN(NodeSets s, plan_node_sets(topo, node, policy));
      if (s.shared) {
        plan.notes.push_back("node " + std::to_string(node) +
                             " has too few cores for separate TX and RX sets; they share " + format_cpu_list(s.tx));
      }
      it = sets.emplace(node, std::move(s)).first;
    }
    plan.tx[nic->name] = it->second.tx;
    plan.rx[nic->name] = it->second.rx;
    plan.nic_order.push_back(nic->name);
    plan.nic_node[nic->name] = node;
  }
  for (auto& [node, s] : sets) plan.nodes.push_back(std::move(s));
  return plan;
}

Status check_bindings(const NicBindings& bindings, const Topology& topo, std::string_view what) {
  for (const auto& [nic, cpus] : bindings) {
    if (topo.find_nic(nic) == nullptr) {
      return Status(Code::kNotFound, std::string(what) + ": unknown NIC " + nic +
                                         " (physical NICs on this host: " + known_nics(topo) + ")");
    }
    for (int c : cpus) {
      if (topo.find_cpu(c) == nullptr) {
        return Status(Code::kNotFound,
                      std::string(what) + ": " + nic + ": CPU " + std::to_string(c) +
                          " does not exist or is offline (online: " + format_cpu_list(topo.all_cpus()) + ")");
      }
    }
  }
  return Status::Ok();
}

}  // namespace ferry::platform
