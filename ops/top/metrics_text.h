// A reader of Prometheus' text exposition format, for `ferry top`: what an
// engine's metrics endpoint serves (docs/metrics.md). The bytes come from
// whatever answers at the address the user gave, so they are checked as a
// peer's are: a line that is not a sample, a comment or blank is refused with
// its line number, and the sample count and line length are bounded.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/status.h"

namespace ferry::top {

struct Sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in the order written
  double value = 0;

  // The value of label `key`, or "" when the sample has none.
  std::string_view label(std::string_view key) const;
};

inline constexpr size_t kMaxSamples = 1'000'000;
inline constexpr size_t kMaxLineBytes = 64 * 1024;

// Every sample of `text`, in order; HELP/TYPE comments and blank lines are
// skipped, a timestamp after the value is ignored. kDataLoss names the
// first line that is not one of those, and why.
Result<std::vector<Sample>> parse_metrics_text(std::string_view text);

// One sample as a line of the format (escaped label values, no newline):
// parse_metrics_text of it gives the sample back.
std::string format_sample(const Sample& s);

}  // namespace ferry::top
