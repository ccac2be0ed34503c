// Which CPUs each NIC's TX and RX workers should run on, derived from the
// topology: the policy behind `ferry tune plan`, whose output becomes
// FERRY_TX_BINDINGS / FERRY_RX_BINDINGS (docs/architecture.md, "Threads"). It leaves cores for the
// system and the application; the engine's own default when no bindings are
// given (core/worker_cpus.h) splits the whole node between TX and RX.
//
// The policy, per NUMA node that holds a planned NIC, over its physical cores
// in id order (a core brings all its SMT siblings along):
//   system  the first cores, left to the kernel, daemons and IRQs of other
//           devices: a sixth of the cores, at least one on nodes of 4+ cores;
//   tx      the next third of what remains;
//   rx      the third after that;
//   app     the rest, for the application's own threads.
// Every NIC of one node shares that node's TX and RX sets. On GCP A3-high (two
// nodes of 52 cores, SMT sibling of N is N+104) this gives Google's published
// bindings: TX eth1:8-21,112-125 ... eth3:60-73,164-177 and RX
// eth1:22-35,126-139 ... eth3:74-87,178-191. A node too small to give TX and
// RX a core each gives them one shared set, and the plan says so.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ferry/status.h"
#include "platform/cpu_binding.h"
#include "platform/topology.h"

namespace ferry::platform {

// Overrides for the policy; -1 keeps the automatic choice. Counts are
// physical cores per node.
struct BindingPolicy {
  int system_cores = -1;
  int tx_cores = -1;
  int rx_cores = -1;
};

// The CPU sets of one NUMA node, each with its SMT siblings.
struct NodeSets {
  int node = 0;
  int cores = 0;  // physical cores in the node
  CpuList system, tx, rx, app;
  bool shared = false;  // too few cores: tx == rx
};

struct BindingPlan {
  std::vector<NodeSets> nodes;                       // the nodes that hold a planned NIC, ascending
  NicBindings tx, rx;                                // per planned NIC
  std::vector<std::string> nic_order;                // planned NICs, natural order
  std::map<std::string, int, NaturalLess> nic_node;  // the node each NIC was planned on
  std::vector<std::string> notes;                    // what the plan had to guess or give up

  // The sets of node `node`, or nullptr when no planned NIC lives there.
  const NodeSets* find_node(int node) const;
};

// Physical cores of a node: each the sorted SMT siblings of one core, ordered
// by their lowest CPU id.
std::vector<CpuList> node_cores(const Topology& topo, int node);

// The sets of one node. kNotFound for an unknown node; kInvalidArgument when
// the policy's counts do not fit in the node's cores.
Result<NodeSets> plan_node_sets(const Topology& topo, int node, const BindingPolicy& policy);

// Plans `nics` (empty: every physical NIC of the host). kNotFound names an
// unknown NIC and lists the known ones; kInvalidArgument as plan_node_sets.
// A NIC whose NUMA node sysfs does not give, on a host of several nodes, is
// planned on the first node, with a note.
Result<BindingPlan> plan_bindings(const Topology& topo, const std::vector<std::string>& nics,
                                  const BindingPolicy& policy);

// Checks bindings against the host: every NIC exists and every CPU is online.
// kNotFound names the first unknown NIC or CPU and `what` (the variable).
Status check_bindings(const NicBindings& bindings, const Topology& topo, std::string_view what);

}  // namespace ferry::platform
