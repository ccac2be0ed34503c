// `ferry tune verify`: does the live host match a plan, or the binding strings
// the engine will use?
//
// Against a plan: every planned IRQ affinity is in force, and (optionally)
// every host setting is at its recommendation. Against binding strings
// (FERRY_TX_BINDINGS / FERRY_RX_BINDINGS, or NCCL's): every NIC exists, every
// CPU is online, each NIC's sets are on its NUMA node, its TX and RX sets do
// not overlap, and its TX/RX interrupts are affine to CPUs of the matching set.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"
#include "platform/cpu_binding.h"
#include "tune/plan.h"

namespace ferry::tune {

struct Check {
  std::string what;      // "IRQ 45 (eth1 rx queue 3)", "eth1 tx set"
  std::string expected;  // "22"
  std::string actual;    // "0-207"
  bool ok = false;
};

struct VerifyReport {
  std::vector<Check> checks;
  int failures() const;
};

// Compares the host under `root` with `plan` (as written by `plan --json`).
// IRQs the plan leaves alone are not checked. Blocks on file reads.
// Never fails as a whole: an unreadable IRQ is a failed check.
VerifyReport verify_plan(std::string_view root, const TunePlan& plan, bool settings);

// Checks binding strings against the host under `root`. kNotFound for an
// unknown NIC or a CPU that does not exist (from check_bindings); other
// disagreements are failed checks.
Result<VerifyReport> verify_bindings(std::string_view root, const platform::NicBindings& tx,
                                     const platform::NicBindings& rx);

// The report as a table; the last line says how many checks failed.
std::string render_verify_text(const VerifyReport& report);

}  // namespace ferry::tune
