// A tuning plan as JSON: what `ferry tune plan --json` prints and what
// `ferry tune apply --plan FILE` and `verify --plan FILE` read back, so that a
// plan can be reviewed (or edited) before it is applied.
//
// Layout (version 1):
//   { "version": 1, "irq_mode": "spread",
//     "tx_bindings": "eth1:8-21,112-125;...", "rx_bindings": "...",
//     "env": { "FERRY_TX_BINDINGS": "...", ..., "NCCL_GPUDIRECTTCPX_RX_BINDINGS": "..." },
//     "host": { "cpus": 208, "numa_nodes": [{"node": 0, "cpus": "0-51,104-155"}], "gpus": [...] },
//     "nodes": [{"node": 0, "cores": 52, "system": "0-7,104-111", "tx": "8-21,112-125",
//                "rx": "22-35,126-139", "app": "36-51,140-155", "shared": false}],
//     "nics": [{"name": "eth1", "node": 0, "numa_node": 0, "driver": "gve", "pci": "0000:06:00.0",
//               "speed_mbps": 200000, "mtu": 8244, "rx_queues": 16, "tx_queues": 16,
//               "tx": "8-21,112-125", "rx": "22-35,126-139"}],
//     "irqs": [{"irq": 100, "nic": "eth1", "name": "...", "kind": "tx", "queue": 0, "basis": "...",
//               "current": "0-207", "planned": "8", "reason": "..."}],
//     "settings": [{"name": "net.core.rmem_max", "state": "change", "current": "212992",
//                   "recommended": "...", "why": "...", "changes": [{"path": "...", "value": "..."}]}],
//     "notes": ["..."] }
// CPU sets are CPU-list strings; "planned": "" means the IRQ is left alone.
#pragma once

#include <string>
#include <string_view>

#include "ferry/status.h"
#include "tune/plan.h"

namespace ferry::tune {

// The plan as JSON text (indented, newline-terminated).
std::string plan_to_json(const TunePlan& plan);

// Reads a plan written by plan_to_json. The topology is not restored, only
// what apply and verify need: bindings, node sets, IRQ plans, settings,
// notes. kInvalidArgument naming `what` and the field for anything malformed
// (a bad CPU list, an unknown kind, a binding string that does not parse).
Result<TunePlan> plan_from_json(std::string_view text, std::string_view what);

}  // namespace ferry::tune
