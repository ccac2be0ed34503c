// Path choice by NUMA proximity.
#include "transport/tcp/path_choice.h"

#include <cstddef>

namespace ferry::tcp {

PathMask choose_paths(const std::vector<int>& path_nodes, const std::vector<bool>& alive, int memory_node,
                      bool nearest) {
  if (!nearest || memory_node < 0) return 0;
  PathMask mask = 0;
  for (size_t p = 0; p < path_nodes.size() && p < 64; ++p) {
    if (path_nodes[p] == memory_node && (p >= alive.size() || alive[p])) mask |= PathMask{1} << p;
  }
  return mask;  // 0 when no live path is near: any path
}

}  // namespace ferry::tcp
