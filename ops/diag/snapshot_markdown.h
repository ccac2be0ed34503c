// A diagnostic snapshot as Markdown, for a person or a bug report: `ferry diag
// snapshot --markdown FILE` (and the default output on a terminal).
#pragma once

#include <string>

#include "diag/snapshot.h"

namespace ferry::diag {

// Host summary, NUMA map, NICs, GPUs, each NIC interrupt (kind, queue,
// affinity, total and the CPUs that took it), NET_RX/NET_TX softirqs per CPU
// (CPUs with none left out) and the sysctls.
std::string snapshot_to_markdown(const Snapshot& snapshot);

}  // namespace ferry::diag
