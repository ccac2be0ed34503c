// Resolution of worker CPU sets.
#include "core/worker_cpus.h"

#include <algorithm>

#include "platform/binding_plan.h"

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

std::pair<platform::CpuList, platform::CpuList> split_node(const platform::Topology& topo, int node) {
  std::vector<platform::CpuList> cores = platform::node_cores(topo, node);
  platform::CpuList tx, rx;
  // One core: TX and RX share it rather than leave it idle for one of them.
  size_t half = cores.size() == 1 ? 1 : cores.size() / 2;
  for (size_t i = 0; i < cores.size(); ++i) {
    if (i < half || cores.size() == 1) tx.insert(tx.end(), cores[i].begin(), cores[i].end());
    if (i >= half || cores.size() == 1) rx.insert(rx.end(), cores[i].begin(), cores[i].end());
  }
  std::sort(tx.begin(), tx.end());
  std::sort(rx.begin(), rx.end());
  return {tx, rx};
}

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
    if (node < 0 || topo.find_node(node) == nullptr) continue;  // unknown: leave the scheduler free
    auto [tx, rx] = split_node(topo, node);
    w.tx[nic.name] = std::move(tx);
    w.rx[nic.name] = std::move(rx);
  }
  return w;
}

}  // namespace ferry::core
