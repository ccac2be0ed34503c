// Which paths a transfer may use: those whose NIC sits on the NUMA node of the
// memory being moved ("nearest"), or every path ("all", or when none is near
// or the node is unknown). Pure function.
#pragma once

#include <cstdint>
#include <vector>

namespace ferry::tcp {

// A bit per path (path < 64); 0 means "any path".
using PathMask = uint64_t;

// `path_nodes[p]` is the NUMA node of path p's NIC (-1 unknown); `alive[p]`
// whether it still carries traffic.
PathMask choose_paths(const std::vector<int>& path_nodes, const std::vector<bool>& alive, int memory_node,
                      bool nearest);

}  // namespace ferry::tcp
