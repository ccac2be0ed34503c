// Comparing configurations on a noisy host: `ferry bench --alternate-nics`
// measures several NIC sets of one host pair burst by burst, in rotating
// order, and judges each set against the first by the ratios of bursts taken
// side by side. On a shared 2-core host one 64 MiB write stream drifts
// between 2 and 5 GB/s within a second, in one process pair as much as
// between runs, so only measurements taken moments apart can be compared.
// This file holds the parts without I/O: the NIC-set list, the burst order
// and the paired statistics.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"

namespace ferry::cli {

// "fa0/fa0,fa1/fa0,fa1,fa2,fa3" -> {"fa0", "fa0,fa1", "fa0,fa1,fa2,fa3"}:
// sets separated by '/', which no interface name contains. At least two
// sets, none empty; kInvalidArgument names the position of a fault.
Result<std::vector<std::string>> parse_nic_sets(std::string_view text);

// The order in which `sets` sets take their turns over `rounds` rounds: every
// set once per round, round r starting with set r mod `sets` (two sets simply
// take turns). Each set takes every place in a round equally often and never
// runs twice in a row: in the netns lab a set's second burst in a row ran
// ~10% faster than its first, which an order reversed every other round
// (…, 1, 0 | 0, 1, …) gave the first and last set alone.
std::vector<int> alternation_order(int sets, int rounds);

// The median of other[i] / ref[i] over rounds, and a bootstrap interval of
// that median at `confidence` (e.g. 0.9), from `resamples` resamples drawn
// with a fixed seed (the same data gives the same interval).
struct PairedRatio {
  double median = 0;
  double lo = 0, hi = 0;
  int pairs = 0;
  int above = 0;  // rounds where other > ref
};
PairedRatio paired_ratio(const std::vector<double>& ref, const std::vector<double>& other, double confidence = 0.9,
                         int resamples = 2000);

}  // namespace ferry::cli
