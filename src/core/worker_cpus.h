// Which CPUs each NIC's worker threads run on: the binding strings when given
// (FERRY_TX/RX_BINDINGS, else NCCL_GPUDIRECTTCPX_TX/RX_BINDINGS), else the
// CPUs of the NIC's NUMA node — the seeds' lesson that threads near their NIC
// matter. Resolved once when the engine starts.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ferry/options.h"
#include "ferry/status.h"
#include "platform/cpu_binding.h"
#include "platform/interfaces.h"
#include "platform/topology.h"

namespace ferry::core {

struct WorkerCpus {
  platform::NicBindings tx, rx;  // a NIC absent here is not pinned
  std::string source;            // "bindings" or "numa" (for logs)
};

// Parses and checks the binding strings of `o` against `topo` (every CPU
// online), or derives NUMA-local sets for `nics`. kInvalidArgument names the
// variable and the position of a malformed string; kNotFound a CPU that does
// not exist.
Result<WorkerCpus> resolve_worker_cpus(const Options& o, const std::vector<platform::Interface>& nics,
                                       const platform::Topology& topo);

}  // namespace ferry::core
