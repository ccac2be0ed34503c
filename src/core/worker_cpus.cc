// Resolution of worker CPU sets.
#include "core/worker_cpus.h"

namespace ferry::core {
namespace {

Status check_cpus(const platform::NicBindings& b, const platform::Topology& topo, std::string_view what) {
  for (const auto& [nic, cpus] : b) {
    for (int cpu : cpus) {
      if (topo.find_cpu(cpu) == nullptr) {
        return Status(Code::kNotFound, std::string(what) + ": CPU " + std::to_string(cpu) + " for " + nic +
                                           " is not an online CPU of this host");
      }
    }
  }
  return Status();
}

}  // namespace

Result<WorkerCpus> resolve_worker_cpus(const Options& o, const std::vector<platform::Interface>& nics,
                                       const platform::Topology& topo) {
  WorkerCpus w;
  if (!o.tx_bindings.empty() || !o.rx_bindings.empty()) {
    w.source = "bindings";
    if (!o.tx_bindings.empty()) {
      FERRY_ASSIGN_OR_RETURN(w.tx, platform::parse_bindings(o.tx_bindings, "FERRY_TX_BINDINGS"));
      FERRY_RETURN_IF_ERROR(check_cpus(w.tx, topo, "FERRY_TX_BINDINGS"));
    }
    if (!o.rx_bindings.empty()) {
      FERRY_ASSIGN_OR_RETURN(w.rx, platform::parse_bindings(o.rx_bindings, "FERRY_RX_BINDINGS"));
      FERRY_RETURN_IF_ERROR(check_cpus(w.rx, topo, "FERRY_RX_BINDINGS"));
    }
    return w;
  }
  w.source = "numa";
  for (const auto& nic : nics) {
    const platform::NicInfo* info = topo.find_nic(nic.name);
    int node = info != nullptr ? topo.nic_node(*info) : (topo.nodes.size() == 1 ? topo.nodes[0].id : -1);
    const platform::NumaNode* n = node >= 0 ? topo.find_node(node) : nullptr;
    if (n == nullptr || n->cpus.empty()) continue;  // unknown: leave the scheduler free
    w.tx[nic.name] = n->cpus;
    w.rx[nic.name] = n->cpus;
  }
  return w;
}

}  // namespace ferry::core
