// Rates from two scrapes: each series is matched by its name and labels.
#include "top/top_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "tune/text_table.h"

namespace ferry::top {
namespace {

std::string series_key(const Sample& s) {
  Sample keyed = s;
  keyed.value = 0;
  return format_sample(keyed);
}

// The counters' growth between the scrapes, by series.
class Deltas {
 public:
  Deltas(const Scrape& before, const Scrape& after) {
    for (const Sample& s : before.samples) before_[series_key(s)] = s.value;
    for (const Sample& s : after.samples) {
      auto it = before_.find(series_key(s));
      double d = s.value;
      if (it != before_.end() && s.value >= it->second) d = s.value - it->second;
      if (!std::isfinite(d)) d = 0;
      grown_.push_back({&s, d});
    }
  }
  template <typename Fn>
  void each(std::string_view name, Fn fn) const {
    for (const auto& [s, d] : grown_) {
      if (s->name == name) fn(*s, d);
    }
  }

 private:
  std::map<std::string, double> before_;
  std::vector<std::pair<const Sample*, double>> grown_;
};

double parse_bound(std::string_view le) {
  if (le == "+Inf" || le == "Inf") return std::numeric_limits<double>::infinity();
  std::string copy(le);
  char* end = nullptr;
  double v = std::strtod(copy.c_str(), &end);
  return end == copy.c_str() + copy.size() ? v : std::numeric_limits<double>::quiet_NaN();
}

// Bytes a second as people read them: 1.23 GB/s (powers of 1000).
std::string rate_bytes(double v) {
  const char* units[] = {"B/s", "KB/s", "MB/s", "GB/s", "TB/s"};
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

std::string rate(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), v >= 100 || v == 0 ? "%.0f/s" : "%.1f/s", v);
  return buf;
}

std::string duration(double s) {
  if (std::isnan(s)) return "-";
  char buf[32];
  if (s < 1e-3) {
    std::snprintf(buf, sizeof(buf), "%.1f us", s * 1e6);
  } else if (s < 1) {
    std::snprintf(buf, sizeof(buf), "%.2f ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f s", s);
  }
  return buf;
}

// Label values come from whatever answered: no control bytes reach the terminal.
std::string shown(std::string_view v) {
  std::string out(v.substr(0, 80));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < ' ' || c == 0x7f) c = '?';
  }
  return out;
}

}  // namespace

double bucket_quantile(double q, const std::vector<std::pair<double, double>>& cumulative) {
  if (cumulative.empty()) return std::numeric_limits<double>::quiet_NaN();
  double total = cumulative.back().second;
  if (!(total > 0)) return std::numeric_limits<double>::quiet_NaN();
  double rank = q * total;
  double lower = 0, below = 0;
  for (const auto& [bound, count] : cumulative) {
    if (count >= rank && count > below) {
      if (std::isinf(bound)) return lower;
      return lower + (bound - lower) * (rank - below) / (count - below);
    }
    lower = bound;
    below = std::max(below, count);
  }
  return lower;
}

TopView make_view(const Scrape& before, const Scrape& after) {
  TopView v;
  v.seconds = std::chrono::duration<double>(after.at - before.at).count();
  const double per = v.seconds > 0 ? 1.0 / v.seconds : 0;
  Deltas d(before, after);

  std::map<std::pair<std::string, std::string>, OpRow> ops;
  auto op_row = [&](const Sample& s) -> OpRow& {
    auto key = std::make_pair(std::string(s.label("op")), std::string(s.label("transport")));
    OpRow& r = ops[key];
    r.op = key.first;
    r.transport = key.second;
    return r;
  };
  d.each("ferry_transfers_total", [&](const Sample& s, double n) {
    OpRow& r = op_row(s);
    r.transfers_per_s += n * per;
    if (s.label("result") == "failed") r.failed_per_s += n * per;
  });
  d.each("ferry_transfer_bytes_total", [&](const Sample& s, double n) { op_row(s).bytes_per_s += n * per; });
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<double, double>>> buckets;
  d.each("ferry_transfer_seconds_bucket", [&](const Sample& s, double n) {
    double bound = parse_bound(s.label("le"));
    if (std::isnan(bound)) return;
    buckets[{std::string(s.label("op")), std::string(s.label("transport"))}].push_back({bound, n});
  });
  for (auto& [key, row] : ops) {
    auto it = buckets.find(key);
    std::vector<std::pair<double, double>> cumulative;
    if (it != buckets.end()) cumulative = it->second;
    std::sort(cumulative.begin(), cumulative.end());
    row.p50_s = bucket_quantile(0.5, cumulative);
    row.p99_s = bucket_quantile(0.99, cumulative);
    v.transfers_per_s += row.transfers_per_s;
    v.failed_per_s += row.failed_per_s;
    v.bytes_per_s += row.bytes_per_s;
    if (row.transfers_per_s > 0 || row.bytes_per_s > 0) v.ops.push_back(row);
  }
  std::sort(v.ops.begin(), v.ops.end(), [](const OpRow& a, const OpRow& b) {
    return a.bytes_per_s != b.bytes_per_s ? a.bytes_per_s > b.bytes_per_s : a.transfers_per_s > b.transfers_per_s;
  });

  std::map<std::string, PeerRow> peers;
  d.each("ferry_peer_transfers_total", [&](const Sample& s, double n) {
    PeerRow& r = peers[std::string(s.label("peer"))];
    r.transfers_per_s += n * per;
    if (s.label("result") == "failed") r.failed_per_s += n * per;
  });
  d.each("ferry_peer_transfer_bytes_total",
         [&](const Sample& s, double n) { peers[std::string(s.label("peer"))].bytes_per_s += n * per; });
  for (auto& [name, row] : peers) {
    row.peer = name;
    v.peers.push_back(row);
  }
  std::sort(v.peers.begin(), v.peers.end(), [](const PeerRow& a, const PeerRow& b) {
    if (a.bytes_per_s != b.bytes_per_s) return a.bytes_per_s > b.bytes_per_s;
    if (a.transfers_per_s != b.transfers_per_s) return a.transfers_per_s > b.transfers_per_s;
    return a.peer < b.peer;
  });

  std::map<std::string, NicRow> nics;
  d.each("ferry_nic_bytes_total", [&](const Sample& s, double n) {
    NicRow& r = nics[std::string(s.label("nic"))];
    (s.label("direction") == "received" ? r.received_per_s : r.sent_per_s) += n * per;
  });
  for (auto& [name, row] : nics) {
    row.nic = name;
    v.nics.push_back(row);
  }
  std::sort(v.nics.begin(), v.nics.end(), [](const NicRow& a, const NicRow& b) {
    return a.sent_per_s + a.received_per_s > b.sent_per_s + b.received_per_s;
  });

  d.each("ferry_transfer_failures_total", [&](const Sample& s, double n) {
    if (n > 0) v.failures.emplace_back(std::string(s.label("code")), n);
  });
  for (const Sample& s : after.samples) {
    if (s.name == "ferry_connections") (s.label("state") == "failed" ? v.connections_failed : v.connections_up) += s.value;
    if (s.name == "ferry_held_bytes") v.held_bytes = s.value;
  }
  return v;
}

