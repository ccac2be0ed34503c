// Which paths a transfer may use: those whose NIC is closest to the memory
// being moved ("nearest") — for GPU memory the NICs behind the same PCI switch
// first, then the same NUMA node; for host memory the NICs on its NUMA node —
// or every path ("all", or when nothing is known to be near). Pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace ferry::tcp {

// A bit per path (path < 64); 0 means "any path".
using PathMask = uint64_t;

// `path_nodes[p]` is the NUMA node of path p's NIC (-1 unknown); `alive[p]`
// whether it still carries traffic.
PathMask choose_paths(const std::vector<int>& path_nodes, const std::vector<bool>& alive, int memory_node,
                      bool nearest);

// How far apart two PCI devices are, from their sysfs paths
// ("/sys/devices/pci0000:00/0000:00:01.0/0000:02:00.0"): the number of hops
// from each up to their deepest common bridge, summed. Devices behind one PCI
// switch are 4 apart or less; -1 when either path is empty, and 1000 when they
// hang off different root complexes.
int pci_distance(std::string_view a, std::string_view b);

// The live paths at the smallest known distance (`distance[p]` < 0: unknown);
// 0 (any path) when no live path has a known distance.
PathMask closest_paths(const std::vector<int>& distance, const std::vector<bool>& alive);

}  // namespace ferry::tcp
