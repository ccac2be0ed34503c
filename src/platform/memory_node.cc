// NUMA node lookup for host memory.
#include "platform/memory_node.h"

#include <sys/syscall.h>
#include <unistd.h>

namespace ferry::platform {

int memory_node(const void* p) {
  constexpr unsigned long kNode = 1;  // MPOL_F_NODE
  constexpr unsigned long kAddr = 2;  // MPOL_F_ADDR
  int node = -1;
  if (::syscall(SYS_get_mempolicy, &node, nullptr, 0, p, kNode | kAddr) != 0) return -1;
  return node;
}

}  // namespace ferry::platform
