// The NUMA node that holds a page of host memory (get_mempolicy), so that a
// transfer can prefer the NICs on the same node.
#pragma once

namespace ferry::platform {

// Node of the page at `p`, or -1 when the kernel does not say (no NUMA).
int memory_node(const void* p);

}  // namespace ferry::platform