std::string render_text(const TopView& v, const std::string& source, size_t max_peers) {
  char head[256];
  std::snprintf(head, sizeof(head),
                "ferry top  %s  (%.1f s window)\n%s  transfers %s  failed %s  connections %.0f up, %.0f failed\n",
                shown(source).c_str(), v.seconds, rate_bytes(v.bytes_per_s).c_str(), rate(v.transfers_per_s).c_str(),
                rate(v.failed_per_s).c_str(), v.connections_up, v.connections_failed);
  std::string out = head;

  tune::TextTable ops({"op", "transport", "transfers", "failed", "bytes", "p50", "p99"});
  for (const OpRow& r : v.ops) {
    ops.add({shown(r.op), shown(r.transport), rate(r.transfers_per_s), rate(r.failed_per_s), rate_bytes(r.bytes_per_s),
             duration(r.p50_s), duration(r.p99_s)});
  }
  out += "\n" + (v.ops.empty() ? std::string("no transfers finished in the window\n") : ops.render());

  tune::TextTable peers({"peer", "transfers", "failed", "bytes"});
  size_t shown_peers = std::min(max_peers, v.peers.size());
  for (size_t i = 0; i < shown_peers; ++i) {
    const PeerRow& r = v.peers[i];
    peers.add({shown(r.peer), rate(r.transfers_per_s), rate(r.failed_per_s), rate_bytes(r.bytes_per_s)});
  }
  if (!v.peers.empty()) {
    out += "\n" + peers.render();
    if (shown_peers < v.peers.size()) out += "... and " + std::to_string(v.peers.size() - shown_peers) + " more peers\n";
  }

  if (!v.nics.empty()) {
    tune::TextTable nics({"nic", "sent", "received"});
    for (const NicRow& r : v.nics) nics.add({shown(r.nic), rate_bytes(r.sent_per_s), rate_bytes(r.received_per_s)});
    out += "\n" + nics.render();
  }
  if (!v.failures.empty()) {
    out += "\nfailures:";
    for (const auto& [code, n] : v.failures) out += " " + shown(code) + " " + std::to_string(static_cast<long long>(n));
    out += "\n";
  }
  return out;
}

nlohmann::json to_json(const TopView& v) {
  nlohmann::json j = {{"seconds", v.seconds},
                      {"transfers_per_s", v.transfers_per_s},
                      {"failed_per_s", v.failed_per_s},
                      {"bytes_per_s", v.bytes_per_s},
                      {"connections_up", v.connections_up},
                      {"connections_failed", v.connections_failed},
                      {"held_bytes", v.held_bytes}};
  j["ops"] = nlohmann::json::array();
  for (const OpRow& r : v.ops) {
    j["ops"].push_back({{"op", r.op},
                        {"transport", r.transport},
                        {"transfers_per_s", r.transfers_per_s},
                        {"failed_per_s", r.failed_per_s},
                        {"bytes_per_s", r.bytes_per_s},
                        {"p50_seconds", std::isnan(r.p50_s) ? nlohmann::json() : nlohmann::json(r.p50_s)},
                        {"p99_seconds", std::isnan(r.p99_s) ? nlohmann::json() : nlohmann::json(r.p99_s)}});
  }
  j["peers"] = nlohmann::json::array();
  for (const PeerRow& r : v.peers) {
    j["peers"].push_back({{"peer", r.peer},
                          {"transfers_per_s", r.transfers_per_s},
                          {"failed_per_s", r.failed_per_s},
                          {"bytes_per_s", r.bytes_per_s}});
  }
  j["nics"] = nlohmann::json::array();
  for (const NicRow& r : v.nics) {
    j["nics"].push_back({{"nic", r.nic}, {"sent_per_s", r.sent_per_s}, {"received_per_s", r.received_per_s}});
  }
  j["failures"] = nlohmann::json::object();
  for (const auto& [code, n] : v.failures) j["failures"][code] = n;
  return j;
}

}  // namespace ferry::top
