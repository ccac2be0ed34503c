// NIC interrupts: parsing /proc/interrupts, finding which IRQs belong to which
// NIC, telling TX from RX queues where the names (or the driver's documented
// convention) allow, and reading an IRQ's CPU affinity.
//
// An IRQ belongs to a NIC when its number is in the NIC's PCI function's
// msi_irqs folder, or when its name or interrupt chip names the NIC
// ("eth1-TxRx-3"), its PCI address ("gve-ntfy-blk3@pci:0000:0c:00.0",
// "PCI-MSIX-0000:0c:00.0") or its virtio device ("virtio2-input.0").
//
// Classification, from the name:
//   rx        "rx" or "input" in the name (virtio2-input.0, eth0-rx-3)
//   tx        "tx" or "output" (virtio2-output.0, eth0-tx-3)
//   txrx      one vector serves a TX and an RX queue (eth0-TxRx-3,
//             mlx5_comp3, ena's eth0-Tx-Rx-3): the name cannot separate them
//   other     management and control vectors (gve-mgmnt, mlx5_async,
//             virtio config)
//   unknown   nothing in the name says; the plan leaves these alone
// gve names its vectors gve-ntfy-blkN without saying TX or RX; the driver
// serves TX queue q from block q and RX queue q from block n/2+q (n blocks),
// so blocks below n/2 are classified tx and the rest rx, and the basis says so.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"
#include "platform/cpu_binding.h"
#include "platform/topology.h"

namespace ferry::platform {

enum class IrqKind : uint8_t { kTx, kRx, kTxRx, kOther, kUnknown };

// "tx", "rx", "txrx", "other", "unknown".
std::string_view irq_kind_name(IrqKind kind);
// The inverse of irq_kind_name; kInvalidArgument for other text.
Result<IrqKind> parse_irq_kind(std::string_view text);

// One row of /proc/interrupts.
struct InterruptLine {
  std::string id;                // "45", or "NMI", "LOC" for the architecture's rows
  int irq = -1;                  // the number; -1 for named rows
  std::vector<uint64_t> counts;  // per column of the header (see InterruptTable::cpus)
  std::string chip;              // "PCI-MSIX-0000:0c:00.0" ("" for named rows)
  std::string name;              // action name(s), or a named row's description
};

struct InterruptTable {
  std::vector<int> cpus;  // CPU id of each count column ("CPU0 CPU1 ...")
  std::vector<InterruptLine> lines;

  // The row of IRQ `irq`, or nullptr.
  const InterruptLine* find(int irq) const;
};

// Parses the text of /proc/interrupts. `what` names the source for messages.
// kInvalidArgument when the header has no CPU columns or a row is malformed.
Result<InterruptTable> parse_interrupts(std::string_view text, std::string_view what);

// What the name of one interrupt says about it.
struct IrqClass {
  IrqKind kind = IrqKind::kUnknown;
  int queue = -1;     // queue or vector index from the name; -1 when none
  std::string basis;  // why: "name says rx (virtio input queue)"
};

// Classifies an interrupt from its action name alone (no gve convention).
IrqClass classify_irq_name(std::string_view name);

struct NicIrq {
  int irq = 0;
  std::string nic;
  std::string name;  // action name from /proc/interrupts
  IrqKind kind = IrqKind::kUnknown;
  int queue = -1;
  std::string found_by;  // "msi_irqs", "name", "msi_irqs+name"
  std::string basis;     // why this kind
};

// Finds and classifies the interrupts of every NIC in `topo`, reading each
// PCI function's msi_irqs under `root`. Ordered by NIC (natural order), then
// IRQ number. IRQs in msi_irqs without a row in the table (vectors no handler
// asked for) are skipped. Never fails: a missing msi_irqs folder only means
// the names decide.
std::vector<NicIrq> find_nic_irqs(std::string_view root, const Topology& topo, const InterruptTable& table);

// "/proc/irq/45/smp_affinity_list".
std::string irq_affinity_path(int irq);

// Reads IRQ `irq`'s affinity under `root`. kNotFound when the IRQ has no
// affinity file (no such IRQ), kInvalidArgument when it is malformed.
Result<CpuList> read_irq_affinity(std::string_view root, int irq);

}  // namespace ferry::platform
