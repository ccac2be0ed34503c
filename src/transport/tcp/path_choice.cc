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

namespace {
std::vector<std::string_view> components(std::string_view path) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) out.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}
}  // namespace

int pci_distance(std::string_view a, std::string_view b) {
  if (a.empty() || b.empty()) return -1;
  std::vector<std::string_view> x = components(a), y = components(b);
  size_t common = 0;
  while (common < x.size() && common < y.size() && x[common] == y[common]) ++common;
  // Below the common prefix "sys/devices" there must be a shared root complex.
  bool same_root = false;
  for (size_t i = 0; i < common; ++i) same_root = same_root || x[i].substr(0, 3) == "pci";
  if (!same_root) return 1000;
  return static_cast<int>((x.size() - common) + (y.size() - common));
}

PathMask closest_paths(const std::vector<int>& distance, const std::vector<bool>& alive) {
  int best = -1;
  for (size_t p = 0; p < distance.size() && p < 64; ++p) {
    if (distance[p] < 0 || (p < alive.size() && !alive[p])) continue;
    if (best < 0 || distance[p] < best) best = distance[p];
  }
  if (best < 0) return 0;
  PathMask mask = 0;
  for (size_t p = 0; p < distance.size() && p < 64; ++p) {
    if (distance[p] == best && (p >= alive.size() || alive[p])) mask |= PathMask{1} << p;
  }
  return mask;
}

}  // namespace ferry::tcp
