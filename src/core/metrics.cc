// The transfer counters, their snapshot, and its Prometheus text.
#include "core/metrics.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

namespace ferry {

const std::vector<double>& MetricsSnapshot::latency_bounds() {
  static const std::vector<double> bounds = [] {
    std::vector<double> b;
    for (double decade = 1e-6; decade < 5; decade *= 10) {
      for (double step : {1.0, 2.5, 5.0}) b.push_back(decade * step);
    }
    b.push_back(10.0);
    b.push_back(std::numeric_limits<double>::infinity());
    return b;
  }();
  return bounds;
}

namespace {

const char* const kOpNames[core::kMeteredOps] = {"send", "recv", "write", "read", "write_blocks", "notify"};
const char* const kTransportNames[core::kMeteredTransports] = {"tcp", "local"};

// A float as Prometheus reads it.
std::string number(double v) {
  if (v == std::numeric_limits<double>::infinity()) return "+Inf";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

// Label values here are ferry's own names: no escaping needed, but keep
// whatever comes from outside to the safe set.
std::string label(std::string_view v) {
  std::string out;
  for (char c : v) out += (c == '"' || c == '\\' || c == '\n') ? '_' : c;
  return out;
}

}  // namespace

std::string prometheus_text(const MetricsSnapshot& m) {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  line("# HELP ferry_transfers_total Transfers finished, by operation, transport and result.");
  line("# TYPE ferry_transfers_total counter");
  for (const auto& [key, c] : m.transfers) {
    std::string l = "op=\"" + label(key.first) + "\",transport=\"" + label(key.second) + "\"";
    line("ferry_transfers_total{" + l + ",result=\"ok\"} " + std::to_string(c.succeeded));
    line("ferry_transfers_total{" + l + ",result=\"failed\"} " + std::to_string(c.failed));
  }
  line("# HELP ferry_transfer_bytes_total Bytes moved by transfers that succeeded.");
  line("# TYPE ferry_transfer_bytes_total counter");
  for (const auto& [key, c] : m.transfers) {
    line("ferry_transfer_bytes_total{op=\"" + label(key.first) + "\",transport=\"" + label(key.second) + "\"} " +
         std::to_string(c.bytes));
  }
  line("# HELP ferry_transfer_seconds Time from posting a transfer to its completion.");
  line("# TYPE ferry_transfer_seconds histogram");
  const auto& bounds = MetricsSnapshot::latency_bounds();
  for (const auto& [key, c] : m.transfers) {
    std::string l = "op=\"" + label(key.first) + "\",transport=\"" + label(key.second) + "\"";
    for (size_t i = 0; i < bounds.size() && i < c.within.size(); ++i) {
      line("ferry_transfer_seconds_bucket{" + l + ",le=\"" + number(bounds[i]) + "\"} " + std::to_string(c.within[i]));
    }
    line("ferry_transfer_seconds_sum{" + l + "} " + number(c.seconds_sum));
    line("ferry_transfer_seconds_count{" + l + "} " + std::to_string(c.succeeded + c.failed));
  }
  line("# HELP ferry_peer_transfers_total Transfers finished, by peer (the connections held now), operation and result.");
  line("# TYPE ferry_peer_transfers_total counter");
  for (const auto& [key, c] : m.peers) {
    std::string l = "peer=\"" + label(key.first) + "\",op=\"" + label(key.second) + "\"";
    line("ferry_peer_transfers_total{" + l + ",result=\"ok\"} " + std::to_string(c.succeeded));
    line("ferry_peer_transfers_total{" + l + ",result=\"failed\"} " + std::to_string(c.failed));
  }
  line("# HELP ferry_peer_transfer_bytes_total Bytes moved by transfers that succeeded, by peer and operation.");
  line("# TYPE ferry_peer_transfer_bytes_total counter");
  for (const auto& [key, c] : m.peers) {
    line("ferry_peer_transfer_bytes_total{peer=\"" + label(key.first) + "\",op=\"" + label(key.second) + "\"} " +
         std::to_string(c.bytes));
  }
  line("# HELP ferry_nic_bytes_total Bytes the TCP data streams carried, by local NIC and direction.");
  line("# TYPE ferry_nic_bytes_total counter");
  for (const auto& [nic, b] : m.nics) {
    line("ferry_nic_bytes_total{nic=\"" + label(nic) + "\",direction=\"sent\"} " + std::to_string(b.sent));
    line("ferry_nic_bytes_total{nic=\"" + label(nic) + "\",direction=\"received\"} " + std::to_string(b.received));
  }
  line("# HELP ferry_transfer_failures_total Failed transfers by status code.");
  line("# TYPE ferry_transfer_failures_total counter");
  for (const auto& [code, n] : m.failures) {
    line("ferry_transfer_failures_total{code=\"" + label(code) + "\"} " + std::to_string(n));
  }
  line("# HELP ferry_connections Connections the engine holds, by transport and state.");
  line("# TYPE ferry_connections gauge");
  for (const auto& [transport, n] : m.connections) {
    auto f = m.connections_failed.find(transport);
    uint64_t failed = f == m.connections_failed.end() ? 0 : f->second;
    line("ferry_connections{transport=\"" + label(transport) + "\",state=\"up\"} " + std::to_string(n - failed));
    line("ferry_connections{transport=\"" + label(transport) + "\",state=\"failed\"} " + std::to_string(failed));
  }
  line("# HELP ferry_handshakes_refused_total Incoming handshakes refused or dropped, by reason.");
  line("# TYPE ferry_handshakes_refused_total counter");
  for (const auto& [reason, n] : m.handshakes_refused) {
    line("ferry_handshakes_refused_total{reason=\"" + label(reason) + "\"} " + std::to_string(n));
  }
  line("# HELP ferry_paths_lost_total Data paths lost (not closed in order), by transport.");
  line("# TYPE ferry_paths_lost_total counter");
  for (const auto& [transport, n] : m.paths_lost) {
    line("ferry_paths_lost_total{transport=\"" + label(transport) + "\"} " + std::to_string(n));
  }
  line("# HELP ferry_chunks_resent_total Chunks a lost path left unconfirmed, sent again on another path, by transport.");
  line("# TYPE ferry_chunks_resent_total counter");
  for (const auto& [transport, c] : m.resent) {
    line("ferry_chunks_resent_total{transport=\"" + label(transport) + "\"} " + std::to_string(c.chunks));
  }
  line("# HELP ferry_chunks_resent_bytes_total Bytes of the chunks sent again after a path was lost, by transport.");
  line("# TYPE ferry_chunks_resent_bytes_total counter");
  for (const auto& [transport, c] : m.resent) {
    line("ferry_chunks_resent_bytes_total{transport=\"" + label(transport) + "\"} " + std::to_string(c.bytes));
  }
  line("# HELP ferry_staging_chunks_total Chunks of GPU memory staged through pinned slots over TCP, by direction.");
  line("# TYPE ferry_staging_chunks_total counter");
  for (const auto& [direction, c] : m.staging) {
    line("ferry_staging_chunks_total{direction=\"" + direction + "\"} " + std::to_string(c.chunks));
  }
  line("# HELP ferry_staging_bytes_total Bytes of GPU memory staged through pinned slots over TCP, by direction.");
  line("# TYPE ferry_staging_bytes_total counter");
  for (const auto& [direction, c] : m.staging) {
    line("ferry_staging_bytes_total{direction=\"" + direction + "\"} " + std::to_string(c.bytes));
  }
  line("# HELP ferry_staging_seconds_total Time from queuing staged chunks' copies to seeing them done, by direction.");
  line("# TYPE ferry_staging_seconds_total counter");
  for (const auto& [direction, c] : m.staging) {
    line("ferry_staging_seconds_total{direction=\"" + direction + "\"} " + number(c.seconds));
  }
  line("# HELP ferry_held_bytes Bytes held for peers (unreceived messages, unpolled notes, unread replies).");
  line("# TYPE ferry_held_bytes gauge");
  line("ferry_held_bytes " + std::to_string(m.held_bytes));
  line("# HELP ferry_held_bytes_peak The most bytes ever held for peers at once.");
  line("# TYPE ferry_held_bytes_peak gauge");
  line("ferry_held_bytes_peak " + std::to_string(m.held_bytes_peak));
  line("# HELP ferry_gpu_objects_made_late_total CUDA streams, events and pinned blocks made on transfer threads.");
  line("# TYPE ferry_gpu_objects_made_late_total counter");
  line("ferry_gpu_objects_made_late_total " + std::to_string(m.gpu_objects_made_late));
  return out;
}

namespace core {

int metered_transport(std::string_view name) {
  for (int i = 0; i < kMeteredTransports; ++i) {
    if (name == kTransportNames[i]) return i;
  }
  return -1;
}

int TransferMetrics::bucket_of(int64_t nanoseconds) {
  // The bounds in nanoseconds, searched from the small end, where most
  // transfers finish.
  static const std::array<int64_t, kBuckets - 1> bounds_ns = [] {
    std::array<int64_t, kBuckets - 1> b{};
    const auto& seconds = MetricsSnapshot::latency_bounds();
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int64_t>(seconds[i] * 1e9 + 0.5);
    return b;
  }();
  for (int i = 0; i < kBuckets - 1; ++i) {
    if (nanoseconds <= bounds_ns[static_cast<size_t>(i)]) return i;
  }
  return kBuckets - 1;
}

TransferMetrics::Shard& TransferMetrics::mine() {
  // Each thread keeps to one shard, handed out in turn.
  static std::atomic<unsigned> next{0};
  thread_local const unsigned index = next.fetch_add(1, std::memory_order_relaxed);
  return shards_[index % kShards];
}

void TransferMetrics::record(MeteredOp op, int transport, uint64_t bytes, int64_t nanoseconds, Code code,
                             PeerMeter* peer) {
  if (transport < 0 || transport >= kMeteredTransports) return;
  constexpr auto relaxed = std::memory_order_relaxed;
  if (peer != nullptr) {
    // One connection's transfers finish on its own workers: these lines are
    // shared by few threads.
    PeerMeter::PerOp& q = peer->ops[static_cast<size_t>(op)];
    if (code == Code::kOk) {
      q.succeeded.fetch_add(1, relaxed);
      q.bytes.fetch_add(bytes, relaxed);
    } else {
      q.failed.fetch_add(1, relaxed);
    }
  }
  Shard& s = mine();
  Shard::PerOp& p = s.ops[static_cast<size_t>(op)][static_cast<size_t>(transport)];
  if (code == Code::kOk) {
    p.succeeded.fetch_add(1, relaxed);
    p.bytes.fetch_add(bytes, relaxed);
  } else {
    p.failed.fetch_add(1, relaxed);
    s.failures[static_cast<size_t>(code) % kCodes].fetch_add(1, relaxed);
  }
  p.nanoseconds.fetch_add(static_cast<uint64_t>(nanoseconds < 0 ? 0 : nanoseconds), relaxed);
  p.buckets[static_cast<size_t>(bucket_of(nanoseconds))].fetch_add(1, relaxed);
}

namespace {

void count(std::map<std::string, uint64_t, std::less<>>& by_label, std::string_view label) {
  auto it = by_label.find(label);
  if (it == by_label.end()) it = by_label.emplace(std::string(label), 0).first;
  ++it->second;
}

}  // namespace

void TransferMetrics::staged(StagingDirection direction, uint64_t bytes, int64_t nanoseconds) {
  constexpr auto relaxed = std::memory_order_relaxed;
  Shard::Staged& s = mine().staged[static_cast<size_t>(direction)];
  s.chunks.fetch_add(1, relaxed);
  s.bytes.fetch_add(bytes, relaxed);
  s.nanoseconds.fetch_add(static_cast<uint64_t>(std::max<int64_t>(nanoseconds, 0)), relaxed);
}

void TransferMetrics::handshake_refused(std::string_view reason) {
  platform::MutexLock lock(mu_);
  count(handshakes_refused_, reason);
}

std::shared_ptr<PeerMeter> TransferMetrics::peer_meter(std::string peer_address) {
  auto meter = std::make_shared<PeerMeter>(std::move(peer_address));
  platform::MutexLock lock(mu_);
  std::erase_if(peers_, [](const std::weak_ptr<PeerMeter>& w) { return w.expired(); });
  peers_.push_back(meter);
  return meter;
}

std::shared_ptr<NicMeter> TransferMetrics::nic_meter(const std::string& nic) {
  platform::MutexLock lock(mu_);
  auto& meter = nics_[nic.empty() ? "any" : nic];
  if (!meter) meter = std::make_shared<NicMeter>();
  return meter;
}

void TransferMetrics::path_lost(std::string_view transport) {
  platform::MutexLock lock(mu_);
  count(paths_lost_, transport);
}

void TransferMetrics::chunk_resent(std::string_view transport, uint64_t bytes) {
  platform::MutexLock lock(mu_);
  auto it = resent_.find(transport);
  if (it == resent_.end()) it = resent_.emplace(std::string(transport), ResentCounts{}).first;
  it->second.chunks += 1;
  it->second.bytes += bytes;
}

MetricsSnapshot TransferMetrics::snapshot() const {
  MetricsSnapshot m;
  constexpr auto relaxed = std::memory_order_relaxed;
  {
    platform::MutexLock lock(mu_);
    m.handshakes_refused.insert(handshakes_refused_.begin(), handshakes_refused_.end());
    m.paths_lost.insert(paths_lost_.begin(), paths_lost_.end());
    m.resent.insert(resent_.begin(), resent_.end());
    for (const auto& [nic, meter] : nics_) m.nics[nic] = {meter->sent.load(relaxed), meter->received.load(relaxed)};
    for (const auto& w : peers_) {
      auto meter = w.lock();
      if (!meter) continue;
      for (int op = 0; op < kMeteredOps; ++op) {
        const PeerMeter::PerOp& q = meter->ops[static_cast<size_t>(op)];
        PeerCounts c{q.succeeded.load(relaxed), q.failed.load(relaxed), q.bytes.load(relaxed)};
        if (c.succeeded + c.failed == 0) continue;
        // Two connections to one address add up.
        PeerCounts& sum = m.peers[{meter->peer, kOpNames[op]}];
        sum.succeeded += c.succeeded;
        sum.failed += c.failed;
        sum.bytes += c.bytes;
      }
    }
  }
  for (int op = 0; op < kMeteredOps; ++op) {
    for (int t = 0; t < kMeteredTransports; ++t) {
      TransferCounts c;
      c.within.assign(kBuckets, 0);
      uint64_t ns = 0;
      for (const Shard& s : shards_) {
        const Shard::PerOp& p = s.ops[static_cast<size_t>(op)][static_cast<size_t>(t)];
        c.succeeded += p.succeeded.load(relaxed);
        c.failed += p.failed.load(relaxed);
        c.bytes += p.bytes.load(relaxed);
        ns += p.nanoseconds.load(relaxed);
        for (int b = 0; b < kBuckets; ++b)
          c.within[static_cast<size_t>(b)] += p.buckets[static_cast<size_t>(b)].load(relaxed);
      }
      if (c.succeeded + c.failed == 0) continue;
      for (int b = 1; b < kBuckets; ++b) c.within[static_cast<size_t>(b)] += c.within[static_cast<size_t>(b - 1)];
      c.seconds_sum = static_cast<double>(ns) * 1e-9;
      m.transfers[{kOpNames[op], kTransportNames[t]}] = std::move(c);
    }
  }
  for (int code = 1; code < kCodes; ++code) {
    uint64_t n = 0;
    for (const Shard& s : shards_) n += s.failures[static_cast<size_t>(code)].load(relaxed);
    if (n > 0) m.failures[std::string(code_name(static_cast<Code>(code)))] = n;
  }
  for (size_t d = 0; d < 2; ++d) {
    StagingCounts c;
    uint64_t ns = 0;
    for (const Shard& s : shards_) {
      c.chunks += s.staged[d].chunks.load(relaxed);
      c.bytes += s.staged[d].bytes.load(relaxed);
      ns += s.staged[d].nanoseconds.load(relaxed);
    }
    if (c.chunks == 0) continue;
    c.seconds = static_cast<double>(ns) * 1e-9;
    m.staging[d == 0 ? "to_host" : "to_device"] = c;
  }
  return m;
}

}  // namespace core
}  // namespace ferry
