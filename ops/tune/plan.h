// A tuning plan: the TX and RX CPU sets of every NIC (as binding strings), the
// CPU affinity each NIC interrupt should get, and the host settings to
// review. Built from the host (or a fixture tree) by make_plan; printed by
// `ferry tune plan`, carried out by `ferry tune apply`, checked by `verify`.
//
// IRQ policy: a NIC's RX interrupts go to its node's RX set, TX interrupts to
// the TX set, vectors that serve both (txrx) to the RX set (their NAPI poll
// does the receive work, the heavier half), management vectors to the node's
// system cores, and interrupts whose role the names do not give are left as
// they are. In kSpread mode (the default) each interrupt gets one CPU, the
// physical cores of the set first and then their SMT siblings, round-robin over
// all NICs of the node ordered by queue, so NICs of one node interleave; in
// kSet mode each gets the whole set and the kernel picks within it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"
#include "platform/binding_plan.h"
#include "platform/irq.h"
#include "tune/file_change.h"
#include "tune/host_settings.h"

namespace ferry::tune {

enum class IrqMode : uint8_t { kSpread, kSet };

// "spread", "set"; parse_irq_mode returns kInvalidArgument for other text.
std::string_view irq_mode_name(IrqMode mode);
Result<IrqMode> parse_irq_mode(std::string_view text);

struct IrqPlan {
  int irq = 0;
  std::string nic;
  std::string name;
  platform::IrqKind kind = platform::IrqKind::kUnknown;
  int queue = -1;
  std::string basis;          // why this kind (from find_nic_irqs)
  platform::CpuList current;  // its affinity now; empty when unreadable
  std::string current_error;  // why `current` is empty, when it is
  platform::CpuList planned;  // empty: leave this IRQ alone
  std::string reason;         // "rx set of node 0", "role unknown: left alone"
};

struct TuneOptions {
  std::vector<std::string> nics;  // empty: every physical NIC
  platform::BindingPolicy policy;
  IrqMode irq_mode = IrqMode::kSpread;
};

struct TunePlan {
  platform::Topology topology;
  platform::BindingPlan bindings;
  IrqMode irq_mode = IrqMode::kSpread;
  std::vector<IrqPlan> irqs;  // NIC order, then IRQ number
  std::vector<HostSetting> settings;
  std::vector<std::string> notes;  // the binding plan's and the IRQ plan's

  // "eth1:8-21,112-125;eth2:..." for FERRY_TX_BINDINGS / ..._TX_BINDINGS.
  std::string tx_bindings() const;
  std::string rx_bindings() const;
};

// Plans for the host under `root` ("" = this host). Reads sysfs, /proc/interrupts
// and each IRQ's affinity; blocks on file reads only; needs no privilege.
// kNotFound for an unknown NIC or a tree without CPUs; kInvalidArgument for
// policy counts that do not fit or a malformed kernel file (named).
Result<TunePlan> make_plan(std::string_view root, const TuneOptions& options);

// Plans IRQ affinities for given topology, bindings and discovered IRQs (no
// file access besides reading current affinities under `root`). Exposed for
// tests; make_plan calls it.
std::vector<IrqPlan> plan_irqs(std::string_view root, const platform::Topology& topo,
                               const platform::BindingPlan& bindings, const std::vector<platform::NicIrq>& irqs,
                               IrqMode mode, std::vector<std::string>& notes);

// The file writes that carry out `plan`: one per IRQ with a planned affinity
// (apply skips those already right), plus, when `settings` is set, the writes
// of every setting in state kChange.
std::vector<FileChange> plan_changes(const TunePlan& plan, bool settings);

// The readable table `ferry tune plan` prints: the sets per node, the binding
// strings with their environment variables, every IRQ, the settings.
std::string render_plan_text(const TunePlan& plan);

}  // namespace ferry::tune
