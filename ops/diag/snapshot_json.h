// A diagnostic snapshot as JSON: what `ferry diag snapshot --json FILE`
// writes and `ferry diag diff A B` reads.
//
// Layout (version 1): { "version": 1, "taken_at": "...", "uptime_s": 1234.5,
//   "hostname": "...",
//   "cpus": [{"cpu": 0, "node": 0, "siblings": "0,104"}],
//   "numa_nodes": [{"node": 0, "cpus": "0-51,104-155"}],
//   "nics": [{"name": "eth1", "driver": "gve", "pci": "0000:06:00.0", "pci_path": "...",
//             "numa_node": 0, "speed_mbps": 200000, "mtu": 8244, "rx_queues": 16, "tx_queues": 16}],
//   "gpus": [{"pci": "0000:04:00.0", "pci_path": "...", "class": "0x030200", "numa_node": 0}],
//   "irqs": [{"irq": 100, "nic": "eth1", "name": "...", "kind": "tx", "queue": 0,
//             "affinity": "8", "total": 123, "counts": {"8": 123}}],
//   "softirqs": {"NET_RX": {"22": 1000}, "NET_TX": {"8": 10}},
//   "cpu_times": {"0": [user, nice, system, idle, iowait, irq, softirq, steal]},
//   "sysctls": {"net.core.rmem_max": "212992", ...},
//   "notes": [] }
// Per-CPU maps are keyed by CPU id as a string and omit zeros.
#pragma once

#include <string>
#include <string_view>

#include "diag/snapshot.h"
#include "ferry/status.h"

namespace ferry::diag {

std::string snapshot_to_json(const Snapshot& snapshot);

// kInvalidArgument naming `what` and the field for anything malformed.
Result<Snapshot> snapshot_from_json(std::string_view text, std::string_view what);

}  // namespace ferry::diag
