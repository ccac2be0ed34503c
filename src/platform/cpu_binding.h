// CPU lists ("0-3,8,10-11") and NCCL-format binding strings
// ("eth1:8-21,112-125;eth2:8-21,112-125"): the one parser and formatter for
// both, shared by `ferry tune` (which prints and checks them) and the engine
// (which pins its TX and RX workers to them, docs/architecture.md, "Threads").
//
// Errors name the source of the text (an environment variable, a file) and the
// 1-based character position, and say what was expected there:
//   FERRY_TX_BINDINGS: position 6: expected a CPU number, found 'x' in "eth1:x"
//
// Example:
//   auto b = ferry::platform::parse_bindings(getenv_text, "FERRY_TX_BINDINGS");
//   if (b.ok()) for (auto& [nic, cpus] : *b) pin(nic, cpus);
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"

namespace ferry::platform {

// A set of CPU ids, sorted ascending, without duplicates.
using CpuList = std::vector<int>;

// Orders names so that embedded numbers compare by value: eth2 < eth10.
struct NaturalLess {
  bool operator()(std::string_view a, std::string_view b) const;
  using is_transparent = void;
};

// NIC name -> the CPUs its workers may run on, in natural name order.
using NicBindings = std::map<std::string, CpuList, NaturalLess>;

// The largest CPU id a list may name; bigger numbers are typos, not CPUs.
inline constexpr int kMaxCpuId = 65535;

// Parses a kernel-style CPU list: comma-separated ids and inclusive ranges
// ("0-3,8,10-11"), blanks around items allowed, a trailing newline allowed.
// Empty (or blank) text is the empty list: sysfs writes that for a node
// without CPUs. The result is sorted and deduplicated. `what` names the
// source for messages ("/sys/devices/system/node/node0/cpulist").
// Returns kInvalidArgument with the position on malformed text, a descending
// range or an id above kMaxCpuId.
Result<CpuList> parse_cpu_list(std::string_view text, std::string_view what);

// Formats a CPU list with ranges: {0,1,2,3,8,10,11} -> "0-3,8,10-11"; {} -> "".
// REQUIRES: `cpus` sorted without duplicates (as parse_cpu_list returns).
std::string format_cpu_list(const CpuList& cpus);

// Sorts and deduplicates `cpus` in place, making it a valid CpuList.
void normalize_cpu_list(CpuList& cpus);

// Parses `nic:cpulist;nic:cpulist...` (NCCL_GPUDIRECTTCPX_TX_BINDINGS format).
// Blanks around items and one trailing ';' are allowed. A NIC name is letters,
// digits and ._-@ characters. Returns kInvalidArgument, naming `what` and the
// 1-based position, for empty text, a missing ':' or CPU number, a descending
// range, an empty CPU list, or a NIC named twice.
Result<NicBindings> parse_bindings(std::string_view text, std::string_view what);

// Formats bindings as `eth1:8-21,112-125;eth2:...` in natural NIC order;
// parse_bindings(format_bindings(b)) == b.
std::string format_bindings(const NicBindings& bindings);

}  // namespace ferry::platform
