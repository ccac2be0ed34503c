// What `ferry top` shows: an engine's rates between two scrapes of its
// metrics page (docs/metrics.md), by operation (with p50/p99 from the
// latency histogram's buckets), by peer and by NIC, with failures by code,
// and the same as text or JSON. Counters that went down between the scrapes
// (the engine restarted) count from zero.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ferry/transfer.h"
#include "top/metrics_text.h"

namespace ferry::top {

struct Scrape {
  std::vector<Sample> samples;
  Clock::time_point at;
};

struct OpRow {
  std::string op, transport;
  double transfers_per_s = 0, failed_per_s = 0, bytes_per_s = 0;
  double p50_s = 0, p99_s = 0;  // NaN when no transfer finished in the window
};

struct PeerRow {
  std::string peer;
  double transfers_per_s = 0, failed_per_s = 0, bytes_per_s = 0;
};

struct NicRow {
  std::string nic;
  double sent_per_s = 0, received_per_s = 0;
};

struct TopView {
  double seconds = 0;  // the window between the two scrapes
  double transfers_per_s = 0, failed_per_s = 0, bytes_per_s = 0;
  double connections_up = 0, connections_failed = 0, held_bytes = 0;
  std::vector<OpRow> ops;      // busiest first
  std::vector<PeerRow> peers;  // busiest first
  std::vector<NicRow> nics;    // busiest first
  std::vector<std::pair<std::string, double>> failures;  // code, count in the window
};

TopView make_view(const Scrape& before, const Scrape& after);

// The q-quantile (0 < q < 1) of the observations that fell in the window,
// from cumulative bucket counts {upper bound, count} sorted by bound (the
// last +Inf), interpolated within the bucket as Prometheus'
// histogram_quantile does; NaN when there are none.
double bucket_quantile(double q, const std::vector<std::pair<double, double>>& cumulative);

// A table a terminal shows, `max_peers` peer rows at most (the rest counted).
std::string render_text(const TopView& v, const std::string& source, size_t max_peers);
nlohmann::json to_json(const TopView& v);

}  // namespace ferry::top
