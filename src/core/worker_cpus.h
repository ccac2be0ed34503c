// Which CPUs each NIC's worker threads run on: the binding strings when given
// (FERRY_TX/RX_BINDINGS, else NCCL_GPUDIRECTTCPX_TX/RX_BINDINGS), else the
// CPUs of the NIC's NUMA node — the seeds' lesson that threads near their NIC
// matter. Resolved once when the engine starts.
//
// Without bindings a node's physical cores are split in two: transmit workers
// on the first half, receive workers on the second, as the seeds' published
// bindings do. Measured in the netns lab on a 2-core host (64 MiB writes over
// unlimited veth links): with every worker free to run on either core, two
// links gave 0.75x and four 0.81x of one link, because each extra link adds a
// sender and a receiver thread that preempt each other; with TX and RX apart,
// one, two and four links all ran within noise of each other.
#pragma once

#include <string>
#include <utility>
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

// The default TX and RX sets of NUMA node `node`: the first and second half
// of its physical cores (SMT siblings stay together); a one-core node gives
// both the same core.
std::pair<platform::CpuList, platform::CpuList> split_node(const platform::Topology& topo, int node);

// Parses and checks the binding strings of `o` against `topo` (every CPU
// online), or derives NUMA-local sets for `nics`. kInvalidArgument names the
// variable and the position of a malformed string; kNotFound a CPU that does
// not exist.
Result<WorkerCpus> resolve_worker_cpus(const Options& o, const std::vector<platform::Interface>& nics,
                                       const platform::Topology& topo);

}  // namespace ferry::core
