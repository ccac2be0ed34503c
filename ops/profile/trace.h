// Chrome trace files (the JSON object format read by Perfetto and
// chrome://tracing): one per rank, rank_N.trace.json.
//
// Times are written twice: "ts"/"dur" in microseconds for the viewers, and
// exact integer nanoseconds in args ("start_ns", "dur_ns"), which the parser
// prefers, because a double holds only about 0.25 us of a timestamp that
// counts nanoseconds since the epoch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ferry/status.h"

namespace ferry::profile {

using TraceValue = std::variant<int64_t, double, std::string>;

struct TraceArg {
  std::string key;
  TraceValue value;
  friend bool operator==(const TraceArg&, const TraceArg&) = default;
};

// A complete event ("ph":"X"): a named span on one thread of one process.
struct TraceEvent {
  std::string name;
  std::string category;
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
  int pid = 0;
  int tid = 0;
  std::vector<TraceArg> args;
  friend bool operator==(const TraceEvent&, const TraceEvent&) = default;

  // The argument `key`, or nullptr.
  const TraceValue* arg(std::string_view key) const;
};

struct Trace {
  std::string process_name;  // shown for `pid` (the rank)
  int pid = 0;
  std::vector<std::pair<int, std::string>> thread_names;  // tid -> name
  std::vector<TraceArg> other_data;                       // run facts ("otherData")
  std::vector<TraceEvent> events;
  friend bool operator==(const Trace&, const Trace&) = default;
};

// The JSON text of `trace`.
std::string trace_to_json(const Trace& trace);

// Reads what trace_to_json writes (and any Chrome trace in the object format
// whose "X" events it keeps; other phases except process/thread names are
// skipped). kDataLoss for text that is not such JSON.
Result<Trace> parse_trace(std::string_view json_text);

}  // namespace ferry::profile
